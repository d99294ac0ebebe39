//! Locality load balancing relative to each client: failover priorities, `distribute`,
//! `failoverPriority`, `PreferClose` Services, and DNS ServiceEntry hosts ranked as EDS
//! endpoints are.

use crate::support::{
    destination_rule, endpoint, expected_eds_diffs, host, labels, outbound, px, service,
    sidecar_proxy, Mesh,
};
use dataflows::model::*;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use std::collections::BTreeMap;

/// An endpoint of `svc` in locality `loc`.
fn placed_endpoint(svc: &str, ip: &str, loc: &str) -> Record {
    let Record::Endpoint(h, mut e) = endpoint(svc, "default", ip, true) else {
        unreachable!("endpoint() makes endpoints")
    };
    e.placement.locality = loc.to_string();
    Record::Endpoint(h, e)
}

/// A sidecar in `default` whose node says it runs in `loc`.
fn placed_proxy(pod: &str, ip: &str, loc: &str) -> Proxy {
    Proxy {
        locality: loc.to_string(),
        ..sidecar_proxy(pod, "default", ip, &[("app", pod)])
    }
}

/// The `reviews` rule with this policy and no subsets.
fn reviews_rule(policy: TrafficPolicy) -> Record {
    let Record::DestinationRule(mut dr) =
        destination_rule("default", "reviews", &host("reviews", "default"), &[])
    else {
        unreachable!("destination_rule() makes rules")
    };
    dr.traffic_policy = Some(policy);
    Record::DestinationRule(dr)
}

/// `region/zone/subzone` → (priority, weight, endpoint count) per locality group.
fn groups(cla: &ClusterLoadAssignment) -> BTreeMap<String, (u32, u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            let name = format!("{}/{}/{}", l.region, l.zone, l.sub_zone);
            let weight = g.load_balancing_weight.as_ref().map_or(0, |w| w.value);
            (name, (g.priority, weight, g.lb_endpoints.len()))
        })
        .collect()
}

/// A DNS ServiceEntry's hosts are balanced by locality as EDS endpoints are: under a rule
/// with `outlierDetection`, the STRICT_DNS cluster a client in r1/z1 holds has its own
/// zone's host at priority 0 and the other region's at 1, a client in r2/z2 the reverse;
/// clients of one locality share one cluster; a client without a locality gets one
/// priority. Removing the rule's outlier detection gives everyone the one unranked cluster
/// again, and a new host reaches every client's cluster.
#[test]
fn dns_entry_hosts_are_balanced_by_each_clients_locality() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r1/z1");
    let c = placed_proxy("c", "10.9.0.3", "r2/z2");
    let d = placed_proxy("d", "10.9.0.4", "");
    let entry = |hosts: &[(&str, &str)]| {
        let Record::Service(mut svc) = service("reviews", "default") else {
            unreachable!()
        };
        svc.resolution = Resolution::Dns;
        svc.dns_endpoints = hosts
            .iter()
            .map(|(address, locality)| DnsEndpoint {
                address: address.to_string(),
                ports: Default::default(),
                labels: Labels::new(),
                placement: Placement {
                    locality: locality.to_string(),
                    weight: None,
                },
                service_account: None,
            })
            .collect();
        Record::Service(svc)
    };
    let outlier = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        ..Default::default()
    };
    let two = entry(&[("east.example", "r1/z1"), ("west.example", "r2/z2")]);
    m.insert(vec![
        two.clone(),
        reviews_rule(outlier.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let inline = |m: &Mesh, p: &Proxy| {
        let c = m.cluster_body(p, &reviews);
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(DiscoveryType::StrictDns as i32))
        );
        groups(&c.load_assignment.expect("inline hosts"))
    };
    let cds = |m: &Mesh, p: &Proxy| m.version(p, ResourceType::Cluster, &reviews);
    assert_eq!(
        inline(&m, &a),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 1, 1)),
            ("r2/z2/".to_string(), (1, 1, 1)),
        ])
    );
    assert_eq!(
        inline(&m, &c),
        BTreeMap::from([
            ("r1/z1/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (0, 1, 1)),
        ])
    );
    assert!(inline(&m, &d).values().all(|g| g.0 == 0));
    assert_eq!(cds(&m, &a), cds(&m, &b), "one locality, one cluster");
    assert_ne!(cds(&m, &a), cds(&m, &c));

    // A new host: every client's cluster has it, at its place.
    let three = entry(&[
        ("east.example", "r1/z1"),
        ("west.example", "r2/z2"),
        ("east2.example", "r1/z1"),
    ]);
    m.replace(two, three.clone());
    assert_eq!(inline(&m, &a)["r1/z1/"], (0, 2, 2));
    assert_eq!(inline(&m, &c)["r1/z1/"], (1, 2, 2));

    // Without outlier detection nothing ranks the hosts: one cluster for everyone.
    m.replace(
        reviews_rule(outlier),
        reviews_rule(TrafficPolicy::default()),
    );
    for p in [&b, &c, &d] {
        assert_eq!(cds(&m, &a), cds(&m, p));
    }
    assert!(inline(&m, &a).values().all(|g| g.0 == 0));
}

