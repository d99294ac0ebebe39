//! Real-Envoy behaviour of a gateway configured with the Kubernetes Gateway API: a
//! `Gateway` of class `istio` and `HTTPRoute`s read from meshflow's config directory, served
//! over Delta ADS to the router its `gateway.networking.k8s.io/gateway-name` label names, as
//! Istio's `samples/bookinfo/gateway-api/` flow does (fixtures written here: a Service per
//! reviews version, as the Gateway API routes by Service).

use crate::support;

use std::net::SocketAddr;

use support::reviews::{count, Client, Reviews};
use support::{
    exactly, free_port, only, require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, STARTUP_TIMEOUT,
};

const NET: u8 = 144;
/// The mesh test's loopback /24.
const MESH_NET: u8 = 145;
/// The HTTPS test's loopback /24.
const HTTPS_NET: u8 = 146;
/// The twenty-routes test's loopback /24.
const EDIT_NET: u8 = 149;
/// The gRPC test's loopback /24.
const GRPC_NET: u8 = 151;
/// The helloworld test's loopback /24.
const HELLO_NET: u8 = 153;
/// The migration test's loopback /24.
const MIGRATE_NET: u8 = 154;
/// The SotW runs' loopback /24s (the gateway's, the mesh's).
const SOTW_NET: u8 = 155;
const MESH_SOTW_NET: u8 = 156;
/// The MESH-HTTP extended features test's loopback /24.
const MESH_EXT_NET: u8 = 157;
/// The listener isolation test's loopback /24.
const ISOLATION_NET: u8 = 158;
/// The listener isolation test's loopback /24, with route hostnames.
const ISOLATION_HOSTNAMES_NET: u8 = 186;
/// The misdirected-request test's loopback /24.
const MISDIRECTED_NET: u8 = 172;
/// The WebSocket and h2c test's loopback /24.
const UPGRADE_NET: u8 = 173;
/// The Service types test's loopback /24.
const SERVICE_TYPES_NET: u8 = 174;
/// The TLSRoute termination test's loopback /24.
const TLS_TERMINATE_NET: u8 = 175;
/// The TLSRoute hostname intersection test's loopback /24.
const TLS_INTERSECTION_NET: u8 = 188;
const HOST: &str = "bookinfo.example";

/// meshflow over `config_dir`, and the Envoy of Gateway `gateway`'s deployment (pod `pod` of
/// `default`, labelled `gateway.networking.k8s.io/gateway-name`) on Delta ADS, once it
/// listens on the Gateway's `port`.
pub(crate) fn start_gateway(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    config_dir: &std::path::Path,
    gateway: &str,
    pod: &str,
    port: u16,
) -> (Meshflow, Envoy) {
    start_gateway_over(
        envoy_bin,
        dir,
        config_dir,
        (gateway, pod, port),
        XdsMode::Delta,
    )
}

/// [`start_gateway`] over ADS flavour `mode`.
fn start_gateway_over(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    config_dir: &std::path::Path,
    (gateway, pod, port): (&str, &str, u16),
    mode: XdsMode,
) -> (Meshflow, Envoy) {
    let meshflow = Meshflow::start(config_dir, dir.path());
    let label = [("gateway.networking.k8s.io/gateway-name", gateway)];
    let node = ProxyNode::router(pod, "default", "127.0.0.1", &label);
    let envoy = gateway_envoy(envoy_bin, dir, &meshflow, &node, port, mode);
    (meshflow, envoy)
}

/// The Envoy of gateway proxy `node`, served by `meshflow` over `mode`, once it listens on
/// `port`.
fn gateway_envoy(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    meshflow: &Meshflow,
    node: &ProxyNode,
    port: u16,
    mode: XdsMode,
) -> Envoy {
    let envoy = Envoy::start(envoy_bin, dir.path(), node, meshflow.xds_addr(), mode);
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("0.0.0.0_{port}"));
    envoy
}

/// Service `reviews-<version>` on port 9080 with its EndpointSlice: the pod of that version.
pub(crate) fn version_service(reviews: &Reviews, version: &str) -> String {
    version_service_on(reviews, version, 9080)
}

/// Backends `reviews-VERSION` of `default` for each of `versions`, on loopback /24 `net`:
/// each started, its pod and its Service (port 9080, with its EndpointSlice) written to
/// `config_dir` (`services.yaml`).
pub(crate) fn reviews_services(
    net: u8,
    config_dir: &std::path::Path,
    versions: &[&str],
) -> (Reviews, Vec<support::Backend>) {
    let reviews = Reviews::new(net, 9080, config_dir);
    let backends = versions.iter().map(|v| reviews.start_backend(v)).collect();
    reviews.write_pods(versions);
    write_config(
        config_dir,
        "services.yaml",
        &versions
            .iter()
            .map(|v| version_service(&reviews, v))
            .collect::<Vec<_>>()
            .join("---\n"),
    );
    (reviews, backends)
}

/// What `GET path` for `host` through `addr` answers: the body of a 200 (the backend's
/// name), else the status.
pub(crate) fn answer(addr: SocketAddr, host: &str, path: &str) -> String {
    let r = support::http_request(addr, "GET", host, path, &[])
        .unwrap_or_else(|e| panic!("{host}{path}: {e}"));
    if r.status == 200 {
        r.text()
    } else {
        r.status.to_string()
    }
}

/// Gateway `edge` of `default` (class `istio`) with one HTTP listener on `port`, then
/// `routes` (YAML documents, each starting `---`).
pub(crate) fn edge_gateway(port: u16, routes: &str) -> String {
    edge_gateway_of(
        &format!("  - {{name: http, port: {port}, protocol: HTTP}}\n"),
        routes,
    )
}

/// Gateway `edge` of `default` (class `istio`) with `listeners` (YAML list items, each
/// `  - …` on a line of its own), then `rest` (YAML documents, each starting `---`).
pub(crate) fn edge_gateway_of(listeners: &str, rest: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
{listeners}{rest}"
    )
}

/// HTTPRoute `name` for host `NAME.example` on Gateway `edge`, its `rules` (YAML, indented
/// as the list under `rules:`).
pub(crate) fn edge_route(name: &str, rules: &str) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [{name}.example]
  rules:
{rules}"
    )
}

/// Service `reviews-v1` (port 9080) in `config_dir`, its pod on loopback /24 `net`, and the
/// backend answering there (kept running while the returned value lives).
pub(crate) fn reviews_v1(net: u8, config_dir: &std::path::Path) -> support::Backend {
    let reviews = Reviews::new(net, 9080, config_dir);
    let backend = reviews.start_backend("v1");
    reviews.write_pods(&["v1"]);
    write_config(
        config_dir,
        "services.yaml",
        &version_service(&reviews, "v1"),
    );
    backend
}

/// [`version_service`] on Service port `port`.
fn version_service_on(reviews: &Reviews, version: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: reviews-{version}, namespace: default}}
spec:
  selector: {{app: reviews, version: {version}}}
  ports: [{{name: http, port: {port}, targetPort: {target}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-{version}-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: reviews-{version}}}
addressType: IPv4
ports: [{{name: http, port: {target}, protocol: TCP}}]
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: reviews-{version}, namespace: default}}
",
        target = reviews.backend_port(),
        ip = reviews.pod_ip(version),
    )
}

fn gateway_yaml(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: bookinfo-gateway, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    port: {port}
    protocol: HTTP
    hostname: \"*.example\"
    allowedRoutes:
      namespaces: {{from: Same}}
"
    )
}

/// HTTPRoute `reviews` (created first): `/reviews` by segment to the two versions by weight.
fn weighted_route(v1: u32, v2: u32) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
spec:
  parentRefs: [{{name: bookinfo-gateway}}]
  hostnames: [{HOST}, other.org]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /reviews}}}}]
    backendRefs:
    - {{name: reviews-v1, port: 9080, weight: {v1}}}
    - {{name: reviews-v2, port: 9080, weight: {v2}}}
"
    )
}

/// HTTPRoute `pinned` (created later): `/reviews/1` exactly to v1.
const PINNED: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: pinned, namespace: default, creationTimestamp: \"2026-02-01T00:00:00Z\"}
spec:
  parentRefs: [{name: bookinfo-gateway, sectionName: http}]
  hostnames: [bookinfo.example]
  rules:
  - matches: [{path: {type: Exact, value: /reviews/1}}]
    backendRefs: [{name: reviews-v1, port: 9080}]
";

/// Proves a Gateway API gateway routes through real Envoy: 404 before any route; a
/// PathPrefix matching by segment (`/reviewsX` is not under `/reviews`); weights shifting
/// traffic between two Services; a later route's exact match taking precedence over an
/// earlier route's prefix; a hostname outside the listener's not served; the route's
/// deletion back to 404, with no update rejected. (Routes of two hostnames on one request's
/// host do not mix: the exact hostname's routes are the virtual host's, as in Istio.)
#[test]
fn gateway_api_routes_through_envoy() {
    let envoy_bin = require_envoy!();
    gateway_api_scenario(&envoy_bin, XdsMode::Delta, NET);
}

