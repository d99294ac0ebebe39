//! GRPCRoute conformance cases with real gRPC calls: at a Gateway API gateway (header
//! matches, weights) and in the mesh (MESH-GRPC: a GRPCRoute whose parent is a Service,
//! called by a client behind its own sidecar: metadata edits and weights). The backends are
//! gRPC echo servers (`support::grpc_echo`) that report which of them answered and the
//! metadata they received.

use crate::gateway_api::start_gateway;
use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use support::grpc_echo::{Echoed, GrpcEcho, GrpcEchoClient, Method};
use support::kube_yaml::HandService;
use support::{
    free_port, require_envoy, share_near, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, STARTUP_TIMEOUT,
};

/// The mesh test's loopback /24.
const NET: u8 = 181;
/// The gateway test's loopback /24.
const GATEWAY_NET: u8 = 182;

/// Makes `calls` calls with `metadata` and counts them by the backend that answered; each
/// call must succeed.
fn split(
    client: &mut GrpcEchoClient,
    calls: usize,
    metadata: &[(&str, &str)],
) -> BTreeMap<String, usize> {
    let mut by_backend = BTreeMap::new();
    for _ in 0..calls {
        let r = client.call(metadata).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.code, 0, "{r:?}");
        *by_backend.entry(r.backend.unwrap_or_default()).or_default() += 1;
    }
    by_backend
}

/// Service `name` (gRPC port `port`, the pods on `target`) and its EndpointSlice of `ips`.
fn grpc_service(name: &str, port: u16, target: u16, ips: &[String]) -> String {
    let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
    let service = HandService {
        port_name: "grpc",
        ..HandService::web(name, port, target)
    };
    format!("---\n{}", service.with_endpoints(&ips))
}

/// The client's Sidecar: one gRPC egress listener on `port`, bound to loopback.
fn client_sidecar(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {port}, protocol: GRPC, name: grpc}}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: [\"./*\"]
"
    )
}

/// GRPCRoute `echo` on Service `echo`: by `x-test-case`, a set, an add, a remove, all three,
/// and a 70/30 split between `echo-v1` and `echo-v2`; everything else to `echo-v1`.
fn echo_route(port: u16) -> String {
    let case = |name: &str, filter: &str| {
        format!(
            "  - matches: [{{headers: [{{name: x-test-case, value: {name}}}]}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {{{filter}}}
    backendRefs: [{{name: echo-v1, port: {port}}}]
"
        )
    };
    let set = "set: [{name: X-Header-Set, value: set-overwrites-values}]";
    let add = "add: [{name: X-Header-Add, value: add-appends-values}]";
    let remove = "remove: [X-Header-Remove]";
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: echo, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: echo, port: {port}}}]
  rules:
{}{}{}{}  - matches: [{{headers: [{{name: x-test-case, value: weights}}]}}]
    backendRefs:
    - {{name: echo-v1, port: {port}, weight: 70}}
    - {{name: echo-v2, port: {port}, weight: 30}}
  - backendRefs: [{{name: echo-v1, port: {port}}}]
",
        case("set", set),
        case("add", add),
        case("remove", remove),
        case("multi", &format!("{set}, {add}, {remove}")),
    )
}

