//! Endpoint changes: each reaches exactly the load assignments that hold the endpoint.

use crate::support::{
    destination_rule, endpoint, expected_eds_diffs, host, outbound, px, router_proxy, service, set,
    sidecar, sidecar_proxy, workload, Mesh,
};
use dataflows::model::*;

/// An endpoint change produces per-proxy diffs only for the ClusterLoadAssignments that
/// contain the endpoint: for each proxy holding such a cluster, `-old +new` of that EDS name
/// and nothing else (no Cluster, Listener or Route, no other EDS name, nothing for proxies
/// that do not see the service). Checked for an added endpoint (default + matching subset),
/// a readiness flip, a removed endpoint of another service, and a pod relabelled from v1 to
/// v2 (both subsets change, the default cluster's content does not).
#[test]
fn endpoint_change_touches_only_its_load_assignments() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let a = sidecar_proxy("a", "default", "10.9.0.1", &[("app", "a")]);
    let b = sidecar_proxy("b", "default", "10.9.0.2", &[("app", "b")]);
    let c = sidecar_proxy("c", "other", "10.9.0.3", &[("app", "c")]);
    let isolated = sidecar_proxy("d", "isolated", "10.9.0.4", &[("app", "d")]);
    let gw = router_proxy(
        "gw",
        "istio-system",
        "10.9.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        destination_rule(
            "default",
            "reviews",
            &reviews,
            &[("v1", "v1"), ("v2", "v2")],
        ),
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload(
            "reviews-v2",
            "default",
            "10.0.0.2",
            &[("app", "reviews"), ("version", "v2")],
        ),
        workload(
            "reviews-v1b",
            "default",
            "10.0.0.3",
            &[("app", "reviews"), ("version", "v1")],
        ),
        endpoint("reviews", "default", "10.0.0.1", true),
        endpoint("reviews", "default", "10.0.0.2", true),
        endpoint("ratings", "default", "10.0.0.5", true),
        sidecar("isolated", "default", None, &["./*"]),
        px(&a),
        px(&b),
        px(&c),
        px(&isolated),
        px(&gw),
    ]);
    let all_default = outbound(9080, "", "reviews", "default");
    let v1 = outbound(9080, "v1", "reviews", "default");
    let v2 = outbound(9080, "v2", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let holders = [&a, &b, &c, &gw];
    for p in holders {
        for name in [&all_default, &v1, &v2, &ratings] {
            assert!(
                m.names(p, ResourceType::Endpoint).contains(name),
                "{} should hold EDS {name}",
                p.id
            );
        }
    }
    assert!(m.names(&isolated, ResourceType::Endpoint).is_empty());
    assert_eq!(m.eds_addresses(&a, &v1), set(&["10.0.0.1:9080"]));

    // 1. A new v1 endpoint: the default and v1 assignments change, v2 does not.
    let before = m.held.clone();
    let diffs = m.insert(vec![endpoint("reviews", "default", "10.0.0.3", true)]);
    let names = [all_default.clone(), v1.clone()];
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, &names, &diffs),
        "adding 10.0.0.3 (v1)"
    );
    assert_eq!(
        m.eds_addresses(&a, &v1),
        set(&["10.0.0.1:9080", "10.0.0.3:9080"])
    );
    assert_eq!(
        m.eds_addresses(&c, &all_default),
        set(&["10.0.0.1:9080", "10.0.0.2:9080", "10.0.0.3:9080"])
    );

    // 2. 10.0.0.2 (v2) becomes not ready: the default and v2 assignments change.
    let before = m.held.clone();
    let diffs = m.replace(
        endpoint("reviews", "default", "10.0.0.2", true),
        endpoint("reviews", "default", "10.0.0.2", false),
    );
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &holders,
            &[all_default.clone(), v2.clone()],
            &diffs
        ),
        "10.0.0.2 not ready"
    );
    assert_eq!(m.eds_addresses(&b, &v2), set(&[]));

    // 3. The only ratings endpoint goes away: only the ratings assignment changes.
    let before = m.held.clone();
    let diffs = m.retract(vec![endpoint("ratings", "default", "10.0.0.5", true)]);
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, std::slice::from_ref(&ratings), &diffs),
        "ratings endpoint removed"
    );
    assert_eq!(m.eds_addresses(&a, &ratings), set(&[]));

    // 4. Pod 10.0.0.1 relabelled v1 → v2: v1 and v2 change; the default assignment's content
    // (addresses) is the same, so it does not change.
    let before = m.held.clone();
    let diffs = m.replace(
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v2")],
        ),
    );
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, &[v1.clone(), v2.clone()], &diffs),
        "10.0.0.1 relabelled"
    );
    assert_eq!(m.eds_addresses(&a, &v1), set(&["10.0.0.3:9080"]));
    assert_eq!(m.eds_addresses(&a, &v2), set(&["10.0.0.1:9080"]));
}
