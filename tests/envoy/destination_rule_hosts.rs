//! Real-Envoy behaviour of DestinationRules found as Istio finds them: a wildcard rule of
//! the root namespace (`*.default.svc.cluster.local`) gives `reviews` its subsets; a rule
//! naming `reviews` in the client's namespace replaces it; and two such rules merge, the
//! later adding the subsets the earlier lacks. A VirtualService sends every request to
//! subset v2; backends name themselves, so each response tells where Envoy sent it.

use crate::support;

use std::net::SocketAddr;

use support::free_port;
use support::reviews::{count, Client, Reviews, FQDN};
use support::{only, require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir};

/// A DestinationRule `name` in `ns` for `host` with subsets `(name, version label)`.
fn rule(ns: &str, name: &str, host: &str, subsets: &[(&str, &str)]) -> String {
    let subsets: String = subsets
        .iter()
        .map(|(n, v)| format!("  - name: {n}\n    labels: {{version: {v}}}\n"))
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: {name}, namespace: {ns}}}
spec:
  host: '{host}'
  subsets:
{subsets}"
    )
}

/// Proves on Envoy that subset v2 of `reviews` comes from a root-namespace wildcard rule
/// while no rule names the host (requests reach v2); that a rule naming `reviews` in the
/// client's namespace takes its place (it defines only v1: the route to v2 finds no
/// cluster, 503); and that a second rule for `reviews` there merges into the first and
/// brings v2 back — with the labels it gives v2 (here: the v1 Pods).
#[test]
fn wildcard_and_merged_destination_rules_give_envoy_their_subsets() {
    let envoy_binary = require_envoy!();
    let dir = TestDir::new("envoy-dr-hosts");
    let config_dir = dir.subdir("config");
    let port = free_port();

    let reviews = Reviews::new(171, port, &config_dir);
    let _backends = [reviews.start_backend("v1"), reviews.start_backend("v2")];
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    write_config(
        &config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );
    write_config(
        &config_dir,
        "vs.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [{FQDN}]
  http:
  - route:
    - destination: {{host: {FQDN}, subset: v2, port: {{number: {port}}}}}
"
        ),
    );
    write_config(
        &config_dir,
        "wild.yaml",
        &rule(
            "istio-system",
            "default-services",
            "*.default.svc.cluster.local",
            &[("v1", "v1"), ("v2", "v2")],
        ),
    );

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start_live(&envoy_binary, dir.path(), &node, meshflow.xds_addr());
    envoy.await_listener(&format!("127.0.0.1_{port}"));

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let client = Client::new(&envoy, addr, "reviews");
    let (v1, v2) = ("reviews-v1", "reviews-v2");
    let counts = client.converge("wildcard rule's v2", "/", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");
    assert!(envoy.cluster_names().contains(&reviews.cluster("v2")));

    // A rule of the client's namespace for `reviews` itself: it has no v2.
    write_config(
        &config_dir,
        "a.yaml",
        &rule("default", "reviews-a", "reviews", &[("v1", "v1")]),
    );
    let counts = client.converge("no v2 any more", "/", &[], |c| only(c, "status 503"), 10);
    assert_eq!(count(&counts, "status 503"), 10, "{counts:?}");

    // A second rule there for `reviews`: merged into the first, it adds v2 (selecting
    // the v1 Pods, to tell its definition from the wildcard's).
    write_config(
        &config_dir,
        "b.yaml",
        &rule("default", "reviews-b", "reviews", &[("v2", "v1")]),
    );
    let counts = client.converge("merged rule's v2", "/", &[], |c| only(c, v1), 20);
    assert_eq!(count(&counts, v1), 20, "{counts:?}");

    // Without the rules naming `reviews`, the wildcard's v2 is back.
    std::fs::remove_file(config_dir.join("a.yaml")).expect("remove a.yaml");
    std::fs::remove_file(config_dir.join("b.yaml")).expect("remove b.yaml");
    let counts = client.converge("wildcard's v2 again", "/", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");
}