/// Proves the same Gateway API routing as [`gateway_api_routes_through_envoy`] when the
/// gateway's Envoy speaks State-of-the-World ADS.
#[test]
fn gateway_api_routes_through_envoy_over_sotw() {
    let envoy_bin = require_envoy!();
    gateway_api_scenario(&envoy_bin, XdsMode::Sotw, SOTW_NET);
}

/// The bookinfo gateway scenario over `mode`, on loopback /24 `net`.
fn gateway_api_scenario(envoy_bin: &std::path::Path, mode: XdsMode, net: u8) {
    let dir = TestDir::new(&format!("envoy-gateway-api-{}", mode.label()));
    let config_dir = dir.subdir("config");
    let port = free_port();
    let route_config = format!("http.{port}");

    let reviews = Reviews::new(net, 9080, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_pods(&["v1", "v2"]);
    let services = [
        version_service(&reviews, "v1"),
        version_service(&reviews, "v2"),
    ];
    write_config(&config_dir, "services.yaml", &services.join("---\n"));
    write_config(&config_dir, "gateway.yaml", &gateway_yaml(port));

    let (_meshflow, envoy) = start_gateway_over(
        envoy_bin,
        &dir,
        &config_dir,
        ("bookinfo-gateway", "bookinfo-gateway-istio-abc", port),
        mode,
    );
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), HOST);
    let (v1, v2) = ("reviews-v1", "reviews-v2");

    // 1. No route attached: nothing is routed.
    let counts = client.converge(
        "no route: 404",
        "/reviews/1",
        &[],
        |c| only(c, "status 404"),
        10,
    );
    assert_eq!(count(&counts, "status 404"), 10, "{counts:?}");

    // 2. All weight on v1; the prefix matches by path segment.
    envoy.await_rds_update(&route_config, || {
        write_config(&config_dir, "route.yaml", &weighted_route(1, 0))
    });
    let counts = client.converge("/reviews → v1", "/reviews/2", &[], |c| only(c, v1), 20);
    assert_eq!(count(&counts, v1), 20, "{counts:?}");
    let counts = client.tally(5, "/reviews", &[]);
    assert_eq!(
        count(&counts, v1),
        5,
        "the prefix itself matches: {counts:?}"
    );
    let counts = client.tally(5, "/reviewsX", &[]);
    assert_eq!(
        count(&counts, "status 404"),
        5,
        "not the same segment: {counts:?}"
    );
    let other = Client::new(
        &envoy,
        SocketAddr::from(([127, 0, 0, 1], port)),
        "other.org",
    );
    let counts = other.tally(5, "/reviews/2", &[]);
    assert_eq!(
        count(&counts, "status 404"),
        5,
        "outside the listener's hostname: {counts:?}"
    );

    // 3. Weights shift traffic: half and half, then all to v2.
    envoy.await_rds_update(&route_config, || {
        write_config(&config_dir, "route.yaml", &weighted_route(50, 50))
    });
    let counts = client.converge("50/50", "/reviews/2", &[], |c| exactly(c, &[v1, v2]), 40);
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    envoy.await_rds_update(&route_config, || {
        write_config(&config_dir, "route.yaml", &weighted_route(0, 1))
    });
    let counts = client.converge("all to v2", "/reviews/2", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");

    // 4. A later route's exact match is more precise than the earlier route's prefix.
    envoy.await_rds_update(&route_config, || {
        write_config(&config_dir, "pinned.yaml", PINNED)
    });
    let counts = client.converge(
        "/reviews/1 pinned to v1",
        "/reviews/1",
        &[],
        |c| only(c, v1),
        20,
    );
    assert_eq!(count(&counts, v1), 20, "{counts:?}");
    let counts = client.tally(10, "/reviews/2", &[]);
    assert_eq!(count(&counts, v2), 10, "{counts:?}");

    // 5. Both routes deleted: nothing is routed again.
    envoy.await_rds_update(&route_config, || {
        std::fs::remove_file(config_dir.join("pinned.yaml")).expect("remove pinned.yaml");
        std::fs::remove_file(config_dir.join("route.yaml")).expect("remove route.yaml");
    });
    let counts = client.converge(
        "routes deleted: 404",
        "/reviews/1",
        &[],
        |c| only(c, "status 404"),
        10,
    );
    assert_eq!(count(&counts, "status 404"), 10, "{counts:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// A TCP listener, a ServiceEntry per echo backend (named by an Istio `Hostname` backend).
fn tcp_yaml(port: u16, echo_port: u16) -> String {
    let entry = |v: &str, host: u8| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: db-{v}, namespace: default}}
spec:
  hosts: [db-{v}.internal]
  ports: [{{number: 5432, name: tcp, protocol: TCP}}]
  resolution: STATIC
  endpoints: [{{address: \"127.0.{NET}.{host}\", ports: {{tcp: {echo_port}}}}}]
"
        )
    };
    format!(
        "{}---\n{}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: db-gateway, namespace: default}}
spec:
  gatewayClassName: meshflow
  listeners:
  - {{name: db, port: {port}, protocol: TCP}}
",
        entry("v1", 21),
        entry("v2", 22)
    )
}

/// TCPRoute `db` to one of the two entries.
fn tcp_route(version: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: db, namespace: default}}
spec:
  parentRefs: [{{name: db-gateway, sectionName: db}}]
  rules:
  - backendRefs:
    - {{group: networking.istio.io, kind: Hostname, name: db-{version}.internal, port: 5432}}
"
    )
}

/// Proves a TCPRoute carries connections through a Gateway API TCP listener of real Envoy,
/// both ways, to the backend it names (an Istio `Hostname`: a ServiceEntry's host), and
/// that editing the route moves new connections to the other backend.
#[test]
fn tcp_routes_carry_connections_through_envoy() {
    use support::tcp_echo::{tcp_tally, TcpEcho};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-tcp");
    let config_dir = dir.subdir("config");
    let (port, echo_port) = (free_port(), free_port());
    let _v1 = TcpEcho::start(&format!("127.0.{NET}.21"), echo_port, "db-v1");
    let _v2 = TcpEcho::start(&format!("127.0.{NET}.22"), echo_port, "db-v2");
    write_config(&config_dir, "mesh.yaml", &tcp_yaml(port, echo_port));
    write_config(&config_dir, "route.yaml", &tcp_route("v1"));
    let (_meshflow, envoy) = start_gateway(
        &envoy_bin,
        &dir,
        &config_dir,
        "db-gateway",
        "db-gateway-abc",
        port,
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut last = Default::default();
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = tcp_tally(addr, 5);
        only(&last, "db-v1")
    });
    assert!(ok, "connections to db-v1: {last:?}\n{}", envoy.summary());
    write_config(&config_dir, "route.yaml", &tcp_route("v2"));
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = tcp_tally(addr, 5);
        only(&last, "db-v2")
    });
    assert!(ok, "connections to db-v2: {last:?}\n{}", envoy.summary());
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// HTTPRoute `reviews` in `default` whose parent is the Service `reviews` (GAMMA): the
/// sidecars' requests to `reviews` split between the version Services by weight.
fn mesh_route(port: u16, v1: u32, v2: u32) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: reviews, port: {port}}}]
  rules:
  - backendRefs:
    - {{name: reviews-v1, port: {port}, weight: {v1}}}
    - {{name: reviews-v2, port: {port}, weight: {v2}}}
"
    )
}

/// Proves the mesh side of the Gateway API (GAMMA) through a real client sidecar: an
/// HTTPRoute whose parent is the Service `reviews` shifts the sidecar's requests to
/// `reviews` between two version Services by weight (all v1, half and half, all v2), and
/// deleting it gives the Service's own endpoints back.
#[test]
fn mesh_routes_shift_reviews_by_weight_through_a_sidecar() {
    let envoy_bin = require_envoy!();
    mesh_scenario(&envoy_bin, XdsMode::Delta, MESH_NET);
}

/// Proves the same mesh routing as [`mesh_routes_shift_reviews_by_weight_through_a_sidecar`]
/// when the client's sidecar speaks State-of-the-World ADS.
#[test]
fn mesh_routes_shift_reviews_by_weight_through_a_sidecar_over_sotw() {
    let envoy_bin = require_envoy!();
    mesh_scenario(&envoy_bin, XdsMode::Sotw, MESH_SOTW_NET);
}