/// Proves MeshGRPCRouteRequestHeaderModifier and MeshGRPCRouteWeight through a real client
/// sidecar: a GRPCRoute on Service `echo` sets, adds and removes request metadata (alone and
/// together) before the call reaches the backend, a call without a test case reaches the
/// default backend untouched, and 300 calls split 70/30 between two Services (each share
/// within 12 points, about 3.7 standard deviations).
#[test]
fn mesh_grpc_routes_edit_metadata_and_split_calls_through_a_sidecar() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-mesh-grpc");
    let config_dir = dir.subdir("config");
    let (port, target) = (free_port(), free_port());
    let ip = |host: u8| format!("127.0.{NET}.{host}");
    let v1 = GrpcEcho::start(&ip(11), target, "echo-v1");
    let v2 = GrpcEcho::start(&ip(12), target, "echo-v2");
    write_config(
        &config_dir,
        "services.yaml",
        &[
            grpc_service("echo", port, target, &[ip(11), ip(12)]),
            grpc_service("echo-v1", port, target, &[ip(11)]),
            grpc_service("echo-v2", port, target, &[ip(12)]),
        ]
        .concat(),
    );
    write_config(&config_dir, "sidecar.yaml", &client_sidecar(port));
    write_config(&config_dir, "route.yaml", &echo_route(port));
    let meshflow = Meshflow::start(&config_dir, dir.path());
    let node = ProxyNode::sidecar("client-abc", "default", &ip(20), &[("app", "client")]);
    let envoy = Envoy::start(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("127.0.0.1_{port}"));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut client = GrpcEchoClient::connect(addr, &format!("echo:{port}"))
        .unwrap_or_else(|e| panic!("{e}\n{}", envoy.summary()));
    let mut call = |metadata: &[(&str, &str)]| -> Echoed {
        client
            .call(metadata)
            .unwrap_or_else(|e| panic!("{metadata:?}: {e}\n{}", envoy.summary()))
    };
    let echoed = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };

    let mut last = None;
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        let r = call(&[("x-test-case", "set"), ("x-header-set", "original")]);
        let done = r.code == 0
            && r.metadata
                .get("x-header-set")
                .is_some_and(|v| v != "original");
        last = Some(r);
        done
    });
    assert!(
        routed,
        "the route never applied: {last:?}\n{}",
        envoy.summary()
    );

    // MeshGRPCRouteRequestHeaderModifier.
    let r = call(&[("x-test-case", "set"), ("x-header-set", "original")]);
    assert_eq!(r.backend.as_deref(), Some("echo-v1"));
    assert_eq!(
        r.metadata,
        echoed(&[
            ("x-test-case", "set"),
            ("x-header-set", "set-overwrites-values")
        ])
    );
    let r = call(&[("x-test-case", "add"), ("x-header-add", "from-client")]);
    assert_eq!(
        r.metadata,
        echoed(&[
            ("x-test-case", "add"),
            ("x-header-add", "from-client,add-appends-values")
        ])
    );
    let r = call(&[
        ("x-test-case", "remove"),
        ("x-header-remove", "gone"),
        ("x-kept", "kept"),
    ]);
    assert_eq!(
        r.metadata,
        echoed(&[("x-test-case", "remove"), ("x-kept", "kept")])
    );
    let r = call(&[
        ("x-test-case", "multi"),
        ("x-header-set", "original"),
        ("x-header-add", "from-client"),
        ("x-header-remove", "gone"),
    ]);
    assert_eq!(
        r.metadata,
        echoed(&[
            ("x-test-case", "multi"),
            ("x-header-set", "set-overwrites-values"),
            ("x-header-add", "from-client,add-appends-values"),
        ])
    );
    let r = call(&[("x-header-remove", "kept")]);
    assert_eq!(
        (r.backend.as_deref(), r.metadata),
        (Some("echo-v1"), echoed(&[("x-header-remove", "kept")])),
        "no test case: the default rule, nothing edited"
    );

    // MeshGRPCRouteWeight.
    let (before1, before2) = (v1.calls(), v2.calls());
    const CALLS: usize = 300;
    drop(call);
    let by_backend = split(&mut client, CALLS, &[("x-test-case", "weights")]);
    let count = |name: &str| by_backend.get(name).copied().unwrap_or(0);
    assert_eq!(
        by_backend.keys().collect::<Vec<_>>(),
        ["echo-v1", "echo-v2"],
        "{by_backend:?}"
    );
    assert!(share_near(count("echo-v1"), CALLS, 70), "{by_backend:?}");
    assert!(share_near(count("echo-v2"), CALLS, 30), "{by_backend:?}");
    assert_eq!(
        (v1.calls() - before1) + (v2.calls() - before2),
        CALLS,
        "each call answered once, by the backend it names"
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// The gateway's GRPCRoutes: on `headers.example`, rules by header (an exact value, two
/// headers together, a regular expression); on `weights.example`, a 70/30/0 split; on
/// `named.example`, two named rules by method (`check` to v1, `limit` to v2).
fn gateway_routes(port: u16) -> String {
    let to = |v: &str| format!("backendRefs: [{{name: echo-{v}, port: {port}}}]");
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: grpc-edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners: [{{name: grpc, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: headers, namespace: default}}
spec:
  parentRefs: [{{name: grpc-edge}}]
  hostnames: [headers.example]
  rules:
  - matches: [{{headers: [{{name: version, value: one}}]}}]
    {v1}
  - matches: [{{headers: [{{name: version, value: two}}]}}]
    {v2}
  - matches: [{{headers: [{{name: version, value: two}}, {{name: color, value: orange}}]}}]
    {v1}
  - matches: [{{headers: [{{type: RegularExpression, name: color, value: \"^(red|blue)$\"}}]}}]
    {v2}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: weights, namespace: default}}
spec:
  parentRefs: [{{name: grpc-edge}}]
  hostnames: [weights.example]
  rules:
  - backendRefs:
    - {{name: echo-v1, port: {port}, weight: 70}}
    - {{name: echo-v2, port: {port}, weight: 30}}
    - {{name: echo-v3, port: {port}, weight: 0}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: named, namespace: default}}
spec:
  parentRefs: [{{name: grpc-edge}}]
  hostnames: [named.example]
  rules:
  - name: check
    matches: [{{method: {{service: envoy.service.auth.v3.Authorization, method: Check}}}}]
    {v1}
  - name: limit
    matches: [{{method: {{service: envoy.service.ratelimit.v3.RateLimitService, method: ShouldRateLimit}}}}]
    {v2}
",
        v1 = to("v1"),
        v2 = to("v2"),
    )
}

/// Proves GRPCRouteHeaderMatching, GRPCRouteWeight and GRPCRouteNamedRule through a real
/// Envoy gateway with real gRPC calls: an exact header picks its backend, two headers
/// together take precedence over one, a regular expression matches, a call no rule matches
/// is UNIMPLEMENTED; 300 calls split 70/30 with none to the weight-0 backend; two named
/// rules send each method to its own backend, their Envoy routes named by the rules.
#[test]
fn grpc_routes_match_headers_and_split_calls_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-grpc-edge");
    let config_dir = dir.subdir("config");
    let (port, target) = (free_port(), free_port());
    let ip = |host: u8| format!("127.0.{GATEWAY_NET}.{host}");
    let echoes: Vec<GrpcEcho> = (1..=3)
        .map(|v| GrpcEcho::start(&ip(10 + v), target, &format!("echo-v{v}")))
        .collect();
    let services: String = (1..=3)
        .map(|v| grpc_service(&format!("echo-v{v}"), port, target, &[ip(10 + v)]))
        .collect();
    write_config(&config_dir, "services.yaml", &services);
    write_config(&config_dir, "gateway.yaml", &gateway_routes(port));
    let (_meshflow, envoy) = start_gateway(
        &envoy_bin,
        &dir,
        &config_dir,
        "grpc-edge",
        "grpc-edge-abc",
        port,
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let connect = |host: &str| {
        GrpcEchoClient::connect(addr, host).unwrap_or_else(|e| panic!("{e}\n{}", envoy.summary()))
    };
    let mut headers = connect("headers.example");
    let mut ask = |metadata: &[(&str, &str)]| {
        let r = headers
            .call(metadata)
            .unwrap_or_else(|e| panic!("{metadata:?}: {e}\n{}", envoy.summary()));
        (r.code, r.backend)
    };
    let v = |n: u8| (0, Some(format!("echo-v{n}")));
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        ask(&[("version", "one")]) == v(1)
    });
    assert!(routed, "never routed\n{}", envoy.summary());

    // GRPCRouteHeaderMatching.
    assert_eq!(ask(&[("version", "two")]), v(2));
    assert_eq!(
        ask(&[("version", "two"), ("color", "orange")]),
        v(1),
        "two headers over one"
    );
    assert_eq!(ask(&[("color", "blue")]), v(2), "the regular expression");
    assert_eq!(
        ask(&[("color", "green")]),
        (12, None),
        "no rule: UNIMPLEMENTED"
    );
    assert_eq!(ask(&[]), (12, None), "no rule: UNIMPLEMENTED");

    // GRPCRouteWeight.
    let mut weights = connect("weights.example");
    let by_backend = split(&mut weights, 300, &[]);
    let count = |name: &str| by_backend.get(name).copied().unwrap_or(0);
    assert!(share_near(count("echo-v1"), 300, 70), "{by_backend:?}");
    assert!(share_near(count("echo-v2"), 300, 30), "{by_backend:?}");
    assert_eq!(echoes[2].calls(), 0, "none to weight 0: {by_backend:?}");

    // GRPCRouteNamedRule.
    let mut named = connect("named.example");
    let mut by_method = |method: Method| {
        let r = named
            .call_method(method, &[])
            .unwrap_or_else(|e| panic!("{method:?}: {e}\n{}", envoy.summary()));
        (r.code, r.backend)
    };
    assert_eq!(by_method(Method::Check), v(1), "rule `check`");
    assert_eq!(by_method(Method::ShouldRateLimit), v(2), "rule `limit`");
    let dump = envoy.config_dump().to_string();
    for rule in ["check", "limit"] {
        assert!(
            dump.contains(&format!("\"name\":\"default.named.{rule}.0\"")),
            "rule {rule}'s Envoy route is named by it: {}",
            envoy.summary()
        );
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
