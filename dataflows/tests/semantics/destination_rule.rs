//! Which DestinationRule applies for each proxy (Istio's lookup path, wildcard hosts,
//! merged rules, workload selectors), what its subsets select, and PASSTHROUGH load
//! balancing.

use crate::support::{
    destination_rule, endpoint, gateway_errors, host, labels, outbound, px, service, set,
    sidecar_proxy, virtual_service, workload, Diffs, Mesh,
};
use dataflows::model::*;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use std::collections::BTreeSet;

fn subset_clusters(clusters: &BTreeSet<String>, name: &str, ns: &str) -> BTreeSet<String> {
    let suffix = format!("|{}", host(name, ns));
    clusters
        .iter()
        .filter(|c| c.ends_with(&suffix) && !c.starts_with("outbound|9080||"))
        .map(|c| c.split('|').nth(2).unwrap().to_string())
        .collect()
}

/// For `reviews.default`, a DestinationRule in the proxy's namespace beats the one in the
/// service's namespace, which beats the one in the root namespace: seen in which subset
/// clusters (`outbound|9080|SUBSET|reviews…`) each proxy gets. Retracting a rule falls back
/// to the next on Istio's lookup path (client namespace, service namespace, root namespace).
#[test]
fn destination_rule_in_proxy_namespace_beats_service_namespace() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let in_default = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let in_other = sidecar_proxy("b", "other", "10.1.0.2", &[("app", "b")]);
    let in_third = sidecar_proxy("c", "third", "10.1.0.3", &[("app", "c")]);
    let svc_ns_dr = destination_rule("default", "reviews", &reviews, &[("from-service-ns", "v1")]);
    let client_ns_dr = destination_rule(
        "other",
        "reviews-for-other",
        &reviews,
        &[("from-client-ns", "v2")],
    );
    let root_dr = destination_rule(
        "istio-system",
        "reviews-root",
        &reviews,
        &[("from-root", "v3")],
    );
    m.insert(vec![
        service("reviews", "default"),
        px(&in_default),
        px(&in_other),
        px(&in_third),
        svc_ns_dr.clone(),
        client_ns_dr.clone(),
        root_dr.clone(),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(
        subsets(&m, &in_other),
        set(&["from-client-ns"]),
        "the client namespace's rule wins"
    );
    assert_eq!(subsets(&m, &in_default), set(&["from-service-ns"]));
    assert_eq!(
        subsets(&m, &in_third),
        set(&["from-service-ns"]),
        "no rule in the client namespace: the service's"
    );
    assert!(
        m.clusters(&in_other)
            .contains(&outbound(9080, "", "reviews", "default")),
        "the default cluster stays"
    );

    m.retract(vec![client_ns_dr]);
    assert_eq!(subsets(&m, &in_other), set(&["from-service-ns"]));
    m.retract(vec![svc_ns_dr]);
    for p in [&in_default, &in_other, &in_third] {
        assert_eq!(
            subsets(&m, p),
            set(&["from-root"]),
            "only the root namespace's rule is left"
        );
    }
    m.retract(vec![root_dr]);
    for p in [&in_default, &in_other, &in_third] {
        assert_eq!(subsets(&m, p), set(&[]));
    }
}

/// A DestinationRule in a namespace that is neither the client's, the service's nor the
/// root namespace is not on Istio's documented lookup path ("client namespace, service
/// namespace, Istio configuration root"), so exporting it does not make it apply: no proxy
/// gets its subsets.
#[test]
fn destination_rule_outside_lookup_path_is_not_applied() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let client = sidecar_proxy("a", "other", "10.1.0.1", &[("app", "a")]);
    let in_default = sidecar_proxy("b", "default", "10.1.0.2", &[("app", "b")]);
    m.insert(vec![
        service("reviews", "default"),
        px(&client),
        px(&in_default),
        destination_rule("unrelated", "reviews", &reviews, &[("stray", "v1")]),
    ]);
    assert_eq!(
        subset_clusters(&m.clusters(&client), "reviews", "default"),
        set(&[])
    );
    assert_eq!(
        subset_clusters(&m.clusters(&in_default), "reviews", "default"),
        set(&[])
    );
}

