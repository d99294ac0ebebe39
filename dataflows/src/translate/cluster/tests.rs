//! Tests of outbound clusters as a whole (discovery, DNS hosts by locality, protocol
//! options, connection pool) and of inbound clusters; the TLS ones are in `tls_tests.rs`.

use super::*;
use crate::model::{
    ClientClass, ConfigKey, ConnectionPool, DnsEndpoint, H2Upgrade, InboundClusterSpec, Kind,
    Protocol, Subset, UpstreamTls,
};
use envoy_types::pb::envoy::config::core::v3::Http2ProtocolOptions;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
pub(crate) fn reviews() -> Service {
    Service {
        control_plane: false,
        mesh_external: false,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: "reviews.default.svc.cluster.local".into(),
        origin: ConfigKey::new(Kind::Service, "default", "reviews"),
        ports: vec![ServicePort {
            name: "http".into(),
            port: 9080,
            protocol: Protocol::Http,
        }],
        export_to: Vec::new(),
        resolution: Resolution::Static,
        addresses: Vec::new(),
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
    }
}

pub(super) fn rule(tls: UpstreamTls) -> DestinationRule {
    DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, "default", "reviews"),
        host: "reviews.default.svc.cluster.local".into(),
        export_to: Vec::new(),
        traffic_policy: Some(TrafficPolicy {
            tls: Some(Box::new(tls)),
            ..Default::default()
        }),
        subsets: vec![Subset {
            name: "v1".into(),
            labels: [("version".to_string(), "v1".to_string())].into(),
            traffic_policy: None,
        }],
        selector: None,
    }
}

/// A DNS entry's endpoints under a rule with `outlierDetection` (Istio's default
/// locality failover) and a `failoverPriority`: the cluster carries its hosts for
/// localizing (its selection), and for a client labelled `tier: gold` the hosts with
/// its label are priority 0, the other next; a `silver` client gets the reverse; with a
/// `failover` entry too, the locality ranks within. Without outlier
/// detection the cluster is as it was (no selection). A DNS_ROUND_ROBIN entry (one host)
/// is never localized.
#[test]
fn dns_clusters_are_balanced_by_locality_per_client_class() {
    let mut svc = reviews();
    svc.resolution = Resolution::Dns;
    for (address, locality, tier) in [
        ("a.example", "r1/z1", "gold"),
        ("b.example", "r1/z1", "silver"),
        ("c.example", "r2/z1", "gold"),
    ] {
        svc.dns_endpoints.push(DnsEndpoint {
            address: address.into(),
            ports: Default::default(),
            labels: [("tier".to_string(), tier.to_string())].into(),
            placement: crate::model::Placement {
                locality: locality.into(),
                weight: None,
            },
            service_account: None,
        });
    }
    let mut dr = rule(UpstreamTls::default());
    dr.subsets.clear();
    let policy = dr.traffic_policy.as_mut().unwrap();
    policy.tls = None;
    policy.outlier_detection = Some(Box::default());
    policy.locality_lb = Some(Box::new(crate::model::LocalityLbSetting {
        failover_priority: vec!["tier".into()],
        ..Default::default()
    }));
    let all = outbound_all(&svc, Some(&dr));
    let (res, _, sel) = &all[0];
    let sel = sel.as_ref().expect("localized per client class");
    assert_eq!(sel.inline_hosts.as_ref().map(Vec::len), Some(3));
    let priorities = |locality: &str, tier: &str| -> Vec<(String, u32)> {
        let class = ClientClass {
            locality: locality.into(),
            labels: Some(vec![("tier".into(), tier.into())]),
        };
        let built = localized_dns(res, sel, &class);
        let c = Cluster::decode(&built.body.0[..]).unwrap();
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(DiscoveryType::StrictDns as i32))
        );
        let mut out: Vec<(String, u32)> = c
            .load_assignment
            .unwrap()
            .endpoints
            .iter()
            .flat_map(|g| {
                g.lb_endpoints.iter().map(move |e| {
                    let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier else {
                        panic!("{e:?}")
                    };
                    (
                        format!("{:?}", ep.address)
                            .split('"')
                            .nth(1)
                            .unwrap()
                            .to_string(),
                        g.priority,
                    )
                })
            })
            .collect();
        out.sort();
        out
    };
    assert_eq!(
        priorities("r1/z1", "gold"),
        vec![
            ("a.example".into(), 0),
            ("b.example".into(), 1),
            ("c.example".into(), 0)
        ],
        "the hosts sharing its label first, whatever their locality"
    );
    assert_eq!(
        priorities("r2/z1", "silver"),
        vec![
            ("a.example".into(), 1),
            ("b.example".into(), 0),
            ("c.example".into(), 1)
        ]
    );
    // With a `failover` entry as well, locality ranks the hosts within each label rank.
    dr.traffic_policy.as_mut().unwrap().locality_lb =
        Some(Box::new(crate::model::LocalityLbSetting {
            failover_priority: vec!["tier".into()],
            failover: vec![("r1".into(), "r2".into())],
            ..Default::default()
        }));
    let all = outbound_all(&svc, Some(&dr));
    let (res, _, sel) = &all[0];
    let sel = sel.as_ref().unwrap();
    let class = ClientClass {
        locality: "r1/z1".into(),
        labels: Some(vec![("tier".into(), "gold".into())]),
    };
    let c = Cluster::decode(&localized_dns(res, sel, &class).body.0[..]).unwrap();
    let groups: Vec<(String, u32)> = c
        .load_assignment
        .unwrap()
        .endpoints
        .iter()
        .map(|g| (g.locality.clone().unwrap_or_default().region, g.priority))
        .collect();
    assert!(groups.contains(&("r1".into(), 0)), "{groups:?}");
    assert!(groups.contains(&("r2".into(), 1)), "{groups:?}");
    assert!(
        c.common_lb_config
            .and_then(|l| l.locality_config_specifier)
            .is_some(),
        "failover entries weigh localities"
    );
    // Without outlier detection nothing is applied: no selection, one priority.
    dr.traffic_policy.as_mut().unwrap().outlier_detection = None;
    assert!(outbound_all(&svc, Some(&dr))[0].2.is_none());
    // One host, resolved by LOGICAL_DNS: never localized.
    svc.resolution = Resolution::DnsRoundRobin;
    svc.dns_endpoints.truncate(1);
    dr.traffic_policy.as_mut().unwrap().outlier_detection = Some(Box::default());
    assert!(outbound_all(&svc, Some(&dr))[0].2.is_none());
}

