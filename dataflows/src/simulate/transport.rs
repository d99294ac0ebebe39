//! Transport sockets as the simulation reads them: plaintext, TLS contexts of either end
//! (certificates, validation, SANs by source), and the metadata matches that pick one per
//! endpoint.

use super::{SanMatcher, Source, Tls, Transport};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::TransportSocket;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use prost::Message;

const RAW_BUFFER_TYPE: &str = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
pub(super) const UPSTREAM_TLS_TYPE: &str =
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DOWNSTREAM_TLS_TYPE: &str = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

/// Which end of a connection a transport socket is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Upstream,
    Downstream,
}

/// What a transport socket does, as far as this simulation reads it.
pub(super) fn transport(t: &TransportSocket, side: Side) -> Transport {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        DownstreamTlsContext, UpstreamTlsContext,
    };
    let unsupported = |type_url: &str, why: String| Transport::Unsupported {
        name: t.name.clone(),
        type_url: type_url.to_string(),
        why,
    };
    let any = match &t.config_type {
        Some(ConfigType::TypedConfig(a)) => a,
        None if t.name == "envoy.transport_sockets.raw_buffer" => return Transport::Plaintext,
        None => return unsupported("", "no typed config".into()),
    };
    let type_name = any.type_url.rsplit('/').next().unwrap_or_default();
    match (type_name, side) {
        (RAW_BUFFER_TYPE, _) => Transport::Plaintext,
        (UPSTREAM_TLS_TYPE, Side::Upstream) => match UpstreamTlsContext::decode(&any.value[..]) {
            Ok(u) => {
                let mut tls = tls_context(u.common_tls_context.as_ref());
                tls.sni = Some(u.sni).filter(|s| !s.is_empty());
                Transport::Tls(Box::new(tls))
            }
            Err(e) => unsupported(&any.type_url, format!("did not decode: {e}")),
        },
        (DOWNSTREAM_TLS_TYPE, Side::Downstream) => {
            match DownstreamTlsContext::decode(&any.value[..]) {
                Ok(d) => {
                    let mut tls = tls_context(d.common_tls_context.as_ref());
                    tls.require_client_certificate =
                        d.require_client_certificate.is_some_and(|b| b.value);
                    Transport::Tls(Box::new(tls))
                }
                Err(e) => unsupported(&any.type_url, format!("did not decode: {e}")),
            }
        }
        (UPSTREAM_TLS_TYPE | DOWNSTREAM_TLS_TYPE, _) => unsupported(
            &any.type_url,
            "a TLS context for the other end of the connection".into(),
        ),
        _ => unsupported(&any.type_url, "a transport socket type not modelled".into()),
    }
}

/// Where the certificate of SDS secret `name` comes from: the proxy's own file for a
/// `file-cert:` name (the secret is the file's stand-in), else the SDS secret itself.
fn sds_source(name: &str) -> Source {
    match crate::model::FileSecret::parse(name) {
        Some(crate::model::FileSecret::Cert { cert, .. }) => Source::File(cert.into()),
        _ => Source::Sds(name.into()),
    }
}

/// The CA (and CRL) of SDS secret `name`: files for a `file-root:` name.
fn sds_validation(t: &mut Tls, name: &str) {
    match crate::model::FileSecret::parse(name) {
        Some(crate::model::FileSecret::Root { ca, crl }) => {
            t.validation = Some(Source::File(ca.into()));
            if let Some(crl) = crl {
                t.crl = Some(Source::File(crl.into()));
            }
        }
        _ => t.validation = Some(Source::Sds(name.into())),
    }
}

fn data_source(d: &envoy_types::pb::envoy::config::core::v3::DataSource) -> Source {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    match &d.specifier {
        Some(Specifier::Filename(f)) => Source::File(f.clone()),
        Some(Specifier::InlineBytes(_) | Specifier::InlineString(_)) => Source::Inline,
        Some(Specifier::EnvironmentVariable(v)) => Source::Environment(v.clone()),
        None => Source::Other("an empty data source".into()),
    }
}

pub(super) fn string_matcher_text(m: Option<&StringMatcher>) -> String {
    let (kind, value) = match m.and_then(|m| m.match_pattern.as_ref()) {
        Some(MatchPattern::Exact(v)) => ("exact", v.clone()),
        Some(MatchPattern::Prefix(v)) => ("prefix", v.clone()),
        Some(MatchPattern::Suffix(v)) => ("suffix", v.clone()),
        Some(MatchPattern::Contains(v)) => ("contains", v.clone()),
        Some(MatchPattern::SafeRegex(r)) => ("regex", r.regex.clone()),
        Some(MatchPattern::Custom(c)) => ("custom", c.name.clone()),
        None => ("none", String::new()),
    };
    let fold = if m.is_some_and(|m| m.ignore_case) {
        ",ignore_case"
    } else {
        ""
    };
    format!("{kind}{fold}:{value}")
}