/// A client sidecar (pod `client-abc` of `default`) and the Service `reviews` with its two
/// version Services, each with its backend, on loopback /24 `net`, under the HTTPRoute
/// `route(port)`; the Service port is the sidecar's egress listener port. Fields drop in
/// order: Envoy, then meshflow, then the backends.
pub(crate) struct MeshClient {
    pub(crate) envoy: Envoy,
    _meshflow: Meshflow,
    _backends: [support::Backend; 2],
    config_dir: std::path::PathBuf,
    pub(crate) port: u16,
    _dir: TestDir,
}

impl MeshClient {
    pub(crate) fn start(
        envoy_bin: &std::path::Path,
        label: &str,
        (net, mode): (u8, XdsMode),
        route: impl Fn(u16) -> String,
    ) -> MeshClient {
        let dir = TestDir::new(label);
        let config_dir = dir.subdir("config");
        let port = free_port();
        let reviews = Reviews::new(net, port, &config_dir);
        let backends = [reviews.start_backend("v1"), reviews.start_backend("v2")];
        reviews.write_service_with(&format!("  clusterIP: {}\n", cluster_ip(net)));
        reviews.write_pods(&["v1", "v2"]);
        reviews.write_endpoints(&["v1", "v2"]);
        let services = [
            version_service_on(&reviews, "v1", port),
            version_service_on(&reviews, "v2", port),
        ];
        write_config(&config_dir, "services.yaml", &services.join("---\n"));
        write_config(
            &config_dir,
            "sidecar.yaml",
            &support::reviews::client_sidecar_yaml(port),
        );
        write_config(&config_dir, "route.yaml", &route(port));
        let meshflow = Meshflow::start(&config_dir, dir.path());
        let labels = [("app", "client")];
        let node = ProxyNode::sidecar("client-abc", "default", &reviews.ip(20), &labels);
        let envoy = Envoy::start(envoy_bin, dir.path(), &node, meshflow.xds_addr(), mode);
        envoy.wait_live(STARTUP_TIMEOUT);
        envoy.await_listener(&format!("127.0.0.1_{port}"));
        MeshClient {
            envoy,
            _meshflow: meshflow,
            _backends: backends,
            config_dir,
            port,
            _dir: dir,
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The ClusterIP of [`MeshClient`]'s Service `reviews` on loopback /24 `net` (never dialled:
/// clients reach the sidecar's bound listener and name the address only as the `Host`).
fn cluster_ip(net: u8) -> String {
    format!("10.96.{net}.1")
}

/// The GAMMA weight scenario over `mode`, on loopback /24 `net`.
fn mesh_scenario(envoy_bin: &std::path::Path, mode: XdsMode, net: u8) {
    let label = format!("envoy-gateway-api-mesh-{}", mode.label());
    let mesh = MeshClient::start(envoy_bin, &label, (net, mode), |port| {
        mesh_route(port, 1, 0)
    });
    let (envoy, config_dir, port) = (&mesh.envoy, &mesh.config_dir, mesh.port);
    let client = Client::new(envoy, mesh.addr(), "reviews");
    let (v1, v2) = ("reviews-v1", "reviews-v2");

    let counts = client.converge("all to v1", "/reviews/1", &[], |c| only(c, v1), 20);
    assert_eq!(count(&counts, v1), 20, "{counts:?}");
    write_config(config_dir, "route.yaml", &mesh_route(port, 50, 50));
    let counts = client.converge(
        "half and half",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    write_config(config_dir, "route.yaml", &mesh_route(port, 0, 1));
    let counts = client.converge("all to v2", "/reviews/1", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");
    std::fs::remove_file(config_dir.join("route.yaml")).expect("remove route.yaml");
    let counts = client.converge(
        "the Service's own endpoints",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// An HTTPRoute on the Service `reviews` with one rule per MESH-HTTP extended feature: a
/// query parameter match (named rule `by-query`), a path prefix rewrite, scheme, port and
/// full-path redirects, a backend's own request header, and a default rule to v1.
fn mesh_extended_route(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: reviews, port: {port}}}]
  rules:
  - name: by-query
    matches: [{{queryParams: [{{name: v, value: \"2\"}}]}}]
    backendRefs: [{{name: reviews-v2, port: {port}}}]
  - matches: [{{path: {{type: PathPrefix, value: /old}}}}]
    filters:
    - type: URLRewrite
      urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /new}}}}
    backendRefs: [{{name: reviews-v1, port: {port}}}]
  - matches: [{{path: {{type: PathPrefix, value: /scheme}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{scheme: https}}}}]
  - matches: [{{path: {{type: PathPrefix, value: /port}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{port: 8443}}}}]
  - matches: [{{path: {{type: PathPrefix, value: /path}}}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {{path: {{type: ReplaceFullPath, replaceFullPath: /elsewhere}}}}
  - matches: [{{path: {{type: PathPrefix, value: /tagged}}}}]
    backendRefs:
    - name: reviews-v1
      port: {port}
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {{set: [{{name: x-mesh-tag, value: tagged}}]}}
  - backendRefs: [{{name: reviews-v1, port: {port}}}]
"
    )
}

/// Proves the MESH-HTTP extended features through a real client sidecar, one request each
/// (the behaviours of the upstream mesh conformance cases, written here): a query parameter
/// match picks v2 (MeshHTTPRouteQueryParamMatching); `/old/x` arrives at the backend as
/// `/new/x` (MeshHTTPRouteRewritePath); scheme, port and full-path redirects answer 302
/// with the Location the filter says (MeshHTTPRouteSchemeRedirect, MeshHTTPRouteRedirectPort,
/// MeshHTTPRouteRedirectPath); a backend's own header modifier reaches that backend
/// (MeshHTTPRouteBackendRequestHeaderModification); the rule's name is in its Envoy route's name
/// (MeshHTTPRouteNamedRouteRule); a request naming the Service by its ClusterIP is routed by
/// the same route.
#[test]
fn mesh_routes_apply_the_extended_features_through_a_sidecar() {
    use support::http_request;
    let envoy_bin = require_envoy!();
    let mesh = MeshClient::start(
        &envoy_bin,
        "envoy-gateway-api-mesh-extended",
        (MESH_EXT_NET, XdsMode::Delta),
        mesh_extended_route,
    );
    let (envoy, addr) = (&mesh.envoy, mesh.addr());
    let client = Client::new(envoy, addr, "reviews");
    let v2 = "reviews-v2";
    let counts = client.converge("v=2 to v2", "/?v=2", &[], |c| only(c, v2), 10);
    assert_eq!(count(&counts, v2), 10, "{counts:?}");
    let get = |path: &str| {
        http_request(addr, "GET", "reviews", path, &[])
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", envoy.summary()))
    };
    let r = get("/?v=1");
    assert_eq!(r.header("x-backend"), Some("reviews-v1"), "{r:?}");
    // The Service's ClusterIP as the host: the Service's virtual host, so its route applies.
    let by_ip = format!("{}:{}", cluster_ip(MESH_EXT_NET), mesh.port);
    let r = http_request(addr, "GET", &by_ip, "/?v=2", &[])
        .unwrap_or_else(|e| panic!("GET {by_ip}: {e}\n{}", envoy.summary()));
    assert_eq!(
        r.header("x-backend"),
        Some("reviews-v2"),
        "by ClusterIP: {r:?}"
    );
    let r = get("/old/x");
    assert_eq!(
        r.header("x-echo-path"),
        Some("/new/x"),
        "prefix rewritten: {r:?}"
    );
    let r = get("/scheme");
    assert_eq!(r.status, 302, "{r:?}");
    let location = r.header("location").unwrap_or_default();
    assert!(location.starts_with("https://reviews"), "{location}");
    let r = get("/port");
    assert_eq!(r.status, 302, "{r:?}");
    let location = r.header("location").unwrap_or_default();
    assert!(
        location.starts_with("http://reviews:8443/port"),
        "{location}"
    );
    let r = get("/path/x");
    assert_eq!(r.status, 302, "{r:?}");
    let location = r.header("location").unwrap_or_default();
    assert!(location.ends_with("/elsewhere"), "{location}");
    let r = get("/tagged");
    assert_eq!(r.header("x-echo-x-mesh-tag"), Some("tagged"), "{r:?}");
    let r = get("/untagged");
    assert_eq!(
        r.header("x-echo-x-mesh-tag"),
        None,
        "only that backend's: {r:?}"
    );
    let dump = envoy.config_dump().to_string();
    assert!(
        dump.contains("\"name\":\"default.reviews.by-query.0\""),
        "the named rule's Envoy route is named by it (namespace, route, rule, match): {}",
        envoy.summary()
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// A `kubernetes.io/tls` Secret `namespace/name`.
pub(crate) fn tls_secret(namespace: &str, name: &str, cert: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        b64(cert),
        b64(key)
    )
}

/// Proves an HTTPS listener of a Gateway API Gateway terminates TLS with the Secret its
/// `certificateRefs` name (a client trusting only that certificate's CA completes the
/// handshake for the listener's hostname) and routes the decrypted request by the
/// HTTPRoute; the same port does not answer plaintext HTTP — nothing is served in clear on
/// a listener written as HTTPS. A second listener on the port names a Secret of another
/// namespace: no handshake completes for its hostname until a ReferenceGrant there allows
/// the Gateway's namespace to name it, then its own certificate is served (over SDS as
/// `kubernetes-gateway://certs/api-cert`), and again none once the grant is deleted.
#[test]
fn an_https_listener_terminates_with_its_certificate_ref() {
    use support::pki::{ca, leaf};
    use support::tls_client::{tls_get_path, Trust};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-https");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let _v1 = reviews_v1(HTTPS_NET, &config_dir);
    let authority = ca("shop CA");
    let (cert, key) = leaf(&authority, &["shop.example"], None);
    write_config(
        &config_dir,
        "secret.yaml",
        &tls_secret("default", "shop-cert", &cert, &key),
    );
    let api_authority = ca("api CA");
    let (api_cert, api_key) = leaf(&api_authority, &["api.example"], None);
    write_config(
        &config_dir,
        "certs.yaml",
        &tls_secret("certs", "api-cert", &api_cert, &api_key),
    );
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: shop, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - name: https
    port: {port}
    protocol: HTTPS
    hostname: shop.example
    tls:
      mode: Terminate
      certificateRefs: [{{name: shop-cert}}]
  - name: api
    port: {port}
    protocol: HTTPS
    hostname: api.example
    tls:
      certificateRefs: [{{name: api-cert, namespace: certs}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: default}}
spec:
  parentRefs: [{{name: shop}}]
  hostnames: [shop.example, api.example]
  rules: [{{backendRefs: [{{name: reviews-v1, port: 9080}}]}}]
"
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "shop", "shop-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut last = Err("not tried".to_string());
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = tls_get_path(
            addr,
            "shop.example",
            "/reviews/1",
            Trust::Roots(&authority.pem),
            &[],
            None,
        );
        last.as_ref()
            .is_ok_and(|(r, peer)| r.contains("reviews-v1") && !peer.is_empty())
    });
    assert!(
        ok,
        "HTTPS through the listener: {last:?}\n{}",
        envoy.summary()
    );
    let plain = support::http_get(addr, "shop.example", "/reviews/1", &[]);
    assert!(
        !plain
            .as_ref()
            .is_ok_and(|(status, body)| *status == 200 || body.contains("reviews-v1")),
        "plaintext must not be served on an HTTPS listener: {plain:?}"
    );

    // The listener whose certificate is another namespace's, by its ReferenceGrants.
    let api = || {
        tls_get_path(
            addr,
            "api.example",
            "/reviews/1",
            Trust::Roots(&api_authority.pem),
            &[],
            None,
        )
    };
    assert!(
        api().is_err(),
        "no grant: the listener is not served, nothing completes a handshake for it"
    );
    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gateways-of-default, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]
  to: [{group: '', kind: Secret, name: api-cert}]
";
    write_config(&config_dir, "grant.yaml", grant);
    let mut last = Err("not tried".to_string());
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = api();
        last.as_ref()
            .is_ok_and(|(r, peer)| r.contains("reviews-v1") && !peer.is_empty())
    });
    assert!(
        ok,
        "HTTPS with the granted certificate: {last:?}\n{}",
        envoy.summary()
    );
    std::fs::remove_file(config_dir.join("grant.yaml")).expect("the grant's file");
    let gone = support::wait_until(support::CONVERGE_TIMEOUT, || api().is_err());
    assert!(gone, "the grant deleted, the listener is served no more");
    assert!(
        tls_get_path(
            addr,
            "shop.example",
            "/reviews/1",
            Trust::Roots(&authority.pem),
            &[],
            None
        )
        .is_ok(),
        "the other listener is untouched"
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves the misdirected-request rule through a real Envoy
/// (HTTPRouteHTTPSListenerDetectMisdirectedRequests): three HTTPS listeners on one port —
/// `foo.example.com`, `*.example.com` and none — and a route for `foo.example.com` and
/// `bar.example.com`. A request whose SNI and Host select the same listener reaches the
/// backend; one whose Host another listener matches more specifically, or that the SNI's
/// listener does not match while another does, is answered 421 (the client should open a
/// connection for it); an unknown host on the hostname-less listener is a 404; a route without
/// hostnames on listener `second.test` serves that host (HTTPRouteHTTPSListener).
#[test]
fn https_listeners_on_one_port_answer_421_to_misdirected_requests() {
    use support::pki::{ca, leaf};
    use support::tls_client::{tls_get_sni, Trust};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-421");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let _v1 = reviews_v1(MISDIRECTED_NET, &config_dir);
    let authority = ca("edge CA");
    let (cert, key) = leaf(
        &authority,
        &[
            "foo.example.com",
            "*.example.com",
            "unknown.test",
            "second.test",
        ],
        None,
    );
    write_config(
        &config_dir,
        "secret.yaml",
        &tls_secret("default", "edge-cert", &cert, &key),
    );
    let listener = |name: &str, hostname: Option<&str>| {
        format!(
            "  - name: {name}\n    port: {port}\n    protocol: HTTPS\n{}    tls: {{certificateRefs: [{{name: edge-cert}}]}}\n",
            hostname.map(|h| format!("    hostname: \"{h}\"\n")).unwrap_or_default()
        )
    };
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
{}{}{}{}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [foo.example.com, bar.example.com]
  rules: [{{backendRefs: [{{name: reviews-v1, port: 9080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: hostless, namespace: default}}
spec:
  parentRefs: [{{name: edge, sectionName: second}}]
  rules: [{{backendRefs: [{{name: reviews-v1, port: 9080}}]}}]
",
            listener("foo", Some("foo.example.com")),
            listener("wild", Some("*.example.com")),
            listener("any", None),
            listener("second", Some("second.test")),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let status = |sni: &str, host: &str| -> Result<u16, String> {
        let (response, _) = tls_get_sni(
            addr,
            sni,
            host,
            "/reviews/1",
            Trust::Roots(&authority.pem),
            &[],
            None,
        )?;
        response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or(response)
    };
    let converged = support::wait_until(support::CONVERGE_TIMEOUT, || {
        status("foo.example.com", "foo.example.com") == Ok(200)
    });
    assert!(
        converged,
        "{:?}\n{}",
        status("foo.example.com", "foo.example.com"),
        envoy.summary()
    );
    for (sni, host, want) in [
        ("foo.example.com", "foo.example.com", 200),
        ("bar.example.com", "bar.example.com", 200),
        // A more specific listener (the exact one) serves foo: misdirected on the wildcard's
        // connection, and on the hostname-less one's.
        ("bar.example.com", "foo.example.com", 421),
        ("unknown.test", "foo.example.com", 421),
        // The SNI's listener does not match the host, another does.
        ("foo.example.com", "bar.example.com", 421),
        ("foo.example.com", "unknown.test", 421),
        ("unknown.test", "bar.example.com", 421),
        // Only the SNI's listener matches, and no route takes the host.
        ("unknown.test", "unknown.test", 404),
        // HTTPRouteHTTPSListener: a route without hostnames serves its listener's hostname;
        // asked of another listener's connection, that host is misdirected.
        ("second.test", "second.test", 200),
        ("unknown.test", "second.test", 421),
        ("baz.example.com", "baz.example.com", 404),
    ] {
        assert_eq!(status(sni, host), Ok(want), "SNI {sni}, Host {host}");
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Service `name` of `default` on port `port` with `appProtocol` `app_protocol`, its one
/// endpoint `ip:target` in an EndpointSlice of its own (no selector: managed by hand).
fn app_protocol_service(
    name: &str,
    port: u16,
    app_protocol: &str,
    ip: &str,
    target: u16,
) -> String {
    service_with(
        name,
        &format!("appProtocol: {app_protocol}, "),
        "",
        (port, ip, target),
    )
}

/// Service `name` of `default` on port `port` (its port's `extra` fields, its spec's
/// `spec_extra` lines), with a hand-managed EndpointSlice of one endpoint `ip:target`.
pub(crate) fn service_with(
    name: &str,
    extra: &str,
    spec_extra: &str,
    (port, ip, target): (u16, &str, u16),
) -> String {
    support::kube_yaml::HandService {
        port_extra: extra,
        spec_extra,
        ..support::kube_yaml::HandService::web(name, port, target)
    }
    .with_endpoints(&[ip])
}

/// Proves HTTPRouteBackendProtocolWebSocket and HTTPRouteBackendProtocolH2C through a real
/// Envoy gateway: a WebSocket to a Service whose port's `appProtocol` is `kubernetes.io/ws`
/// is upgraded through the HTTP listener and its text and binary messages come back from the
/// backend that accepted it; an h2c request (HTTP/2 with prior knowledge) to a Service of
/// `appProtocol: kubernetes.io/h2c` reaches its backend over HTTP/2 — a server that speaks
/// nothing else.
#[test]
fn http_routes_carry_websockets_and_h2c_to_their_backends() {
    use support::upgrades::{h2c_get, ws_exchange, H2cBackend, WsEcho};
    use tungstenite::Message;
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-upgrades");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let (ws_ip, h2c_ip) = (
        format!("127.0.{UPGRADE_NET}.11"),
        format!("127.0.{UPGRADE_NET}.12"),
    );
    let (ws_port, h2c_port) = (free_port(), free_port());
    let _ws = WsEcho::start(&ws_ip, ws_port, "socket-v1");
    let _h2c = H2cBackend::start(&h2c_ip, h2c_port, "h2c-v1");
    write_config(
        &config_dir,
        "services.yaml",
        &format!(
            "{}---\n{}",
            app_protocol_service("socket", 8080, "kubernetes.io/ws", &ws_ip, ws_port),
            app_protocol_service("h2c", 8081, "kubernetes.io/h2c", &h2c_ip, h2c_port),
        ),
    );
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(
            port,
            &[
                edge_route("ws", "  - backendRefs: [{name: socket, port: 8080}]\n"),
                edge_route("h2c", "  - backendRefs: [{name: h2c, port: 8081}]\n"),
            ]
            .concat(),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let messages = [
        Message::Text("hello through the gateway".into()),
        Message::Binary(vec![0u8, 1, 2, 254, 255].into()),
    ];
    let mut last = Err("not tried".to_string());
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = ws_exchange(addr, "ws.example", "/chat", &messages);
        last.is_ok()
    });
    assert!(ok, "the WebSocket: {last:?}\n{}", envoy.summary());
    let exchange = last.expect("checked");
    assert_eq!(exchange.backend, "socket-v1");
    assert_eq!(exchange.echoed, messages.to_vec(), "text and binary echoed");

    let mut last = Err("not tried".to_string());
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = h2c_get(addr, "h2c.example", "/");
        last.as_ref().is_ok_and(|r| r.status == 200)
    });
    assert!(ok, "h2c: {last:?}\n{}", envoy.summary());
    let r = last.expect("checked");
    assert_eq!(
        (r.backend.as_str(), r.version.as_str()),
        ("h2c-v1", "HTTP/2.0"),
        "{r:?}"
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves HTTPRouteServiceTypes through a real Envoy gateway: a headless Service
/// (`clusterIP: None`) and a Service whose EndpointSlice is managed by hand (no selector),
/// each once with an IPv4 slice and once with an IPv6 one (`addressType: IPv6`, its backend
/// on `::1`), are each reachable through an HTTPRoute, each request answered by its own
/// backend.
#[test]
fn http_routes_reach_headless_and_hand_managed_services() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-service-types");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let (headless_ip, manual_ip) = (
        format!("127.0.{SERVICE_TYPES_NET}.11"),
        format!("127.0.{SERVICE_TYPES_NET}.12"),
    );
    let (headless_port, manual_port) = (free_port(), free_port());
    let _headless = support::Backend::start(&headless_ip, headless_port, "headless-v1");
    let _manual = support::Backend::start(&manual_ip, manual_port, "manual-v1");
    // IPv6: the machines' loopback has `::1` (the test fails where it has not: the case
    // needs an IPv6 endpoint to be real).
    let (headless6_port, manual6_port) = (free_port(), free_port());
    let _headless6 = support::Backend::start("::1", headless6_port, "headless6-v1");
    let _manual6 = support::Backend::start("::1", manual6_port, "manual6-v1");
    let v6 = "  ipFamilies: [IPv6]\n";
    write_config(
        &config_dir,
        "services.yaml",
        &[
            service_with(
                "headless",
                "",
                "  clusterIP: None\n",
                (8080, &headless_ip, headless_port),
            ),
            service_with(
                "manual",
                "",
                "  clusterIP: 10.96.0.12\n",
                (8080, &manual_ip, manual_port),
            ),
            service_with(
                "headless6",
                "",
                &format!("  clusterIP: None\n{v6}"),
                (8080, "::1", headless6_port),
            ),
            service_with(
                "manual6",
                "",
                &format!("  clusterIP: \"fd00:10:96::12\"\n{v6}"),
                (8080, "::1", manual6_port),
            ),
        ]
        .join("---\n"),
    );
    let route = |name: &str| {
        edge_route(
            name,
            &format!("  - backendRefs: [{{name: {name}, port: 8080}}]\n"),
        )
    };
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(
            port,
            &["headless", "manual", "headless6", "manual6"]
                .map(route)
                .concat(),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for name in ["headless", "manual", "headless6", "manual6"] {
        let host = format!("{name}.example");
        let mut last = Err("not tried".to_string());
        let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
            last = support::http_get(addr, &host, "/", &[]);
            last.as_ref()
                .is_ok_and(|(s, body)| *s == 200 && body.contains(&format!("{name}-v1")))
        });
        assert!(ok, "{name}: {last:?}\n{}", envoy.summary());
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves TLSRouteModeTerminate and TLSRouteModeMixed through a real Envoy gateway: on one
/// port, a TLS listener that terminates (`*.example.com`) and one that passes TLS through
/// (`pass.example.net`). A client's TLS connection for `a.example.com` or `b.example.com` is
/// terminated with the listener's certificate and its plaintext reaches the TCP backend of
/// that name's TLSRoute; one for `pass.example.net` reaches its backend's own TLS (the
/// client sees the backend's certificate); a name of the terminating listener no TLSRoute
/// takes completes no handshake, nor does a passthrough name whose TLSRoute's backend is
/// missing or of an unknown kind.
#[test]
fn tls_routes_are_terminated_or_passed_through_by_their_listener() {
    use support::pki::{ca, leaf};
    use support::tcp_echo::TcpEcho;
    use support::tls_backend::TlsBackend;
    use support::tls_client::{tls_echo, tls_get_path, Trust};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-tls-terminate");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let ip = |host: u8| format!("127.0.{TLS_TERMINATE_NET}.{host}");
    let (echo_port, tls_port) = (free_port(), free_port());
    let _a = TcpEcho::start(&ip(11), echo_port, "db-a");
    let _b = TcpEcho::start(&ip(12), echo_port, "db-b");
    let backend_ca = ca("backend CA");
    let (bcert, bkey) = leaf(&backend_ca, &["pass.example.net"], None);
    let _secure = TlsBackend::start(&ip(13), tls_port, "secure-v1", &bcert, &bkey, None);
    let edge_ca = ca("edge CA");
    let (cert, key) = leaf(&edge_ca, &["*.example.com"], None);
    write_config(
        &config_dir,
        "secret.yaml",
        &tls_secret("default", "edge-cert", &cert, &key),
    );
    let tcp = "appProtocol: tcp, ";
    write_config(
        &config_dir,
        "services.yaml",
        &format!(
            "{}---\n{}---\n{}",
            service_with("db-a", tcp, "", (5432, &ip(11), echo_port)),
            service_with("db-b", tcp, "", (5432, &ip(12), echo_port)),
            service_with("secure", "appProtocol: tls, ", "", (443, &ip(13), tls_port)),
        ),
    );
    let route = |name: &str, section: &str, host: &str, to: &str, to_port: u16| {
        tls_route(name, section, &format!("[{host}]"), to, to_port)
    };
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - name: terminate
    port: {port}
    protocol: TLS
    hostname: \"*.example.com\"
    tls: {{mode: Terminate, certificateRefs: [{{name: edge-cert}}]}}
  - name: passthrough
    port: {port}
    protocol: TLS
    hostname: \"*.example.net\"
    tls: {{mode: Passthrough}}
{}{}{}{}---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: odd, namespace: default}}
spec:
  parentRefs: [{{name: edge, sectionName: passthrough}}]
  hostnames: [odd.example.net]
  rules: [{{backendRefs: [{{group: unknownkind.example.com, kind: NonExistent, name: secure}}]}}]
",
            route("a", "terminate", "a.example.com", "db-a", 5432),
            route("b", "terminate", "b.example.com", "db-b", 5432),
            route("pass", "passthrough", "pass.example.net", "secure", 443),
            route(
                "missing",
                "passthrough",
                "missing.example.net",
                "nowhere",
                443
            ),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let edge = Trust::Roots(&edge_ca.pem);
    for (sni, backend) in [("a.example.com", "db-a"), ("b.example.com", "db-b")] {
        let mut last = Err("not tried".to_string());
        let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
            last = tls_echo(addr, sni, edge, None);
            last.as_deref() == Ok(backend)
        });
        assert!(ok, "{sni}: {last:?}\n{}", envoy.summary());
    }
    let passed = tls_get_path(
        addr,
        "pass.example.net",
        "/",
        Trust::Roots(&backend_ca.pem),
        &[],
        None,
    );
    assert!(
        passed.as_ref().is_ok_and(|(r, _)| r.contains("secure-v1")),
        "the passthrough listener's TLSRoute reaches the backend's own TLS: {passed:?}"
    );
    let unrouted = tls_echo(addr, "c.example.com", edge, None);
    assert!(
        unrouted.is_err(),
        "no TLSRoute names c.example.com: {unrouted:?}"
    );
    // TLSRouteInvalidBackendRefNonexistent, TLSRouteInvalidBackendRefUnknownKind: a route
    // whose backend is missing or of an unknown kind carries no connection.
    let backend_trust = Trust::Roots(&backend_ca.pem);
    for sni in ["missing.example.net", "odd.example.net"] {
        let refused = tls_get_path(addr, sni, "/", backend_trust, &[], None);
        assert!(refused.is_err(), "{sni}: {refused:?}");
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves TLSRouteHostnameIntersection with real TLS connections through a real Envoy
/// gateway: passthrough listeners with an exact hostname, a wildcard, a more specific
/// wildcard and none, each with a TLSRoute whose hostnames are wider, narrower or partly
/// outside; a connection whose SNI is in the intersection reaches that route's backend (its
/// own TLS, end to end), one outside it completes no handshake.
#[test]
fn tls_routes_take_the_intersection_of_their_hostnames_and_the_listeners() {
    use support::pki::{ca, leaf};
    use support::tls_backend::TlsBackend;
    use support::tls_client::{tls_get_sni, Trust};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-tls-intersection");
    let config_dir = dir.subdir("config");
    let ip = |host: u8| format!("127.0.{TLS_INTERSECTION_NET}.{host}");
    let backend_ca = ca("backend CA");
    let names = [
        "*.example.com",
        "*.sub.example.com",
        "*.example.net",
        "*.example.org",
    ];
    let (cert, key) = leaf(&backend_ca, &names, None);
    let tls_port = free_port();
    let backends: Vec<TlsBackend> = ["a", "b", "c", "d"]
        .iter()
        .zip(11u8..)
        .map(|(name, host)| {
            let identity = format!("backend-{name}");
            TlsBackend::start(&ip(host), tls_port, &identity, &cert, &key, None)
        })
        .collect();
    let services: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .zip(11u8..)
        .map(|(name, host)| {
            service_with(name, "appProtocol: tls, ", "", (443, &ip(host), tls_port))
        })
        .collect();
    write_config(&config_dir, "services.yaml", &services.join("---\n"));
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let listener = |name: &str, port: u16, hostname: &str| {
        format!("  - {{name: {name}, port: {port}, protocol: TLS, {hostname}tls: {{mode: Passthrough}}}}\n")
    };
    let route =
        |name: &str, section: &str, hostnames: &str| tls_route(name, section, hostnames, name, 443);
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway_of(
            &[
                listener("exact", ports[0], "hostname: abc.example.com, "),
                listener("wildcard", ports[1], "hostname: '*.example.com', "),
                listener("narrow", ports[2], "hostname: '*.sub.example.com', "),
                listener("any", ports[3], ""),
            ]
            .concat(),
            &[
                // A wider route on an exact listener: the listener's name only.
                route("a", "exact", "['*.example.com']"),
                // An exact name inside the listener's wildcard, and one outside it.
                route("b", "wildcard", "[foo.example.com, bar.example.org]"),
                // A wider wildcard on a narrower one: the narrower.
                route("c", "narrow", "['*.example.com']"),
                // Any name on a listener without a hostname.
                route("d", "any", "['*.example.net']"),
            ]
            .concat(),
        ),
    );
    let (_meshflow, envoy) =
        start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", ports[0]);
    let trust = Trust::Roots(&backend_ca.pem);
    let connect = |port: u16, sni: &str| {
        tls_get_sni(
            SocketAddr::from(([127, 0, 0, 1], port)),
            sni,
            sni,
            "/",
            trust,
            &[],
            None,
        )
    };
    let reached = [
        (ports[0], "abc.example.com", "a"),
        (ports[1], "foo.example.com", "b"),
        (ports[2], "x.sub.example.com", "c"),
        (ports[3], "x.example.net", "d"),
    ];
    for (port, sni, backend) in reached {
        let mut last = Err("not tried".to_string());
        let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
            last = connect(port, sni);
            last.as_ref()
                .is_ok_and(|(r, _)| r.ends_with(&format!("backend-{backend}")))
        });
        assert!(
            ok,
            "{sni} on :{port} reaches {backend}: {last:?}\n{}",
            envoy.summary()
        );
    }
    let refused = [
        (ports[0], "other.example.com"),
        (ports[1], "bar.example.com"),
        (ports[1], "bar.example.org"),
        (ports[2], "y.example.com"),
        (ports[3], "x.example.com"),
    ];
    for (port, sni) in refused {
        let got = connect(port, sni);
        assert!(
            got.is_err(),
            "{sni} on :{port} is outside every intersection: {got:?}"
        );
    }
    for b in &backends {
        assert!(b.requests_served() > 0, "each backend answered");
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// TLSRoute `name` of `default` on listener `section` of Gateway `edge`, for `hostnames`
/// (a YAML list), to Service `to` port `to_port`.
fn tls_route(name: &str, section: &str, hostnames: &str, to: &str, to_port: u16) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge, sectionName: {section}}}]
  hostnames: {hostnames}
  rules: [{{backendRefs: [{{name: {to}, port: {to_port}}}]}}]
"
    )
}

