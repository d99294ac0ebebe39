//! Which mesh clients and which ports a GAMMA route governs, with real requests through
//! real client sidecars: a consumer route (MeshConsumerRoute) applies to the clients of its
//! own namespace only, and a route's parent `port` (MeshPorts) picks the one port of the
//! Service it governs, where a parent without a port governs them all. Each route sets a
//! response header, so the client sees which route (if any) its request took.

use crate::support;

use std::net::SocketAddr;

use support::kube_yaml::HandService;
use support::{
    free_port, require_envoy, write_config, Backend, Envoy, HttpResponse, Meshflow, ProxyNode,
    TestDir, XdsMode, STARTUP_TIMEOUT,
};

/// The consumer-route test's loopback /24.
const CONSUMER_NET: u8 = 192;
/// The ports test's loopback /24.
const PORTS_NET: u8 = 193;

/// A Sidecar for the pods labelled `app: <app>` of `namespace`: one HTTP egress listener
/// per port of `ports`, bound to `bind` (the tests' sidecars are not captured: their
/// listeners are bound addresses), seeing the Services of `hosts`.
fn client_sidecar(namespace: &str, app: &str, bind: &str, ports: &[u16], hosts: &str) -> String {
    let egress: String = ports
        .iter()
        .map(|port| {
            format!(
                "  - port: {{number: {port}, protocol: HTTP, name: http-{port}}}
    bind: {bind}
    captureMode: NONE
    hosts: [\"{hosts}\"]
"
            )
        })
        .collect();
    format!(
        "---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: {app}, namespace: {namespace}}}
spec:
  workloadSelector: {{labels: {{app: {app}}}}}
  egress:
{egress}"
    )
}

/// A client sidecar of pod `pod` in `namespace`, at `ip` (its listeners bound there),
/// started and holding its first egress listener.
fn start_client(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    meshflow: &Meshflow,
    (pod, namespace, app): (&str, &str, &str),
    ip: &str,
    port: u16,
) -> Envoy {
    let node = ProxyNode::sidecar(pod, namespace, ip, &[("app", app)]);
    let envoy = Envoy::start(
        envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("{ip}_{port}"));
    envoy
}

/// A GET of `path` for `host` through the sidecar listening at `addr`.
fn get(envoy: &Envoy, addr: SocketAddr, host: &str, path: &str) -> HttpResponse {
    support::http_request(addr, "GET", host, path, &[])
        .unwrap_or_else(|e| panic!("GET {host}{path}: {e}\n{}", envoy.summary()))
}

/// What a response says of its route: the answering backend and the `X-Header-Set` a
/// route's response header modifier set (none when no route's filter ran).
fn seen(r: &HttpResponse) -> (u16, Option<String>, Option<String>) {
    (
        r.status,
        r.header("x-backend").map(str::to_owned),
        r.header("x-header-set").map(str::to_owned),
    )
}

/// Proves MeshConsumerRoute through two real client sidecars: an HTTPRoute in namespace
/// `consumer` whose parent is Service `echo-v1` of namespace `default` (the producer's) sets
/// a response header for the requests of `consumer`'s client, and only for them; the
/// client of `default` reaches the same backend without it. The consumer route's backend
/// is the producer's Service, which needs no ReferenceGrant.
#[test]
fn a_consumer_route_applies_to_its_own_namespace_s_clients_only() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-mesh-consumer");
    let config_dir = dir.subdir("config");
    let (port, target) = (free_port(), free_port());
    let ip = |host: u8| format!("127.0.{CONSUMER_NET}.{host}");
    let _v1 = Backend::start(&ip(11), target, "echo-v1");
    let service = HandService {
        port_name: "http",
        ..HandService::web("echo-v1", port, target)
    };
    write_config(
        &config_dir,
        "services.yaml",
        &service.with_endpoints(&[&ip(11)]),
    );
    let (consumer_ip, producer_ip) = (ip(20), ip(21));
    write_config(
        &config_dir,
        "sidecars.yaml",
        &[
            client_sidecar("consumer", "client", &consumer_ip, &[port], "*/*"),
            client_sidecar("default", "client", &producer_ip, &[port], "./*"),
        ]
        .concat(),
    );
    write_config(
        &config_dir,
        "route.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: consumer-route, namespace: consumer}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: echo-v1, namespace: default, port: {port}}}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: X-Header-Set, value: set}}]}}
    backendRefs: [{{name: echo-v1, namespace: default, port: {port}}}]
"
        ),
    );
    let meshflow = Meshflow::start(&config_dir, dir.path());
    let consumer = start_client(
        &envoy_bin,
        &dir,
        &meshflow,
        ("client-abc", "consumer", "client"),
        &consumer_ip,
        port,
    );
    let producer = start_client(
        &envoy_bin,
        &dir,
        &meshflow,
        ("client-def", "default", "client"),
        &producer_ip,
        port,
    );
    let host = "echo-v1.default.svc.cluster.local";
    let consumer_addr: SocketAddr = format!("{consumer_ip}:{port}").parse().expect("address");
    let producer_addr: SocketAddr = format!("{producer_ip}:{port}").parse().expect("address");
    let mut last = None;
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        let r = seen(&get(&consumer, consumer_addr, host, "/"));
        let done = r.2.is_some();
        last = Some(r);
        done
    });
    assert!(
        routed,
        "the consumer route never applied: {last:?}\n{}",
        consumer.summary()
    );
    let with_header = (200, Some("echo-v1".to_owned()), Some("set".to_owned()));
    let without = (200, Some("echo-v1".to_owned()), None);
    for _ in 0..5 {
        assert_eq!(seen(&get(&consumer, consumer_addr, host, "/")), with_header);
        assert_eq!(
            seen(&get(&producer, producer_addr, host, "/")),
            without,
            "the producer namespace's client is not governed by another namespace's route"
        );
    }
    // The producer's client by the short name of its own namespace: the same answer.
    assert_eq!(
        seen(&get(&producer, producer_addr, "echo-v1", "/")),
        without
    );
    assert_eq!(consumer.rejected_updates(), 0, "{}", consumer.summary());
    assert_eq!(producer.rejected_updates(), 0, "{}", producer.summary());
}

