//! The traffic policy of a cluster, as Istio's `cluster_traffic_policy.go` applies it:
//! load balancing, connection pool limits and lifetimes, outlier detection, and the
//! upstream HTTP protocol options.

use crate::model::{
    ConnectionPool, H2Upgrade, HashTable, LoadBalancer, OutlierDetection, TrafficPolicy,
};
use crate::translate::duration_ms;
use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers::Thresholds;
use envoy_types::pb::envoy::config::cluster::v3::cluster::common_lb_config::LocalityConfigSpecifier;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    LbConfig, LbPolicy, LeastRequestLbConfig, MaglevLbConfig, RingHashLbConfig, RoundRobinLbConfig,
    SlowStartConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::UpstreamConnectionOptions;
use envoy_types::pb::envoy::config::cluster::v3::{CircuitBreakers, Cluster};
use envoy_types::pb::envoy::config::core::v3::Http2ProtocolOptions;
use envoy_types::pb::envoy::config::core::v3::RuntimeDouble;
use envoy_types::pb::envoy::config::core::v3::TcpKeepalive;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    explicit_http_config::ProtocolConfig, ExplicitHttpConfig, UpstreamProtocolOptions,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};

/// Envoy's load balancer for `policy` (Istio's default is LEAST_REQUEST). `grpc`: for
/// proxyless gRPC clients, whose xDS client implements only ROUND_ROBIN and RING_HASH.
pub(super) fn lb_policy(policy: &TrafficPolicy, grpc: bool) -> i32 {
    match &policy.load_balancer {
        Some(LoadBalancer::ConsistentHash(ch)) => match ch.table {
            // gRPC's xDS client implements RING_HASH, not MAGLEV.
            HashTable::Maglev { .. } if !grpc => LbPolicy::Maglev as i32,
            _ => LbPolicy::RingHash as i32,
        },
        _ if grpc => LbPolicy::RoundRobin as i32,
        Some(LoadBalancer::RoundRobin) => LbPolicy::RoundRobin as i32,
        Some(LoadBalancer::Random) => LbPolicy::Random as i32,
        Some(LoadBalancer::LeastRequest) | None => LbPolicy::LeastRequest as i32,
        Some(LoadBalancer::Passthrough) => LbPolicy::ClusterProvided as i32,
    }
}

/// The table of a consistent-hash cluster (Istio's minimum ring size defaults to 1024), or
/// the slow start of a warmed-up round robin or least request one.
pub(super) fn lb_config(policy: &TrafficPolicy, grpc: bool) -> Option<LbConfig> {
    if let Some(LoadBalancer::ConsistentHash(ch)) = &policy.load_balancer {
        return Some(match ch.table {
            HashTable::Maglev { table_size } if !grpc => LbConfig::MaglevLbConfig(MaglevLbConfig {
                table_size: table_size.map(|value| UInt64Value { value }),
            }),
            HashTable::Maglev { .. } => LbConfig::RingHashLbConfig(RingHashLbConfig::default()),
            HashTable::Ring { minimum_size } => LbConfig::RingHashLbConfig(RingHashLbConfig {
                minimum_ring_size: Some(UInt64Value {
                    value: minimum_size.unwrap_or(1024),
                }),
                ..Default::default()
            }),
        });
    }
    let w = policy.warmup.as_ref().filter(|_| !grpc)?;
    let slow_start = SlowStartConfig {
        slow_start_window: Some(duration_ms(w.duration_ms)),
        aggression: Some(RuntimeDouble {
            default_value: w.aggression_micros as f64 / 1e6,
            runtime_key: "meshflow.lb.slow_start_aggression".into(),
        }),
        min_weight_percent: Some(Percent {
            value: w.minimum_percent_micros as f64 / 1e6,
        }),
    };
    match policy.load_balancer {
        Some(LoadBalancer::RoundRobin) => Some(LbConfig::RoundRobinLbConfig(RoundRobinLbConfig {
            slow_start_config: Some(slow_start),
        })),
        Some(LoadBalancer::LeastRequest) | None => {
            Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
                slow_start_config: Some(slow_start),
                ..Default::default()
            }))
        }
        _ => None,
    }
}