/// HTTPRoute `r<i>` for host `h<i>.example`, to one version Service.
fn host_route(i: usize, version: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: default}}
spec:
  parentRefs: [{{name: bookinfo-gateway}}]
  hostnames: [h{i}.example]
  rules: [{{backendRefs: [{{name: reviews-{version}, port: 9080}}]}}]
"
    )
}

/// Proves that editing 20 routes at once fails no request: traffic to the 20 hostnames runs
/// throughout while every route moves from v1 to v2 in one write of the config directory;
/// every request is answered by v1 or v2 (no 404 or 5xx while the gateway's route
/// configuration changes), and each host ends on v2.
#[test]
fn twenty_routes_edited_at_once_fail_no_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const ROUTES: usize = 20;
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-twenty");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(EDIT_NET, 9080, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_pods(&["v1", "v2"]);
    let services = [
        version_service(&reviews, "v1"),
        version_service(&reviews, "v2"),
    ];
    write_config(&config_dir, "services.yaml", &services.join("---\n"));
    write_config(
        &config_dir,
        "gateway.yaml",
        &gateway_yaml(port).replace("    hostname: \"*.example\"\n", ""),
    );
    let all = |version: &str| -> String {
        (0..ROUTES)
            .map(|i| host_route(i, version))
            .collect::<Vec<_>>()
            .join("---\n")
    };
    write_config(&config_dir, "routes.yaml", &all("v1"));
    let (_meshflow, envoy) = start_gateway(
        &envoy_bin,
        &dir,
        &config_dir,
        "bookinfo-gateway",
        "gw-abc",
        port,
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for i in 0..ROUTES {
        let client = Client::new(&envoy, addr, &format!("h{i}.example"));
        client.converge("each host on v1", "/", &[], |c| only(c, "reviews-v1"), 2);
    }

    let running = Arc::new(AtomicBool::new(true));
    let traffic = {
        let running = running.clone();
        std::thread::spawn(move || {
            let mut outcomes: std::collections::HashMap<String, usize> = Default::default();
            let mut i = 0;
            while running.load(Ordering::Relaxed) {
                let host = format!("h{}.example", i % ROUTES);
                let outcome = match support::http_get(addr, &host, "/", &[]) {
                    Ok((200, body)) => body.trim().to_string(),
                    Ok((status, _)) => format!("status {status}"),
                    Err(e) => format!("error: {e}"),
                };
                *outcomes.entry(outcome).or_default() += 1;
                i += 1;
            }
            outcomes
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    write_config(&config_dir, "routes.yaml", &all("v2"));
    for i in 0..ROUTES {
        let client = Client::new(&envoy, addr, &format!("h{i}.example"));
        client.converge("each host on v2", "/", &[], |c| only(c, "reviews-v2"), 2);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    running.store(false, Ordering::Relaxed);
    let outcomes = traffic.join().expect("the traffic thread");
    let answered = count(&outcomes, "reviews-v1") + count(&outcomes, "reviews-v2");
    let total: usize = outcomes.values().sum();
    assert!(
        total > ROUTES * 2,
        "too little traffic to say anything: {outcomes:?}"
    );
    assert_eq!(
        answered, total,
        "every request answered by v1 or v2: {outcomes:?}"
    );
    assert!(count(&outcomes, "reviews-v2") > 0, "{outcomes:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Service `authz` (port name `grpc`: HTTP/2 upstream) with its EndpointSlice at `at`.
fn grpc_service(at: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: authz, namespace: default}}
spec:
  ports: [{{name: grpc, port: 9000, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: authz-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: authz}}
addressType: IPv4
ports: [{{name: grpc, port: {port}, protocol: TCP}}]
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
",
        port = at.port(),
        ip = at.ip(),
    )
}

/// GRPCRoute `authz` on the Gateway, matching one method of Envoy's authorization service.
fn grpc_route(method: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: authz, namespace: default}}
spec:
  parentRefs: [{{name: grpc-gateway}}]
  rules:
  - matches: [{{method: {{service: envoy.service.auth.v3.Authorization, method: {method}}}}}]
    backendRefs: [{{name: authz, port: 9000}}]
"
    )
}

/// One `Authorization/Check` call through the gateway: the gRPC status code it ends with
/// (0 or 7 from the service; 12 UNIMPLEMENTED when no route takes the method).
fn check_through(addr: SocketAddr) -> Result<i32, String> {
    use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
    use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(std::time::Duration::from_secs(2))
            .timeout(std::time::Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let mut client = AuthorizationClient::new(channel);
        match client.check(CheckRequest::default()).await {
            Ok(r) => Ok(r.into_inner().status.map(|s| s.code).unwrap_or(0)),
            Err(status) => Ok(status.code() as i32),
        }
    })
}