/// `simple: PASSTHROUGH` makes original-destination clusters for Envoy, and leaves
/// proxyless gRPC clients EDS clusters balanced round robin with an assignment each, as
/// Istio's gRPC generator does (their xDS client has no original-destination cluster).
#[test]
fn passthrough_keeps_eds_for_proxyless_clients() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    let dr = DestinationRule {
        traffic_policy: Some(TrafficPolicy {
            load_balancer: Some(LoadBalancer::Passthrough),
            ..Default::default()
        }),
        ..rule(UpstreamTls::default())
    };
    let defaults = ClusterDefaults::default();
    for grpc in [false, true] {
        let all = outbound_all_for(&reviews(), Some(&dr), grpc, &defaults);
        assert_eq!(all.len(), 2, "the service's cluster and subset v1's");
        for (r, _, eds) in all {
            let c = Cluster::decode(&*r.body.0).unwrap();
            let kind = if grpc {
                DiscoveryType::Eds
            } else {
                DiscoveryType::OriginalDst
            };
            assert_eq!(
                c.cluster_discovery_type,
                Some(ClusterDiscoveryType::Type(kind as i32)),
                "{} grpc={grpc}",
                c.name
            );
            let lb = if grpc {
                LbPolicy::RoundRobin
            } else {
                LbPolicy::ClusterProvided
            };
            assert_eq!(c.lb_policy, lb as i32, "{} grpc={grpc}", c.name);
            assert_eq!(eds.is_some(), grpc, "{} grpc={grpc}", c.name);
        }
    }
}

/// The `HttpProtocolOptions` of each cluster of `svc` under a rule whose whole
/// `connectionPool` is `pool` (by cluster name; `None`: no options).
fn protocol_options(
    svc: &Service,
    pool: ConnectionPool,
) -> Vec<(String, Option<HttpProtocolOptions>)> {
    let dr = DestinationRule {
        traffic_policy: Some(TrafficPolicy {
            connection_pool: Some(Box::new(pool)),
            ..Default::default()
        }),
        subsets: Vec::new(),
        ..rule(UpstreamTls::default())
    };
    outbound_all(svc, Some(&dr))
        .into_iter()
        .map(|(r, _, _)| {
            let c = Cluster::decode(&*r.body.0).unwrap();
            let options = c
                .typed_extension_protocol_options
                .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
                .map(|a| HttpProtocolOptions::decode(&*a.value).unwrap());
            (c.name, options)
        })
        .collect()
}

