//! Random DestinationRules: hosts (exact and wildcard), subsets, `exportTo` and workload
//! selectors, and the traffic policies of rules, subsets and ports (load balancers, TLS,
//! locality, connection pools).

use crate::records::{namespace, pick, service_name, NAMESPACES};
use crate::support::{host, labels};
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

pub fn destination_rule(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let (ns, svc_name) = (namespace(slot), service_name(slot));
    let mut dr = DestinationRule {
        key: ConfigKey::new(
            Kind::DestinationRule,
            pick(rng, &NAMESPACES),
            format!("dr{}", slot % 3),
        ),
        host: host(&svc_name, ns),
        export_to: vec![],
        traffic_policy: lb_policy(rng, extra),
        subsets: ["v1", "v2"][..rng.random_range(1..3)]
            .iter()
            .map(|v| Subset {
                name: v.to_string(),
                labels: labels(&[("version", v)]),
                traffic_policy: lb_policy(rng, extra),
            })
            .collect(),
        // Now and then only for the proxies of its namespace a label selects.
        selector: extra
            .random_bool(0.3)
            .then(|| labels(&[("app", pick(extra, &["client", "svc0", "nobody"]))])),
    };
    // Now and then a wildcard host (the most specific covering rule applies where no rule
    // names the host), and an `exportTo` that decides which rules of one namespace and host
    // merge; the rules of a namespace for one host (`dr0` to `dr2`) merge in name order.
    match extra.random_range(0..8) {
        0 => dr.host = format!("*.{ns}.svc.cluster.local"),
        1 => dr.host = "*.svc.cluster.local".to_string(),
        2 => dr.host = "*".to_string(),
        _ => {}
    }
    let exports: [&[&str]; 6] = [&[], &[], &["."], &["*"], &[".", "other"], &["other"]];
    dr.export_to = exports[extra.random_range(0..exports.len())]
        .iter()
        .map(|e| e.to_string())
        .collect();
    Record::DestinationRule(dr)
}

/// Often none; else a load balancer that changes routes (consistent hashing), clusters
/// (warmup) or whether a cluster has endpoints at all (passthrough).
/// `extra` draws what later features add (mesh mTLS), so the draws of `rng` (and the
/// scenarios each seed has always explored) stay as they were.
fn lb_policy(rng: &mut StdRng, extra: &mut StdRng) -> Option<TrafficPolicy> {
    let policy = base_policy(rng, extra);
    let policy = per_port_and_secrets(extra, policy);
    let policy = with_locality(extra, policy);
    with_connection_pool(extra, policy)
}

/// Sometimes a `connectionPool` whose `tcp.idleTimeout` reaches the `tcp_proxy` of routes
/// to the host (the rule's own) and whose `h2UpgradePolicy` makes its clusters HTTP/2.
fn with_connection_pool(
    extra: &mut StdRng,
    policy: Option<TrafficPolicy>,
) -> Option<TrafficPolicy> {
    if extra.random_bool(0.7) {
        return policy;
    }
    let mut p = policy.unwrap_or_default();
    let pool = p.connection_pool.get_or_insert_with(Default::default);
    pool.tcp_idle_timeout_ms = Some(30_000);
    pool.h2_upgrade = Some(H2Upgrade::Upgrade);
    pool.max_concurrent_streams = Some(10);
    pool.max_requests_per_connection = Some(5);
    if extra.random_bool(0.5) {
        pool.max_connection_duration_ms = Some(60_000);
    }
    Some(p)
}

/// A locality load balancing setting: failover (with or without region entries),
/// `failoverPriority` (with a fixed value, a label and a topology label, or beside
/// failover), `distribute` with wildcards, or switched off.
pub fn locality_setting(extra: &mut StdRng) -> LocalityLbSetting {
    match extra.random_range(0..6) {
        4 => LocalityLbSetting {
            failover_priority: vec![
                "version=v1".into(),
                "app".into(),
                "topology.kubernetes.io/zone".into(),
            ],
            ..Default::default()
        },
        5 => LocalityLbSetting {
            failover: vec![("r1".into(), "r2".into())],
            failover_priority: vec!["app".into()],
            ..Default::default()
        },
        0 => LocalityLbSetting::default(),
        1 => LocalityLbSetting {
            failover: vec![("r1".into(), "r2".into())],
            ..Default::default()
        },
        2 => LocalityLbSetting {
            distribute: vec![
                LocalityDistribute {
                    from: "r1/z1/*".into(),
                    to: vec![("r1/z1/*".into(), 70), ("r2/*".into(), 30)],
                },
                LocalityDistribute {
                    from: "*".into(),
                    to: vec![("r1/*".into(), 50), ("r2".into(), 50)],
                },
            ],
            ..Default::default()
        },
        _ => LocalityLbSetting {
            enabled: Some(false),
            ..Default::default()
        },
    }
}

