//! CUSTOM AuthorizationPolicies as Istio translates them: per provider (in name order), an
//! RBAC filter whose shadow rules are the policies' rules (action DENY, so what a chain
//! cannot check widens what is asked, never narrows it), which names the matching rule in
//! its dynamic metadata, then Envoy's ext_authz filter, enabled only by that metadata: the
//! external service is asked about exactly the requests the rules match.
//!
//! A provider that cannot be used (missing, invalid, its service unknown) becomes an
//! enforcing RBAC DENY of the same rules (Istio's `-deny-due-to-bad-CUSTOM-action`). On a
//! chain that proxies bytes, a gRPC provider checks the connection (network ext_authz);
//! an HTTP provider cannot, and where Istio lets such connections through unchecked,
//! meshflow denies the ones the rules match (`-deny-due-to-http-provider-on-tcp`): a
//! restriction it cannot honour fails closed.

use super::rbac::{
    http_rbac_filter, network_rbac_filter, policy_of, ActionRules, HTTP_RBAC, NETWORK_RBAC,
};
use crate::model::{provider_prefix, AuthzAction, ExtAuthzApi, NamedCustom, ResolvedExtAuthz};
use envoy_types::pb::envoy::config::core::v3::{
    grpc_service, http_uri, ApiVersion, GrpcService, HeaderValue, HttpUri,
};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter};
use envoy_types::pb::envoy::config::rbac::v3::Policy;
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3 as http_ext;
use envoy_types::pb::envoy::extensions::filters::network::ext_authz::v3 as net_ext;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpFilter,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    metadata_matcher::{path_segment, PathSegment},
    string_matcher, value_matcher, ListStringMatcher, MetadataMatcher, StringMatcher, ValueMatcher,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::protobuf::Duration;
use envoy_types::util::pack_any;
use std::collections::BTreeMap;

pub const HTTP_EXT_AUTHZ: &str = "envoy.filters.http.ext_authz";
pub const NETWORK_EXT_AUTHZ: &str = "envoy.filters.network.ext_authz";
/// The shadow rules' stat prefix, and with it the dynamic metadata key
/// (`istio_ext_authz_shadow_effective_policy_id`) the ext_authz filter is enabled by.
pub const SHADOW_PREFIX: &str = "istio_ext_authz_";
/// What a bad provider's rules are renamed with (Istio's suffix).
pub const BAD_PROVIDER_SUFFIX: &str = "-deny-due-to-bad-CUSTOM-action";
/// What an HTTP provider's rules are renamed with on a chain that proxies bytes.
pub const HTTP_PROVIDER_ON_TCP_SUFFIX: &str = "-deny-due-to-http-provider-on-tcp";
/// Istio's timeout of a check when the provider sets none.
const DEFAULT_TIMEOUT_MS: u64 = 600_000;

type Providers = BTreeMap<String, Result<ResolvedExtAuthz, String>>;

/// Per provider named (in name order), the rules of its policies as a chain (`http` or
/// not) checks them, by rule name.
fn by_provider<'a>(
    custom: &'a [NamedCustom],
    tds: &[String],
    http: bool,
) -> BTreeMap<&'a str, BTreeMap<String, Policy>> {
    let mut out: BTreeMap<&str, BTreeMap<String, Policy>> = BTreeMap::new();
    for c in custom {
        let rules = out.entry(c.custom.provider.as_str()).or_default();
        for (i, rule) in c.custom.rules.iter().enumerate() {
            if let Some(checked) = rule.on_chain(AuthzAction::Deny, http) {
                rules.insert(c.rule_name(i), policy_of(&checked, &c.namespace, tds));
            }
        }
    }
    out
}

/// The rules renamed with `suffix`, enforcing: what they match is denied.
fn denying(rules: BTreeMap<String, Policy>, suffix: &str) -> ActionRules {
    ActionRules {
        enforced: Some(
            rules
                .into_iter()
                .map(|(name, p)| (format!("{name}{suffix}"), p))
                .collect(),
        ),
        shadow: None,
    }
}

/// The rules as shadow rules: evaluated, the matching one named in the metadata.
fn asking(rules: BTreeMap<String, Policy>) -> ActionRules {
    ActionRules {
        enforced: None,
        shadow: Some(rules),
    }
}

/// What enables a provider's ext_authz filter: the RBAC filter `filter` named one of its
/// rules.
fn enabled_by(filter: &str, provider: &str) -> MetadataMatcher {
    MetadataMatcher {
        filter: filter.into(),
        path: vec![PathSegment {
            segment: Some(path_segment::Segment::Key(format!(
                "{SHADOW_PREFIX}shadow_effective_policy_id"
            ))),
        }],
        value: Some(ValueMatcher {
            match_pattern: Some(value_matcher::MatchPattern::StringMatch(StringMatcher {
                match_pattern: Some(string_matcher::MatchPattern::Prefix(format!(
                    "{}-",
                    provider_prefix(provider)
                ))),
                ignore_case: false,
            })),
        }),
        ..Default::default()
    }
}

