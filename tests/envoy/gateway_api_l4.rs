//! TCPRoute attachment through a real Envoy gateway, with real connections: a route without
//! `sectionName` or `port` on every TCP listener, routes attached by port and by section
//! name, several routes on one listener, of which the oldest carries the connections, and
//! a route's weights as shares of real connections; a backend in another namespace by its
//! ReferenceGrant.

use crate::gateway_api::{service_with, start_gateway};
use crate::support;

use std::net::SocketAddr;

use support::kube_yaml::HandService;
use support::tcp_echo::{tcp_tally, TcpEcho};
use support::{free_port, require_envoy, share_near, write_config, TestDir};

/// The attachment test's loopback /24.
const NET: u8 = 183;
/// The grant test's loopback /24.
const GRANT_NET: u8 = 185;

/// TCPRoute `name` created at `created`, attached by `parent` (the fields after `name:
/// edge`), to Service `to` on port 5432.
fn tcp_route(name: &str, created: &str, parent: &str, to: &str) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: {name}, namespace: default, creationTimestamp: \"{created}\"}}
spec:
  parentRefs: [{{name: edge{parent}}}]
  rules: [{{backendRefs: [{{name: {to}, port: 5432}}]}}]
"
    )
}

/// Proves TCPRouteParentRefAttachAll, TCPRouteParentRefPortAndSectionName and
/// TCPRouteMultipleRoutesAttachment with real connections through three TCP listeners:
/// route `all` (no section, no port) carries listener `c`'s connections; on listener `a` it
/// shares with the newer route `by-section` and, being older, carries them; on listener `b`
/// the older route `by-port` carries them; on listener `d`, route `weighted` splits 200
/// connections 3 to 1 (TCPRouteWeightedRouting, within 12 points). With `all` deleted,
/// `a`'s connections go to `by-section`'s backend.
#[test]
fn tcp_routes_attach_by_parent_and_the_oldest_carries_the_connections() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-tcp-attach");
    let config_dir = dir.subdir("config");
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let echo_port = free_port();
    let ip = |host: u8| format!("127.0.{NET}.{host}");
    let _v1 = TcpEcho::start(&ip(11), echo_port, "db-v1");
    let _v2 = TcpEcho::start(&ip(12), echo_port, "db-v2");
    let tcp = "appProtocol: tcp, ";
    write_config(
        &config_dir,
        "services.yaml",
        &format!(
            "{}---\n{}",
            service_with("db-v1", tcp, "", (5432, &ip(11), echo_port)),
            service_with("db-v2", tcp, "", (5432, &ip(12), echo_port)),
        ),
    );
    let [a, b, c, d] = ports;
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners:
  - {{name: a, port: {a}, protocol: TCP}}
  - {{name: b, port: {b}, protocol: TCP}}
  - {{name: c, port: {c}, protocol: TCP}}
  - {{name: d, port: {d}, protocol: TCP}}
"
    );
    write_config(&config_dir, "gateway.yaml", &gateway);
    let all = tcp_route("all", "2026-01-01T00:00:00Z", "", "db-v1");
    write_config(&config_dir, "all.yaml", &all);
    write_config(
        &config_dir,
        "routes.yaml",
        &[
            tcp_route(
                "by-section",
                "2026-02-01T00:00:00Z",
                ", sectionName: a",
                "db-v2",
            ),
            tcp_route(
                "by-port",
                "2025-12-01T00:00:00Z",
                &format!(", port: {b}"),
                "db-v2",
            ),
            // TCPRouteWeightedRouting: listener d's connections split 3 to 1, older than `all`.
            "---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: weighted, namespace: default, creationTimestamp: \"2025-11-01T00:00:00Z\"}
spec:
  parentRefs: [{name: edge, sectionName: d}]
  rules:
  - backendRefs:
    - {name: db-v1, port: 5432, weight: 3}
    - {name: db-v2, port: 5432, weight: 1}
"
            .to_string(),
        ]
        .concat(),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", a);
    let carried_by = |port: u16, backend: &str| {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut last = Default::default();
        let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
            last = tcp_tally(addr, 4);
            support::only(&last, backend)
        });
        assert!(
            ok,
            "port {port}: connections to {backend}: {last:?}\n{}",
            envoy.summary()
        );
    };
    carried_by(c, "db-v1");
    carried_by(a, "db-v1");
    carried_by(b, "db-v2");
    // 200 connections to listener d: db-v1's share within 12 points of 75 %.
    let split = tcp_tally(SocketAddr::from(([127, 0, 0, 1], d)), 200);
    let count = |backend: &str| split.get(backend).copied().unwrap_or(0);
    assert_eq!(
        count("db-v1") + count("db-v2"),
        200,
        "every connection answered: {split:?}"
    );
    assert!(share_near(count("db-v1"), 200, 75), "{split:?}");
    support::remove_config(&config_dir, "all.yaml");
    carried_by(a, "db-v2");
    carried_by(b, "db-v2");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves TCPRouteReferenceGrant with real connections: a TCPRoute's backend in another
/// namespace carries connections while a ReferenceGrant there allows TCPRoutes of the
/// route's namespace, and none once the grant is deleted.
#[test]
fn a_tcp_routes_backend_of_another_namespace_carries_connections_while_granted() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-tcp-grant");
    let config_dir = dir.subdir("config");
    let (port, echo_port) = (free_port(), free_port());
    let _db = TcpEcho::start(&format!("127.0.{GRANT_NET}.11"), echo_port, "db-data");
    let service = HandService {
        namespace: "data",
        port_extra: "appProtocol: tcp, ",
        ..HandService::web("db", 5432, echo_port)
    };
    write_config(
        &config_dir,
        "service.yaml",
        &service.with_endpoints(&[&format!("127.0.{GRANT_NET}.11")]),
    );
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners: [{{name: db, port: {port}, protocol: TCP}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: db, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  rules: [{{backendRefs: [{{name: db, namespace: data, port: 5432}}]}}]
"
        ),
    );
    write_config(
        &config_dir,
        "grant.yaml",
        "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: tcp-from-default, namespace: data}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TCPRoute, namespace: default}]
  to: [{group: '', kind: Service}]
",
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut last = Default::default();
    let granted = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = tcp_tally(addr, 4);
        support::only(&last, "db-data")
    });
    assert!(granted, "granted: {last:?}\n{}", envoy.summary());
    support::remove_config(&config_dir, "grant.yaml");
    let refused = support::wait_until(support::CONVERGE_TIMEOUT, || {
        last = tcp_tally(addr, 4);
        !last.contains_key("db-data")
    });
    assert!(refused, "the grant deleted: {last:?}\n{}", envoy.summary());
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