/// Proves a GRPCRoute routes real gRPC through a Gateway API gateway to an HTTP/2 backend by
/// service and method: the call reaches the service (which counts it) while the route
/// matches its method, and is answered UNIMPLEMENTED (no route) without reaching it once the
/// route matches another method.
#[test]
fn grpc_routes_route_calls_by_method_through_envoy() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-grpc");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let authz = support::ext_authz::ExtAuthz::start(&format!("127.0.{GRPC_NET}.11"));
    write_config(&config_dir, "service.yaml", &grpc_service(authz.grpc));
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: grpc-gateway, namespace: default}}
spec:
  gatewayClassName: istio
  listeners: [{{name: grpc, port: {port}, protocol: HTTP}}]
"
        ),
    );
    write_config(&config_dir, "route.yaml", &grpc_route("Check"));
    let (_meshflow, envoy) = start_gateway(
        &envoy_bin,
        &dir,
        &config_dir,
        "grpc-gateway",
        "grpc-gateway-abc",
        port,
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut last = Err("not tried".to_string());
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = check_through(addr);
        matches!(last, Ok(0 | 7))
    });
    assert!(
        ok,
        "Check through the gateway: {last:?}\n{}",
        envoy.summary()
    );
    assert!(authz.asked().1 >= 1, "the service answered it");

    write_config(&config_dir, "route.yaml", &grpc_route("NotCheck"));
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = check_through(addr);
        last == Ok(12)
    });
    assert!(
        ok,
        "Check once the route takes another method: {last:?}\n{}",
        envoy.summary()
    );
    let asked = authz.asked().1;
    assert_eq!(check_through(addr), Ok(12));
    assert_eq!(authz.asked().1, asked, "not sent to the service");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Istio's helloworld sample's objects as its Gateway API task states them (our own
/// fixtures): Services `helloworld` (both versions) and `helloworld-v1`/`-v2` on port 5000,
/// the pods' EndpointSlices, and Gateway `helloworld-gateway` (HTTP, routes of its own
/// namespace).
fn helloworld_yaml(port: u16, backend_port: u16) -> String {
    let ip = |v: u8| format!("127.0.{HELLO_NET}.{}", 10 + v);
    let service = |name: &str, selector: &str, ips: &[String]| {
        let endpoints: String = ips
            .iter()
            .map(|ip| format!("- addresses: [{ip}]\n  conditions: {{ready: true}}\n"))
            .collect();
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  selector: {{{selector}}}
  ports: [{{name: http, port: 5000, targetPort: {backend_port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {backend_port}, protocol: TCP}}]
endpoints:
{endpoints}---
"
        )
    };
    format!(
        "{}{}{}apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: helloworld-gateway, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    port: {port}
    protocol: HTTP
    allowedRoutes:
      namespaces: {{from: Same}}
",
        service("helloworld", "app: helloworld", &[ip(1), ip(2)]),
        service("helloworld-v1", "app: helloworld, version: v1", &[ip(1)]),
        service("helloworld-v2", "app: helloworld, version: v2", &[ip(2)]),
    )
}

/// HTTPRoute `helloworld`: exactly `/hello`, to the given (Service, weight) backends.
fn helloworld_route(backends: &[(&str, u32)]) -> String {
    let refs: String = backends
        .iter()
        .map(|(name, weight)| format!("    - {{name: {name}, port: 5000, weight: {weight}}}\n"))
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: helloworld, namespace: default}}
spec:
  parentRefs: [{{name: helloworld-gateway}}]
  rules:
  - matches: [{{path: {{type: Exact, value: /hello}}}}]
    backendRefs:
{refs}"
    )
}

