//! The `mongo` fixture of the TCP tests (`tests/envoy/tcp.rs` and its mirror in
//! `tests/routing_simulation/tcp.rs`): a Service whose port is named `tcp-mongo`, pods
//! `mongo-v1`/`mongo-v2` at `127.0.<net>.11`/`.12`, their EndpointSlice and subsets, Sidecar
//! `client` with a bound TCP egress listener, and Gateway `tcp-gateway` with a TCP server,
//! written as files into meshflow's config directory.

use std::path::Path;

use super::write_config;

/// `127.0.<net>.<host>`.
pub fn ip(net: u8, host: u8) -> String {
    format!("127.0.{net}.{host}")
}

/// Service, pods, endpoints and subsets of `mongo`, the client's Sidecar and the Gateway.
pub fn write_mesh(config: &Path, net: u8, service_port: u16, backend_port: u16, gateway_port: u16) {
    let (v1, v2) = (ip(net, 11), ip(net, 12));
    write_config(
        config,
        "mongo.yaml",
        &format!(
            "apiVersion: v1
kind: Service
metadata: {{name: mongo, namespace: default}}
spec:
  clusterIP: 10.96.0.52
  selector: {{app: mongo}}
  ports:
  - {{name: tcp-mongo, port: {service_port}, targetPort: {backend_port}, protocol: TCP}}
---
apiVersion: v1
kind: Pod
metadata: {{name: mongo-v1, namespace: default, labels: {{app: mongo, version: v1}}}}
status: {{phase: Running, podIP: {v1}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: mongo-v2, namespace: default, labels: {{app: mongo, version: v2}}}}
status: {{phase: Running, podIP: {v2}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: mongo-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: mongo}}
addressType: IPv4
ports: [{{name: tcp-mongo, port: {backend_port}, protocol: TCP}}]
endpoints:
- addresses: [{v1}]
  conditions: {{ready: true}}
- addresses: [{v2}]
  conditions: {{ready: true}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: mongo, namespace: default}}
spec:
  host: mongo
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {service_port}, protocol: TCP, name: tcp}}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: [./*]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: tcp-gateway, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {gateway_port}, protocol: TCP, name: tcp}}
    bind: 127.0.0.1
    hosts: ['*']
"
        ),
    );
}

/// VirtualService `mongo` for sidecars: one `tcp` route splitting connections by `split`.
pub fn write_split(config: &Path, split: &[(&str, u32)]) {
    let route: String = split
        .iter()
        .map(|(subset, weight)| {
            format!(
                "    - destination: {{host: mongo, subset: {subset}}}\n      weight: {weight}\n"
            )
        })
        .collect();
    write_config(
        config,
        "mongo-vs.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: mongo, namespace: default}}
spec:
  hosts: [mongo]
  tcp:
  - route:
{route}"
        ),
    );
}

/// VirtualService `mongo-gateway` bound to `tcp-gateway`: connections to the server's port
/// go to subset v2 of `mongo` (Service port `service_port`).
pub fn write_gateway_route(config: &Path, gateway_port: u16, service_port: u16) {
    write_config(
        config,
        "mongo-gateway-vs.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: mongo-gateway, namespace: default}}
spec:
  hosts: ['*']
  gateways: [tcp-gateway]
  tcp:
  - match: [{{port: {gateway_port}}}]
    route:
    - destination: {{host: mongo, subset: v2, port: {{number: {service_port}}}}}
"
        ),
    );
}
