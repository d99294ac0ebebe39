//! Step 7: a cluster and its endpoints (EDS, static, DNS, original destination), with the
//! transport each endpoint is reached by.

use super::listener::socket;
use super::transport::{auto_sni, socket_criteria_hold, transport, value_text, Side};
use super::{Call, Discovery, ProxyConfig, SocketMatch, Transport, Upstream, UpstreamEndpoint};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{address, HealthStatus, TransportSocket};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};

impl ProxyConfig {
    /// Step 7: a cluster and its endpoints.
    pub(super) fn upstream(&self, cluster: &str, weight: Option<u32>, call: &Call) -> Upstream {
        let mut up = Upstream {
            cluster: cluster.to_string(),
            weight,
            discovery: Discovery::NotFound,
            endpoints: Vec::new(),
            transport: Transport::Plaintext,
            socket_matches: Vec::new(),
            request_headers: Vec::new(),
            response_headers: Vec::new(),
        };
        let Some(c) = self.clusters.get(cluster) else {
            return up;
        };
        let (auto_sni, auto_san_validation) = auto_sni(c);
        let upstream_transport = |t: Option<&TransportSocket>| {
            let mut t = t.map_or(Transport::Plaintext, |t| transport(t, Side::Upstream));
            if let Transport::Tls(tls) = &mut t {
                tls.auto_sni = auto_sni;
                tls.auto_san_validation = auto_san_validation;
            }
            t
        };
        up.transport = upstream_transport(c.transport_socket.as_ref());
        up.socket_matches = c
            .transport_socket_matches
            .iter()
            .map(|m| SocketMatch {
                name: m.name.clone(),
                criteria: m
                    .r#match
                    .iter()
                    .flat_map(|s| s.fields.iter())
                    .map(|(k, v)| format!("{k}={}", value_text(v)))
                    .collect(),
                transport: upstream_transport(m.transport_socket.as_ref()),
            })
            .collect();
        if c.transport_socket_matcher.is_some() {
            up.socket_matches.push(SocketMatch {
                name: "transport_socket_matcher".into(),
                criteria: Vec::new(),
                transport: Transport::Unsupported {
                    name: "transport_socket_matcher".into(),
                    type_url: String::new(),
                    why: "the cluster's xDS matcher of transport sockets is not modelled: \
                          endpoints are given the legacy metadata matches"
                        .into(),
                },
            });
        }
        let matches = &c.transport_socket_matches;
        let endpoints_of = |cla: &ClusterLoadAssignment| endpoints_of(cla, matches);
        let kind = match &c.cluster_discovery_type {
            None => Ok(DiscoveryType::Static),
            Some(ClusterDiscoveryType::Type(t)) => {
                DiscoveryType::try_from(*t).map_err(|_| format!("discovery type {t}"))
            }
            Some(ClusterDiscoveryType::ClusterType(t)) => Err(t.name.clone()),
        };
        let inline = || {
            c.load_assignment
                .as_ref()
                .map(endpoints_of)
                .unwrap_or_default()
        };
        (up.discovery, up.endpoints) = match kind {
            Ok(DiscoveryType::Eds) => {
                let service_name = c
                    .eds_cluster_config
                    .as_ref()
                    .map(|e| e.service_name.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| cluster.to_string());
                let cla = self.endpoints.get(&service_name);
                (
                    Discovery::Eds {
                        service_name,
                        assignment_found: cla.is_some(),
                    },
                    cla.map(endpoints_of).unwrap_or_default(),
                )
            }
            Ok(DiscoveryType::Static) => (Discovery::Static, inline()),
            Ok(DiscoveryType::StrictDns) => (Discovery::StrictDns, inline()),
            Ok(DiscoveryType::LogicalDns) => (Discovery::LogicalDns, inline()),
            Ok(DiscoveryType::OriginalDst) => {
                let dst = call.address.as_ref().map(|a| UpstreamEndpoint {
                    address: format!("{a}:{}", call.port),
                    locality: None,
                    locality_weight: None,
                    weight: None,
                    priority: 0,
                    healthy: true,
                    socket: None,
                });
                (Discovery::OriginalDst, dst.into_iter().collect())
            }
            Err(other) => (Discovery::Other(other), Vec::new()),
        };
        up
    }
}

/// The endpoints of an assignment, each with the first of `matches` its metadata (else its
/// locality's) selects.
fn endpoints_of(
    cla: &ClusterLoadAssignment,
    matches: &[envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch],
) -> Vec<UpstreamEndpoint> {
    let mut out = Vec::new();
    for group in &cla.endpoints {
        let locality = group.locality.as_ref().and_then(|l| {
            let parts = [&l.region, &l.zone, &l.sub_zone];
            parts
                .iter()
                .any(|p| !p.is_empty())
                .then(|| format!("{}/{}/{}", l.region, l.zone, l.sub_zone))
        });
        for lb in &group.lb_endpoints {
            let Some(lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
                continue;
            };
            let address = match e.address.as_ref().and_then(|a| a.address.as_ref()) {
                Some(address::Address::Pipe(p)) => format!("unix://{}", p.path),
                _ => match socket(e.address.as_ref()) {
                    Some((ip, port)) => format!("{ip}:{port}"),
                    None => continue,
                },
            };
            let healthy = matches!(
                HealthStatus::try_from(lb.health_status),
                Ok(HealthStatus::Unknown | HealthStatus::Healthy | HealthStatus::Degraded)
            );
            let by = |metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>| {
                matches
                    .iter()
                    .find(|m| socket_criteria_hold(m.r#match.as_ref(), metadata))
            };
            let socket = by(lb.metadata.as_ref())
                .or_else(|| by(group.metadata.as_ref()))
                .map(|m| m.name.clone());
            out.push(UpstreamEndpoint {
                address,
                locality: locality.clone(),
                locality_weight: group.load_balancing_weight.map(|w| w.value),
                weight: lb.load_balancing_weight.map(|w| w.value),
                priority: group.priority,
                healthy,
                socket,
            });
        }
    }
    out
}