/// Sometimes `outlierDetection` (which turns locality failover on) and a
/// `localityLbSetting`, at the policy or at a port entry.
fn with_locality(extra: &mut StdRng, policy: Option<TrafficPolicy>) -> Option<TrafficPolicy> {
    if extra.random_bool(0.6) {
        return policy;
    }
    let mut p = policy.unwrap_or_default();
    let mut target = TrafficPolicy::default();
    if extra.random_bool(0.6) {
        target.outlier_detection = Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        }));
    }
    if extra.random_bool(0.6) {
        target.locality_lb = Some(Box::new(locality_setting(extra)));
    }
    if extra.random_bool(0.3) {
        p.port_level.push((pick(extra, &[9080u16, 8080]), target));
    } else {
        p.outlier_detection = target.outlier_detection;
        p.locality_lb = target.locality_lb;
    }
    Some(p)
}

/// Later additions, drawn from `extra` only: a `portLevelSettings` entry (hashing, TLS from
/// a Secret, or TLS disabled for one port), or the policy's own TLS from a Secret.
fn per_port_and_secrets(
    extra: &mut StdRng,
    policy: Option<TrafficPolicy>,
) -> Option<TrafficPolicy> {
    let credential = |extra: &mut StdRng| {
        Some(Box::new(UpstreamTls {
            credential: Some(pick(extra, &["cred", "other"]).to_string()),
            mutual: extra.random_bool(0.5),
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        }))
    };
    match extra.random_range(0..6) {
        0 => {
            let entry = match extra.random_range(0..3) {
                0 => TrafficPolicy {
                    load_balancer: Some(LoadBalancer::ConsistentHash(Box::new(ConsistentHash {
                        key: HashKey::Header("x-port".into()),
                        table: HashTable::Ring { minimum_size: None },
                    }))),
                    ..Default::default()
                },
                1 => TrafficPolicy {
                    tls: credential(extra),
                    ..Default::default()
                },
                _ => TrafficPolicy {
                    tls_disabled: true,
                    connect_timeout_ms: Some(1234),
                    ..Default::default()
                },
            };
            let mut p = policy.unwrap_or_default();
            p.port_level.push((pick(extra, &[9080u16, 8080]), entry));
            Some(p)
        }
        1 => {
            let mut p = policy.unwrap_or_default();
            p.tls = credential(extra);
            Some(p)
        }
        _ => policy,
    }
}

fn base_policy(rng: &mut StdRng, extra: &mut StdRng) -> Option<TrafficPolicy> {
    let hash = |key| {
        LoadBalancer::ConsistentHash(Box::new(ConsistentHash {
            key,
            table: HashTable::Ring { minimum_size: None },
        }))
    };
    let (load_balancer, warmup) = match rng.random_range(0..8) {
        0 => (Some(hash(HashKey::Header("x-user".into()))), None),
        1 => (Some(hash(HashKey::SourceIp)), None),
        2 => (Some(LoadBalancer::Passthrough), None),
        3 => (
            Some(LoadBalancer::RoundRobin),
            Some(Warmup {
                duration_ms: 30_000,
                minimum_percent_micros: 10_000_000,
                aggression_micros: 1_000_000,
            }),
        ),
        // Mesh mTLS: clusters that hold the trust domain's identities.
        _ if extra.random_bool(0.4) => {
            return Some(TrafficPolicy {
                tls: Some(Box::new(UpstreamTls {
                    istio_mutual: true,
                    ..Default::default()
                })),
                ..Default::default()
            })
        }
        _ => return None,
    };
    Some(TrafficPolicy {
        load_balancer,
        warmup,
        ..Default::default()
    })
}
