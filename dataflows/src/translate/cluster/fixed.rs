//! Clusters not built from a service's ports: a proxy's inbound clusters (`inbound|PORT||`)
//! and the fixed `PassthroughCluster` and `BlackHoleCluster`.

use super::dns::single_host;
use super::tls::fail_closed_metadata;
use super::traffic_policy::{circuit_breakers, http_protocol_options, keepalive, Side};
use crate::model::{InboundClusterSpec, Resource, ResourceType, DEFAULT_CONNECT_TIMEOUT_MS};
use crate::translate::{duration_ms, inbound_cluster_name};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, LbPolicy,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::util::pack_any;
use prost::Message;

/// `inbound|PORT||` as `spec` describes it: traffic arriving for the proxy's own workload,
/// sent to the application at `spec.endpoint`. As Istio builds inbound clusters: only the
/// connection pool applies (the Sidecar's or the DestinationRule's: connect timeout,
/// circuit-breaker limits — Istio's defaults, no limit, where it sets none —, connection
/// lifetimes, keepalive, `useClientProtocol`), never a load balancer, outlier detection,
/// TLS or an `h2UpgradePolicy`; an HTTP2 or gRPC port speaks HTTP/2 to the application, a
/// port whose protocol is told per connection the protocol of each request.
pub fn inbound(spec: &InboundClusterSpec, connect_timeout_ms: u64) -> Resource {
    let name = inbound_cluster_name(spec.port);
    let pool = spec.pool.as_ref();
    let connection_pool = pool.and_then(|p| p.pool.as_ref());
    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(duration_ms(
            pool.and_then(|p| p.connect_timeout_ms)
                .unwrap_or(connect_timeout_ms),
        )),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        load_assignment: Some(single_host(&name, &spec.endpoint.0, spec.endpoint.1)),
        circuit_breakers: Some(circuit_breakers(connection_pool)),
        upstream_connection_options: keepalive(connection_pool),
        ..Default::default()
    };
    if let Some(why) = &spec.fail_closed {
        cluster.load_assignment = Some(ClusterLoadAssignment {
            cluster_name: name.clone(),
            ..Default::default()
        });
        cluster.metadata = Some(fail_closed_metadata(&format!(
            "{why}: this cluster has no endpoints, so no connection reaches the application \
             without it"
        )));
    }
    if let Some(options) = http_protocol_options(spec.protocol, connection_pool, Side::Inbound) {
        cluster.typed_extension_protocol_options.insert(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".into(),
            pack_any(options),
        );
    }
    Resource::new(ResourceType::Cluster, name, cluster.encode_to_vec())
}

/// `PassthroughCluster`: forwards to the original destination (ALLOW_ANY egress).
pub fn passthrough(connect_timeout_ms: u64) -> Resource {
    let cluster = Cluster {
        name: crate::translate::PASSTHROUGH_CLUSTER.into(),
        connect_timeout: Some(duration_ms(connect_timeout_ms)),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(
            DiscoveryType::OriginalDst as i32,
        )),
        lb_policy: LbPolicy::ClusterProvided as i32,
        ..Default::default()
    };
    Resource::new(
        ResourceType::Cluster,
        cluster.name.clone(),
        cluster.encode_to_vec(),
    )
}

/// `BlackHoleCluster`: a static cluster with no endpoints.
pub fn blackhole() -> Resource {
    let cluster = Cluster {
        name: crate::translate::BLACKHOLE_CLUSTER.into(),
        connect_timeout: Some(duration_ms(DEFAULT_CONNECT_TIMEOUT_MS)),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        ..Default::default()
    };
    Resource::new(
        ResourceType::Cluster,
        cluster.name.clone(),
        cluster.encode_to_vec(),
    )
}