/// Service `name` of `default` with two HTTP ports, `ports.0` and `ports.1`, both onto
/// `target` of its one endpoint `ip`, and its hand-managed EndpointSlice.
fn two_port_service(name: &str, ports: (u16, u16), target: u16, ip: &str) -> String {
    let (a, b) = ports;
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports:
  - {{name: http-a, port: {a}, targetPort: {target}, protocol: TCP}}
  - {{name: http-b, port: {b}, targetPort: {target}, protocol: TCP}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http-a, port: {target}, protocol: TCP}}, {{name: http-b, port: {target}, protocol: TCP}}]
endpoints:
- addresses: [\"{ip}\"]
  conditions: {{ready: true}}
"
    )
}

/// An HTTPRoute on Service `service` (its parent `port`, when given) that sets the
/// response header `X-Header-Set: <value>` and sends to the Service itself.
fn header_route(service: &str, port: Option<u16>, to_port: u16, value: &str) -> String {
    let parent_port = port.map_or(String::new(), |p| format!(", port: {p}"));
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {service}-route, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: {service}{parent_port}}}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: X-Header-Set, value: {value}}}]}}
    backendRefs: [{{name: {service}, port: {to_port}}}]
"
    )
}

/// Proves MeshPorts through a real client sidecar: Services `echo-v1` and `echo-v2` each
/// have two HTTP ports; the route on `echo-v1` names the first port in its parent and
/// governs it only (its header set there, the second port answered by the Service without
/// it), the route on `echo-v2` names no port and governs both.
#[test]
fn a_mesh_route_s_parent_port_picks_the_ports_it_governs() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-mesh-ports");
    let config_dir = dir.subdir("config");
    let (first, second, target) = (free_port(), free_port(), free_port());
    let ip = |host: u8| format!("127.0.{PORTS_NET}.{host}");
    let _v1 = Backend::start(&ip(11), target, "echo-v1");
    let _v2 = Backend::start(&ip(12), target, "echo-v2");
    write_config(
        &config_dir,
        "services.yaml",
        &[
            two_port_service("echo-v1", (first, second), target, &ip(11)),
            two_port_service("echo-v2", (first, second), target, &ip(12)),
        ]
        .concat(),
    );
    let client_ip = ip(20);
    write_config(
        &config_dir,
        "sidecar.yaml",
        &client_sidecar("default", "client", &client_ip, &[first, second], "./*"),
    );
    write_config(
        &config_dir,
        "routes.yaml",
        &[
            header_route("echo-v1", Some(first), first, "v1"),
            header_route("echo-v2", None, first, "v2"),
        ]
        .concat(),
    );
    let meshflow = Meshflow::start(&config_dir, dir.path());
    let client = start_client(
        &envoy_bin,
        &dir,
        &meshflow,
        ("client-abc", "default", "client"),
        &client_ip,
        first,
    );
    client.await_listener(&format!("{client_ip}_{second}"));
    let at = |port: u16| -> SocketAddr { format!("{client_ip}:{port}").parse().expect("address") };
    let mut last = None;
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        let r = [
            seen(&get(&client, at(first), "echo-v1", "/")),
            seen(&get(&client, at(second), "echo-v2", "/")),
        ];
        let done = r.iter().all(|(_, _, header)| header.is_some());
        last = Some(r);
        done
    });
    assert!(
        routed,
        "the routes never applied: {last:?}\n{}",
        client.summary()
    );
    let answer = |backend: &str, header: Option<&str>| {
        (200, Some(backend.to_owned()), header.map(str::to_owned))
    };
    assert_eq!(
        seen(&get(&client, at(first), "echo-v1", "/")),
        answer("echo-v1", Some("v1")),
        "the port the parent names"
    );
    assert_eq!(
        seen(&get(&client, at(second), "echo-v1", "/")),
        answer("echo-v1", None),
        "a port the parent does not name keeps the Service's own route"
    );
    for port in [first, second] {
        assert_eq!(
            seen(&get(&client, at(port), "echo-v2", "/")),
            answer("echo-v2", Some("v2")),
            "a parent without a port governs port {port}"
        );
    }
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
}
