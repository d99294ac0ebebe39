//! SDS: the TLS material of gateway servers, as Envoy `Secret` resources named as Istio
//! names them (`kubernetes://NAME` for a `credentialName`'s certificate and key,
//! `kubernetes://NAME-cacert` for the CA bundle a MUTUAL server verifies clients with), and
//! the downstream TLS context that refers to them (or to files the proxy reads itself).
//!
//! A Secret's body carries its private key: only proxies whose listeners name it receive it
//! (the hub sends SDS by explicit subscription), and anything shown to people renders it
//! redacted (`src/debug/envoy_json.rs`).

use super::ads;
use crate::model::{Credential, Resource, ResourceType, ServerTls, ServerTlsMode, TlsIdentity};
use envoy_types::pb::envoy::config::core::v3::{
    data_source::Specifier, transport_socket::ConfigType, DataSource, TransportSocket,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
    secret, subject_alt_name_matcher::SanType, CertificateValidationContext, CommonTlsContext,
    DownstreamTlsContext, SdsSecretConfig, Secret, SubjectAltNameMatcher, TlsCertificate,
    TlsParameters,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;
use prost::Message;

/// Istio's SDS name prefix for Kubernetes Secrets.
pub const SECRET_PREFIX: &str = "kubernetes://";

/// The SDS name of the certificate and key of Secret `name`.
pub fn certificate_name(secret: &str) -> String {
    format!("{SECRET_PREFIX}{secret}")
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
    Resource::new(ResourceType::Secret, secret.name.clone(), secret.encode_to_vec())
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

/// Matchers for names a peer certificate must carry: each as a DNS or a URI SAN (exact).
pub(crate) fn san_matchers(names: &[String]) -> Vec<SubjectAltNameMatcher> {
    names
        .iter()
        .flat_map(|san| {
            [SanType::Dns, SanType::Uri].map(|t| SubjectAltNameMatcher {
                san_type: t as i32,
                matcher: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::Exact(san.clone())),
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
        .collect()
}

fn sds(name: String) -> SdsSecretConfig {
    SdsSecretConfig {
        name,
        sds_config: Some(ads()),
    }
}

/// The transport socket of a terminating gateway server (SIMPLE or MUTUAL); `http`: the
/// chain speaks HTTP, so ALPN offers h2 and http/1.1 as Istio's gateways do.
pub fn downstream_tls(tls: &ServerTls, http: bool) -> TransportSocket {
    let mutual = tls.mode == ServerTlsMode::Mutual;
    let sans = CertificateValidationContext {
        match_typed_subject_alt_names: san_matchers(&tls.subject_alt_names),
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
        Some(Credential::Secret(name)) => {
            common.tls_certificate_sds_secret_configs = vec![sds(certificate_name(name))];
            if mutual {
                common.validation_context_type = Some(
                    ValidationContextType::CombinedValidationContext(
                        CombinedCertificateValidationContext {
                            default_validation_context: Some(sans),
                            validation_context_sds_secret_config: Some(sds(ca_name(name))),
                            ..Default::default()
                        },
                    ),
                );
            }
        }
        Some(Credential::Files { cert, key, ca }) => {
            common.tls_certificates = vec![TlsCertificate {
                certificate_chain: Some(file(cert)),
                private_key: Some(file(key)),
                ..Default::default()
            }];
            if mutual {
                common.validation_context_type =
                    Some(ValidationContextType::ValidationContext(
                        CertificateValidationContext {
                            trusted_ca: ca.as_deref().map(file),
                            ..sans
                        },
                    ));
            }
        }
        None => {}
    }
    let context = DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: mutual.then_some(BoolValue { value: true }),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(ConfigType::TypedConfig(pack_any(context))),
    }
}
