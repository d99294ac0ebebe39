//! Upstream TLS of outbound clusters, as Istio's `cluster_tls.go` builds it: a
//! DestinationRule's `SIMPLE`/`MUTUAL` (from files or a `credentialName`), `ISTIO_MUTUAL`,
//! auto mTLS, and why a cluster fails closed rather than send plaintext.

use super::credential::ClientSecrets;
use crate::model::{Service, TrafficPolicy};
use crate::translate::endpoint::TLS_MODE_ISTIO;
use envoy_types::util::pack_any;

/// The names a `SIMPLE`/`MUTUAL` server's certificate must carry: the rule's
/// `subjectAltNames`, else, for a ServiceEntry's host, its identities (the entry's
/// `subjectAltNames` and its endpoints' service accounts), as Istio falls back to the
/// service accounts of a service of its external registry; none for a Kubernetes Service.
pub(super) fn origination_sans(
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
pub(super) fn auto_sni(
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
pub(super) fn upstream_tls(
    tls: &crate::model::UpstreamTls,
    sans: &[String],
    h2: bool,
    system_ca: &str,
) -> envoy_types::pb::envoy::config::core::v3::TransportSocket {
    use crate::translate::secret::{file_cert_name, file_root_name, san_matchers, sds};
    use envoy_types::pb::envoy::config::core::v3::{transport_socket::ConfigType, TransportSocket};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
        CertificateValidationContext, UpstreamTlsContext,
    };
    // The files come over SDS (`file-cert:`, `file-root:`, as Istio names them): a file
    // missing on the proxy then holds up this cluster alone, not the whole CDS update.
    let mut common = origination_context(h2);
    common.tls_certificate_sds_secret_configs = tls
        .client_cert
        .iter()
        .map(|(cert, key)| sds(file_cert_name(cert, key)))
        .collect();
    common.validation_context_type = (!tls.insecure_skip_verify).then(|| {
        // A BackendTLSPolicy's bundle is the proxy's inline: it has no file to read.
        if let Some(pem) = &tls.ca_pem {
            return ValidationContextType::ValidationContext(CertificateValidationContext {
                trusted_ca: Some(inline_pem(pem)),
                match_typed_subject_alt_names: san_matchers(sans),
                ..Default::default()
            });
        }
        let ca = tls.ca.as_deref().unwrap_or(system_ca);
        ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
            default_validation_context: Some(CertificateValidationContext {
                match_typed_subject_alt_names: san_matchers(sans),
                ..Default::default()
            }),
            validation_context_sds_secret_config: Some(sds(file_root_name(ca, tls.crl.as_deref()))),
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

/// PEM given to Envoy inline.
fn inline_pem(pem: &str) -> envoy_types::pb::envoy::config::core::v3::DataSource {
    use envoy_types::pb::envoy::config::core::v3::{data_source::Specifier, DataSource};
    DataSource {
        specifier: Some(Specifier::InlineString(pem.to_string())),
        ..Default::default()
    }
}

/// Envoy's TLS transport socket for `SIMPLE`/`MUTUAL` with `credentialName`, as Istio
/// builds it: the client certificate from SDS `kubernetes://NAME` (MUTUAL), the server
/// verified against SDS `kubernetes://NAME-cacert` and `sans` (unless
/// `insecureSkipVerify`).
pub(super) fn credential_tls(
    tls: &crate::model::UpstreamTls,
    sans: &[String],
    h2: bool,
) -> envoy_types::pb::envoy::config::core::v3::TransportSocket {
    use crate::translate::secret::{ca_name, certificate_name, san_matchers, sds};
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
pub(super) fn fail_closed(
    policy: &TrafficPolicy,
    grpc: bool,
    secrets: ClientSecrets,
) -> Option<String> {
    match policy.tls.as_deref() {
        Some(t) if grpc && t.istio_mutual => Some(
            "DestinationRule tls mode ISTIO_MUTUAL is not supported for a proxyless gRPC \
             client (it takes no SDS certificates)"
                .into(),
        ),
        Some(t) if grpc => Some(proxyless_tls_reason(t)),
        Some(t) if t.unusable.is_some() => t.unusable.clone(),
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
pub(super) fn istio_mutual(
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
        crate::translate::secret::san_matchers(&tls.subject_alt_names)
    } else if !identities.is_empty() {
        crate::translate::secret::identity_matchers(&identities)
    } else {
        vec![crate::translate::secret::uri_prefix_matcher(&format!(
            "spiffe://{trust_domain}/"
        ))]
    };
    let context = UpstreamTlsContext {
        common_tls_context: Some(crate::translate::secret::istio_common_context(
            &crate::translate::secret::ISTIO_ALPN,
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

/// Istio's auto mTLS sockets: the mesh's mutual TLS (as `ISTIO_MUTUAL` without a rule's
/// `sni` or `subjectAltNames`) to the endpoints whose metadata says `tlsMode: istio`,
/// plaintext to every other endpoint.
pub(super) fn auto_mtls_matches(
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
pub(super) fn fail_closed_metadata(
    why: &str,
) -> envoy_types::pb::envoy::config::core::v3::Metadata {
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
