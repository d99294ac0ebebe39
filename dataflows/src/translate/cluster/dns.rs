//! The hosts of DNS clusters (`STRICT_DNS`, `LOGICAL_DNS`): a ServiceEntry's endpoints or
//! its host itself, and their locality load balancing per client class.

use crate::model::{
    ClientClass, DestinationRule, EdsSel, InlineHost, Resource, Service, ServicePort,
};
use crate::translate::socket_address;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use prost::Message;

/// The hosts a DNS cluster resolves: the entry's endpoints (of the subset's labels, each at
/// its port for `port`, weighted and grouped by locality) or, without endpoints, the host
/// itself at the port's `targetPort`, as Istio generates them.
pub(super) fn dns_hosts(
    service: &Service,
    port: &ServicePort,
    dr: Option<&DestinationRule>,
    subset: Option<&str>,
    cluster: &str,
) -> ClusterLoadAssignment {
    if service.dns_endpoints.is_empty() {
        let at = service.host_target_ports.get(&port.name).copied();
        return single_host(cluster, &service.hostname, at.unwrap_or(port.port));
    }
    let no_labels = crate::model::Labels::new();
    let selector = dr
        .and_then(|d| d.subsets.iter().find(|s| Some(s.name.as_str()) == subset))
        .map_or(&no_labels, |s| &s.labels);
    let members = dns_members(service, port, selector);
    let addrs = members
        .iter()
        .map(|h| {
            (
                h.locality.as_str(),
                h.address.as_str(),
                h.port,
                h.weight,
                crate::translate::endpoint::runs_sidecar(&h.labels),
            )
        })
        .collect();
    crate::translate::endpoint::assignment(cluster, addrs)
}

/// A DNS entry's endpoints a subset's `selector` selects (all for none), each at its port
/// for `port`, with its locality, labels and weight.
pub(super) fn dns_members(
    service: &Service,
    port: &ServicePort,
    selector: &crate::model::Labels,
) -> Vec<InlineHost> {
    service
        .dns_endpoints
        .iter()
        .filter(|e| selector.iter().all(|(k, v)| e.labels.get(k) == Some(v)))
        .map(|e| InlineHost {
            locality: e.placement.locality.clone(),
            labels: e.labels.clone(),
            address: e.address.clone(),
            port: e.ports.get(&port.name).copied().unwrap_or(port.port),
            weight: e.placement.weight.unwrap_or(1).max(1),
        })
        .collect()
}

/// A DNS cluster whose hosts are balanced by locality (its selection carries them), for
/// clients of `class`: its inline assignment ranked and weighed as an EDS cluster's would
/// be for them (Istio applies locality load balancing to a DNS cluster's load assignment
/// as to EDS). Anything else is returned as it is.
pub fn localized_dns(res: &Resource, sel: &EdsSel, class: &ClientClass) -> Resource {
    let (Some(hosts), Some(mode)) = (&sel.inline_hosts, sel.locality.as_deref()) else {
        return res.clone();
    };
    let Ok(mut cluster) = Cluster::decode(&res.body.0[..]) else {
        return res.clone();
    };
    cluster.load_assignment = Some(crate::translate::endpoint::localized_assignment(
        &cluster.name,
        hosts,
        mode,
        class,
    ));
    Resource::new(res.rtype, res.name.clone(), cluster.encode_to_vec())
}

pub(super) fn single_host(cluster: &str, ip_or_host: &str, port: u16) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: vec![LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                    address: Some(socket_address(ip_or_host, port)),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}
