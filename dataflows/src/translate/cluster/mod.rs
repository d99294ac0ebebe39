//! CDS: outbound clusters per service port and DestinationRule subset, inbound clusters
//! for a proxy's own ports, and the Passthrough/BlackHole clusters.
//!
//! This file builds an outbound cluster; the rest is split by concern, as Istio splits
//! its `cluster_builder.go`, `cluster_tls.go` and `cluster_traffic_policy.go`: `tls.rs`
//! (upstream TLS, failing closed), `traffic_policy.rs` (load balancing, limits, protocol
//! options), `dns.rs` (the hosts of DNS clusters), `credential.rs` (the Secrets of a
//! `credentialName`) and `fixed.rs` (inbound, Passthrough and BlackHole clusters).

mod credential;
mod dns;
mod fixed;
mod tls;
mod traffic_policy;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tls_tests;

pub use crate::translate::endpoint::{TLS_MODE_ISTIO, TRANSPORT_SOCKET_MATCH};
pub use credential::ClientSecrets;
pub use dns::localized_dns;
pub use fixed::{blackhole, inbound, passthrough};
pub use tls::{istio_sni, proxyless_tls_reason};

use crate::model::{
    ClusterDefaults, DestinationRule, EdsSel, LoadBalancer, LocalityMode, Resolution, Resource,
    ResourceType, Service, ServicePort, TrafficPolicy,
};
use crate::translate::{ads, duration_ms, outbound_cluster_name};
use dns::{dns_hosts, dns_members};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CommonLbConfig, DiscoveryType, DnsLookupFamily, EdsClusterConfig,
    LbPolicy,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    explicit_http_config::ProtocolConfig, ExplicitHttpConfig, UpstreamProtocolOptions,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::util::pack_any;
use prost::Message;
use tls::{
    auto_mtls_matches, auto_sni, credential_tls, fail_closed, fail_closed_metadata, istio_mutual,
    origination_sans, upstream_tls,
};
use traffic_policy::{
    circuit_breakers, http_protocol_options, keepalive, lb_config, lb_policy, outlier_detection,
    weigh_localities, Side,
};

/// The policy of the cluster of `subset` on `port` (`None`: a port no `portLevelSettings`
/// entry names): Istio's merge of the rule's policy and the subset's, see
/// [`TrafficPolicy::merged`].
fn effective_policy(
    dr: Option<&DestinationRule>,
    subset: Option<&str>,
    port: Option<u16>,
) -> TrafficPolicy {
    let rule = dr.and_then(|d| d.traffic_policy.as_ref());
    let sub = dr
        .and_then(|d| d.subsets.iter().find(|s| Some(s.name.as_str()) == subset))
        .and_then(|s| s.traffic_policy.as_ref());
    TrafficPolicy::merged(rule, sub, port)
}

/// The consistent-hash keys of `dr`'s clusters, per subset (`None`: the host's own) and
/// port, where its effective policy hashes: what the routes to those clusters hash
/// requests by. Each port a `portLevelSettings` entry names (of the rule or the subset)
/// has its own row; empty when no cluster of the rule hashes.
pub fn hashing(dr: &DestinationRule) -> crate::model::HostHashing {
    let hash = |p: TrafficPolicy| match p.load_balancer {
        Some(LoadBalancer::ConsistentHash(ch)) => Some(ch.key),
        _ => None,
    };
    let rule = dr.traffic_policy.as_ref();
    let mut out = crate::model::HostHashing::new();
    let subsets = std::iter::once(None).chain(dr.subsets.iter().map(Some));
    for subset in subsets {
        let name = subset.map(|s| s.name.clone());
        let sub = subset.and_then(|s| s.traffic_policy.as_ref());
        if let Some(key) = hash(TrafficPolicy::merged(rule, sub, None)) {
            out.insert((name.clone(), None), Some(key));
        }
        let ports: std::collections::BTreeSet<u16> = rule
            .into_iter()
            .chain(sub)
            .flat_map(|p| p.port_level.iter().map(|(n, _)| *n))
            .collect();
        for port in ports {
            out.insert(
                (name.clone(), Some(port)),
                hash(TrafficPolicy::merged(rule, sub, Some(port))),
            );
        }
    }
    if out.values().all(Option::is_none) {
        out.clear();
    }
    out
}