pub(super) fn ports(protocols: &[(u16, Protocol)]) -> Service {
    Service {
        ports: protocols
            .iter()
            .map(|(port, protocol)| ServicePort {
                name: format!("p{port}"),
                port: *port,
                protocol: *protocol,
            })
            .collect(),
        ..reviews()
    }
}

fn explicit_h2(o: &HttpProtocolOptions) -> Option<&Http2ProtocolOptions> {
    match &o.upstream_protocol_options {
        Some(UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(h2)),
        })) => Some(h2),
        _ => None,
    }
}

/// `h2UpgradePolicy: UPGRADE` makes every cluster of the rule HTTP/2, with
/// `maxConcurrentStreams`; `DEFAULT` and `DO_NOT_UPGRADE` leave HTTP/1.1 ports alone,
/// and an HTTP2 port is HTTP/2 (with the limit) whatever the policy.
#[test]
fn h2_upgrade_policy_as_istio_decides_it() {
    let svc = ports(&[(80, Protocol::Http), (81, Protocol::Http2)]);
    let upgraded = protocol_options(
        &svc,
        ConnectionPool {
            h2_upgrade: Some(H2Upgrade::Upgrade),
            max_concurrent_streams: Some(7),
            ..Default::default()
        },
    );
    assert_eq!(upgraded.len(), 2);
    for (name, options) in &upgraded {
        let h2 = options.as_ref().and_then(explicit_h2);
        let streams = h2.and_then(|h| h.max_concurrent_streams.as_ref());
        assert_eq!(streams.map(|s| s.value), Some(7), "{name}: {options:?}");
        // No lifetimes given: no common options.
        assert!(options
            .as_ref()
            .unwrap()
            .common_http_protocol_options
            .is_none());
    }
    for policy in [None, Some(H2Upgrade::DoNotUpgrade)] {
        let got = protocol_options(
            &svc,
            ConnectionPool {
                h2_upgrade: policy,
                max_concurrent_streams: Some(7),
                ..Default::default()
            },
        );
        assert_eq!(got[0].0, "outbound|80||reviews.default.svc.cluster.local");
        assert!(got[0].1.is_none(), "{policy:?}: {:?}", got[0].1);
        let h2 = got[1].1.as_ref().and_then(explicit_h2).expect("h2 port");
        assert_eq!(h2.max_concurrent_streams.as_ref().map(|s| s.value), Some(7));
    }
}