fn timeout(p: &ResolvedExtAuthz) -> Duration {
    let ms = p.provider.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

fn grpc_service(p: &ResolvedExtAuthz) -> GrpcService {
    GrpcService {
        timeout: Some(timeout(p)),
        target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(
            grpc_service::EnvoyGrpc {
                cluster_name: p.cluster.clone(),
                authority: p.host.clone(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// Istio's header patterns: `*x` a suffix, `x*` a prefix, else exact; case-insensitive.
fn headers(list: &[String]) -> Option<ListStringMatcher> {
    use string_matcher::MatchPattern as P;
    (!list.is_empty()).then(|| ListStringMatcher {
        patterns: list
            .iter()
            .map(|h| StringMatcher {
                match_pattern: Some(if let Some(rest) = h.strip_prefix('*') {
                    P::Suffix(rest.into())
                } else if let Some(rest) = h.strip_suffix('*') {
                    P::Prefix(rest.into())
                } else {
                    P::Exact(h.clone())
                }),
                ignore_case: true,
            })
            .collect(),
    })
}

/// The HTTP ext_authz filter of a usable provider.
fn http_ext_authz(p: &ResolvedExtAuthz) -> http_ext::ExtAuthz {
    let cfg = &p.provider;
    let mut out = http_ext::ExtAuthz {
        transport_api_version: ApiVersion::V3 as i32,
        failure_mode_allow: cfg.fail_open,
        status_on_error: cfg
            .status_on_error
            .map(|code| HttpStatus { code: code as i32 }),
        filter_enabled_metadata: Some(enabled_by(HTTP_RBAC, &cfg.name)),
        with_request_body: cfg.body.as_ref().map(|b| http_ext::BufferSettings {
            max_request_bytes: b.max_request_bytes,
            allow_partial_message: b.allow_partial_message,
            pack_as_bytes: b.pack_as_bytes,
        }),
        ..Default::default()
    };
    match &cfg.api {
        ExtAuthzApi::Grpc => {
            out.services = Some(http_ext::ext_authz::Services::GrpcService(grpc_service(p)));
        }
        ExtAuthzApi::Http(h) => {
            let responses = [
                &h.upstream_on_allow,
                &h.downstream_on_deny,
                &h.downstream_on_allow,
            ];
            out.allowed_headers = headers(&h.request_headers);
            out.services = Some(http_ext::ext_authz::Services::HttpService(
                http_ext::HttpService {
                    server_uri: Some(HttpUri {
                        // Required, not used: the cluster says where.
                        uri: format!("http://{}", p.host),
                        timeout: Some(timeout(p)),
                        http_upstream_type: Some(http_uri::HttpUpstreamType::Cluster(
                            p.cluster.clone(),
                        )),
                    }),
                    path_prefix: h.path_prefix.clone(),
                    authorization_request: (!h.additional_headers.is_empty()).then(|| {
                        http_ext::AuthorizationRequest {
                            headers_to_add: h
                                .additional_headers
                                .iter()
                                .map(|(k, v)| HeaderValue {
                                    key: k.clone(),
                                    value: v.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        }
                    }),
                    authorization_response: responses.iter().any(|l| !l.is_empty()).then(|| {
                        http_ext::AuthorizationResponse {
                            allowed_upstream_headers: headers(&h.upstream_on_allow),
                            allowed_client_headers: headers(&h.downstream_on_deny),
                            allowed_client_headers_on_success: headers(&h.downstream_on_allow),
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
            ));
        }
    }
    out
}

/// A RBAC filter of CUSTOM rules: action DENY, as Istio builds them.
fn http_rbac(rules: &ActionRules, shadow_prefix: &str) -> HttpFilter {
    http_rbac_filter(AuthzAction::Deny, rules, shadow_prefix.into())
}

fn network_rbac(rules: &ActionRules, shadow_prefix: &str) -> Filter {
    network_rbac_filter(AuthzAction::Deny, rules, shadow_prefix.into())
}

/// The CUSTOM filters of a connection manager, first among its HTTP filters.
pub fn http_custom_filters(
    custom: &[NamedCustom],
    providers: &Providers,
    tds: &[String],
) -> Vec<HttpFilter> {
    let mut out = Vec::new();
    for (name, rules) in by_provider(custom, tds, true) {
        match providers.get(name) {
            Some(Ok(p)) => {
                out.push(http_rbac(&asking(rules), SHADOW_PREFIX));
                out.push(HttpFilter {
                    name: HTTP_EXT_AUTHZ.into(),
                    config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
                        http_ext_authz(p),
                    ))),
                    ..Default::default()
                });
            }
            _ => out.push(http_rbac(&denying(rules, BAD_PROVIDER_SUFFIX), "")),
        }
    }
    out
}

/// The CUSTOM filters of a chain that proxies bytes, first among its filters.
pub fn network_custom_filters(
    custom: &[NamedCustom],
    providers: &Providers,
    tds: &[String],
) -> Vec<Filter> {
    let mut out = Vec::new();
    for (name, rules) in by_provider(custom, tds, false) {
        match providers.get(name) {
            Some(Ok(p)) if p.provider.api == ExtAuthzApi::Grpc => {
                out.push(network_rbac(&asking(rules), SHADOW_PREFIX));
                let ext = net_ext::ExtAuthz {
                    stat_prefix: "tcp.".into(),
                    grpc_service: Some(grpc_service(p)),
                    failure_mode_allow: p.provider.fail_open,
                    transport_api_version: ApiVersion::V3 as i32,
                    filter_enabled_metadata: Some(enabled_by(NETWORK_RBAC, &p.provider.name)),
                    ..Default::default()
                };
                out.push(Filter {
                    name: NETWORK_EXT_AUTHZ.into(),
                    config_type: Some(filter::ConfigType::TypedConfig(pack_any(ext))),
                });
            }
            Some(Ok(_)) => out.push(network_rbac(
                &denying(rules, HTTP_PROVIDER_ON_TCP_SUFFIX),
                "",
            )),
            _ => out.push(network_rbac(&denying(rules, BAD_PROVIDER_SUFFIX), "")),
        }
    }
    out
}
