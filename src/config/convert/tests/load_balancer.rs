//! A traffic policy's `loadBalancer`: consistent hash, warmup, the locality settings, and
//! what is refused naming the field.

use super::*;

const DR_LB: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: ns}\nspec:\n  host: reviews\n  trafficPolicy:\n    loadBalancer:\n";

#[test]
fn consistent_hash_warmup_and_passthrough_are_read() {
    use dataflows::model::{HashKey, HashTable, LoadBalancer};
    let lb = |p: &Parsed| {
        dr(p)
            .traffic_policy
            .as_ref()
            .and_then(|t| t.load_balancer.clone())
    };
    let p = parse(&format!(
        "{DR_LB}      consistentHash: {{httpCookie: {{name: user, ttl: 60s, path: /}}, maglev: {{tableSize: 65537}}}}\n"
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let Some(LoadBalancer::ConsistentHash(ch)) = lb(&p) else {
        panic!("{:?}", lb(&p))
    };
    assert_eq!(
        ch.key,
        HashKey::Cookie {
            name: "user".into(),
            path: Some("/".into()),
            ttl_ms: Some(60_000)
        }
    );
    assert_eq!(
        ch.table,
        HashTable::Maglev {
            table_size: Some(65537)
        }
    );
    let p = parse(&format!("{DR_LB}      simple: PASSTHROUGH\n"));
    assert_eq!(lb(&p), Some(LoadBalancer::Passthrough));
    let p = parse(&format!(
        "{DR_LB}      simple: ROUND_ROBIN\n      warmup: {{duration: 30s, minimumPercent: 5}}\n"
    ));
    let w = dr(&p)
        .traffic_policy
        .as_ref()
        .unwrap()
        .warmup
        .clone()
        .unwrap();
    assert_eq!(
        (w.duration_ms, w.minimum_percent_micros, w.aggression_micros),
        (30_000, 5_000_000, 1_000_000),
        "Istio's default aggression is 1.0"
    );
    // Warmup where Envoy has no slow start: said, and left out.
    let p = parse(&format!(
        "{DR_LB}      simple: RANDOM\n      warmupDurationSecs: 10s\n"
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.trafficPolicy.loadBalancer.warmupDurationSecs"]
    );
    assert!(dr(&p).traffic_policy.as_ref().unwrap().warmup.is_none());
}

#[test]
fn load_balancer_problems_name_their_field() {
    for (lb, field) in [
        (
            "      simple: ROUND_ROBIN\n      consistentHash: {useSourceIp: true}\n",
            "spec.trafficPolicy.loadBalancer.consistentHash",
        ),
        (
            "      consistentHash: {useSourceIp: true, httpHeaderName: x}\n",
            "spec.trafficPolicy.loadBalancer.consistentHash",
        ),
        (
            "      consistentHash: {ringHash: {}}\n",
            "spec.trafficPolicy.loadBalancer.consistentHash",
        ),
        (
            "      consistentHash: {httpCookie: {ttl: 1s}}\n",
            "spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.name",
        ),
        (
            "      warmup: {duration: 1s, minimumPercent: 120}\n",
            "spec.trafficPolicy.loadBalancer.warmup.minimumPercent",
        ),
        (
            "      warmup: {duration: soon}\n",
            "spec.trafficPolicy.loadBalancer.warmup.duration",
        ),
    ] {
        let err = parse_document(&format!("{DR_LB}{lb}"), &MeshConfig::default()).expect_err(lb);
        assert!(format!("{err:?}").contains(field), "{lb}: {err:?}");
    }
}

#[test]
fn locality_lb_setting_is_read_and_checked_as_istio_checks_it() {
    let doc = |tp: &str| format!("{DR}  trafficPolicy:\n{tp}");
    // Failover with outlier detection, at the rule and a port; nothing said.
    let p = parse(&doc(
        "    loadBalancer:\n      localityLbSetting:\n        failover: [{from: r1, to: r2}]\n    \
         outlierDetection: {consecutive5xxErrors: 1}\n    portLevelSettings:\n    - port: {number: 9080}\n      \
         loadBalancer:\n        localityLbSetting:\n          distribute:\n          - from: r1/z1/*\n            \
         to: {r1/z1/*: 80, r2/*: 20}\n",
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let policy = dr(&p).traffic_policy.as_ref().expect("a policy");
    let own = policy.locality_lb.as_deref().expect("read");
    assert_eq!(own.failover, vec![("r1".to_string(), "r2".to_string())]);
    let port = policy.port_level[0].1.locality_lb.as_deref().expect("read");
    assert_eq!(port.distribute[0].to.len(), 2);
    // Failover without outlier detection never applies.
    let p = parse(&doc(
        "    loadBalancer:\n      localityLbSetting:\n        failover: [{from: r1, to: r2}]\n        \
         failoverPriority: [app]\n",
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.trafficPolicy.loadBalancer.localityLbSetting"]
    );
    // failoverPriority is read, in order, with its `key=value` entries.
    let p = parse(&doc(
        "    loadBalancer:\n      localityLbSetting:\n        \
         failoverPriority: [\"tier=gold\", app, topology.kubernetes.io/zone]\n    \
         outlierDetection: {consecutive5xxErrors: 1}\n",
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let policy = dr(&p).traffic_policy.as_ref().expect("a policy");
    let own = policy.locality_lb.as_deref().expect("read");
    assert_eq!(
        own.failover_priority,
        vec!["tier=gold", "app", "topology.kubernetes.io/zone"]
    );
    // Beside distribute it is ignored, which is said.
    let p = parse(&doc(
        "    loadBalancer:\n      localityLbSetting:\n        \
         distribute: [{from: r1/*, to: {r1/*: 100}}]\n        failoverPriority: [app]\n    \
         outlierDetection: {consecutive5xxErrors: 1}\n",
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.trafficPolicy.loadBalancer.localityLbSetting.failoverPriority"]
    );
    // Rejected as Istio's validation rejects them, naming the field.
    let rejected = |tp: &str| {
        let e = parse_document(&doc(tp), &MeshConfig::default()).unwrap_err();
        (e.field, e.message)
    };
    let lb = "    loadBalancer:\n      localityLbSetting:\n";
    let (field, message) = rejected(&format!(
        "{lb}        distribute:\n        - from: r1\n          to: {{r1: 80, r2: 10}}\n"
    ));
    assert_eq!(
        field,
        "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to"
    );
    assert_eq!(message, "weights must sum to 100 (they sum to 90)");
    assert_eq!(
        rejected(&format!(
            "{lb}        distribute: [{{from: r1, to: {{r1: 100}}}}]\n        failover: [{{from: r1, to: r2}}]\n"
        ))
        .0,
        "spec.trafficPolicy.loadBalancer.localityLbSetting"
    );
    assert_eq!(
        rejected(&format!(
            "{lb}        failover: [{{from: r1/z1, to: r2}}]\n"
        ))
        .0,
        "spec.trafficPolicy.loadBalancer.localityLbSetting.failover[0]"
    );
    assert_eq!(
        rejected(&format!(
            "{lb}        distribute: [{{from: '*/z1', to: {{r1: 100}}}}]\n"
        ))
        .0,
        "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute"
    );
    assert_eq!(
        rejected(&format!(
            "{lb}        distribute: [{{from: r1, to: {{r1: 50, r1/z1: 50}}}}]\n"
        ))
        .0,
        "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to"
    );
    assert_eq!(
        rejected(&format!(
            "{lb}        distribute: [{{from: r1, to: {{r1: 0, r2: 100}}}}]\n"
        ))
        .0,
        "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to.r1"
    );
    // At a subset too.
    let p = parse(&format!(
        "{DR}  subsets:\n  - name: v1\n    labels: {{version: v1}}\n    trafficPolicy:\n      \
         loadBalancer:\n        localityLbSetting: {{enabled: false}}\n"
    ));
    let sub = dr(&p).subsets[0].traffic_policy.as_ref().expect("a policy");
    assert_eq!(
        sub.locality_lb.as_deref().and_then(|l| l.enabled),
        Some(false)
    );
}

/// `simple: UNSPECIFIED` is Istio's default algorithm, LEAST_REQUEST, not Envoy's round robin.
#[test]
fn an_unspecified_load_balancer_is_least_request() {
    let p = parse("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: ns}\nspec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {simple: UNSPECIFIED}}\n");
    let d = dr(&p);
    assert_eq!(
        d.traffic_policy
            .as_ref()
            .and_then(|t| t.load_balancer.clone()),
        Some(dataflows::model::LoadBalancer::LeastRequest)
    );
}