/// Two backends answering as `names`, at `127.0.<net>.11` and `.12` on `port`.
fn two_backends(net: u8, port: u16, names: [&str; 2]) -> [support::Backend; 2] {
    names.map(|name| {
        let host = if name == names[0] { 11 } else { 12 };
        support::Backend::start(&format!("127.0.{net}.{host}"), port, name)
    })
}

/// Proves Istio's helloworld Gateway API flow through real Envoy: `/hello` through the
/// gateway reaches both versions behind `helloworld` (and only `/hello`: an exact match),
/// then, the route moved to the version Services by weight, all of it goes to v2.
#[test]
fn helloworld_gateway_api_flow_through_envoy() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-helloworld");
    let config_dir = dir.subdir("config");
    let (port, backend_port) = (free_port(), free_port());
    let _backends = two_backends(HELLO_NET, backend_port, ["helloworld-v1", "helloworld-v2"]);
    write_config(
        &config_dir,
        "helloworld.yaml",
        &helloworld_yaml(port, backend_port),
    );
    write_config(
        &config_dir,
        "route.yaml",
        &helloworld_route(&[("helloworld", 1)]),
    );
    let (_meshflow, envoy) = start_gateway(
        &envoy_bin,
        &dir,
        &config_dir,
        "helloworld-gateway",
        "helloworld-gateway-istio-abc",
        port,
    );
    let client = Client::new(
        &envoy,
        SocketAddr::from(([127, 0, 0, 1], port)),
        "helloworld.example",
    );
    let (v1, v2) = ("helloworld-v1", "helloworld-v2");
    let counts = client.converge(
        "both versions",
        "/hello",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    let counts = client.tally(5, "/hello/again", &[]);
    assert_eq!(
        count(&counts, "status 404"),
        5,
        "an exact match: {counts:?}"
    );
    write_config(
        &config_dir,
        "route.yaml",
        &helloworld_route(&[("helloworld-v1", 0), ("helloworld-v2", 100)]),
    );
    let counts = client.converge("all to v2", "/hello", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// The two Services of the migration test, `reviews-v1` and `reviews-v2` (port 9080), each
/// with its one backend.
fn migration_services(backend_port: u16) -> String {
    ["v1", "v2"]
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "apiVersion: v1
kind: Service
metadata: {{name: reviews-{v}, namespace: default}}
spec:
  selector: {{app: reviews, version: {v}}}
  ports: [{{name: http, port: 9080, targetPort: {backend_port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-{v}-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: reviews-{v}}}
addressType: IPv4
ports: [{{name: http, port: {backend_port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.{MIGRATE_NET}.{ip}]
  conditions: {{ready: true}}
---
",
                ip = 11 + i
            )
        })
        .collect()
}

/// The gateway in Istio's form: a Gateway on `port` for `bookinfo.example` and a
/// VirtualService sending `/reviews` 80/20 to the two versions.
fn istio_form(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: bookinfo-gateway, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    hosts: [{HOST}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [{HOST}]
  gateways: [bookinfo-gateway]
  http:
  - match: [{{uri: {{prefix: /reviews}}}}]
    route:
    - destination: {{host: reviews-v1, port: {{number: 9080}}}}
      weight: 80
    - destination: {{host: reviews-v2, port: {{number: 9080}}}}
      weight: 20
"
    )
}

/// The same gateway in the Gateway API's form, as `docs/gateway-api.md` says to write it:
/// a Gateway of class istio with the server as its listener, and an HTTPRoute for the
/// VirtualService.
fn gateway_api_form(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: bookinfo-gateway, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    port: {port}
    protocol: HTTP
    hostname: {HOST}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default}}
spec:
  parentRefs: [{{name: bookinfo-gateway}}]
  hostnames: [{HOST}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /reviews}}}}]
    backendRefs:
    - {{name: reviews-v1, port: 9080, weight: 80}}
    - {{name: reviews-v2, port: 9080, weight: 20}}
