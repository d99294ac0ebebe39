//! SDS: the TLS material of gateway servers, as Envoy `Secret` resources named as Istio
//! names them (`kubernetes://NAME` for a `credentialName`'s certificate and key,
//! `kubernetes://NAME-cacert` for the CA bundle a MUTUAL server verifies clients with), and
//! the downstream TLS context that refers to them (or to files the proxy reads itself).
//!
//! Workload identities (`ISTIO_MUTUAL`) use Istio's SDS names: `default` for the proxy's own
//! certificate and key, `ROOTCA` for the mesh's root. `ROOTCA` is an ordinary resource (a
//! root is public and fixed). `default` is not computed here: a key is made at random and
//! must never enter the dataflow, its history or its debug views. The dataflow carries a
//! stand-in instead (a generic secret naming the SPIFFE identity, [`workload_stand_in`]),
//! versioned by the identity and the root, which the xDS server replaces with the certificate
//! its CA issued for that identity when it sends it ([`stand_in_identity`]).
//!
//! A Secret's body carries its private key: only proxies whose listeners name it receive it
//! (the hub sends SDS by explicit subscription), and anything shown to people renders it
//! redacted (`src/debug/envoy_json.rs`).

use super::ads;
use crate::model::{
    Credential, InboundMtls, MeshSettings, Proxy, ProxyKind, Resource, ResourceType, ServerTls,
    ServerTlsMode, TlsIdentity,
};
use envoy_types::pb::envoy::config::core::v3::{
    data_source::Specifier, transport_socket::ConfigType, DataSource, TransportSocket,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    certificate_validation_context::TrustChainVerification,
    common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
    secret,
    subject_alt_name_matcher::SanType,
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, GenericSecret,
    SdsSecretConfig, Secret, SubjectAltNameMatcher, TlsCertificate, TlsParameters,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;
use prost::Message;

/// The SDS name of a proxy's own workload certificate and key (Istio's).
pub const WORKLOAD_CERT: &str = "default";
/// The SDS name of the mesh's root certificate, peers are verified against (Istio's).
pub const ROOT_CA: &str = "ROOTCA";

/// Istio's SDS name prefix for Kubernetes Secrets.
pub const SECRET_PREFIX: &str = "kubernetes://";

/// Istio's SDS name prefixes for a certificate and key the proxy reads from its own files
/// (`file-cert:CERT~KEY`), and for a CA bundle it reads from one (`file-root:CA`; with a
/// CRL, meshflow's `file-root:CA~CRL`). Served over SDS rather than inline in the cluster or
/// listener that names them, so that a file missing on the proxy costs that one secret (its
/// cluster or listener warms, failing closed) instead of the whole CDS or LDS update.
pub use crate::model::{FILE_CERT_PREFIX, FILE_ROOT_PREFIX};

/// The SDS name of the certificate and key in files `cert` and `key`.
pub fn file_cert_name(cert: &str, key: &str) -> String {
    format!("{FILE_CERT_PREFIX}{cert}~{key}")
}

/// The SDS name of the CA bundle in file `ca` (and the CRL in `crl`).
pub fn file_root_name(ca: &str, crl: Option<&str>) -> String {
    match crl {
        Some(crl) => format!("{FILE_ROOT_PREFIX}{ca}~{crl}"),
        None => format!("{FILE_ROOT_PREFIX}{ca}"),
    }
}

/// The secret an SDS name of [`file_cert_name`] or [`file_root_name`] stands for: the files,
/// which the proxy reads (and watches) itself. `None` for any other name.
pub fn file_secret(name: &str) -> Option<Resource> {
    let r#type = match crate::model::FileSecret::parse(name)? {
        crate::model::FileSecret::Cert { cert, key } => {
            secret::Type::TlsCertificate(TlsCertificate {
                certificate_chain: Some(file(cert)),
                private_key: Some(file(key)),
                ..Default::default()
            })
        }
        crate::model::FileSecret::Root { ca, crl } => {
            secret::Type::ValidationContext(CertificateValidationContext {
                trusted_ca: Some(file(ca)),
                crl: crl.map(file),
                ..Default::default()
            })
        }
    };
    Some(encode(Secret {
        name: name.to_string(),
        r#type: Some(r#type),
    }))
}

