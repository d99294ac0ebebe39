//! ListenerSets through a real Envoy gateway: the traffic halves of the Gateway API's
//! ListenerSet conformance cases (their status halves are asserted from files in
//! `src/sources/kube/listener_set_status_tests.rs`).

use crate::gateway_api::{answer, edge_gateway_of, reviews_services, start_gateway};
use crate::support;

use std::net::SocketAddr;

use support::{free_port, require_envoy, write_config, TestDir};

/// This test's loopback /24.
const NET: u8 = 190;

/// An HTTPRoute `name` of `ns` with `parents` (a YAML flow list), every request under
/// `prefix` to `reviews-VERSION` of `default`.
fn route(ns: &str, name: &str, parents: &str, prefix: &str, version: &str) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: {parents}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    backendRefs: [{{name: reviews-{version}, namespace: default, port: 9080}}]
"
    )
}

/// A ListenerSet `name` of `ns` on Gateway `default/edge` with HTTP listeners on `port`,
/// each `(name, hostname, allowedRoutes YAML or "")`.
fn listener_set(ns: &str, name: &str, port: u16, listeners: &[(&str, &str, &str)]) -> String {
    let listeners: String = listeners
        .iter()
        .map(|(l, host, allowed)| {
            let allowed = if allowed.is_empty() {
                String::new()
            } else {
                format!(", allowedRoutes: {allowed}")
            };
            format!("  - {{name: {l}, port: {port}, protocol: HTTP, hostname: {host}{allowed}}}\n")
        })
        .collect();
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRef: {{name: edge, namespace: default}}
  listeners:
{listeners}"
    )
}

/// A `parentRefs` entry naming ListenerSet `name` (of the route's namespace unless `ns`).
fn set_parent(name: &str, section: Option<&str>, ns: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    let ns = ns.map(|n| format!(", namespace: {n}")).unwrap_or_default();
    format!("{{group: gateway.networking.k8s.io, kind: ListenerSet, name: {name}{section}{ns}}}")
}