"
    )
}

/// Proves the migration `docs/gateway-api.md` describes on a running gateway: the pod
/// carries both forms' labels, the Istio Gateway/VirtualService are replaced by a Gateway
/// and an HTTPRoute in one write, the traffic keeps its split (both versions answer, nothing
/// else) while the path prefix now matches by segment (`/reviewsX`, routed by Istio's string
/// prefix, answers 404), and `meshflow diff` of the gateway proxy names what it was sent:
/// its route configuration modified in place (the same name, the route now `PathPrefix` by
/// segment; no listener or cluster touched), with the Istio objects' removal and the Gateway
/// API objects' arrival as the epoch's input changes. The diff is printed for the docs'
/// example.
#[test]
fn moving_a_gateway_to_the_gateway_api_keeps_its_traffic_and_diff_shows_the_change() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-migration");
    let config_dir = dir.subdir("config");
    let (port, backend_port) = (free_port(), free_port());
    let _backends = two_backends(MIGRATE_NET, backend_port, ["reviews-v1", "reviews-v2"]);
    write_config(
        &config_dir,
        "services.yaml",
        &migration_services(backend_port),
    );
    write_config(&config_dir, "gateway.yaml", &istio_form(port));
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_s = debug.to_string();
    let meshflow = Meshflow::start_with_args(&config_dir, dir.path(), &["--debug-addr", &debug_s]);
    let labels = [
        ("istio", "ingressgateway"),
        ("gateway.networking.k8s.io/gateway-name", "bookinfo-gateway"),
    ];
    let node = ProxyNode::router(
        "bookinfo-gateway-istio-abc",
        "default",
        "127.0.0.1",
        &labels,
    );
    let envoy = gateway_envoy(&envoy_bin, &dir, &meshflow, &node, port, XdsMode::Delta);
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), HOST);
    let (v1, v2) = ("reviews-v1", "reviews-v2");
    let both = |c: &std::collections::HashMap<String, usize>| exactly(c, &[v1, v2]);
    let counts = client.converge("Istio's form: both versions", "/reviews", &[], both, 40);
    assert!(both(&counts), "{counts:?}");
    // Istio's `prefix` is a string prefix: `/reviewsX` is routed too.
    let counts = client.tally(10, "/reviewsX", &[]);
    assert_eq!(count(&counts, "status 404"), 0, "{counts:?}");

    write_config(&config_dir, "gateway.yaml", &gateway_api_form(port));
    // The Gateway API's PathPrefix matches by segment: `/reviewsX` no longer is.
    let is_404 = |c: &std::collections::HashMap<String, usize>| count(c, "status 404") == 10;
    client.converge("the Gateway API's form", "/reviewsX", &[], is_404, 10);
    let counts = client.tally(40, "/reviews", &[]);
    assert!(both(&counts), "the same split: {counts:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());

    // The proxy's last change: the migration's epoch.
    let diff = support::meshflow_cli(&["diff", &node.id, "--debug-addr", &debug_s]);
    eprintln!("meshflow diff {}:\n{diff}", node.id);
    let route = format!("http.{port}");
    assert!(
        diff.lines()
            .any(|l| l.starts_with("~ RDS ") && l.contains(&route)),
        "the route configuration {route} modified in place:\n{diff}"
    );
    assert!(
        diff.lines()
            .any(|l| l.trim_start().starts_with("+ ") && l.contains("path_separated_prefix")),
        "the route's new match as a + line:\n{diff}"
    );
    assert!(
        !diff
            .lines()
            .any(|l| ["~ LDS ", "+ LDS ", "- LDS ", "~ CDS ", "- CDS "]
                .iter()
                .any(|p| l.starts_with(p))),
        "the listener and clusters untouched: only the route configuration changes:\n{diff}"
    );
    for input in [
        "VirtualService default/reviews delete",
        "Gateway default/bookinfo-gateway delete",
        "Gateway.gateway.networking.k8s.io default/bookinfo-gateway insert",
        "HTTPRoute default/reviews insert",
    ] {
        assert!(
            diff.contains(input),
            "the epoch's input change {input:?}:\n{diff}"
        );
    }
}

