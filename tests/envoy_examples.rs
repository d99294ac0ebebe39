//! Envoy's judgement of the examples that show Istio's networking API field by field
//! (`examples/traffic-management`, `examples/service-registry`): the config meshflow
//! generates for their proxies — listeners, clusters, and the route configurations put in
//! place of their RDS references — is loaded by `envoy --mode validate`, which refuses
//! anything it would reject over xDS (a bad regex, an unknown filter config, a cluster whose
//! load balancer and hash policy disagree). The goldens (`tests/golden.rs`) pin what is
//! generated; this checks that Envoy takes it.

mod support;

use dataflows::model::ProxyKind;

use support::envoy_validate::envoy_validates_example;
use support::{require_envoy, ProxyNode, TestDir};

/// Proves that Envoy accepts every listener, cluster and route configuration of
/// `examples/traffic-management` (Istio's traffic management tasks: every HTTP match kind
/// and route action, DestinationRule load balancing, connection pools, outlier detection
/// and consistent hashing) for its captured `sleep` sidecar and its ingress gateway, and
/// that the route actions reach Envoy as such: fault injection, CORS, mirroring, rewrites
/// (by regex too), redirects, direct responses, hash policies, and at the gateway the
/// delegated `/reviews` routes and the wildcard host's direct response.
#[test]
fn envoy_accepts_the_traffic_management_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-traffic");
    let sleep = ProxyNode::sidecar(
        "sleep-abc",
        "default",
        "127.0.3.60",
        &[("app", "sleep"), ("version", "v1")],
    );
    let gateway = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.3.70",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    );
    // The goldens' other two: a client `sourceLabels` leaves out, and one of another
    // namespace (its own VirtualService for reviews).
    let productpage = ProxyNode::sidecar(
        "productpage-v1",
        "default",
        "127.0.3.21",
        &[("app", "productpage"), ("version", "v1")],
    );
    let staging = ProxyNode::sidecar("sleep", "staging", "127.0.3.80", &[("app", "sleep")]);
    let nodes = [
        (&sleep, ProxyKind::Sidecar),
        (&gateway, ProxyKind::Router),
        (&productpage, ProxyKind::Sidecar),
        (&staging, ProxyKind::Sidecar),
    ];
    let listeners =
        envoy_validates_example(&envoy_bin, dir.path(), "traffic-management", &nodes);
    let sidecar: String = listeners[0].iter().map(|l| l.to_string()).collect();
    for expected in [
        "envoy.filters.http.fault",
        "envoy.filters.http.cors",
        "request_mirror_policies",
        "regex_rewrite",
        "host_rewrite_literal",
        "direct_response",
        "redirect",
        "hash_policy",
        "retry_policy",
        "query_parameters",
        "x-served-by",
        "reviews-default",
    ] {
        assert!(
            sidecar.contains(expected),
            "the sleep sidecar's routes carry {expected}: {sidecar}"
        );
    }
    let router: String = listeners[1].iter().map(|l| l.to_string()).collect();
    for expected in [
        "*.bookinfo.example",
        "no such storefront",
        "jason",
        "/productpage",
    ] {
        assert!(
            router.contains(expected),
            "the gateway's routes carry {expected}: {router}"
        );
    }
}

/// Proves that Envoy accepts every listener, cluster and route configuration of
/// `examples/service-registry` (ServiceEntries of each resolution, a Unix socket endpoint,
/// WorkloadEntries, Kubernetes Services of each protocol, headless and ExternalName) for its
/// `frontend` sidecar, whose Sidecar binds an ingress port and two egress ports itself, and
/// for a captured `sleep` sidecar under no Sidecar, whose TCP services are proxied by
/// address.
#[test]
fn envoy_accepts_the_service_registry_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-registry");
    let frontend = ProxyNode::sidecar(
        "frontend-abc",
        "default",
        "127.0.4.60",
        &[("app", "frontend")],
    );
    let sleep = ProxyNode::sidecar("sleep-abc", "default", "127.0.4.70", &[("app", "sleep")]);
    let nodes = [
        (&frontend, ProxyKind::Sidecar),
        (&sleep, ProxyKind::Sidecar),
    ];
    let listeners =
        envoy_validates_example(&envoy_bin, dir.path(), "service-registry", &nodes);
    let names = |i: usize| -> Vec<String> {
        listeners[i]
            .iter()
            .filter_map(|l| l["name"].as_str().map(str::to_owned))
            .collect()
    };
    let bound = names(0);
    for name in ["127.0.0.1_80", "127.0.0.1_27017", "inbound_127.0.4.60_9080"] {
        assert!(
            bound.iter().any(|n| n == name),
            "frontend listener {name}: {bound:?}"
        );
    }
    let frontend_text: String = listeners[0].iter().map(|l| l.to_string()).collect();
    assert!(
        frontend_text.contains("block_all"),
        "REGISTRY_ONLY's block_all virtual host: {frontend_text}"
    );
    let sleep_text: String = listeners[1].iter().map(|l| l.to_string()).collect();
    for expected in ["tcp_proxy", "10.96.4.20", "10.96.4.21", "198.51.100.0"] {
        assert!(
            sleep_text.contains(expected),
            "the sleep sidecar's listeners carry {expected}: {sleep_text}"
        );
    }
}

/// Proves that Envoy accepts the config of `examples/locality` for its sleep sidecars in
/// r1/z1 and r2/z1, and that the DNS entry `geo.example.com` reaches each as a STRICT_DNS
/// cluster whose inline hosts are ranked from that client's locality: its own region's
/// host at priority 0, the other region's at 1.
#[test]
fn envoy_accepts_the_locality_example_with_each_clients_dns_cluster() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-locality");
    let r1 = ProxyNode::sidecar(
        "sleep-r1",
        "default",
        "127.0.0.51",
        &[("app", "sleep"), ("istio-locality", "r1.z1")],
    );
    let r2 = ProxyNode::sidecar(
        "sleep-r2",
        "default",
        "127.0.0.52",
        &[("app", "sleep"), ("istio-locality", "r2.z1")],
    );
    let nodes = [(&r1, ProxyKind::Sidecar), (&r2, ProxyKind::Sidecar)];
    let held = support::envoy_validate::envoy_validates_example_with_clusters(
        &envoy_bin,
        dir.path(),
        "locality",
        &nodes,
    );
    for ((node, near, far), (_, clusters)) in [
        (&r1, "east.geo.example.com", "west.geo.example.com"),
        (&r2, "west.geo.example.com", "east.geo.example.com"),
    ]
    .into_iter()
    .zip(&held)
    {
        let cluster = clusters
            .iter()
            .find(|c| c["name"] == "outbound|8080||geo.example.com")
            .expect("the DNS entry's cluster");
        assert_eq!(cluster["type"], "STRICT_DNS", "{cluster}");
        let groups = cluster["load_assignment"]["endpoints"]
            .as_array()
            .expect("inline hosts")
            .iter()
            .map(|g| {
                (
                    g["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["address"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    g["priority"].as_u64().unwrap_or(0),
                )
            })
            .collect::<std::collections::BTreeMap<String, u64>>();
        assert_eq!(groups.get(near), Some(&0), "{}: {cluster}", node.id);
        assert_eq!(groups.get(far), Some(&1), "{}: {cluster}", node.id);
    }
}