/// The file secrets ([`file_secret`]) a cluster or listener names in its TLS contexts.
pub fn file_secrets(r: &Resource) -> Vec<Resource> {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext;
    // Only clusters and listeners have TLS contexts (a gateway's route configuration can be
    // megabytes: it is not scanned), and most name no file: only those whose bytes hold the
    // prefix are decoded.
    if !matches!(r.rtype, ResourceType::Cluster | ResourceType::Listener) {
        return Vec::new();
    }
    let body = &r.body.0[..];
    if !body.windows(5).any(|w| w == b"file-") {
        return Vec::new();
    }
    let sockets: Vec<TransportSocket> = match r.rtype {
        ResourceType::Cluster => match Cluster::decode(body) {
            Ok(c) => c
                .transport_socket
                .into_iter()
                .chain(
                    c.transport_socket_matches
                        .into_iter()
                        .filter_map(|m| m.transport_socket),
                )
                .collect(),
            Err(_) => Vec::new(),
        },
        ResourceType::Listener => match Listener::decode(body) {
            Ok(l) => l
                .filter_chains
                .into_iter()
                .chain(l.default_filter_chain)
                .filter_map(|c| c.transport_socket)
                .collect(),
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut names = std::collections::BTreeSet::new();
    for s in sockets {
        let Some(ConfigType::TypedConfig(any)) = s.config_type else {
            continue;
        };
        let common = if any.type_url.ends_with(".UpstreamTlsContext") {
            UpstreamTlsContext::decode(&any.value[..])
                .ok()
                .and_then(|u| u.common_tls_context)
        } else if any.type_url.ends_with(".DownstreamTlsContext") {
            DownstreamTlsContext::decode(&any.value[..])
                .ok()
                .and_then(|d| d.common_tls_context)
        } else {
            None
        };
        let Some(common) = common else {
            continue;
        };
        names.extend(
            common
                .tls_certificate_sds_secret_configs
                .into_iter()
                .map(|c| c.name),
        );
        match common.validation_context_type {
            Some(ValidationContextType::ValidationContextSdsSecretConfig(c)) => {
                names.insert(c.name);
            }
            Some(ValidationContextType::CombinedValidationContext(c)) => {
                names.extend(c.validation_context_sds_secret_config.map(|c| c.name));
            }
            _ => {}
        }
    }
    names.iter().filter_map(|n| file_secret(n)).collect()
}

/// The SDS name of the certificate and key of Secret `name`.
pub fn certificate_name(secret: &str) -> String {
    format!("{SECRET_PREFIX}{secret}")
}

/// Istio's SDS name prefix for a Gateway API certificate of another namespace.
pub const GRANTED_SECRET_PREFIX: &str = "kubernetes-gateway://";

/// The SDS names of a Secret credential's certificate and key and of its CA bundle (`None`
/// for files): `kubernetes://NAME` for a Secret of the workload's namespace,
/// `kubernetes-gateway://NAMESPACE/NAME` for one of another namespace a ReferenceGrant
/// allows.
pub fn credential_names(credential: &Credential) -> Option<(String, String)> {
    match credential {
        Credential::Secret(name) => Some((certificate_name(name), ca_name(name))),
        Credential::Granted { namespace, name } => Some((
            format!("{GRANTED_SECRET_PREFIX}{namespace}/{name}"),
            format!("{GRANTED_SECRET_PREFIX}{namespace}/{name}-cacert"),
        )),
        Credential::Files { .. } => None,
    }
}

/// The SDS name of the CA bundle that goes with Secret `name` (its own `ca.crt`/`cacert`,
/// or the `NAME-cacert` Secret's).
pub fn ca_name(secret: &str) -> String {
    format!("{SECRET_PREFIX}{secret}-cacert")
}

fn inline(pem: &str) -> DataSource {
    DataSource {
        specifier: Some(Specifier::InlineString(pem.to_string())),
        ..Default::default()
    }
}

pub(crate) fn file(path: &str) -> DataSource {
    DataSource {
        specifier: Some(Specifier::Filename(path.to_string())),
        ..Default::default()
    }
}

fn encode(secret: Secret) -> Resource {
    Resource::new(
        ResourceType::Secret,
        secret.name.clone(),
        secret.encode_to_vec(),
    )
}

/// The SDS resource of a certificate and its key.
pub fn certificate(name: &str, id: &TlsIdentity) -> Resource {
    encode(Secret {
        name: name.to_string(),
        r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: Some(inline(&id.cert_chain)),
            private_key: Some(inline(&id.private_key)),
            ..Default::default()
        })),
    })
}