/// Locality load balancing, as Istio applies it, relative to each client proxy's locality:
/// with `outlierDetection`, priorities (0 the client's own zone and subzone, then its zone,
/// its region, elsewhere, without gaps); with `distribute`, the weights of the first entry
/// the client matches (the groups it names nothing emptied), whether or not outliers are
/// detected; `enabled: false` neither. Proxies in one locality share one assignment;
/// proxies without a locality, and clusters without such a rule, share one as before; an
/// endpoint change reaches exactly the assignments that hold it.
#[test]
fn load_assignments_follow_each_client_locality() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r1/z1");
    let c = placed_proxy("c", "10.9.0.3", "r2/z2");
    let d = placed_proxy("d", "10.9.0.4", "");
    let outlier = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        placed_endpoint("reviews", "10.0.0.1", "r1/z1"),
        placed_endpoint("reviews", "10.0.0.2", "r2/z2"),
        placed_endpoint("reviews", "10.0.0.3", "r1/z2"),
        placed_endpoint("ratings", "10.0.0.5", "r1/z1"),
        reviews_rule(outlier.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let eds = |m: &Mesh, p: &Proxy, name: &str| m.version(p, ResourceType::Endpoint, name);
    // Failover: priorities relative to the client.
    assert_eq!(
        groups(&m.cla(&a, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 1, 1)),
            ("r1/z2/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (2, 1, 1)),
        ])
    );
    assert_eq!(
        groups(&m.cla(&c, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (1, 1, 1)),
            ("r1/z2/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (0, 1, 1)),
        ])
    );
    // A client of no locality shares nothing with any group: one priority.
    assert!(groups(&m.cla(&d, &reviews)).values().all(|g| g.0 == 0));
    assert_eq!(
        eds(&m, &a, &reviews),
        eds(&m, &b, &reviews),
        "one locality, one assignment"
    );
    assert_ne!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    // Without a locality rule, everyone shares the one assignment.
    for p in [&b, &c, &d] {
        assert_eq!(eds(&m, &a, &ratings), eds(&m, p, &ratings));
    }
    // Priorities need no switch in the cluster; distribute does (below).
    assert!(m
        .cluster_body(&a, &reviews)
        .common_lb_config
        .unwrap()
        .locality_config_specifier
        .is_none());

    // An endpoint of ratings: each proxy gets its one new ratings assignment, nothing else.
    let before = m.held.clone();
    let diffs = m.insert(vec![placed_endpoint("ratings", "10.0.0.6", "r2/z2")]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&ratings),
            &diffs
        )
    );
    // An endpoint of reviews: each proxy's reviews assignment, nothing else.
    let before = m.held.clone();
    let diffs = m.insert(vec![placed_endpoint("reviews", "10.0.0.4", "r2/z2")]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&reviews),
            &diffs
        )
    );
    assert_eq!(groups(&m.cla(&c, &reviews))["r2/z2/"], (0, 2, 2));

    // Distribute, without outlier detection: clients in r1/z1 weigh by it, others not.
    let distribute = TrafficPolicy {
        locality_lb: Some(Box::new(LocalityLbSetting {
            distribute: vec![LocalityDistribute {
                from: "r1/z1/*".into(),
                to: vec![("r1/z1".into(), 80), ("r2/*".into(), 20)],
            }],
            ..Default::default()
        })),
        ..Default::default()
    };
    m.replace(
        reviews_rule(outlier.clone()),
        reviews_rule(distribute.clone()),
    );
    assert_eq!(
        groups(&m.cla(&a, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 80, 1)),
            ("r1/z2/".to_string(), (0, 1, 0)),
            ("r2/z2/".to_string(), (0, 20, 2)),
        ])
    );
    assert_eq!(
        groups(&m.cla(&c, &reviews)),
        groups(&m.cla(&d, &reviews)),
        "no entry for r2/z2: as it is"
    );
    assert!(m
        .cluster_body(&a, &reviews)
        .common_lb_config
        .and_then(|c| c.locality_config_specifier)
        .is_some());

    // Switched off: one assignment for all again.
    let mut off = distribute.clone();
    off.outlier_detection = outlier.outlier_detection.clone();
    if let Some(l) = off.locality_lb.as_mut() {
        l.enabled = Some(false);
        l.distribute.clear();
    }
    m.replace(reviews_rule(distribute), reviews_rule(off));
    for p in [&b, &c, &d] {
        assert_eq!(eds(&m, &a, &reviews), eds(&m, p, &reviews));
    }
    assert!(groups(&m.cla(&a, &reviews)).values().all(|g| g.0 == 0));
}