/// The TCP keepalive of `tcp.tcpKeepalive`, if set.
pub(super) fn keepalive(pool: Option<&ConnectionPool>) -> Option<UpstreamConnectionOptions> {
    pool.and_then(|p| p.tcp_keepalive)
        .map(|(probes, time, interval)| UpstreamConnectionOptions {
            tcp_keepalive: Some(TcpKeepalive {
                keepalive_probes: probes.map(|value| UInt32Value { value }),
                keepalive_time: time.map(|s| UInt32Value { value: s as u32 }),
                keepalive_interval: interval.map(|s| UInt32Value { value: s as u32 }),
            }),
            ..Default::default()
        })
}

/// Istio sets Envoy's per-cluster limits to the maximum unless a DestinationRule says
/// otherwise; Envoy's own defaults (1024 requests, 3 concurrent retries) would cap traffic.
/// A limit of 0 is no limit too: Istio cannot tell it from unset (proto3 integers), so it
/// keeps the maximum rather than refuse every connection.
pub(super) fn circuit_breakers(pool: Option<&ConnectionPool>) -> CircuitBreakers {
    let limit = |v: Option<u32>| {
        Some(UInt32Value {
            value: v.filter(|n| *n > 0).unwrap_or(u32::MAX),
        })
    };
    let pool = pool.cloned().unwrap_or_default();
    CircuitBreakers {
        thresholds: vec![Thresholds {
            max_connections: limit(pool.max_connections),
            max_pending_requests: limit(pool.max_pending_requests),
            max_requests: limit(pool.max_requests),
            max_retries: limit(pool.max_retries),
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Whether an outbound cluster is upgraded to HTTP/2, as Istio decides it: never with
/// `useClientProtocol`; `UPGRADE` upgrades whatever the port's protocol (the rule's author
/// says the port speaks HTTP; a TCP port's `tcp_proxy` does not use the options), and
/// `DO_NOT_UPGRADE` does not; `DEFAULT` follows the mesh's `h2UpgradePolicy`, which
/// meshflow leaves at Istio's default, `DO_NOT_UPGRADE`.
fn h2_upgrade(pool: Option<&ConnectionPool>) -> bool {
    pool.is_some_and(|p| !p.use_client_protocol && p.h2_upgrade == Some(H2Upgrade::Upgrade))
}

/// Which side of a proxy a cluster is on, and for outbound ones whether the proxy is a
/// gateway.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Outbound { gateway: bool },
    Inbound,
}

/// The cluster's `HttpProtocolOptions`, as Istio builds them: HTTP/2 for HTTP2 and gRPC
/// ports and for upgraded clusters (with `maxConcurrentStreams`), the protocol of the
/// request with `useClientProtocol`, the connection lifetimes of `connectionPool`
/// (`tcp.idleTimeout` where `http.idleTimeout` is unset); `None` where none of it applies.
/// `side`: outbound (where `h2UpgradePolicy` applies: Istio never upgrades an inbound
/// cluster) or inbound. A port whose protocol is told per connection speaks the protocol of
/// the request (HTTP/1.1, or HTTP/2 for an `h2c` client) on sidecars, inbound and outbound,
/// and HTTP/1.1 from gateways, whose clients negotiate HTTP/2 by ALPN whatever the
/// application speaks, as Istio builds them.
pub(super) fn http_protocol_options(
    protocol: crate::model::Protocol,
    pool: Option<&ConnectionPool>,
    side: Side,
) -> Option<HttpProtocolOptions> {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::UseDownstreamHttpConfig;
    let outbound = matches!(side, Side::Outbound { .. });
    let h2 = matches!(
        protocol,
        crate::model::Protocol::Http2 | crate::model::Protocol::Grpc
    ) || (outbound && h2_upgrade(pool));
    let downstream = pool.is_some_and(|p| p.use_client_protocol)
        || (protocol == crate::model::Protocol::Auto && side != Side::Outbound { gateway: true });
    let common = pool.and_then(common_http_options);
    if !h2 && !downstream && common.is_none() {
        return None;
    }
    let upstream = if downstream {
        // Istio replaces the explicit protocol whole: HTTP/1.1 or HTTP/2 as the request
        // came, Envoy's defaults for each.
        UpstreamProtocolOptions::UseDownstreamProtocolConfig(UseDownstreamHttpConfig {
            http_protocol_options: Some(Default::default()),
            http2_protocol_options: Some(Http2ProtocolOptions::default()),
            ..Default::default()
        })
    } else {
        let protocol = if h2 {
            ProtocolConfig::Http2ProtocolOptions(Http2ProtocolOptions {
                max_concurrent_streams: pool
                    .and_then(|p| p.max_concurrent_streams)
                    .map(|value| UInt32Value { value }),
                ..Default::default()
            })
        } else {
            ProtocolConfig::HttpProtocolOptions(Default::default())
        };
        UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(protocol),
        })
    };
    Some(HttpProtocolOptions {
        common_http_protocol_options: common,
        upstream_protocol_options: Some(upstream),
        ..Default::default()
    })
}

/// The connection lifetimes of `connectionPool`, if any is set.
fn common_http_options(
    pool: &ConnectionPool,
) -> Option<envoy_types::pb::envoy::config::core::v3::HttpProtocolOptions> {
    let idle = pool.idle_timeout_ms.or(pool.tcp_idle_timeout_ms);
    // `maxRequestsPerConnection: 0` means unset to Istio (its proto cannot tell the two
    // apart), so it is left out: Envoy's own default (no limit) applies either way, and
    // the config equals the one istiod sends.
    let per_connection = pool.max_requests_per_connection.filter(|n| *n > 0);
    if idle.is_none() && pool.max_connection_duration_ms.is_none() && per_connection.is_none() {
        return None;
    }
    Some(
        envoy_types::pb::envoy::config::core::v3::HttpProtocolOptions {
            idle_timeout: idle.map(duration_ms),
            max_connection_duration: pool.max_connection_duration_ms.map(duration_ms),
            max_requests_per_connection: per_connection.map(|value| UInt32Value { value }),
            ..Default::default()
        },
    )
}

/// Istio's translation: success-rate ejection off; each error count that is set ejects at
/// once (enforcing 100%).
pub(super) fn outlier_detection(
    o: &OutlierDetection,
) -> envoy_types::pb::envoy::config::cluster::v3::OutlierDetection {
    let n = |v: Option<u32>| v.map(|value| UInt32Value { value });
    let enforce = |v: Option<u32>| {
        v.map(|c| UInt32Value {
            value: if c > 0 { 100 } else { 0 },
        })
    };
    let local = o.split_external_local_origin_errors;
    envoy_types::pb::envoy::config::cluster::v3::OutlierDetection {
        enforcing_success_rate: Some(UInt32Value { value: 0 }),
        consecutive_5xx: n(o.consecutive_5xx),
        enforcing_consecutive_5xx: enforce(o.consecutive_5xx),
        consecutive_gateway_failure: n(o.consecutive_gateway_errors),
        enforcing_consecutive_gateway_failure: enforce(o.consecutive_gateway_errors),
        split_external_local_origin_errors: local,
        consecutive_local_origin_failure: if local {
            n(o.consecutive_local_origin_failures)
        } else {
            None
        },
        enforcing_consecutive_local_origin_failure: if local {
            enforce(o.consecutive_local_origin_failures)
        } else {
            None
        },
        enforcing_local_origin_success_rate: local.then_some(UInt32Value { value: 0 }),
        interval: o.interval_ms.map(duration_ms),
        base_ejection_time: o.base_ejection_time_ms.map(duration_ms),
        max_ejection_percent: n(o.max_ejection_percent),
        ..Default::default()
    }
}

/// Has Envoy weigh the cluster's locality groups (`locality_weighted_lb_config`), as Istio
/// has it for `distribute` and `failover` entries (priorities alone need no switch).
pub(super) fn weigh_localities(cluster: &mut Cluster) {
    cluster
        .common_lb_config
        .get_or_insert_with(Default::default)
        .locality_config_specifier = Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(
        Default::default(),
    ));
}