/// One outbound cluster for `service` on `port`, optionally for one subset of `dr`.
/// `grpc`: for proxyless gRPC clients, whose xDS client implements only ROUND_ROBIN and
/// RING_HASH of the `lb_policy` enum and rejects the cluster otherwise; LEAST_REQUEST and
/// RANDOM become ROUND_ROBIN there.
fn outbound(
    service: &Service,
    port: &ServicePort,
    dr: Option<&DestinationRule>,
    subset: Option<&str>,
    grpc: bool,
    defaults: &ClusterDefaults,
    secrets: ClientSecrets,
) -> Resource {
    let name = outbound_cluster_name(port.port, subset, &service.hostname);
    let policy = effective_policy(dr, subset, Some(port.port));
    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(duration_ms(
            policy
                .connect_timeout_ms
                .unwrap_or(defaults.connect_timeout_ms),
        )),
        lb_policy: lb_policy(&policy, grpc),
        lb_config: lb_config(&policy, grpc),
        circuit_breakers: Some(circuit_breakers(policy.connection_pool.as_deref())),
        outlier_detection: policy.outlier_detection.as_deref().map(outlier_detection),
        common_lb_config: policy.outlier_detection.as_ref().map(|o| CommonLbConfig {
            // Istio's minHealthPercent: below it, Envoy ignores ejections (panic mode).
            healthy_panic_threshold: Some(Percent {
                value: f64::from(o.min_health_percent.unwrap_or(0)),
            }),
            ..Default::default()
        }),
        upstream_connection_options: keepalive(policy.connection_pool.as_deref()),
        ..Default::default()
    };
    let fail_closed = fail_closed(&policy, grpc, secrets);
    let target = Target {
        service,
        port,
        dr,
        subset,
        grpc,
        defaults,
    };
    discovery(&mut cluster, &target, &policy, fail_closed.as_deref());
    let side = Side::Outbound {
        gateway: defaults.gateway,
    };
    let mut options = http_protocol_options(port.protocol, policy.connection_pool.as_deref(), side);
    // A cluster that fails closed has no hosts to speak TLS to.
    if fail_closed.is_none() {
        transport(&mut cluster, &mut options, &target, &policy);
    }
    if let Some(options) = options {
        // A single entry, so the map's iteration order cannot change the encoding.
        cluster.typed_extension_protocol_options.insert(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".into(),
            pack_any(options),
        );
    }
    Resource::new(ResourceType::Cluster, name, cluster.encode_to_vec())
}

/// What an outbound cluster is built for: the service's port, the rule and subset, and
/// the clients (proxyless gRPC or Envoy, and their defaults).
struct Target<'a> {
    service: &'a Service,
    port: &'a ServicePort,
    dr: Option<&'a DestinationRule>,
    subset: Option<&'a str>,
    grpc: bool,
    defaults: &'a ClusterDefaults,
}

