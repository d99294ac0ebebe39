//! EDS: one ClusterLoadAssignment per EDS cluster, shared by every proxy holding it.

use super::socket_address;
use crate::model::{Endpoint, Resource, ResourceType};
use envoy_types::pb::envoy::config::core::v3::{HealthStatus, Locality};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint,
    LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use prost::Message;

/// The assignment for `cluster` from its endpoints, in a canonical order (sorted, deduplicated)
/// so equal sets encode to equal bytes. Endpoints that are not ready are left out, as Istio does.
pub fn load_assignment<'a>(
    cluster: &str,
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
) -> Resource {
    let mut addrs: Vec<(&str, u16)> = endpoints
        .into_iter()
        .filter(|e| e.ready)
        .map(|e| (e.ip.as_str(), e.port))
        .collect();
    addrs.sort();
    addrs.dedup();
    let lb_endpoints: Vec<LbEndpoint> = addrs
        .into_iter()
        .map(|(ip, port)| LbEndpoint {
            host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                address: Some(socket_address(ip, port)),
                ..Default::default()
            })),
            health_status: HealthStatus::Healthy as i32,
            load_balancing_weight: Some(UInt32Value { value: 1 }),
            ..Default::default()
        })
        .collect();
    let cla = ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: if lb_endpoints.is_empty() {
            Vec::new()
        } else {
            // The locality's weight is the sum of its endpoints' weights, as Istio sends it.
            let weight = lb_endpoints.len() as u32;
            vec![LocalityLbEndpoints {
                // Always present, if empty: gRPC's xDS client rejects a group without one.
                locality: Some(Locality::default()),
                lb_endpoints,
                load_balancing_weight: Some(UInt32Value { value: weight }),
                ..Default::default()
            }]
        },
        ..Default::default()
    };
    Resource::new(
        ResourceType::Endpoint,
        cluster.to_string(),
        cla.encode_to_vec(),
    )
}