/// The verification a validation context asks for: its CA, CRL and SAN matchers.
#[allow(deprecated)] // the untyped SAN matchers are still valid config
fn read_validation(
    t: &mut Tls,
    v: &envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CertificateValidationContext,
) {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::subject_alt_name_matcher::SanType;
    t.validation = v
        .trusted_ca
        .as_ref()
        .map(data_source)
        .or_else(|| v.system_root_certs.as_ref().map(|_| Source::System))
        .or_else(|| {
            v.ca_certificate_provider_instance
                .as_ref()
                .map(|p| Source::Other(format!("certificate provider {}", p.instance_name)))
        });
    t.crl = v.crl.as_ref().map(data_source);
    t.sans = v
        .match_typed_subject_alt_names
        .iter()
        .map(|m| SanMatcher {
            san_type: match SanType::try_from(m.san_type) {
                Ok(SanType::Dns) => "DNS".into(),
                Ok(SanType::Uri) => "URI".into(),
                Ok(SanType::IpAddress) => "IP_ADDRESS".into(),
                Ok(SanType::Email) => "EMAIL".into(),
                Ok(SanType::OtherName) => format!("OTHER_NAME({})", m.oid),
                Ok(SanType::Unspecified) | Err(_) => format!("UNKNOWN({})", m.san_type),
            },
            matcher: string_matcher_text(m.matcher.as_ref()),
        })
        .chain(v.match_subject_alt_names.iter().map(|m| SanMatcher {
            san_type: "ANY".into(),
            matcher: string_matcher_text(Some(m)),
        }))
        .collect();
}

/// The parts of a TLS context either end shares.
fn tls_context(
    c: Option<&envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CommonTlsContext>,
) -> Tls {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType as V, tls_parameters::TlsProtocol,
    };
    let Some(c) = c else {
        return Tls::default();
    };
    let mut t = Tls {
        alpn: c.alpn_protocols.clone(),
        ..Default::default()
    };
    t.certificates = c
        .tls_certificates
        .iter()
        .map(|cert| {
            cert.certificate_chain.as_ref().map_or(
                Source::Other("a certificate without a chain".into()),
                data_source,
            )
        })
        .chain(
            c.tls_certificate_sds_secret_configs
                .iter()
                .map(|s| sds_source(&s.name)),
        )
        .chain(
            c.tls_certificate_provider_instance
                .as_ref()
                .map(|p| Source::Other(format!("certificate provider {}", p.instance_name))),
        )
        .collect();
    #[allow(deprecated)] // the deprecated providers are still valid config
    match &c.validation_context_type {
        Some(V::ValidationContext(v)) => read_validation(&mut t, v),
        Some(V::ValidationContextSdsSecretConfig(s)) => sds_validation(&mut t, &s.name),
        Some(V::CombinedValidationContext(cv)) => {
            if let Some(d) = &cv.default_validation_context {
                read_validation(&mut t, d);
            }
            if let Some(s) = &cv.validation_context_sds_secret_config {
                sds_validation(&mut t, &s.name);
            }
        }
        Some(V::ValidationContextCertificateProvider(p)) => {
            t.validation = Some(Source::Other(format!("certificate provider {}", p.name)))
        }
        Some(V::ValidationContextCertificateProviderInstance(p)) => {
            t.validation = Some(Source::Other(format!(
                "certificate provider {}",
                p.instance_name
            )))
        }
        None => {}
    }
    let version = |v: i32| match TlsProtocol::try_from(v) {
        Ok(TlsProtocol::TlsAuto) => None,
        Ok(p) => Some(p.as_str_name().to_string()),
        Err(_) => Some(format!("unknown({v})")),
    };
    if let Some(p) = &c.tls_params {
        t.versions = (
            version(p.tls_minimum_protocol_version),
            version(p.tls_maximum_protocol_version),
        );
    }
    t.istio_mutual = t.certificates == [Source::Sds("default".into())]
        && t.validation == Some(Source::Sds("ROOTCA".into()));
    t
}

/// A cluster's `auto_sni` and `auto_san_validation` (its HTTP protocol options').
pub(super) fn auto_sni(c: &Cluster) -> (bool, bool) {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
    let options = c
        .typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .and_then(|a| HttpProtocolOptions::decode(&a.value[..]).ok())
        .and_then(|o| o.upstream_http_protocol_options);
    options.map_or((false, false), |o| (o.auto_sni, o.auto_san_validation))
}

/// Envoy's metadata label match: every criterion is a field of `metadata` under
/// `envoy.transport_socket_match` with an equal value (no criteria: any endpoint).
pub(super) fn socket_criteria_hold(
    criteria: Option<&envoy_types::pb::google::protobuf::Struct>,
    metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>,
) -> bool {
    let Some(criteria) = criteria.filter(|c| !c.fields.is_empty()) else {
        return true;
    };
    let Some(fields) = metadata.and_then(|m| m.filter_metadata.get(SOCKET_MATCH_KEY)) else {
        return false;
    };
    criteria
        .fields
        .iter()
        .all(|(k, v)| fields.fields.get(k) == Some(v))
}

pub(super) const SOCKET_MATCH_KEY: &str = "envoy.transport_socket_match";

pub(super) fn value_text(v: &envoy_types::pb::google::protobuf::Value) -> String {
    use envoy_types::pb::google::protobuf::value::Kind;
    match &v.kind {
        Some(Kind::StringValue(s)) => format!("{s:?}"),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::NumberValue(n)) => n.to_string(),
        Some(Kind::NullValue(_)) | None => "null".into(),
        Some(Kind::StructValue(_)) => "{…}".into(),
        Some(Kind::ListValue(_)) => "[…]".into(),
    }
}