/// Proves, through a real Envoy gateway, ListenerSetHTTPRouting (routes attached to the
/// Gateway, to sets, to a set's listener by `sectionName`, and to all three, each served on
/// the hostnames of the listeners they attach to only: 404 elsewhere),
/// ListenerSetGatewayParentSectionNameNotFound and ListenerSetDualParentRefIndependence (a
/// Gateway parent naming a set's listener attaches nowhere, while the same route's set
/// parent is served), ListenerSetAllowedRoutesNamespaces (a set listener's `Same` is the
/// set's namespace: the route of that namespace is served, the Gateway's namespace's is
/// not; `All` takes both) and the Gateway's `allowedListeners` (`None`: the sets' hostnames
/// are no longer served, the Gateway's are; back to `All`: served again). Envoy rejects no
/// update.
#[test]
fn listener_sets_add_listeners_their_routes_alone_are_served_on() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-listener-sets");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let (_reviews, _backends) = reviews_services(NET, &config_dir, &["v1", "v2", "v3"]);
    // The routes of `team` may send to the Services of `default`.
    write_config(
        &config_dir,
        "grant.yaml",
        "apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: team-routes, namespace: default}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: team}]
  to: [{group: '', kind: Service}]
",
    );
    let gateway = |allowed: &str| {
        edge_gateway_of(
            &format!(
                "  - {{name: gw-1, port: {port}, protocol: HTTP, hostname: gw-1.example}}\n  \
                 - {{name: gw-2, port: {port}, protocol: HTTP, hostname: gw-2.example}}\n"
            ),
            "",
        )
        .replace(
            "  gatewayClassName: istio\n",
            &format!("  gatewayClassName: istio\n  allowedListeners: {{namespaces: {{from: {allowed}}}}}\n"),
        )
    };
    write_config(&config_dir, "gateway.yaml", &gateway("All"));
    let sets = [
        listener_set(
            "default",
            "ls-1",
            port,
            &[("l-1", "ls1-l1.example", ""), ("l-2", "ls1-l2.example", "")],
        ),
        listener_set("default", "ls-2", port, &[("l-1", "ls2-l1.example", "")]),
        listener_set(
            "team",
            "ls-team",
            port,
            &[
                ("same", "team-same.example", ""),
                ("all", "team-all.example", "{namespaces: {from: All}}"),
            ],
        ),
    ]
    .concat();
    write_config(&config_dir, "sets.yaml", &sets);
    let routes = [
        route(
            "default",
            "all",
            &format!(
                "[{{name: edge}}, {}, {}]",
                set_parent("ls-1", None, None),
                set_parent("ls-2", None, None)
            ),
            "/all",
            "v1",
        ),
        route("default", "gateway", "[{name: edge}]", "/gateway", "v2"),
        route(
            "default",
            "gateway-section",
            "[{name: edge, sectionName: gw-1}]",
            "/gateway-section",
            "v3",
        ),
        route(
            "default",
            "ls-1",
            &format!("[{}]", set_parent("ls-1", None, None)),
            "/ls-1",
            "v2",
        ),
        route(
            "default",
            "ls-1-section",
            &format!("[{}]", set_parent("ls-1", Some("l-1"), None)),
            "/ls-1-section",
            "v3",
        ),
        // The Gateway has no listener `l-1` of its own; the set parent is served all the same.
        route(
            "default",
            "dual",
            &format!(
                "[{{name: edge, sectionName: l-1}}, {}]",
                set_parent("ls-1", Some("l-1"), None)
            ),
            "/dual",
            "v1",
        ),
        // A set listener's `Same` is the set's namespace (team), not the Gateway's.
        route(
            "default",
            "from-default",
            &format!("[{}]", set_parent("ls-team", None, Some("team"))),
            "/from-default",
            "v2",
        ),
        route(
            "team",
            "from-team",
            &format!("[{}]", set_parent("ls-team", None, None)),
            "/from-team",
            "v3",
        ),
    ]
    .concat();
    write_config(&config_dir, "routes.yaml", &routes);
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ask = |host: &str, path: &str| answer(addr, host, path);
    // Every route is in one push: once one is served, all are.
    let served = support::wait_until(support::CONVERGE_TIMEOUT, || {
        ask("ls2-l1.example", "/all") == "reviews-v1"
    });
    assert!(served, "the routes are not served\n{}", envoy.summary());
    let hosts = [
        "gw-1.example",
        "gw-2.example",
        "ls1-l1.example",
        "ls1-l2.example",
        "ls2-l1.example",
    ];
    // What each path answers on each of `hosts`, in order.
    let cases: &[(&str, [&str; 5])] = &[
        ("/all", ["v1", "v1", "v1", "v1", "v1"]),
        ("/gateway", ["v2", "v2", "404", "404", "404"]),
        ("/gateway-section", ["v3", "404", "404", "404", "404"]),
        ("/ls-1", ["404", "404", "v2", "v2", "404"]),
        ("/ls-1-section", ["404", "404", "v3", "404", "404"]),
        ("/dual", ["404", "404", "v1", "404", "404"]),
    ];
    let expect = |want: &str| {
        if want == "404" {
            want.to_string()
        } else {
            format!("reviews-{want}")
        }
    };
    for (path, answers) in cases {
        for (host, want) in hosts.iter().zip(answers) {
            assert_eq!(ask(host, path), expect(want), "{host}{path}");
        }
    }
    // The set of team: `Same` takes team's route only, `All` both.
    for (host, path, want) in [
        ("team-same.example", "/from-team", "v3"),
        ("team-same.example", "/from-default", "404"),
        ("team-all.example", "/from-team", "v3"),
        ("team-all.example", "/from-default", "v2"),
    ] {
        assert_eq!(ask(host, path), expect(want), "{host}{path}");
    }

    // The Gateway takes no ListenerSet any more: the sets' hostnames are not served, the
    // Gateway's own still are.
    write_config(&config_dir, "gateway.yaml", &gateway("None"));
    let gone = support::wait_until(support::CONVERGE_TIMEOUT, || {
        ask("ls1-l1.example", "/ls-1") == "404"
    });
    assert!(gone, "a set the Gateway no longer takes is still served");
    for host in ["ls1-l2.example", "ls2-l1.example", "team-all.example"] {
        assert_eq!(ask(host, "/all"), "404", "{host}");
    }
    assert_eq!(ask("gw-1.example", "/all"), "reviews-v1");
    assert_eq!(ask("gw-1.example", "/gateway-section"), "reviews-v3");
    // Taken again: served again.
    write_config(&config_dir, "gateway.yaml", &gateway("All"));
    let back = support::wait_until(support::CONVERGE_TIMEOUT, || {
        ask("ls1-l1.example", "/ls-1-section") == "reviews-v3"
    });
    assert!(back, "a set taken again is not served");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