/// The listener isolation case's listeners on one port: (listener, hostname, the path prefix
/// its route takes, the Service it routes to).
const ISOLATED: [(&str, Option<&str>, &str, &str); 4] = [
    ("empty", None, "/", "iso-empty"),
    ("wildcard", Some("*.example.com"), "/", "iso-wild"),
    ("foo", Some("*.foo.example.com"), "/", "iso-foo"),
    ("abc", Some("abc.foo.example.com"), "/abc", "iso-abc"),
];

/// A Gateway with the [`ISOLATED`] listeners on `port`, an HTTPRoute per listener (attached
/// by `sectionName`, no hostnames of its own) and a Service with one backend per listener.
fn isolation_yaml(port: u16, backend_port: u16, net: u8, route_hostnames: &str) -> String {
    let mut listeners = String::new();
    let mut objects = String::new();
    for (i, (name, hostname, prefix, service)) in ISOLATED.iter().enumerate() {
        let host = hostname
            .map(|h| format!(", hostname: \"{h}\""))
            .unwrap_or_default();
        listeners.push_str(&format!(
            "  - {{name: {name}, port: {port}, protocol: HTTP{host}}}\n"
        ));
        objects.push_str(&format!(
            "---
apiVersion: v1
kind: Service
metadata: {{name: {service}, namespace: default}}
spec:
  ports: [{{name: http, port: 80, targetPort: {backend_port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {service}-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: {service}}}
addressType: IPv4
ports: [{{name: http, port: {backend_port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.{net}.{ip}]
  conditions: {{ready: true}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: isolation, sectionName: {name}}}]
{route_hostnames}  rules:
  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    backendRefs: [{{name: {service}, port: 80}}]
",
            ip = 11 + i
        ));
    }
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: isolation, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
{listeners}{objects}"
    )
}

/// Proves HTTP listener isolation (the conformance suite's GatewayHTTPListenerIsolation,
/// written here) through real Envoy: four listeners on one port — no hostname,
/// `*.example.com`, `*.foo.example.com`, `abc.foo.example.com` — each with a route attached
/// to it alone. A request is served only by the routes of the most specific listener its
/// host matches: `bar.com` by the hostname-less listener's, `bar.example.com` by the
/// wildcard's, `bar.foo.example.com` by the narrower wildcard's, `abc.foo.example.com` by its
/// own; and a path the most specific listener's routes do not take answers 404, rather than
/// falling through to a wider listener's routes.
#[test]
fn http_listeners_on_one_port_serve_only_their_own_routes() {
    let envoy_bin = require_envoy!();
    isolation_scenario(&envoy_bin, ISOLATION_NET, "");
}

/// [`http_listeners_on_one_port_serve_only_their_own_routes`] when every route also names
/// all four hostnames (the conformance case's "with hostname intersection" half): each
/// route serves the intersection with its own listener, and a host is still served only by
/// its most specific listener's route.
#[test]
fn http_listeners_on_one_port_serve_only_their_own_routes_with_route_hostnames() {
    let envoy_bin = require_envoy!();
    isolation_scenario(
        &envoy_bin,
        ISOLATION_HOSTNAMES_NET,
        "  hostnames: [bar.com, \"*.example.com\", \"*.foo.example.com\", abc.foo.example.com]\n",
    );
}

/// The isolation scenario on loopback /24 `net`, each route with `route_hostnames` (a
/// `hostnames:` line of its spec, or nothing).
fn isolation_scenario(envoy_bin: &std::path::Path, net: u8, route_hostnames: &str) {
    use support::Backend;
    let dir = TestDir::new(&format!("envoy-gateway-api-isolation-{net}"));
    let config_dir = dir.subdir("config");
    let (port, backend_port) = (free_port(), free_port());
    let _backends: Vec<Backend> = ISOLATED
        .iter()
        .enumerate()
        .map(|(i, (_, _, _, service))| {
            Backend::start(&format!("127.0.{net}.{}", 11 + i), backend_port, service)
        })
        .collect();
    write_config(
        &config_dir,
        "isolation.yaml",
        &isolation_yaml(port, backend_port, net, route_hostnames),
    );
    let (_meshflow, envoy) = start_gateway(
        envoy_bin,
        &dir,
        &config_dir,
        "isolation",
        "isolation-abc",
        port,
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for (host, path, expected) in [
        ("bar.com", "/", "iso-empty"),
        ("bar.example.com", "/", "iso-wild"),
        ("bar.foo.example.com", "/", "iso-foo"),
        ("abc.foo.example.com", "/abc", "iso-abc"),
        ("abc.foo.example.com", "/other", "status 404"),
    ] {
        let client = Client::new(&envoy, addr, host);
        let counts = client.converge(
            &format!("{host}{path}"),
            path,
            &[],
            |c| only(c, expected),
            5,
        );
        assert_eq!(count(&counts, expected), 5, "{host}{path}: {counts:?}");
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