/// Two DestinationRules on the lookup path can define a subset of the same name with
/// different labels (here `canary` = version v2 in the service's namespace, version v1 in
/// the client's). The EDS resource has one name (`outbound|9080|canary|reviews…`), but each
/// proxy must get the endpoints selected by the rule in effect for *it*, as Istio computes
/// EDS with the proxy's own DestinationRule.
#[test]
fn subset_endpoints_follow_each_proxys_own_destination_rule() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let in_default = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let in_other = sidecar_proxy("b", "other", "10.1.0.2", &[("app", "b")]);
    m.insert(vec![
        service("reviews", "default"),
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
        endpoint("reviews", "default", "10.0.0.1", true),
        endpoint("reviews", "default", "10.0.0.2", true),
        destination_rule("default", "reviews", &reviews, &[("canary", "v2")]),
        destination_rule("other", "reviews", &reviews, &[("canary", "v1")]),
        px(&in_default),
        px(&in_other),
    ]);
    let canary = outbound(9080, "canary", "reviews", "default");
    assert!(m.clusters(&in_default).contains(&canary));
    assert!(m.clusters(&in_other).contains(&canary));
    assert_eq!(
        m.eds_addresses(&in_default, &canary),
        set(&["10.0.0.2:9080"]),
        "the service namespace's canary = v2"
    );
    assert_eq!(
        m.eds_addresses(&in_other, &canary),
        set(&["10.0.0.1:9080"]),
        "the client namespace's canary = v1"
    );
}

/// [`destination_rule`] with `exportTo`, a `trafficPolicy` balancing by `lb` and a
/// `workloadSelector`.
fn destination_rule_with(
    ns: &str,
    name: &str,
    host: &str,
    subsets: &[(&str, &str)],
    export_to: &[&str],
    lb: Option<LoadBalancer>,
    selector: Option<&[(&str, &str)]>,
) -> Record {
    let Record::DestinationRule(mut dr) = destination_rule(ns, name, host, subsets) else {
        unreachable!("destination_rule() makes rules")
    };
    dr.export_to = export_to.iter().map(|e| e.to_string()).collect();
    dr.traffic_policy = lb.map(|lb| TrafficPolicy {
        load_balancer: Some(lb),
        ..Default::default()
    });
    dr.selector = selector.map(labels);
    Record::DestinationRule(dr)
}

/// The proxy's clusters of the default port 9080 whose names change in `diffs`, by host.
fn changed_hosts(diffs: &Diffs) -> BTreeSet<String> {
    diffs
        .iter()
        .filter(|((_, k), _)| k.rtype == ResourceType::Cluster)
        .filter_map(|((_, k), _)| k.name.split('|').nth(3).map(str::to_string))
        .collect()
}

fn changed_proxies(diffs: &Diffs) -> BTreeSet<ProxyId> {
    diffs.iter().map(|((p, _), _)| p.clone()).collect()
}