/// An endpoint of `svc` in `loc` whose workload carries `tier`.
fn tiered_endpoint(svc: &str, ip: &str, loc: &str, tier: &str) -> Record {
    let Record::Endpoint(h, mut e) = placed_endpoint(svc, ip, loc) else {
        unreachable!("placed_endpoint() makes endpoints")
    };
    e.labels = labels(&[("tier", tier)]);
    Record::Endpoint(h, e)
}

/// `(locality, priority, endpoints)` per group, in the assignment's order.
fn ranked_groups(cla: &ClusterLoadAssignment) -> Vec<(String, u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            let name = format!("{}/{}/{}", l.region, l.zone, l.sub_zone);
            (name, g.priority, g.lb_endpoints.len())
        })
        .collect()
}

/// `failoverPriority` as Istio applies it, per client: an endpoint's priority comes from
/// how many of the listed labels, in order, it shares with the client proxy (a topology
/// label from each side's locality), renumbered without gaps; proxies with the same values
/// share one assignment; a proxy with neither labels nor a locality compares "" for each
/// (as Istio's proxies always carry some label, it ranks them too); clusters without the rule stay shared; an endpoint change reaches exactly
/// the assignments that hold it; removing the list ends the split.
#[test]
fn failover_priority_ranks_endpoints_by_the_labels_they_share_with_each_client() {
    let mut m = Mesh::new();
    let gold = |pod: &str, ip: &str| Proxy {
        locality: "r1/z1".into(),
        ..sidecar_proxy(pod, "default", ip, &[("tier", "gold")])
    };
    let a = gold("a", "10.9.0.1");
    let b = gold("b", "10.9.0.2");
    let c = Proxy {
        locality: "r1/z1".into(),
        ..sidecar_proxy("c", "default", "10.9.0.3", &[("tier", "silver")])
    };
    let d = sidecar_proxy("d", "default", "10.9.0.4", &[]);
    let prioritized = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        locality_lb: Some(Box::new(LocalityLbSetting {
            failover_priority: vec!["tier".into(), "topology.kubernetes.io/zone".into()],
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        tiered_endpoint("reviews", "10.0.0.1", "r1/z1", "gold"),
        tiered_endpoint("reviews", "10.0.0.2", "r1/z2", "gold"),
        tiered_endpoint("reviews", "10.0.0.3", "r1/z1", "silver"),
        placed_endpoint("ratings", "10.0.0.5", "r1/z1"),
        reviews_rule(prioritized.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let eds = |m: &Mesh, p: &Proxy, name: &str| m.version(p, ResourceType::Endpoint, name);
    let g = |s: &str, p: u32, n: usize| (s.to_string(), p, n);
    // Gold in z1: its tier and zone first, its tier elsewhere next, then the rest.
    assert_eq!(
        ranked_groups(&m.cla(&a, &reviews)),
        vec![g("r1/z1/", 0, 1), g("r1/z1/", 2, 1), g("r1/z2/", 1, 1)]
    );
    // Silver: the silver endpoint, then every other one (the zone counts only after the tier).
    assert_eq!(
        ranked_groups(&m.cla(&c, &reviews)),
        vec![g("r1/z1/", 0, 1), g("r1/z1/", 1, 1), g("r1/z2/", 1, 1)]
    );
    // No labels and no locality: "" shares the tier with no endpoint, one rank for all.
    assert_eq!(
        ranked_groups(&m.cla(&d, &reviews)),
        vec![g("r1/z1/", 0, 2), g("r1/z2/", 0, 1)]
    );
    assert_eq!(
        eds(&m, &a, &reviews),
        eds(&m, &b, &reviews),
        "same values, one assignment"
    );
    assert_ne!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    for p in [&b, &c, &d] {
        assert_eq!(
            eds(&m, &a, &ratings),
            eds(&m, p, &ratings),
            "no rule: shared"
        );
    }

    // A gold endpoint in z1: gold clients' first group grows; each proxy gets only its
    // new reviews assignment.
    let before = m.held.clone();
    let diffs = m.insert(vec![tiered_endpoint(
        "reviews", "10.0.0.4", "r1/z1", "gold",
    )]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&reviews),
            &diffs
        )
    );
    assert_eq!(ranked_groups(&m.cla(&b, &reviews))[0], g("r1/z1/", 0, 2));

    // Without the list: locality failover again, one assignment per locality.
    let mut plain = prioritized.clone();
    if let Some(l) = plain.locality_lb.as_mut() {
        l.failover_priority.clear();
    }
    m.replace(reviews_rule(prioritized), reviews_rule(plain));
    assert_eq!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    assert_eq!(
        ranked_groups(&m.cla(&c, &reviews)),
        vec![g("r1/z1/", 0, 3), g("r1/z2/", 1, 1)]
    );
}

/// A Service's `trafficDistribution: PreferClose`, as Istio's `GetLocalityLbSetting` reads it:
/// without a DestinationRule `localityLbSetting`, each client's assignment ranks the
/// endpoints by how much of its network, region, zone and subzone they share, even without
/// outlier detection; clients in different places get different assignments; a rule's
/// `localityLbSetting` (here `enabled: false`) takes precedence; without the preference the
/// assignment is one shared, unranked one again.
#[test]
fn prefer_close_services_rank_endpoints_by_the_clients_place() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r2/z3");
    let Record::Service(mut close) = service("reviews", "default") else {
        unreachable!()
    };
    close.prefer_close = true;
    m.insert(vec![
        Record::Service(close.clone()),
        placed_endpoint("reviews", "10.0.0.1", "r1/z1"),
        placed_endpoint("reviews", "10.0.0.2", "r1/z2"),
        placed_endpoint("reviews", "10.0.0.3", "r2/z3"),
        px(&a),
        px(&b),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let g = |s: &str, p: u32| (s.to_string(), p, 1usize);
    let ranks = |m: &Mesh, p: &Proxy| {
        let mut r = ranked_groups(&m.cla(p, &reviews));
        r.sort();
        r
    };
    assert_eq!(
        ranks(&m, &a),
        vec![g("r1/z1/", 0), g("r1/z2/", 1), g("r2/z3/", 2)]
    );
    assert_eq!(
        ranks(&m, &b),
        vec![g("r1/z1/", 1), g("r1/z2/", 1), g("r2/z3/", 0)]
    );
    let eds = |m: &Mesh, p: &Proxy| m.version(p, ResourceType::Endpoint, &reviews);
    assert_ne!(eds(&m, &a), eds(&m, &b));

    // A rule's own setting wins: disabled, nothing is ranked.
    let off = TrafficPolicy {
        locality_lb: Some(Box::new(LocalityLbSetting {
            enabled: Some(false),
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![reviews_rule(off.clone())]);
    assert!(
        ranks(&m, &a).iter().all(|(_, p, _)| *p == 0),
        "{:?}",
        ranks(&m, &a)
    );
    m.retract(vec![reviews_rule(off)]);

    // Without the preference: no ranking, one assignment for both.
    let mut plain = close.clone();
    plain.prefer_close = false;
    m.replace(Record::Service(close), Record::Service(plain));
    assert!(ranks(&m, &a).iter().all(|(_, p, _)| *p == 0));
    assert_eq!(eds(&m, &a), eds(&m, &b));
}
