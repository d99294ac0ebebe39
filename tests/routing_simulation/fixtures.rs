//! The scenarios several files start from: the `reviews` fixture behind a sidecar
//! (`sidecar_setup`) or a gateway (`gateway_setup`), the bookinfo example as shipped, the
//! `mongo` fixture's names, and where the task pages' fixtures live.

use crate::support;
use crate::support::reviews::{client_sidecar_yaml, Binding, Reviews};
use crate::support::{write_config, ProxyNode, TestDir};
use crate::Mesh;
use dataflows::model::ProxyId;
use dataflows::simulate::Call;

/// The Envoy tests take a free port; no socket is opened here, so any port will do.
pub(crate) const PORT: u16 = 18080;
pub(crate) const JASON: (&str, &str) = ("end-user", "jason");

/// The `reviews` mesh of the Envoy tests: Service, Pods and EndpointSlice for `versions`, and a
/// DestinationRule with a subset per version.
pub(crate) fn reviews_mesh(mesh: &Mesh, service_port: u16, versions: &[&str]) -> Reviews {
    let reviews = Reviews::new(60, service_port, &mesh.config);
    reviews.write_service();
    reviews.write_pods(versions);
    reviews.write_endpoints(versions);
    reviews.write_destination_rule(versions);
    reviews
}

/// `ip:port` of pod `reviews-<version>`.
pub(crate) fn pod(reviews: &Reviews, version: &str) -> String {
    format!("{}:{}", reviews.pod_ip(version), reviews.backend_port())
}

/// The sidecar scenario's setup (envoy/sidecar.rs, envoy/faults.rs, debug/envoy.rs): pod
/// `client-abc` without capture, scoped by Sidecar `client` (egress listener bound to
/// `127.0.0.1:PORT`); the `reviews` Service on that same port.
pub(crate) fn sidecar_setup(label: &str, versions: &[&str]) -> (Mesh, Reviews, ProxyId) {
    let mut mesh = Mesh::new(label);
    let reviews = reviews_mesh(&mesh, PORT, versions);
    write_config(&mesh.config, "sidecar.yaml", &client_sidecar_yaml(PORT));
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let id = mesh.connect(&node);
    mesh.sync_clean();
    (mesh, reviews, id)
}

/// A request through the sidecar's bound egress listener with `Host: host`.
pub(crate) fn via_sidecar(host: &str, path: &str) -> Call {
    Call::get(host, PORT, path).to_address("127.0.0.1")
}

pub(crate) const GATEWAY_HOST: &str = "reviews.example.com";

/// Gateway `bookinfo-gateway` on `127.0.0.1:PORT` for any host, selecting the router
/// `istio-ingressgateway-abc`; the `reviews` Service on 9080.
pub(crate) fn gateway_setup(label: &str, versions: &[&str]) -> (Mesh, Reviews, ProxyId, Binding) {
    let mut mesh = Mesh::new(label);
    let reviews = reviews_mesh(&mesh, 9080, versions);
    let gateway = format!(
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: bookinfo-gateway
  namespace: default
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: {PORT}
      name: http
      protocol: HTTP
    bind: 127.0.0.1
    hosts:
    - \"*\"
"
    );
    write_config(&mesh.config, "gateway.yaml", &gateway);
    // The gateway's pod, which the Gateway's selector finds.
    write_config(
        &mesh.config,
        "gateway-pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: istio-ingressgateway-abc, namespace: istio-system, labels: {istio: ingressgateway}}\nstatus: {podIP: 127.0.0.1}\n",
    );
    let node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let id = mesh.connect(&node);
    mesh.sync_clean();
    let binding = Binding::Gateway {
        gateway: "bookinfo-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    (mesh, reviews, id, binding)
}

pub(crate) fn via_gateway(host: &str, path: &str) -> Call {
    Call::get(host, PORT, path).to_address("127.0.0.1")
}

/// The proxy of the deployment that runs Gateway API Gateway `gw` (its name label, as Istio
/// labels the deployment it provisions), connected.
pub(crate) fn gateway_api_proxy(mesh: &mut Mesh, gw: &str) -> ProxyId {
    mesh.connect(&ProxyNode::router(
        &format!("{gw}-abc"),
        "default",
        "127.0.0.1",
        &[("gateway.networking.k8s.io/gateway-name", gw)],
    ))
}

/// The values of header `name` among headers as a request leaves for its upstream, in order.
pub(crate) fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A second Service beside `reviews`, on the same port.
pub(crate) const RATINGS: &str = "apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: default}
spec: {ports: [{name: http, port: 9080}]}
";

pub(crate) const BOOKINFO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo/config");

/// `examples/bookinfo/config` as shipped, with the two proxies of `tests/bookinfo.rs`.
pub(crate) fn bookinfo() -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::over(TestDir::new("routing-simulation-bookinfo"), BOOKINFO.into());
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-5d9f7c8b6-x2x7k",
        "istio-system",
        "127.0.0.1",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    let sleep = mesh.connect(&ProxyNode::sidecar(
        "sleep",
        "default",
        "127.0.1.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    (mesh, gateway, sleep)
}

pub(crate) fn bookinfo_cluster(subset: &str, service: &str) -> String {
    format!("outbound|9080|{subset}|{service}.default.svc.cluster.local")
}

/// `ip:port` of pod `mongo-<version>` of the fixture (net 60, backends on `PORT + 1`).
pub(crate) fn mongo_pod(version: u8) -> String {
    format!("{}:{}", support::mongo::ip(60, 10 + version), PORT + 1)
}

pub(crate) fn mongo_cluster(subset: &str) -> String {
    format!("outbound|{PORT}|{subset}|mongo.default.svc.cluster.local")
}

pub(crate) const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tasks");