/// A service without a rule of its own takes the most specific wildcard rule that covers
/// it (`*.default.svc.cluster.local` before `*`), as Istio's lookup does; a rule for the
/// host itself beats both. Adding and removing the more specific rules moves the host's
/// clusters over and back, and each change reaches only the hosts the rule covers: a
/// `*.default…` rule never touches `details.other`.
#[test]
fn wildcard_destination_rules_apply_most_specific_first_and_incrementally() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let star = destination_rule("istio-system", "all", "*", &[("from-star", "v1")]);
    let ns_wild = destination_rule(
        "istio-system",
        "default-ns",
        "*.default.svc.cluster.local",
        &[("from-ns-wildcard", "v2")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        service("details", "other"),
        px(&client),
        star.clone(),
    ]);
    let subsets = |m: &Mesh, name: &str, ns: &str| subset_clusters(&m.clusters(&client), name, ns);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-star"]));
    assert_eq!(subsets(&m, "details", "other"), set(&["from-star"]));

    let diffs = m.insert(vec![ns_wild.clone()]);
    assert_eq!(
        subsets(&m, "reviews", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(
        subsets(&m, "ratings", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(subsets(&m, "details", "other"), set(&["from-star"]));
    assert_eq!(
        changed_hosts(&diffs),
        set(&[&host("reviews", "default"), &host("ratings", "default")]),
        "the longer wildcard reaches only the hosts it covers"
    );

    let exact = destination_rule(
        "default",
        "reviews",
        &host("reviews", "default"),
        &[("from-exact", "v3")],
    );
    let diffs = m.insert(vec![exact.clone()]);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-exact"]));
    assert_eq!(
        subsets(&m, "ratings", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(changed_hosts(&diffs), set(&[&host("reviews", "default")]));

    let diffs = m.retract(vec![exact]);
    assert_eq!(
        subsets(&m, "reviews", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(changed_hosts(&diffs), set(&[&host("reviews", "default")]));

    let diffs = m.retract(vec![ns_wild]);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-star"]));
    assert_eq!(subsets(&m, "ratings", "default"), set(&["from-star"]));
    assert_eq!(
        changed_hosts(&diffs),
        set(&[&host("reviews", "default"), &host("ratings", "default")])
    );
}

/// Istio looks a rule up namespace by namespace (the proxy's, the service's, the root) and
/// stops at the first that has one covering the host: a wildcard rule in the proxy's own
/// namespace beats the service namespace's rule for the host itself, for that namespace's
/// proxies alone. A wildcard rule exported only to one namespace applies there only.
#[test]
fn wildcard_destination_rule_in_the_proxy_namespace_beats_an_exact_one_elsewhere() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let third = sidecar_proxy("c", "third", "10.1.0.3", &[("app", "c")]);
    m.insert(vec![
        service("reviews", "default"),
        service("details", "other"),
        px(&client),
        px(&third),
        destination_rule(
            "default",
            "reviews",
            &host("reviews", "default"),
            &[("from-exact", "v1")],
        ),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &client), set(&["from-exact"]));
    let own = destination_rule(
        "client",
        "everything",
        "*.svc.cluster.local",
        &[("from-client-wildcard", "v2")],
    );
    let diffs = m.insert(vec![own.clone()]);
    assert_eq!(subsets(&m, &client), set(&["from-client-wildcard"]));
    assert_eq!(
        subset_clusters(&m.clusters(&client), "details", "other"),
        set(&["from-client-wildcard"])
    );
    assert_eq!(subsets(&m, &third), set(&["from-exact"]));
    assert_eq!(
        changed_proxies(&diffs),
        BTreeSet::from([client.id.clone()]),
        "a rule of the client namespace reaches its proxies alone"
    );
    m.retract(vec![own]);
    assert_eq!(subsets(&m, &client), set(&["from-exact"]));

    // Exported to `third` only, from the service's namespace.
    let only_third = destination_rule_with(
        "other",
        "details-wild",
        "*.other.svc.cluster.local",
        &[("for-third", "v1")],
        &["third"],
        None,
        None,
    );
    m.insert(vec![only_third]);
    assert_eq!(
        subset_clusters(&m.clusters(&third), "details", "other"),
        set(&["for-third"])
    );
    assert_eq!(
        subset_clusters(&m.clusters(&client), "details", "other"),
        set(&[])
    );
}

/// Two rules of one namespace for one host, without selectors and with the same
/// `exportTo`, are merged as Istio merges them (meshflow orders them by name, Istio by
/// creation time): the first keeps its `trafficPolicy`, the later one adds the subsets
/// whose names are new (a subset of a name the first defines keeps the first's labels),
/// and a warning names the later rule. Removing the first leaves the second alone.
#[test]
fn destination_rules_of_one_host_and_namespace_merge_in_name_order() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let reviews = host("reviews", "default");
    let first = destination_rule_with(
        "default",
        "a-reviews",
        &reviews,
        &[("v1", "v1")],
        &[],
        Some(LoadBalancer::Random),
        None,
    );
    let second = destination_rule_with(
        "default",
        "b-reviews",
        &reviews,
        &[("v1", "other-label"), ("v2", "v2")],
        &[],
        Some(LoadBalancer::LeastRequest),
        None,
    );
    m.insert(vec![
        service("reviews", "default"),
        endpoint("reviews", "default", "10.2.0.1", true),
        workload("reviews-v1", "default", "10.2.0.1", &[("version", "v1")]),
        px(&client),
        second.clone(),
        first.clone(),
    ]);
    assert_eq!(
        subset_clusters(&m.clusters(&client), "reviews", "default"),
        set(&["v1", "v2"])
    );
    let lb = |m: &Mesh, subset: &str| {
        m.cluster_body(&client, &outbound(9080, subset, "reviews", "default"))
            .lb_policy
    };
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    assert_eq!(
        lb(&m, ""),
        LbPolicy::Random as i32,
        "the first rule's policy"
    );
    assert_eq!(lb(&m, "v2"), LbPolicy::Random as i32);
    assert_eq!(
        m.eds_addresses(&client, &outbound(9080, "v1", "reviews", "default")),
        set(&["10.2.0.1:9080"]),
        "v1 keeps the first rule's labels"
    );
    let warnings = gateway_errors(&m, ErrorCode::DestinationRuleMerged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("b-reviews")
            && warnings[0].contains("merged into a-reviews")
            && warnings[0].contains("subset(s) v1")
            && warnings[0].contains("trafficPolicy is not used"),
        "{warnings:?}"
    );

    m.retract(vec![first]);
    assert_eq!(lb(&m, ""), LbPolicy::LeastRequest as i32);
    assert!(
        m.eds_addresses(&client, &outbound(9080, "v1", "reviews", "default"))
            .is_empty(),
        "v1 is the second rule's now (version: other-label)"
    );
    assert!(gateway_errors(&m, ErrorCode::DestinationRuleMerged).is_empty());
}

/// Rules with different `exportTo` are not merged (Istio's enhanced merge): each stays an
/// entry, and a proxy that sees both takes the last one without a selector. A rule with a
/// `workloadSelector` never merges with one without: the proxies it selects take it alone,
/// the others the rule without.
#[test]
fn destination_rules_merge_only_with_the_same_export_to_and_selector() {
    let mut m = Mesh::new();
    let selected = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let plain = sidecar_proxy("b", "default", "10.1.0.2", &[("app", "b")]);
    let elsewhere = sidecar_proxy("c", "other", "10.1.0.3", &[("app", "c")]);
    let reviews = host("reviews", "default");
    let private = destination_rule_with(
        "default",
        "a-private",
        &reviews,
        &[("private", "v1")],
        &["."],
        None,
        None,
    );
    let public = destination_rule_with(
        "default",
        "b-public",
        &reviews,
        &[("public", "v2")],
        &["*"],
        None,
        None,
    );
    let selecting = destination_rule_with(
        "default",
        "c-selecting",
        &reviews,
        &[("selected", "v3")],
        &[],
        None,
        Some(&[("app", "a")]),
    );
    m.insert(vec![
        service("reviews", "default"),
        px(&selected),
        px(&plain),
        px(&elsewhere),
        private.clone(),
        public.clone(),
        selecting,
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &selected), set(&["selected"]));
    assert_eq!(subsets(&m, &plain), set(&["public"]), "the last entry");
    assert_eq!(subsets(&m, &elsewhere), set(&["public"]));
    assert!(gateway_errors(&m, ErrorCode::DestinationRuleMerged).is_empty());

    // The same `exportTo`: merged, for every proxy without the selector.
    let Record::DestinationRule(mut now_public) = private.clone() else {
        unreachable!()
    };
    now_public.export_to = vec!["*".into()];
    m.replace(private, Record::DestinationRule(now_public));
    assert_eq!(subsets(&m, &plain), set(&["private", "public"]));
    assert_eq!(subsets(&m, &elsewhere), set(&["private", "public"]));
    assert_eq!(subsets(&m, &selected), set(&["selected"]));
    assert_eq!(
        gateway_errors(&m, ErrorCode::DestinationRuleMerged).len(),
        1
    );
}

/// Once the proxy's namespace has rules for the most specific host covering a service,
/// Istio's lookup stops there even if they all have a `workloadSelector` the proxy does not
/// match: that proxy gets no rule, not the service namespace's.
#[test]
fn selector_rules_of_the_proxy_namespace_stop_the_lookup_there() {
    let mut m = Mesh::new();
    let selected = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let other = sidecar_proxy("b", "client", "10.1.0.2", &[("app", "b")]);
    let reviews = host("reviews", "default");
    m.insert(vec![
        service("reviews", "default"),
        px(&selected),
        px(&other),
        destination_rule("default", "reviews", &reviews, &[("from-service-ns", "v1")]),
        destination_rule_with(
            "client",
            "for-a",
            &reviews,
            &[("for-a", "v2")],
            &[],
            None,
            Some(&[("app", "a")]),
        ),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &selected), set(&["for-a"]));
    assert_eq!(subsets(&m, &other), set(&[]));
    m.insert(vec![destination_rule(
        "client",
        "for-all",
        &reviews,
        &[("for-all", "v3")],
    )]);
    assert_eq!(subsets(&m, &other), set(&["for-all"]));
    assert_eq!(subsets(&m, &selected), set(&["for-a"]));
}

/// A route to a subset that only a wildcard rule, or the later of two merged rules,
/// defines is no undefined subset; one no rule covering the host defines is (MF0004).
#[test]
fn subsets_of_wildcard_and_merged_rules_count_as_defined() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let with_subset = |name: &str, subset: &str| {
        let Record::VirtualService(mut vs) =
            virtual_service("default", name, &[&reviews], &["mesh"], &reviews)
        else {
            unreachable!()
        };
        vs.http[0].route[0].subset = Some(subset.to_string());
        Record::VirtualService(vs)
    };
    m.insert(vec![
        service("reviews", "default"),
        destination_rule(
            "istio-system",
            "all",
            "*.svc.cluster.local",
            &[("wild", "v1")],
        ),
        destination_rule("default", "a", &reviews, &[("first", "v1")]),
        destination_rule("default", "b", &reviews, &[("second", "v2")]),
        with_subset("to-wild", "wild"),
        with_subset("to-second", "second"),
        with_subset("to-nowhere", "nowhere"),
    ]);
    let undefined: Vec<String> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::SubsetNotDefined)
        .map(|e| e.object.name.clone())
        .collect();
    assert_eq!(undefined, vec!["to-nowhere".to_string()]);
}

/// Proves that a DestinationRule's `loadBalancer.simple: PASSTHROUGH` makes the host's
/// clusters (the service's and each subset's) go to the connection's original destination
/// as Istio's do: type ORIGINAL_DST, lb policy CLUSTER_PROVIDED, no EDS config, no load
/// assignment and no endpoint metadata to match (no auto mTLS); without the rule the
/// clusters take their endpoints from EDS again.
#[test]
fn passthrough_load_balancing_sends_to_the_original_destination() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let rule = destination_rule_with(
        "default",
        "reviews",
        &host("reviews", "default"),
        &[("v1", "v1")],
        &[],
        Some(LoadBalancer::Passthrough),
        None,
    );
    m.insert(vec![
        px(&client),
        service("reviews", "default"),
        endpoint("reviews", "default", "10.2.0.1", true),
        workload("reviews-v1", "default", "10.2.0.1", &[("version", "v1")]),
        rule.clone(),
    ]);
    let names = [
        outbound(9080, "", "reviews", "default"),
        outbound(9080, "v1", "reviews", "default"),
    ];
    for name in &names {
        let c = m.cluster_body(&client, name);
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(
                DiscoveryType::OriginalDst as i32
            )),
            "{name}: {c:?}"
        );
        assert_eq!(c.lb_policy, LbPolicy::ClusterProvided as i32, "{name}");
        assert!(c.eds_cluster_config.is_none(), "{name}: {c:?}");
        assert!(c.load_assignment.is_none(), "{name}: {c:?}");
        assert!(c.lb_config.is_none(), "{name}: {c:?}");
        assert!(c.transport_socket_matches.is_empty(), "{name}: {c:?}");
    }

    m.retract(vec![rule]);
    let c = m.cluster_body(&client, &names[0]);
    assert_eq!(
        c.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
    );
    assert_eq!(c.lb_policy, LbPolicy::LeastRequest as i32);
    assert_eq!(m.eds_addresses(&client, &names[0]), set(&["10.2.0.1:9080"]));
}