/// The SDS resource of a CA bundle clients are verified against.
pub fn validation(name: &str, ca_pem: &str) -> Resource {
    encode(Secret {
        name: name.to_string(),
        r#type: Some(secret::Type::ValidationContext(
            CertificateValidationContext {
                trusted_ca: Some(inline(ca_pem)),
                ..Default::default()
            },
        )),
    })
}

/// Matchers for names a peer certificate must carry: each as a DNS or a URI SAN (exact),
/// and an IP address also as an IP SAN (in its canonical text, as Envoy compares it), so
/// `subjectAltNames: [10.0.0.5]` accepts a server certificate naming that address.
pub(crate) fn san_matchers(names: &[String]) -> Vec<SubjectAltNameMatcher> {
    let exact = |t: SanType, value: String| SubjectAltNameMatcher {
        san_type: t as i32,
        matcher: Some(StringMatcher {
            match_pattern: Some(MatchPattern::Exact(value)),
            ..Default::default()
        }),
        ..Default::default()
    };
    names
        .iter()
        .flat_map(|san| {
            let ip = san
                .parse::<std::net::IpAddr>()
                .ok()
                .map(|ip| exact(SanType::IpAddress, ip.to_string()));
            [
                exact(SanType::Dns, san.clone()),
                exact(SanType::Uri, san.clone()),
            ]
            .into_iter()
            .chain(ip)
        })
        .collect()
}

pub(crate) fn sds(name: String) -> SdsSecretConfig {
    SdsSecretConfig {
        name,
        sds_config: Some(ads()),
    }
}

