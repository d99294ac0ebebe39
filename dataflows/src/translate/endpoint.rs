//! EDS: one ClusterLoadAssignment per EDS cluster, shared by every proxy holding it.

use super::socket_address;
use crate::model::{Endpoint, Resource, ResourceType};
use envoy_types::pb::envoy::config::core::v3::{address, Address, HealthStatus, Locality, Pipe};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint,
    LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use prost::Message;

/// The assignment for `cluster` from its endpoints, in a canonical order (sorted, deduplicated)
/// so equal sets encode to equal bytes. Endpoints that are not ready are left out, as Istio does.
/// Endpoints are grouped by locality (Istio's `region/zone/subzone`); each carries its
/// weight, and each group the sum of its endpoints' weights, as Istio sends them.
pub fn load_assignment<'a>(
    cluster: &str,
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
) -> Resource {
    let addrs = endpoints
        .into_iter()
        .filter(|e| e.ready)
        .map(|e| {
            (
                e.placement.locality.as_str(),
                e.ip.as_str(),
                e.port,
                e.placement.weight.unwrap_or(1).max(1),
            )
        })
        .collect();
    Resource::new(
        ResourceType::Endpoint,
        cluster.to_string(),
        assignment(cluster, addrs).encode_to_vec(),
    )
}

/// The assignment of `(locality, address, port, weight)` entries in a canonical order,
/// grouped by locality: the body of an EDS resource, and the inline hosts of a DNS cluster.
/// An address `unix://PATH` is a Unix domain socket (its port means nothing).
pub(crate) fn assignment(
    cluster: &str,
    mut addrs: Vec<(&str, &str, u16, u32)>,
) -> ClusterLoadAssignment {
    addrs.sort();
    // One entry per address in a locality (the least weight, by the order above).
    addrs.dedup_by(|b, a| (a.0, a.1, a.2) == (b.0, b.1, b.2));
    let mut groups: Vec<LocalityLbEndpoints> = Vec::new();
    let mut current: Option<&str> = None;
    for (locality, ip, port, weight) in addrs {
        if current != Some(locality) {
            current = Some(locality);
            groups.push(LocalityLbEndpoints {
                // Always present, if empty: gRPC's xDS client rejects a group without one.
                locality: Some(parse_locality(locality)),
                load_balancing_weight: Some(UInt32Value { value: 0 }),
                ..Default::default()
            });
        }
        let group = groups.last_mut().expect("pushed above");
        group.lb_endpoints.push(LbEndpoint {
            host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                address: Some(endpoint_address(ip, port)),
                ..Default::default()
            })),
            health_status: HealthStatus::Healthy as i32,
            load_balancing_weight: Some(UInt32Value { value: weight }),
            ..Default::default()
        });
        if let Some(w) = group.load_balancing_weight.as_mut() {
            w.value = w.value.saturating_add(weight);
        }
    }
    ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: groups,
        ..Default::default()
    }
}

/// An endpoint's address: a Unix domain socket for `unix://PATH` (a ServiceEntry endpoint
/// Istio allows with STATIC resolution), else an IP or host name and port.
fn endpoint_address(ip: &str, port: u16) -> Address {
    match ip.strip_prefix("unix://") {
        Some(path) => Address {
            address: Some(address::Address::Pipe(Pipe {
                path: path.to_string(),
                mode: 0,
            })),
        },
        None => socket_address(ip, port),
    }
}

/// Istio's `region/zone/subzone`, any part possibly missing.
pub fn parse_locality(s: &str) -> Locality {
    let mut parts = s.splitn(3, '/').map(str::to_string);
    Locality {
        region: parts.next().unwrap_or_default(),
        zone: parts.next().unwrap_or_default(),
        sub_zone: parts.next().unwrap_or_default(),
    }
}