/// A DestinationRule whose host no service's host is or covers is a warning (Istio's
/// IST0174); a wildcard host covering a service says nothing; defining the host ends it.
#[test]
fn a_rule_for_no_known_host_is_a_warning_until_the_host_is_defined() {
    let mut m = Mesh::new();
    let missing = host("ghost", "default");
    m.insert(vec![
        service("reviews", "default"),
        destination_rule("default", "ghost", &missing, &[]),
        destination_rule("default", "wide", "*.default.svc.cluster.local", &[]),
    ]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::DestinationRuleHostUnknown),
        vec![format!(
            "DestinationRule/default/ghost: spec.host: {missing} is the host of no Service or \
             ServiceEntry (nor covers one): the rule applies to nothing (IST0174 \
             UnknownDestinationRuleHost)"
        )]
    );
    assert_eq!(
        ErrorCode::DestinationRuleHostUnknown.message_code(),
        ("MF0033", "UnknownDestinationRuleHost")
    );
    m.insert(vec![service("ghost", "default")]);
    assert!(gateway_errors(&m, ErrorCode::DestinationRuleHostUnknown).is_empty());
}

/// A subset whose labels select none of its host's endpoints is a warning (Istio's
/// IST0173): requests routed to it would find no upstream. A host without endpoints says
/// nothing; relabelling a Pod into the subset ends it.
#[test]
fn a_subset_selecting_no_endpoint_is_a_warning_until_one_matches() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    m.insert(vec![
        service("reviews", "default"),
        destination_rule(
            "default",
            "reviews",
            &reviews,
            &[("v1", "v1"), ("v3", "v3")],
        ),
    ]);
    assert!(
        gateway_errors(&m, ErrorCode::SubsetSelectsNothing).is_empty(),
        "no endpoint yet: nothing to say"
    );
    let v3 = workload("reviews-b", "default", "10.0.4.2", &[("version", "v2")]);
    m.insert(vec![
        endpoint("reviews", "default", "10.0.4.1", true),
        endpoint("reviews", "default", "10.0.4.2", true),
        workload("reviews-a", "default", "10.0.4.1", &[("version", "v1")]),
        v3.clone(),
    ]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::SubsetSelectsNothing),
        vec![format!(
            "DestinationRule/default/reviews: spec.subsets[1]: subset \"v3\" selects none of \
             the endpoints of {reviews}: requests routed to it are answered 503 (IST0173 \
             DestinationRuleSubsetNotSelectPods)"
        )]
    );
    m.replace(
        v3,
        workload("reviews-b", "default", "10.0.4.2", &[("version", "v3")]),
    );
    assert!(gateway_errors(&m, ErrorCode::SubsetSelectsNothing).is_empty());
}