/// Where an outbound cluster's hosts come from: none where it fails closed (`fail_closed`
/// says why), the original destination, EDS, or DNS, by the rule and the service's
/// resolution.
fn discovery(
    cluster: &mut Cluster,
    target: &Target,
    policy: &TrafficPolicy,
    fail_closed: Option<&str>,
) {
    let Target {
        service,
        port,
        dr,
        subset,
        grpc,
        defaults,
    } = *target;
    let name = cluster.name.clone();
    match service.resolution {
        // Fail closed: a cluster of no hosts answers 503 where the rule asked for TLS that
        // is not generated, instead of sending the request in plaintext. Its metadata says
        // why, for whoever reads the config dump.
        _ if fail_closed.is_some() => {
            cluster.cluster_discovery_type =
                Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
            cluster.load_assignment = Some(ClusterLoadAssignment {
                cluster_name: name.clone(),
                ..Default::default()
            });
            cluster.metadata = Some(fail_closed_metadata(&format!(
                "{}: this cluster has no endpoints, so no request is sent unencrypted",
                fail_closed.unwrap_or_default()
            )));
        }
        // `PASSTHROUGH`: the connection's original destination, as Istio does.
        _ if passthrough_lb(policy, grpc) => {
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(
                DiscoveryType::OriginalDst as i32,
            ));
        }
        // A headless Service from a sidecar: the pod the client dialled (Istio's
        // `Passthrough` resolution); gateways and gRPC clients balance over its pods (EDS).
        Resolution::Static if original_destination(service, grpc, defaults) => {
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(
                DiscoveryType::OriginalDst as i32,
            ));
            cluster.lb_policy = LbPolicy::ClusterProvided as i32;
            cluster.lb_config = None;
        }
        // A `resolution: NONE` ServiceEntry from a sidecar: the connection's original
        // destination, which is all such an entry asks for.
        Resolution::None if original_destination(service, grpc, defaults) => {
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(
                DiscoveryType::OriginalDst as i32,
            ));
            cluster.lb_policy = LbPolicy::ClusterProvided as i32;
        }
        // EDS; for a `Passthrough` service (headless, `resolution: NONE`) this is a gateway's
        // or a gRPC client's cluster, which has no original destination to keep: Istio's
        // `convertResolution` gives routers EDS over the service's endpoints.
        Resolution::Static | Resolution::None => {
            // Locality weights and failover entries: Envoy weighs localities only when told
            // to, as Istio tells it (priorities alone need no switch).
            let weighted = LocalityMode::of(policy, defaults.locality_lb.as_ref(), service)
                .is_some_and(|m| m.weighted());
            if weighted {
                weigh_localities(cluster);
            }
            cluster.cluster_discovery_type =
                Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32));
            cluster.eds_cluster_config = Some(EdsClusterConfig {
                // Never give up waiting for the assignment: it is always sent (possibly empty).
                eds_config: Some(envoy_types::pb::envoy::config::core::v3::ConfigSource {
                    initial_fetch_timeout: Some(duration_ms(0)),
                    ..ads()
                }),
                service_name: name.clone(),
            });
        }
        Resolution::Dns | Resolution::DnsRoundRobin => {
            let weighted = service.resolution == Resolution::Dns
                && !service.dns_endpoints.is_empty()
                && LocalityMode::of(policy, defaults.locality_lb.as_ref(), service)
                    .is_some_and(|m| m.weighted());
            if weighted {
                weigh_localities(cluster);
            }
            let hosts = dns_hosts(service, port, dr, subset, &name);
            let logical = service.resolution == Resolution::DnsRoundRobin;
            let kind = match hosts.endpoints.iter().map(|g| g.lb_endpoints.len()).sum() {
                // Envoy resolves a LOGICAL_DNS cluster's one host only; with none left (a
                // subset its endpoint is not in) the cluster has nothing to resolve.
                0 if logical => DiscoveryType::Static,
                _ if logical => DiscoveryType::LogicalDns,
                _ => DiscoveryType::StrictDns,
            };
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(kind as i32));
            cluster.load_assignment = Some(hosts);
            // IPv4 answers only, as Istio resolves for proxies with IPv4 addresses (the
            // clusters are shared by a scope, so per-proxy families are not chosen here).
            cluster.dns_lookup_family = DnsLookupFamily::V4Only as i32;
        }
    }
}

/// The transport socket of an outbound cluster that does not fail closed: the rule's TLS
/// (`ISTIO_MUTUAL`, or `SIMPLE`/`MUTUAL` with the upstream HTTP options of auto SNI), else
/// Istio's auto mTLS where it applies.
fn transport(
    cluster: &mut Cluster,
    options: &mut Option<HttpProtocolOptions>,
    target: &Target,
    policy: &TrafficPolicy,
) {
    let Target {
        service,
        port,
        subset,
        grpc,
        defaults,
        ..
    } = *target;
    match &policy.tls {
        Some(tls) if tls.istio_mutual => {
            cluster.transport_socket = Some(istio_mutual(
                tls,
                port.port,
                subset,
                service,
                &defaults.trust_domain,
            ))
        }
        Some(tls) => {
            // Istio offers ALPN `h2` where the cluster speaks HTTP/2 by its explicit
            // options (not where it speaks the request's protocol).
            let h2 = options.as_ref().is_some_and(|o| {
                matches!(
                    &o.upstream_protocol_options,
                    Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                        ExplicitHttpConfig {
                            protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(_)),
                        }
                    ))
                )
            });
            let sans = origination_sans(tls, service, &defaults.trust_domain);
            cluster.transport_socket = Some(if tls.credential.is_some() {
                credential_tls(tls, &sans, h2)
            } else {
                upstream_tls(tls, &sans, h2, &defaults.system_ca_bundle)
            });
            if let Some(auto) = auto_sni(tls) {
                let o = options.get_or_insert_with(|| HttpProtocolOptions {
                    // Envoy requires the protocol: HTTP/1.1, as Istio completes it.
                    upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                        ExplicitHttpConfig {
                            protocol_config: Some(ProtocolConfig::HttpProtocolOptions(
                                Default::default(),
                            )),
                        },
                    )),
                    ..Default::default()
                });
                o.upstream_http_protocol_options = Some(auto);
            }
        }
        // Istio's auto mTLS: no `tls` of the rule (`DISABLE` is one: plaintext), a service
        // inside the mesh, a client that takes SDS certificates (not a proxyless one),
        // endpoints Envoy knows (not original destinations, which carry no metadata to
        // match: Envoy 1.40 `--mode validate` crashes on socket matches of an ORIGINAL_DST
        // cluster).
        None if defaults.auto_mtls
            && !policy.tls_disabled
            && !grpc
            && !original_destination(service, grpc, defaults)
            && !service.mesh_external
            && !passthrough_lb(policy, grpc) =>
        {
            cluster.transport_socket_matches =
                auto_mtls_matches(port.port, subset, service, &defaults.trust_domain);
        }
        None => {}
    }
}