/// The transport socket of a terminating gateway server (SIMPLE, MUTUAL, OPTIONAL_MUTUAL or
/// ISTIO_MUTUAL); `http`: the chain speaks HTTP, so ALPN offers h2 and http/1.1 as Istio's
/// gateways do. OPTIONAL_MUTUAL verifies a client certificate without requiring one.
pub fn downstream_tls(tls: &ServerTls, http: bool) -> TransportSocket {
    let mutual = matches!(
        tls.mode,
        ServerTlsMode::Mutual | ServerTlsMode::IstioMutual | ServerTlsMode::OptionalMutual
    );
    let required = mutual && tls.mode != ServerTlsMode::OptionalMutual;
    let accept_untrusted = tls.client_ca.as_ref().is_some_and(|c| c.accept_untrusted);
    let sans = CertificateValidationContext {
        match_typed_subject_alt_names: san_matchers(&tls.subject_alt_names),
        trust_chain_verification: if accept_untrusted {
            TrustChainVerification::AcceptUntrusted as i32
        } else {
            TrustChainVerification::VerifyTrustChain as i32
        },
        ..Default::default()
    };
    let mut common = CommonTlsContext {
        alpn_protocols: if http {
            vec!["h2".into(), "http/1.1".into()]
        } else {
            Vec::new()
        },
        tls_params: (tls.min_version.is_some()
            || tls.max_version.is_some()
            || !tls.cipher_suites.is_empty())
        .then(|| TlsParameters {
            tls_minimum_protocol_version: tls.min_version.unwrap_or_default(),
            tls_maximum_protocol_version: tls.max_version.unwrap_or_default(),
            cipher_suites: tls.cipher_suites.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    match &tls.credential {
        Some(c @ (Credential::Secret(_) | Credential::Granted { .. })) => {
            let (cert, ca) = credential_names(c).unwrap_or_default();
            // A Gateway API frontend validation's CA, in place of the Secret's own.
            let ca = tls.client_ca.as_ref().map_or(ca, |c| c.sds_name.clone());
            common.tls_certificate_sds_secret_configs = vec![sds(cert)];
            if mutual {
                common.validation_context_type =
                    Some(ValidationContextType::CombinedValidationContext(
                        CombinedCertificateValidationContext {
                            default_validation_context: Some(sans),
                            validation_context_sds_secret_config: Some(sds(ca)),
                            ..Default::default()
                        },
                    ));
            }
        }
        Some(Credential::Files { cert, key, ca }) => {
            common.tls_certificate_sds_secret_configs = vec![sds(file_cert_name(cert, key))];
            if mutual {
                common.validation_context_type = Some(match ca {
                    Some(ca) => ValidationContextType::CombinedValidationContext(
                        CombinedCertificateValidationContext {
                            default_validation_context: Some(sans),
                            validation_context_sds_secret_config: Some(sds(file_root_name(
                                ca, None,
                            ))),
                            ..Default::default()
                        },
                    ),
                    None => ValidationContextType::ValidationContext(sans),
                });
            }
        }
        // The gateway's workload certificate; clients verified against the mesh's root
        // (and the server's `subjectAltNames`, if any).
        None if tls.mode == ServerTlsMode::IstioMutual => {
            let istio = istio_common_context(&[], sans.match_typed_subject_alt_names);
            common.tls_certificate_sds_secret_configs = istio.tls_certificate_sds_secret_configs;
            common.validation_context_type = istio.validation_context_type;
        }
        None => {}
    }
    let context = DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: required.then_some(BoolValue { value: true }),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}

/// The SDS resources of a proxy's workload identity: `ROOTCA` and the stand-in for its
/// `default` certificate, when the mesh has a CA; routers and sidecars only (a proxyless
/// client takes no SDS).
pub fn workload_secrets(p: &Proxy, mesh: &MeshSettings) -> Vec<Resource> {
    let Some(root) = mesh.trust_root.as_deref() else {
        return Vec::new();
    };
    if p.kind == ProxyKind::Proxyless {
        return Vec::new();
    }
    let identity = mesh.spiffe_id(&p.namespace, p.service_account());
    vec![
        validation(ROOT_CA, root),
        workload_stand_in(&identity, root),
    ]
}

/// What stands in for the `default` certificate of `identity` in the dataflow: a generic
/// secret holding the identity only. Its version is the identity's and the root's, so a new
/// root (a restart with another CA) reaches proxies that resume with the old version.
pub fn workload_stand_in(identity: &str, root: &str) -> Resource {
    let body = Secret {
        name: WORKLOAD_CERT.into(),
        r#type: Some(secret::Type::GenericSecret(GenericSecret {
            secret: Some(inline(identity)),
            ..Default::default()
        })),
    }
    .encode_to_vec();
    let mut versioned = body.clone();
    versioned.extend_from_slice(root.as_bytes());
    Resource {
        rtype: ResourceType::Secret,
        name: WORKLOAD_CERT.into(),
        version: crate::model::version_of(&versioned),
        body: crate::model::Body(body.into()),
    }
}

/// The SPIFFE identity a `default` stand-in names (`None` for any other body).
pub fn stand_in_identity(body: &[u8]) -> Option<String> {
    let s = Secret::decode(body).ok()?;
    if s.name != WORKLOAD_CERT {
        return None;
    }
    match s.r#type? {
        secret::Type::GenericSecret(g) => match g.secret?.specifier? {
            Specifier::InlineString(id) if id.starts_with("spiffe://") => Some(id),
            _ => None,
        },
        _ => None,
    }
}