/// `useClientProtocol`: Envoy's downstream protocol on every port (never upgraded,
/// no stream limit, as Istio replaces the explicit protocol).
#[test]
fn use_client_protocol_takes_the_requests_protocol() {
    let svc = ports(&[(80, Protocol::Http), (81, Protocol::Grpc)]);
    let got = protocol_options(
        &svc,
        ConnectionPool {
            use_client_protocol: true,
            max_concurrent_streams: Some(7),
            ..Default::default()
        },
    );
    for (name, options) in got {
        let options = options.expect("options");
        match options.upstream_protocol_options {
            Some(UpstreamProtocolOptions::UseDownstreamProtocolConfig(d)) => {
                assert!(d.http_protocol_options.is_some(), "{name}");
                let h2 = d.http2_protocol_options.expect("h2 options");
                assert!(h2.max_concurrent_streams.is_none(), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// A port whose protocol is told per connection passes the request's protocol on from
/// a sidecar (outbound and inbound) and speaks HTTP/1.1 from a gateway, whose clients
/// negotiate HTTP/2 by ALPN whatever the application speaks; a `useClientProtocol` rule
/// still passes it on from a gateway.
#[test]
fn ports_told_per_connection_pass_the_requests_protocol_on_from_sidecars_only() {
    let svc = ports(&[(80, Protocol::Auto), (81, Protocol::Http)]);
    let options = |gateway: bool, pool: Option<ConnectionPool>| -> Vec<bool> {
        let dr = pool.map(|p| DestinationRule {
            traffic_policy: Some(TrafficPolicy {
                connection_pool: Some(Box::new(p)),
                ..Default::default()
            }),
            subsets: Vec::new(),
            ..rule(UpstreamTls::default())
        });
        let defaults = ClusterDefaults {
            gateway,
            ..Default::default()
        };
        outbound_all_for(&svc, dr.as_ref(), false, &defaults)
            .into_iter()
            .map(|(r, _, _)| passes_protocol_on(&r))
            .collect()
    };
    assert_eq!(options(false, None), vec![true, false]);
    assert_eq!(options(true, None), vec![false, false]);
    let client = ConnectionPool {
        use_client_protocol: true,
        ..Default::default()
    };
    assert_eq!(options(true, Some(client)), vec![true, true]);
    let spec = |protocol| InboundClusterSpec {
        port: 7000,
        endpoint: ("127.0.0.1".into(), 7000),
        protocol,
        pool: None,
        fail_closed: None,
    };
    assert!(passes_protocol_on(&inbound(&spec(Protocol::Auto), 1000)));
    assert!(!passes_protocol_on(&inbound(&spec(Protocol::Http), 1000)));
}

/// An inbound cluster that fails closed (a Sidecar ingress `tls` meshflow cannot honour)
/// has an assignment of no endpoints, and says why in its metadata; otherwise the
/// application's.
#[test]
fn an_inbound_cluster_failing_closed_has_no_endpoints() {
    let spec = |fail_closed: Option<&str>| InboundClusterSpec {
        port: 8443,
        endpoint: ("127.0.0.1".into(), 8443),
        protocol: Protocol::Http,
        pool: None,
        fail_closed: fail_closed.map(str::to_string),
    };
    let open = Cluster::decode(&*inbound(&spec(None), 1000).body.0).unwrap();
    let hosts = |c: &Cluster| {
        c.load_assignment.as_ref().map(|a| {
            a.endpoints
                .iter()
                .map(|e| e.lb_endpoints.len())
                .sum::<usize>()
        })
    };
    assert_eq!(hosts(&open), Some(1));
    assert!(open.metadata.is_none());
    let closed = Cluster::decode(&*inbound(&spec(Some("ingress tls")), 1000).body.0).unwrap();
    assert_eq!(closed.name, "inbound|8443||");
    assert_eq!(hosts(&closed), Some(0));
    assert!(
        format!("{:?}", closed.metadata).contains("ingress tls"),
        "{:?}",
        closed.metadata
    );
}

/// Whether cluster `r` speaks the request's protocol upstream (`use_downstream_protocol`).
fn passes_protocol_on(r: &Resource) -> bool {
    let c = Cluster::decode(&*r.body.0).unwrap();
    c.typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .map(|a| HttpProtocolOptions::decode(&*a.value).unwrap())
        .is_some_and(|o| {
            matches!(
                o.upstream_protocol_options,
                Some(UpstreamProtocolOptions::UseDownstreamProtocolConfig(_))
            )
        })
}

/// `tcp.idleTimeout` is the idle timeout of the cluster's connections where
/// `http.idleTimeout` sets none; `http.idleTimeout` wins.
#[test]
fn tcp_idle_timeout_falls_back_for_http_connections() {
    let svc = ports(&[(80, Protocol::Http)]);
    let idle = |pool: ConnectionPool| {
        let (_, options) = protocol_options(&svc, pool).remove(0);
        let options = options.expect("options");
        assert!(options.upstream_protocol_options.is_some());
        options
            .common_http_protocol_options
            .and_then(|c| c.idle_timeout)
            .map(|d| d.seconds)
    };
    let tcp_only = ConnectionPool {
        tcp_idle_timeout_ms: Some(30_000),
        ..Default::default()
    };
    assert_eq!(idle(tcp_only.clone()), Some(30));
    let both = ConnectionPool {
        idle_timeout_ms: Some(5_000),
        ..tcp_only
    };
    assert_eq!(idle(both), Some(5));
}

/// `http.maxRequestsPerConnection: 0` is unset, as Istio reads it: no
/// `max_requests_per_connection` (and, alone, no common HTTP options at all); a
/// positive count is sent.
#[test]
fn zero_max_requests_per_connection_is_left_out() {
    let svc = ports(&[(80, Protocol::Http)]);
    let common = |n: u32| {
        let pool = ConnectionPool {
            max_requests_per_connection: Some(n),
            ..Default::default()
        };
        protocol_options(&svc, pool)
            .remove(0)
            .1
            .and_then(|o| o.common_http_protocol_options)
    };
    assert_eq!(common(0), None);
    let zero_with_idle = ConnectionPool {
        max_requests_per_connection: Some(0),
        idle_timeout_ms: Some(5_000),
        ..Default::default()
    };
    let options = protocol_options(&svc, zero_with_idle)
        .remove(0)
        .1
        .and_then(|o| o.common_http_protocol_options)
        .expect("idle timeout");
    assert_eq!(options.max_requests_per_connection, None);
    assert_eq!(options.idle_timeout.map(|d| d.seconds), Some(5));
    let one = common(1).expect("a positive count is sent");
    assert_eq!(one.max_requests_per_connection.map(|v| v.value), Some(1));
}
