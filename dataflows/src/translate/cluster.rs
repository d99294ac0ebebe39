//! CDS: outbound clusters per service port and DestinationRule subset, inbound clusters
//! for a proxy's own ports, and the Passthrough/BlackHole clusters.

use super::{ads, duration_ms, inbound_cluster_name, outbound_cluster_name, socket_address};
use crate::client_tls::ClientSecrets;
use crate::model::{
    ClientClass, ClusterDefaults, ConnectionPool, DestinationRule, EdsSel, H2Upgrade, HashTable,
    InboundClusterSpec, InlineHost, LoadBalancer, LocalityMode, OutlierDetection, Resolution,
    Resource, ResourceType, Service, ServicePort, TrafficPolicy, DEFAULT_CONNECT_TIMEOUT_MS,
};
use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers::Thresholds;
use envoy_types::pb::envoy::config::cluster::v3::cluster::common_lb_config::LocalityConfigSpecifier;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, DnsLookupFamily, EdsClusterConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    CommonLbConfig, LbConfig, LeastRequestLbConfig, MaglevLbConfig, RingHashLbConfig,
    RoundRobinLbConfig, SlowStartConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::UpstreamConnectionOptions;
use envoy_types::pb::envoy::config::cluster::v3::{CircuitBreakers, Cluster};
use envoy_types::pb::envoy::config::core::v3::Http2ProtocolOptions;
use envoy_types::pb::envoy::config::core::v3::RuntimeDouble;
use envoy_types::pb::envoy::config::core::v3::TcpKeepalive;
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    explicit_http_config::ProtocolConfig, ExplicitHttpConfig, UpstreamProtocolOptions,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};
use envoy_types::util::pack_any;
use prost::Message;

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
        // Istio's default is LEAST_REQUEST.
        lb_policy: match &policy.load_balancer {
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
        },
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
                fail_closed.as_deref().unwrap_or_default()
            )));
        }
        // `PASSTHROUGH`: the connection's original destination, as Istio does.
        _ if passthrough_lb(&policy, grpc) => {
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
            let weighted = LocalityMode::of(&policy, defaults.locality_lb.as_ref(), service)
                .is_some_and(|m| m.weighted());
            if weighted {
                weigh_localities(&mut cluster);
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
                && LocalityMode::of(&policy, defaults.locality_lb.as_ref(), service)
                    .is_some_and(|m| m.weighted());
            if weighted {
                weigh_localities(&mut cluster);
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
    let side = Side::Outbound {
        gateway: defaults.gateway,
    };
    let mut options = http_protocol_options(port.protocol, policy.connection_pool.as_deref(), side);
    match &policy.tls {
        _ if fail_closed.is_some() => {}
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
            && !passthrough_lb(&policy, grpc) =>
        {
            cluster.transport_socket_matches =
                auto_mtls_matches(port.port, subset, service, &defaults.trust_domain);
        }
        None => {}
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

/// The table of a consistent-hash cluster (Istio's minimum ring size defaults to 1024), or
/// the slow start of a warmed-up round robin or least request one.
fn lb_config(policy: &TrafficPolicy, grpc: bool) -> Option<LbConfig> {
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

/// The names a `SIMPLE`/`MUTUAL` server's certificate must carry: the rule's
/// `subjectAltNames`, else, for a ServiceEntry's host, its identities (the entry's
/// `subjectAltNames` and its endpoints' service accounts), as Istio falls back to the
/// service accounts of a service of its external registry; none for a Kubernetes Service.
fn origination_sans(
    tls: &crate::model::UpstreamTls,
    service: &Service,
    trust_domain: &str,
) -> Vec<String> {
    if !tls.subject_alt_names.is_empty() {
        return tls.subject_alt_names.clone();
    }
    if service.origin.kind == crate::model::Kind::ServiceEntry {
        return service.identities(trust_domain);
    }
    Vec::new()
}

/// Istio's upstream HTTP options of `SIMPLE`/`MUTUAL`: without an `sni`, Envoy takes the
/// SNI from each request's host (`auto_sni`) and, unless the rule names
/// `subjectAltNames` or skips verification, checks the server's certificate for that host
/// (`auto_san_validation`). Decided on the rule's own names, before a ServiceEntry's are
/// taken, as Istio decides it. `None` with an `sni`: the one name is sent, and the
/// certificate is held to the CA and the names given. A TCP port's `tcp_proxy` does not
/// read these options (no host: no SNI, the CA alone).
fn auto_sni(
    tls: &crate::model::UpstreamTls,
) -> Option<envoy_types::pb::envoy::config::core::v3::UpstreamHttpProtocolOptions> {
    let sni = tls.sni.as_deref().is_none_or(str::is_empty);
    if !sni {
        return None;
    }
    Some(
        envoy_types::pb::envoy::config::core::v3::UpstreamHttpProtocolOptions {
            auto_sni: true,
            auto_san_validation: tls.subject_alt_names.is_empty() && !tls.insecure_skip_verify,
            ..Default::default()
        },
    )
}

/// The common context Istio starts `SIMPLE`/`MUTUAL` from: TLS 1.2 to 1.3, and ALPN `h2`
/// where the cluster speaks HTTP/2 (`h2`); no ALPN otherwise.
fn origination_context(
    h2: bool,
) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CommonTlsContext {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        tls_parameters::TlsProtocol, CommonTlsContext, TlsParameters,
    };
    CommonTlsContext {
        tls_params: Some(TlsParameters {
            tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
            ..Default::default()
        }),
        alpn_protocols: if h2 { vec!["h2".into()] } else { Vec::new() },
        ..Default::default()
    }
}

/// Envoy's TLS transport socket for a DestinationRule's `SIMPLE` or `MUTUAL` TLS from
/// files: the server verified (unless `insecureSkipVerify`) against `caCertificates`, else
/// the proxy's system bundle `system_ca` (Istio's proxies verify against their system's
/// bundle then), and `sans` (see [`origination_sans`]).
fn upstream_tls(
    tls: &crate::model::UpstreamTls,
    sans: &[String],
    h2: bool,
    system_ca: &str,
) -> envoy_types::pb::envoy::config::core::v3::TransportSocket {
    use envoy_types::pb::envoy::config::core::v3::{transport_socket::ConfigType, TransportSocket};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType, CertificateValidationContext, TlsCertificate,
        UpstreamTlsContext,
    };
    let file = |path: &str| super::secret::file(path);
    let validation = (!tls.insecure_skip_verify).then(|| CertificateValidationContext {
        trusted_ca: Some(file(tls.ca.as_deref().unwrap_or(system_ca))),
        crl: tls.crl.as_deref().map(file),
        match_typed_subject_alt_names: super::secret::san_matchers(sans),
        ..Default::default()
    });
    let mut common = origination_context(h2);
    common.tls_certificates = tls
        .client_cert
        .iter()
        .map(|(cert, key)| TlsCertificate {
            certificate_chain: Some(file(cert)),
            private_key: Some(file(key)),
            ..Default::default()
        })
        .collect();
    common.validation_context_type = validation.map(ValidationContextType::ValidationContext);
    let context = UpstreamTlsContext {
        common_tls_context: Some(common),
        sni: tls.sni.clone().unwrap_or_default(),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}

/// Envoy's TLS transport socket for `SIMPLE`/`MUTUAL` with `credentialName`, as Istio
/// builds it: the client certificate from SDS `kubernetes://NAME` (MUTUAL), the server
/// verified against SDS `kubernetes://NAME-cacert` and `sans` (unless
/// `insecureSkipVerify`).
fn credential_tls(
    tls: &crate::model::UpstreamTls,
    sans: &[String],
    h2: bool,
) -> envoy_types::pb::envoy::config::core::v3::TransportSocket {
    use super::secret::{ca_name, certificate_name, san_matchers, sds};
    use envoy_types::pb::envoy::config::core::v3::{transport_socket::ConfigType, TransportSocket};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
        CertificateValidationContext, UpstreamTlsContext,
    };
    let name = tls.credential.as_deref().unwrap_or_default();
    let mut common = origination_context(h2);
    if tls.mutual {
        common.tls_certificate_sds_secret_configs = vec![sds(certificate_name(name))];
    }
    common.validation_context_type = (!tls.insecure_skip_verify).then(|| {
        ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
            default_validation_context: Some(CertificateValidationContext {
                match_typed_subject_alt_names: san_matchers(sans),
                ..Default::default()
            }),
            validation_context_sds_secret_config: Some(sds(ca_name(name))),
            ..Default::default()
        })
    });
    let context = UpstreamTlsContext {
        common_tls_context: Some(common),
        sni: tls.sni.clone().unwrap_or_default(),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}

/// Why a cluster under `policy` fails closed (has no endpoints) rather than send plaintext,
/// if it does. A proxyless gRPC client takes certificates from the certificate providers of
/// its own bootstrap, not from SDS or files a control plane names: it can do neither
/// `ISTIO_MUTUAL` as generated here nor `SIMPLE`/`MUTUAL` (files or `credentialName`), and
/// its xDS client would refuse the cluster (or, with fallback credentials, send
/// plaintext); a `credentialName` whose Secret this proxy cannot be served fails closed too.
fn fail_closed(policy: &TrafficPolicy, grpc: bool, secrets: ClientSecrets) -> Option<String> {
    match policy.tls.as_deref() {
        Some(t) if grpc && t.istio_mutual => Some(
            "DestinationRule tls mode ISTIO_MUTUAL is not supported for a proxyless gRPC \
             client (it takes no SDS certificates)"
                .into(),
        ),
        Some(t) if grpc => Some(proxyless_tls_reason(t)),
        Some(t) if t.credential.is_some() => secrets
            .resolve(t)
            .err()
            .map(|why| format!("DestinationRule {}.credentialName: {why}", t.field)),
        _ => None,
    }
}

/// Why a proxyless gRPC client cannot originate a rule's `SIMPLE`/`MUTUAL` TLS: the field
/// named, for the cluster's metadata and the error of its rule.
pub fn proxyless_tls_reason(t: &crate::model::UpstreamTls) -> String {
    let mode = if t.mutual { "MUTUAL" } else { "SIMPLE" };
    match t.credential {
        Some(_) => format!(
            "DestinationRule {}.credentialName is not supported for a proxyless gRPC client \
             (it takes no SDS certificates)",
            t.field
        ),
        None => format!(
            "DestinationRule {}.mode {mode} is not supported for a proxyless gRPC client (it \
             verifies servers only with the certificate providers of its own bootstrap, not \
             with files a control plane names)",
            t.field
        ),
    }
}

/// Istio's SNI of mesh-internal mTLS: `outbound_.PORT_.SUBSET_.HOST` (`_` with no subset).
pub fn istio_sni(port: u16, subset: Option<&str>, host: &str) -> String {
    format!("outbound_.{port}_.{}_.{host}", subset.unwrap_or(""))
}

/// Envoy's TLS transport socket for `ISTIO_MUTUAL`: the proxy's workload certificate (SDS
/// `default`), the server verified against the mesh's root (SDS `ROOTCA`) and pinned, as
/// Istio pins it, to the rule's `subjectAltNames`, else to the service's identities (the
/// service accounts its endpoints run as, a ServiceEntry's `subjectAltNames`); a service
/// with none known is held to the mesh's identities (`spiffe://TD/`), never to anyone.
fn istio_mutual(
    tls: &crate::model::UpstreamTls,
    port: u16,
    subset: Option<&str>,
    service: &Service,
    trust_domain: &str,
) -> envoy_types::pb::envoy::config::core::v3::TransportSocket {
    use envoy_types::pb::envoy::config::core::v3::{transport_socket::ConfigType, TransportSocket};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext;
    let host = &service.hostname;
    let identities = service.identities(trust_domain);
    let sans = if !tls.subject_alt_names.is_empty() {
        super::secret::san_matchers(&tls.subject_alt_names)
    } else if !identities.is_empty() {
        super::secret::identity_matchers(&identities)
    } else {
        vec![super::secret::uri_prefix_matcher(&format!(
            "spiffe://{trust_domain}/"
        ))]
    };
    let context = UpstreamTlsContext {
        common_tls_context: Some(super::secret::istio_common_context(
            &super::secret::ISTIO_ALPN,
            sans,
        )),
        sni: tls
            .sni
            .clone()
            .unwrap_or_else(|| istio_sni(port, subset, host)),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}

/// The endpoint metadata Envoy picks a cluster's transport socket by
/// (`filter_metadata["envoy.transport_socket_match"]`), and the value of its `tlsMode` key
/// for an endpoint that runs a sidecar: Istio's names.
pub const TRANSPORT_SOCKET_MATCH: &str = "envoy.transport_socket_match";
pub const TLS_MODE_ISTIO: &str = "istio";

/// Istio's auto mTLS sockets: the mesh's mutual TLS (as `ISTIO_MUTUAL` without a rule's
/// `sni` or `subjectAltNames`) to the endpoints whose metadata says `tlsMode: istio`,
/// plaintext to every other endpoint.
fn auto_mtls_matches(
    port: u16,
    subset: Option<&str>,
    service: &Service,
    trust_domain: &str,
) -> Vec<envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch> {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
    use envoy_types::pb::envoy::config::core::v3::{transport_socket::ConfigType, TransportSocket};
    use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let istio = Struct {
        fields: [(
            "tlsMode".to_string(),
            Value {
                kind: Some(Kind::StringValue(TLS_MODE_ISTIO.into())),
            },
        )]
        .into_iter()
        .collect(),
    };
    let mtls = crate::model::UpstreamTls {
        istio_mutual: true,
        ..Default::default()
    };
    vec![
        TransportSocketMatch {
            name: "tlsMode-istio".into(),
            r#match: Some(istio),
            transport_socket: Some(istio_mutual(&mtls, port, subset, service, trust_domain)),
        },
        TransportSocketMatch {
            name: "tlsMode-disabled".into(),
            r#match: Some(Struct::default()),
            transport_socket: Some(TransportSocket {
                name: "envoy.transport_sockets.raw_buffer".into(),
                config_type: Some(ConfigType::TypedConfig(pack_any(RawBuffer::default()))),
            }),
        },
    ]
}

/// `filter_metadata["meshflow"].fail_closed = why`.
fn fail_closed_metadata(why: &str) -> envoy_types::pb::envoy::config::core::v3::Metadata {
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let why = Value {
        kind: Some(Kind::StringValue(why.to_string())),
    };
    let fields = [("fail_closed".to_string(), why)].into_iter().collect();
    envoy_types::pb::envoy::config::core::v3::Metadata {
        filter_metadata: [("meshflow".to_string(), Struct { fields })]
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// The TCP keepalive of `tcp.tcpKeepalive`, if set.
fn keepalive(pool: Option<&ConnectionPool>) -> Option<UpstreamConnectionOptions> {
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
fn circuit_breakers(pool: Option<&ConnectionPool>) -> CircuitBreakers {
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
enum Side {
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
fn http_protocol_options(
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
fn outlier_detection(
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
fn weigh_localities(cluster: &mut Cluster) {
    cluster
        .common_lb_config
        .get_or_insert_with(Default::default)
        .locality_config_specifier = Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(
        Default::default(),
    ));
}

/// The hosts a DNS cluster resolves: the entry's endpoints (of the subset's labels, each at
/// its port for `port`, weighted and grouped by locality) or, without endpoints, the host
/// itself at the port's `targetPort`, as Istio generates them.
fn dns_hosts(
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
                super::endpoint::runs_sidecar(&h.labels),
            )
        })
        .collect();
    super::endpoint::assignment(cluster, addrs)
}

/// A DNS entry's endpoints a subset's `selector` selects (all for none), each at its port
/// for `port`, with its locality, labels and weight.
fn dns_members(
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
    cluster.load_assignment = Some(super::endpoint::localized_assignment(
        &cluster.name,
        hosts,
        mode,
        class,
    ));
    Resource::new(res.rtype, res.name.clone(), cluster.encode_to_vec())
}

fn single_host(cluster: &str, ip_or_host: &str, port: u16) -> ClusterLoadAssignment {
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
        name: super::PASSTHROUGH_CLUSTER.into(),
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
        name: super::BLACKHOLE_CLUSTER.into(),
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
            }),
            Resolution::Dns if !service.dns_endpoints.is_empty() => locality.map(|mode| EdsSel {
                labels: crate::model::Labels::new(),
                locality: Some(mode),
                inline_hosts: Some(dns_members(service, port, labels)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConfigKey, DnsEndpoint, Kind, Protocol, Subset, UpstreamTls};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType, tls_parameters::TlsProtocol, UpstreamTlsContext,
    };

    fn reviews() -> Service {
        Service {
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

    fn rule(tls: UpstreamTls) -> DestinationRule {
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

    /// The clusters' TLS contexts by name (`None`: no transport socket).
    fn contexts(dr: &DestinationRule, grpc: bool) -> Vec<TlsOf> {
        contexts_of(&reviews(), dr, grpc)
    }

    type TlsOf = (
        String,
        Option<UpstreamTlsContext>,
        Option<ClusterLoadAssignment>,
    );

    fn contexts_of(
        service: &Service,
        dr: &DestinationRule,
        grpc: bool,
    ) -> Vec<(
        String,
        Option<UpstreamTlsContext>,
        Option<ClusterLoadAssignment>,
    )> {
        let defaults = ClusterDefaults {
            connect_timeout_ms: 1000,
            trust_domain: "corp.example".into(),
            locality_lb: None,
            system_ca_bundle: "/etc/proxy/ca-bundle.pem".into(),
            gateway: false,
            auto_mtls: true,
        };
        outbound_all_for(service, Some(dr), grpc, &defaults)
            .into_iter()
            .map(|(r, _, _)| {
                let c = Cluster::decode(&*r.body.0).unwrap();
                let tls = c.transport_socket.and_then(|t| match t.config_type {
                    Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(a)) => {
                        Some(UpstreamTlsContext::decode(&*a.value).unwrap())
                    }
                    None => None,
                });
                (c.name, tls, c.load_assignment)
            })
            .collect()
    }

    #[test]
    fn istio_mutual_uses_the_workload_certificate_and_istio_sni() {
        let dr = rule(UpstreamTls {
            istio_mutual: true,
            ..Default::default()
        });
        let got = contexts(&dr, false);
        assert_eq!(got.len(), 2);
        for (name, tls, _) in &got {
            let tls = tls.as_ref().expect("a TLS context");
            let subset = if name.contains("|v1|") { "v1" } else { "" };
            assert_eq!(
                tls.sni,
                format!("outbound_.9080_.{subset}_.reviews.default.svc.cluster.local")
            );
            let common = tls.common_tls_context.as_ref().unwrap();
            assert_eq!(common.alpn_protocols, vec!["istio-peer-exchange", "istio"]);
            assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "default");
            let Some(ValidationContextType::CombinedValidationContext(v)) =
                &common.validation_context_type
            else {
                panic!("a combined validation context: {common:?}");
            };
            assert_eq!(
                v.validation_context_sds_secret_config
                    .as_ref()
                    .unwrap()
                    .name,
                "ROOTCA"
            );
            // No names of its own: any identity of the trust domain.
            let sans = &v
                .default_validation_context
                .as_ref()
                .unwrap()
                .match_typed_subject_alt_names;
            assert_eq!(sans.len(), 1);
            assert!(
                format!("{sans:?}").contains("spiffe://corp.example/"),
                "{sans:?}"
            );
        }
        // The rule's own names and SNI win.
        let dr = rule(UpstreamTls {
            istio_mutual: true,
            sni: Some("r.example".into()),
            subject_alt_names: vec!["spiffe://corp.example/ns/default/sa/reviews".into()],
            ..Default::default()
        });
        let (_, tls, _) = &contexts(&dr, false)[0];
        let tls = tls.as_ref().unwrap();
        assert_eq!(tls.sni, "r.example");
        assert!(format!("{tls:?}").contains("sa/reviews"));
        assert!(!format!("{tls:?}").contains("Prefix"));
    }

    /// Without names of its own, the rule pins the server to the service's identities: its
    /// endpoints' accounts, a ServiceEntry's `subjectAltNames`, its DNS endpoints' accounts.
    #[test]
    fn istio_mutual_pins_servers_to_the_services_identities() {
        let dr = rule(UpstreamTls {
            istio_mutual: true,
            ..Default::default()
        });
        let mut svc = reviews().with_identities(&[
            "spiffe://corp.example/ns/default/sa/reviews".to_string(),
            "spiffe://other.example/ns/x/sa/y".to_string(),
        ]);
        svc.dns_endpoints.push(DnsEndpoint {
            address: "reviews.example".into(),
            ports: Default::default(),
            labels: Default::default(),
            placement: Default::default(),
            service_account: Some("dns".into()),
        });
        for (_, tls, _) in contexts_of(&svc, &dr, false) {
            let sans = format!("{tls:?}");
            for id in [
                "spiffe://corp.example/ns/default/sa/reviews",
                "spiffe://other.example/ns/x/sa/y",
                "spiffe://corp.example/ns/default/sa/dns",
            ] {
                assert!(sans.contains(&format!("Exact(\"{id}\")")), "{id}: {sans}");
            }
            assert!(!sans.contains("Prefix"), "no trust-domain prefix: {sans}");
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

    /// A proxyless gRPC client cannot use SDS certificates: no transport socket, no hosts.
    #[test]
    fn istio_mutual_fails_closed_for_proxyless_clients() {
        let dr = rule(UpstreamTls {
            istio_mutual: true,
            ..Default::default()
        });
        for (name, tls, assignment) in contexts(&dr, true) {
            assert!(tls.is_none(), "{name}");
            let a = assignment.expect("a static assignment");
            assert!(a.endpoints.is_empty(), "{name}");
        }
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

    fn ports(protocols: &[(u16, Protocol)]) -> Service {
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

    /// The clusters of `svc` under `dr`, decoded, with the system bundle of
    /// [`contexts_of`].
    fn decoded(svc: &Service, dr: &DestinationRule, grpc: bool) -> Vec<Cluster> {
        let defaults = ClusterDefaults {
            system_ca_bundle: "/etc/proxy/ca-bundle.pem".into(),
            ..Default::default()
        };
        outbound_all_for(svc, Some(dr), grpc, &defaults)
            .into_iter()
            .map(|(r, _, _)| Cluster::decode(&*r.body.0).unwrap())
            .collect()
    }

    fn tls_of(c: &Cluster) -> UpstreamTlsContext {
        use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
        match c
            .transport_socket
            .as_ref()
            .and_then(|t| t.config_type.as_ref())
        {
            Some(ConfigType::TypedConfig(a)) => UpstreamTlsContext::decode(&*a.value).unwrap(),
            other => panic!("{}: no TLS context: {other:?}", c.name),
        }
    }

    fn options_of(c: &Cluster) -> Option<HttpProtocolOptions> {
        c.typed_extension_protocol_options
            .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
            .map(|a| HttpProtocolOptions::decode(&*a.value).unwrap())
    }

    /// `(auto_sni, auto_san_validation)` of the cluster's upstream HTTP options.
    fn auto(c: &Cluster) -> Option<(bool, bool)> {
        let o = options_of(c)?.upstream_http_protocol_options?;
        Some((o.auto_sni, o.auto_san_validation))
    }

    fn validation(
        t: &UpstreamTlsContext,
    ) -> Option<&envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CertificateValidationContext>
    {
        match &t.common_tls_context.as_ref()?.validation_context_type {
            Some(ValidationContextType::ValidationContext(v)) => Some(v),
            Some(ValidationContextType::CombinedValidationContext(v)) => {
                v.default_validation_context.as_ref()
            }
            _ => None,
        }
    }

    fn trusted_file(t: &UpstreamTlsContext) -> Option<String> {
        use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
        match validation(t)?.trusted_ca.as_ref()?.specifier.as_ref()? {
            Specifier::Filename(f) => Some(f.clone()),
            _ => None,
        }
    }

    /// SIMPLE without `caCertificates` verifies against the proxy's system bundle (a file
    /// Envoy reads: Envoy does not implement `system_root_certs`), with Istio's TLS
    /// versions, auto SNI and auto SAN validation; `caCertificates` replaces the bundle.
    #[test]
    fn simple_tls_without_a_ca_verifies_against_the_system_bundle() {
        let dr = rule(UpstreamTls::default());
        let clusters = decoded(&reviews(), &dr, false);
        assert_eq!(clusters.len(), 2);
        for c in &clusters {
            let t = tls_of(c);
            assert_eq!(
                trusted_file(&t).as_deref(),
                Some("/etc/proxy/ca-bundle.pem"),
                "{}",
                c.name
            );
            let v = validation(&t).unwrap();
            assert!(v.system_root_certs.is_none(), "{v:?}");
            assert!(v.match_typed_subject_alt_names.is_empty());
            let common = t.common_tls_context.as_ref().unwrap();
            let params = common.tls_params.as_ref().expect("TLS parameters");
            assert_eq!(
                params.tls_minimum_protocol_version,
                TlsProtocol::TlSv12 as i32
            );
            assert_eq!(
                params.tls_maximum_protocol_version,
                TlsProtocol::TlSv13 as i32
            );
            // An HTTP/1.1 cluster offers no ALPN; the SNI comes from each request.
            assert!(common.alpn_protocols.is_empty());
            assert_eq!(t.sni, "");
            assert_eq!(auto(c), Some((true, true)), "{}", c.name);
            // Envoy requires a protocol beside the upstream options: HTTP/1.1.
            let o = options_of(c).unwrap();
            assert!(
                matches!(
                    o.upstream_protocol_options,
                    Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                        ExplicitHttpConfig {
                            protocol_config: Some(ProtocolConfig::HttpProtocolOptions(_))
                        }
                    ))
                ),
                "{o:?}"
            );
        }
        let dr = rule(UpstreamTls {
            ca: Some("/etc/certs/ca.pem".into()),
            ..Default::default()
        });
        let c = &decoded(&reviews(), &dr, false)[0];
        assert_eq!(
            trusted_file(&tls_of(c)).as_deref(),
            Some("/etc/certs/ca.pem")
        );
    }

    /// Istio's auto SNI and SAN validation: an `sni` turns both off; `subjectAltNames` or
    /// `insecureSkipVerify` turn SAN validation off (the names given are checked, or none).
    #[test]
    fn sni_and_names_decide_auto_sni_and_san_validation() {
        let with = |tls: UpstreamTls| {
            let c = decoded(&reviews(), &rule(tls), false).remove(0);
            (tls_of(&c), auto(&c))
        };
        let (t, a) = with(UpstreamTls {
            sni: Some("reviews.example".into()),
            ..Default::default()
        });
        assert_eq!((t.sni.as_str(), a), ("reviews.example", None));
        let (t, a) = with(UpstreamTls {
            subject_alt_names: vec!["reviews.example".into()],
            ..Default::default()
        });
        assert_eq!(a, Some((true, false)));
        assert!(format!("{:?}", validation(&t)).contains("reviews.example"));
        let (t, a) = with(UpstreamTls {
            insecure_skip_verify: true,
            ..Default::default()
        });
        assert_eq!(a, Some((true, false)));
        assert!(validation(&t).is_none(), "nothing verified: {t:?}");
        // MUTUAL from files: the client certificate, the same verification.
        let (t, a) = with(UpstreamTls {
            client_cert: Some(("/c.pem".into(), "/k.pem".into())),
            mutual: true,
            ..Default::default()
        });
        assert_eq!(a, Some((true, true)));
        assert_eq!(
            trusted_file(&t).as_deref(),
            Some("/etc/proxy/ca-bundle.pem")
        );
        assert_eq!(t.common_tls_context.unwrap().tls_certificates.len(), 1);
    }

    /// ALPN `h2` where the cluster speaks HTTP/2 by its explicit options, none where it
    /// speaks the request's protocol.
    #[test]
    fn http2_clusters_offer_h2_by_alpn() {
        let svc = ports(&[(9090, Protocol::Grpc), (80, Protocol::Http)]);
        let dr = DestinationRule {
            subsets: Vec::new(),
            ..rule(UpstreamTls::default())
        };
        let alpn: Vec<(String, Vec<String>)> = decoded(&svc, &dr, false)
            .iter()
            .map(|c| {
                let t = tls_of(c);
                (c.name.clone(), t.common_tls_context.unwrap().alpn_protocols)
            })
            .collect();
        assert_eq!(
            alpn,
            vec![
                (
                    "outbound|9090||reviews.default.svc.cluster.local".to_string(),
                    vec!["h2".to_string()]
                ),
                (
                    "outbound|80||reviews.default.svc.cluster.local".to_string(),
                    Vec::new()
                ),
            ]
        );
        let mut dr = dr;
        if let Some(p) = dr.traffic_policy.as_mut() {
            p.connection_pool = Some(Box::new(ConnectionPool {
                use_client_protocol: true,
                ..Default::default()
            }));
        }
        for c in decoded(&svc, &dr, false) {
            let t = tls_of(&c);
            assert!(t.common_tls_context.unwrap().alpn_protocols.is_empty());
            assert_eq!(auto(&c), Some((true, true)), "{}", c.name);
        }
    }

    /// A ServiceEntry's names (and its endpoints' identities) hold the server where the
    /// rule names none, as Istio takes an external service's accounts; auto SAN validation
    /// is still decided on the rule's own names. A Kubernetes Service lends none.
    #[test]
    fn a_service_entrys_names_verify_the_server_where_the_rule_gives_none() {
        let mut entry = reviews();
        entry.origin = ConfigKey::new(Kind::ServiceEntry, "default", "reviews");
        entry.subject_alt_names = vec!["api.example.com".into()];
        let sans = |svc: &Service, tls: UpstreamTls| {
            let c = decoded(svc, &rule(tls), false).remove(0);
            (format!("{:?}", validation(&tls_of(&c))), auto(&c))
        };
        let (v, a) = sans(&entry, UpstreamTls::default());
        assert!(v.contains("api.example.com"), "{v}");
        assert_eq!(a, Some((true, true)));
        let (v, _) = sans(
            &reviews().with_identities(&["api.example.com".into()]),
            UpstreamTls::default(),
        );
        assert!(!v.contains("api.example.com"), "{v}");
        let (v, a) = sans(
            &entry,
            UpstreamTls {
                subject_alt_names: vec!["other.example.com".into()],
                ..Default::default()
            },
        );
        assert!(v.contains("other.example.com") && !v.contains("api.example.com"));
        assert_eq!(a, Some((true, false)));
    }

    /// `credentialName` origination takes Istio's TLS versions, ALPN and auto SNI too.
    #[test]
    fn credential_tls_takes_istios_parameters() {
        let svc = ports(&[(9090, Protocol::Http2)]);
        let dr = DestinationRule {
            subsets: Vec::new(),
            ..rule(UpstreamTls {
                credential: Some("client".into()),
                mutual: true,
                ..Default::default()
            })
        };
        let secret = crate::model::TlsSecret {
            key: ConfigKey::new(Kind::Secret, "default", "client"),
            identity: Some(crate::model::TlsIdentity {
                cert_chain: "CERT".into(),
                private_key: "KEY".into(),
                fingerprint: "fp".into(),
            }),
            ca: Some("CA".into()),
            problem: None,
        };
        let list = [&secret];
        let secrets = ClientSecrets {
            namespace: "default",
            secrets: &list,
        };
        let (r, _, _) =
            outbound_all_with(&svc, Some(&dr), false, &ClusterDefaults::default(), secrets)
                .remove(0);
        let c = Cluster::decode(&*r.body.0).unwrap();
        let t = tls_of(&c);
        let common = t.common_tls_context.as_ref().unwrap();
        assert_eq!(common.alpn_protocols, vec!["h2"]);
        assert_eq!(
            common
                .tls_params
                .as_ref()
                .unwrap()
                .tls_minimum_protocol_version,
            TlsProtocol::TlSv12 as i32
        );
        assert_eq!(
            common.tls_certificate_sds_secret_configs[0].name,
            "kubernetes://client"
        );
        assert_eq!(auto(&c), Some((true, true)));
    }

    /// A proxyless gRPC client cannot verify with files (nor take SDS): SIMPLE and MUTUAL
    /// clusters fail closed there, and the rule's error names the field.
    #[test]
    fn simple_and_mutual_fail_closed_for_proxyless_clients() {
        for tls in [
            UpstreamTls {
                field: "spec.trafficPolicy.tls".into(),
                ..Default::default()
            },
            UpstreamTls {
                client_cert: Some(("/c.pem".into(), "/k.pem".into())),
                mutual: true,
                field: "spec.trafficPolicy.tls".into(),
                ..Default::default()
            },
        ] {
            let dr = rule(tls);
            for (name, tls, assignment) in contexts(&dr, true) {
                assert!(tls.is_none(), "{name}");
                assert!(assignment
                    .expect("a static assignment")
                    .endpoints
                    .is_empty());
            }
            let errors = crate::client_tls::proxyless_errors(&dr);
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].code, crate::model::ErrorCode::ProxylessTls);
            assert!(
                errors[0].message.contains("spec.trafficPolicy.tls.mode"),
                "{}",
                errors[0].message
            );
        }
    }
}