/// The `default` secret a CA issued: the workload's certificate chain and key.
pub fn workload_certificate(chain_pem: &str, key_pem: &str) -> Vec<u8> {
    Secret {
        name: WORKLOAD_CERT.into(),
        r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: Some(inline(chain_pem)),
            private_key: Some(inline(key_pem)),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// Matches URI SANs starting with `prefix` (a trust domain's `spiffe://TD/`).
/// Matchers for workload identities: a SPIFFE ID as an exact URI SAN (a workload
/// certificate carries nothing else); any other name as [`san_matchers`] match it.
pub(crate) fn identity_matchers(ids: &[String]) -> Vec<SubjectAltNameMatcher> {
    ids.iter()
        .flat_map(|id| {
            if id.starts_with("spiffe://") {
                vec![SubjectAltNameMatcher {
                    san_type: SanType::Uri as i32,
                    matcher: Some(StringMatcher {
                        match_pattern: Some(MatchPattern::Exact(id.clone())),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            } else {
                san_matchers(std::slice::from_ref(id))
            }
        })
        .collect()
}

pub(crate) fn uri_prefix_matcher(prefix: &str) -> SubjectAltNameMatcher {
    SubjectAltNameMatcher {
        san_type: SanType::Uri as i32,
        matcher: Some(StringMatcher {
            match_pattern: Some(MatchPattern::Prefix(prefix.to_string())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The TLS context of a workload identity, either side: the proxy's `default` certificate,
/// peers verified against `ROOTCA` and `sans` (none: any certificate the root signed).
pub(crate) fn istio_common_context(
    alpn: &[&str],
    sans: Vec<SubjectAltNameMatcher>,
) -> CommonTlsContext {
    CommonTlsContext {
        alpn_protocols: alpn.iter().map(|a| a.to_string()).collect(),
        tls_certificate_sds_secret_configs: vec![sds(WORKLOAD_CERT.into())],
        validation_context_type: Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: Some(CertificateValidationContext {
                    match_typed_subject_alt_names: sans,
                    ..Default::default()
                }),
                validation_context_sds_secret_config: Some(sds(ROOT_CA.into())),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// ALPN a sidecar's mTLS carries so the peer's inbound listener tells it from other TLS.
pub const ISTIO_ALPN: [&str; 2] = ["istio-peer-exchange", "istio"];

/// Istio's cipher suites for the mesh's mTLS (TLS 1.2; TLS 1.3's are not configurable in
/// Envoy), where `meshMTLS.cipherSuites` names none.
pub const ISTIO_MTLS_CIPHERS: [&str; 6] = [
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-GCM-SHA256",
];

/// The transport socket of an inbound mTLS chain, as Istio builds it: the workload
/// certificate; a client certificate the mesh's root signed required, naming a SPIFFE
/// identity of one of the mesh's trust domains (`spiffe://TD/` prefixes: `trustDomain` and
/// `trustDomainAliases`), any workload of them (PERMISSIVE and STRICT alike: who may call
/// is AuthorizationPolicy's to say); TLS 1.2 or 1.3 (1.3 only under `meshMTLS` asking for
/// it) with Istio's cipher suites or the mesh's.
pub fn inbound_mtls(m: &InboundMtls) -> TransportSocket {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::tls_parameters::TlsProtocol;
    let sans = m
        .trust_domains
        .iter()
        .map(|td| SubjectAltNameMatcher {
            san_type: SanType::Uri as i32,
            matcher: Some(StringMatcher {
                match_pattern: Some(MatchPattern::Prefix(format!("spiffe://{td}/"))),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let mut common = istio_common_context(&["h2", "http/1.1"], sans);
    common.tls_params = Some(TlsParameters {
        tls_minimum_protocol_version: if m.min_tls13 {
            TlsProtocol::TlSv13
        } else {
            TlsProtocol::TlSv12
        } as i32,
        tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
        cipher_suites: if m.cipher_suites.is_empty() {
            ISTIO_MTLS_CIPHERS.iter().map(|c| c.to_string()).collect()
        } else {
            m.cipher_suites.clone()
        },
        ecdh_curves: m.ecdh_curves.clone(),
        ..Default::default()
    });
    let context = DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(BoolValue { value: true }),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inbound mTLS accepts the identities of each trust domain (a `spiffe://TD/` URI
    /// prefix, so `spiffe://TD.evil/` is not one), at TLS 1.3 only when the mesh asks, with
    /// Istio's ciphers unless the mesh names its own.
    #[test]
    fn inbound_mtls_takes_the_mesh_trust_domains_and_tls() {
        let context = |m: &InboundMtls| {
            let Some(ConfigType::TypedConfig(any)) = inbound_mtls(m).config_type else {
                panic!("no config");
            };
            let ctx = DownstreamTlsContext::decode(&any.value[..]).expect("a context");
            assert_eq!(
                ctx.require_client_certificate,
                Some(BoolValue { value: true })
            );
            ctx.common_tls_context.expect("common")
        };
        let common = context(&InboundMtls::default());
        let params = common.tls_params.clone().expect("params");
        assert_eq!(params.tls_minimum_protocol_version, 3, "TLS 1.2");
        assert_eq!(params.tls_maximum_protocol_version, 4, "TLS 1.3");
        assert_eq!(params.cipher_suites, ISTIO_MTLS_CIPHERS);
        let prefixes = |c: &CommonTlsContext| -> Vec<(i32, String)> {
            let Some(ValidationContextType::CombinedValidationContext(v)) =
                &c.validation_context_type
            else {
                panic!("no validation");
            };
            v.default_validation_context
                .as_ref()
                .expect("default")
                .match_typed_subject_alt_names
                .iter()
                .map(
                    |m| match m.matcher.as_ref().and_then(|x| x.match_pattern.as_ref()) {
                        Some(MatchPattern::Prefix(p)) => (m.san_type, p.clone()),
                        other => panic!("{other:?}"),
                    },
                )
                .collect()
        };
        let uri = SanType::Uri as i32;
        assert_eq!(prefixes(&common), [(uri, "spiffe://cluster.local/".into())]);
        let m = InboundMtls {
            trust_domains: vec!["corp.example".into(), "old.example".into()],
            min_tls13: true,
            cipher_suites: vec!["ECDHE-RSA-AES256-GCM-SHA384".into()],
            ecdh_curves: vec!["X25519".into()],
        };
        let common = context(&m);
        assert_eq!(
            prefixes(&common),
            [
                (uri, "spiffe://corp.example/".into()),
                (uri, "spiffe://old.example/".into())
            ]
        );
        let params = common.tls_params.expect("params");
        assert_eq!(params.tls_minimum_protocol_version, 4, "TLS 1.3");
        assert_eq!(params.cipher_suites, ["ECDHE-RSA-AES256-GCM-SHA384"]);
        assert_eq!(params.ecdh_curves, ["X25519"]);
    }

    /// A name that is an IP address is also matched as an IP SAN (canonical text); other
    /// names as DNS or URI SANs only.
    #[test]
    fn ip_address_names_are_matched_as_ip_sans_too() {
        let m = san_matchers(&["10.0.0.5".into(), "api.example.com".into(), "::0:1".into()]);
        let got: Vec<(i32, String)> = m
            .iter()
            .map(|m| {
                let v = match m.matcher.as_ref().and_then(|x| x.match_pattern.as_ref()) {
                    Some(MatchPattern::Exact(v)) => v.clone(),
                    other => panic!("{other:?}"),
                };
                (m.san_type, v)
            })
            .collect();
        let (dns, uri, ip) = (
            SanType::Dns as i32,
            SanType::Uri as i32,
            SanType::IpAddress as i32,
        );
        assert_eq!(
            got,
            vec![
                (dns, "10.0.0.5".into()),
                (uri, "10.0.0.5".into()),
                (ip, "10.0.0.5".into()),
                (dns, "api.example.com".into()),
                (uri, "api.example.com".into()),
                (dns, "::0:1".into()),
                (uri, "::0:1".into()),
                (ip, "::1".into()),
            ]
        );
    }
}