/// Whether a rule's `simple: PASSTHROUGH` makes the cluster an original-destination one:
/// not for proxyless gRPC clients, whose xDS client has no such cluster — Istio's gRPC
/// generator keeps their clusters EDS, balanced round robin, whatever the rule says.
fn passthrough_lb(policy: &TrafficPolicy, grpc: bool) -> bool {
    policy.load_balancer == Some(LoadBalancer::Passthrough) && !grpc
}

/// Whether a client's cluster of `service` goes to the connection's original destination:
/// Istio's `Passthrough` resolution (a headless Service, a `resolution: NONE` ServiceEntry),
/// from a sidecar (`convertResolution`; gateways and proxyless clients take EDS).
fn original_destination(service: &Service, grpc: bool, defaults: &ClusterDefaults) -> bool {
    service.passes_through() && !grpc && !defaults.gateway
}

/// Every outbound cluster of one service under the DestinationRule in effect: the default
/// cluster per port plus one per subset per port. Returns `(resource, port, selection)`;
/// the selection (subset labels, locality load balancing) is `Some` for EDS clusters.
pub fn outbound_all(
    service: &Service,
    dr: Option<&DestinationRule>,
) -> Vec<(Resource, u16, Option<EdsSel>)> {
    outbound_all_for(service, dr, false, &ClusterDefaults::default())
}

/// As [`outbound_all`], for Envoy (`grpc: false`) or proxyless gRPC clients (`grpc: true`).
/// A `credentialName` cluster fails closed here: see [`outbound_all_with`].
pub fn outbound_all_for(
    service: &Service,
    dr: Option<&DestinationRule>,
    grpc: bool,
    defaults: &ClusterDefaults,
) -> Vec<(Resource, u16, Option<EdsSel>)> {
    outbound_all_with(service, dr, grpc, defaults, ClientSecrets::default())
}

/// As [`outbound_all_for`], for a client proxy that may take the certificates of a
/// `credentialName` from `secrets` (its namespace's).
pub fn outbound_all_with(
    service: &Service,
    dr: Option<&DestinationRule>,
    grpc: bool,
    defaults: &ClusterDefaults,
    secrets: ClientSecrets,
) -> Vec<(Resource, u16, Option<EdsSel>)> {
    let mut out = Vec::new();
    // A `PASSTHROUGH` cluster goes to original destinations, and one that fails closed
    // has no hosts: neither has an assignment.
    // What the assignment of an EDS cluster is built from: the subset's labels and the
    // locality load balancing of its policy.
    // A STRICT_DNS cluster of a ServiceEntry's endpoints carries them inline: under
    // locality load balancing the cluster itself differs per client class.
    let eds = |subset: Option<&str>, port: &ServicePort, labels: &crate::model::Labels| {
        let policy = effective_policy(dr, subset, Some(port.port));
        if passthrough_lb(&policy, grpc)
            || original_destination(service, grpc, defaults)
            || fail_closed(&policy, grpc, secrets).is_some()
        {
            return None;
        }
        let locality =
            LocalityMode::of(&policy, defaults.locality_lb.as_ref(), service).map(Box::new);
        match service.resolution {
            Resolution::Static | Resolution::None => Some(EdsSel {
                labels: labels.clone(),
                locality,
                inline_hosts: None,
                service_namespace: service.namespace().to_string(),
            }),
            Resolution::Dns if !service.dns_endpoints.is_empty() => locality.map(|mode| EdsSel {
                labels: crate::model::Labels::new(),
                locality: Some(mode),
                inline_hosts: Some(dns_members(service, port, labels)),
                service_namespace: service.namespace().to_string(),
            }),
            _ => None,
        }
    };
    let outbound = |port, subset| outbound(service, port, dr, subset, grpc, defaults, secrets);
    for port in &service.ports {
        let sel = eds(None, port, &crate::model::Labels::new());
        out.push((outbound(port, None), port.port, sel));
        for subset in dr.map(|d| d.subsets.as_slice()).unwrap_or(&[]) {
            let sel = eds(Some(&subset.name), port, &subset.labels);
            out.push((outbound(port, Some(&subset.name)), port.port, sel));
        }
    }
    out
}
