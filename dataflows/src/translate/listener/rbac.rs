//! Envoy's RBAC filters for the security policies of a workload
//! ([`crate::model::InboundSecurity`]): the AuthorizationPolicies' rules, per action, on
//! HTTP connection managers (after the RequestAuthentications' `jwt_authn`, whose verified
//! payload their token fields read) and on chains that proxy bytes; and a network filter
//! that refuses every connection (what [`super::refusals`] puts on a chain whose connection
//! manager cannot be read back).

use crate::model::{AuthzAction, AuthzField, AuthzMatch, CheckedRule, NamedAuthz};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter};
use envoy_types::pb::envoy::config::rbac::v3::{
    permission, principal, rbac::Action, MetadataSource, Permission, Policy, Principal, Rbac,
    SourcedMetadata,
};
use envoy_types::pb::envoy::config::route::v3::{header_matcher, HeaderMatcher};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpFilter,
};
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    list_matcher, metadata_matcher, string_matcher, value_matcher, ListMatcher, MetadataMatcher,
    RegexMatcher, StringMatcher, ValueMatcher,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::util::pack_any;
use prost::Message;
use std::collections::BTreeMap;

pub const NETWORK_RBAC: &str = "envoy.filters.network.rbac";
pub const HTTP_RBAC: &str = "envoy.filters.http.rbac";

/// The network RBAC filter that refuses every connection: rules with action ALLOW and no
/// policy, which Envoy's API defines as "if present and empty, DENY". It runs before any
/// other filter of the chain, so no byte reaches the application.
pub fn deny_all_filter() -> Filter {
    let rbac = NetworkRbac {
        rules: Some(Rbac {
            action: Action::Allow as i32,
            ..Default::default()
        }),
        stat_prefix: "meshflow_authz_not_enforced.".into(),
        ..Default::default()
    };
    Filter {
        name: NETWORK_RBAC.into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(rbac))),
    }
}

/// Whether `f` is [`deny_all_filter`]'s filter (tests and the simulation read it).
pub fn is_deny_all(f: &Filter) -> bool {
    f.name == NETWORK_RBAC
}

fn regex(r: String) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(string_matcher::MatchPattern::SafeRegex(RegexMatcher {
            regex: r,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `s` with every ASCII punctuation character escaped, for RE2 (which takes `\` before
/// punctuation as the literal character, and rejects it before letters).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Istio's value patterns: `*` anything (present), `*x` a suffix, `x*` a prefix, else
/// exact; `prefix` (`spiffe://` for principals) goes before what the value writes.
fn pattern(v: &str, prefix: &str, ignore_case: bool) -> StringMatcher {
    use string_matcher::MatchPattern as P;
    let m = if v == "*" {
        return StringMatcher {
            ignore_case,
            ..regex(".+".into())
        };
    } else if let Some(rest) = v.strip_prefix('*') {
        if prefix.is_empty() {
            P::Suffix(rest.into())
        } else {
            return regex(format!("{}.*{}", quote(prefix), quote(rest)));
        }
    } else if let Some(rest) = v.strip_suffix('*') {
        P::Prefix(format!("{prefix}{rest}"))
    } else {
        P::Exact(format!("{prefix}{v}"))
    };
    StringMatcher {
        match_pattern: Some(m),
        ignore_case,
    }
}

fn prefix(p: String) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(string_matcher::MatchPattern::Prefix(p)),
        ignore_case: false,
    }
}

/// A header's value by Istio's patterns, `*` meaning present.
fn header_value(name: &str, v: &str, ignore_case: bool) -> HeaderMatcher {
    use header_matcher::HeaderMatchSpecifier as Spec;
    HeaderMatcher {
        name: name.into(),
        header_match_specifier: Some(if v == "*" {
            Spec::PresentMatch(true)
        } else {
            Spec::StringMatch(pattern(v, "", ignore_case))
        }),
        ..Default::default()
    }
}

/// `10.0.0.0/8` or a bare address as Envoy's range (the conversion checked it).
fn cidr(v: &str) -> envoy_types::pb::envoy::config::core::v3::CidrRange {
    crate::translate::cidr(v)
}

/// A principal-name regex for a glob (`*` any run).
fn glob(v: &str) -> String {
    v.split('*').map(quote).collect::<Vec<_>>().join(".*")
}

fn principal_name(m: StringMatcher) -> principal::Identifier {
    principal::Identifier::Authenticated(principal::Authenticated {
        principal_name: Some(m),
    })
}

/// One value of a source-side field as Envoy's principal; `ns`: the policy's namespace.
fn source_value(field: &AuthzField, v: &str, ns: &str) -> principal::Identifier {
    use principal::Identifier as I;
    match field {
        AuthzField::Principal => principal_name(pattern(v, "spiffe://", false)),
        AuthzField::Namespace => principal_name(regex(format!(".*/ns/{}/.*", glob(v)))),
        // Istio's: any identity; the domain exactly; a pattern within the domain.
        AuthzField::TrustDomain => principal_name(match v.split_once('*') {
            None => prefix(format!("spiffe://{v}/")),
            Some(("", "")) => prefix("spiffe://".into()),
            Some((before, after)) => regex(format!(
                "spiffe://{}[^/]*{}/.*",
                quote(before),
                quote(after)
            )),
        }),
        AuthzField::ServiceAccount => {
            let (sa_ns, sa) = v.split_once('/').unwrap_or((ns, v));
            // Istio's (1.29.2, CVE-2026-39350: names quoted, so `.` is no wildcard).
            principal_name(regex(format!(
                "spiffe://.+/ns/{}/(.+/|)sa/{}(/.+)?",
                quote(sa_ns),
                quote(sa)
            )))
        }
        AuthzField::SourceIp => I::DirectRemoteIp(cidr(v)),
        AuthzField::RemoteIp => I::RemoteIp(cidr(v)),
        AuthzField::Header(name) => I::Header(header_value(name, v, false)),
        AuthzField::RequestPrincipal => request_principal(v),
        AuthzField::Audience => dynamic(claim(&["aud".into()], pattern(v, "", false))),
        AuthzField::Presenter => dynamic(claim(&["azp".into()], pattern(v, "", false))),
        AuthzField::Claim(path) => dynamic(claim(path, pattern(v, "", false))),
        // Operation-side fields are not given here ([`AuthzField::of_source`]).
        _ => I::NotId(Box::new(Principal {
            identifier: Some(I::Any(true)),
        })),
    }
}

use crate::translate::claims::{claim, claim_string};

/// A `requestPrincipals` value, `ISS/SUB` split at the last `/` (an issuer is often a URL),
/// as the token's `iss` and `sub`, with Istio's wildcards: `*` any token, `*SUFFIX` and
/// `PREFIX*` on the whole value, `*/SUB` any issuer, `ISS/*` any subject.
fn request_principal(v: &str) -> principal::Identifier {
    use principal::Identifier as I;
    let any = || regex(".+".into());
    let exact = |s: &str| StringMatcher {
        match_pattern: Some(string_matcher::MatchPattern::Exact(s.into())),
        ignore_case: false,
    };
    let (iss, sub) = match v.rsplit_once('/') {
        Some((i, s)) => (i, Some(s)),
        None => (v, None),
    };
    let (iss_m, sub_m) = if v == "*" {
        (any(), any())
    } else if v.starts_with('*') {
        match sub {
            Some(s) if iss == "*" => (any(), exact(s)),
            Some(s) => (pattern(iss, "", false), exact(s)),
            None => (any(), pattern(v, "", false)),
        }
    } else if v.ends_with('*') {
        match sub {
            Some("*") => (exact(iss), any()),
            Some(s) => (exact(iss), pattern(s, "", false)),
            None => (pattern(v, "", false), any()),
        }
    } else {
        (exact(iss), exact(sub.unwrap_or("")))
    };
    let on = |key: &str, m: StringMatcher| Principal {
        identifier: Some(dynamic(claim_string(key, m))),
    };
    I::AndIds(principal::Set {
        ids: vec![on("iss", iss_m), on("sub", sub_m)],
    })
}

/// A principal on the request's dynamic metadata (where `jwt_authn` leaves the payload).
fn dynamic(m: MetadataMatcher) -> principal::Identifier {
    principal::Identifier::SourcedMetadata(SourcedMetadata {
        metadata_matcher: Some(m),
        metadata_source: MetadataSource::Dynamic as i32,
    })
}

/// One value of an operation-side field as Envoy's permission.
fn operation_value(field: &AuthzField, v: &str) -> permission::Rule {
    use permission::Rule as R;
    match field {
        AuthzField::Host => R::Header(header_value(":authority", v, true)),
        AuthzField::Method => R::Header(header_value(":method", v, false)),
        // Istio's `{*}` and `{**}` are Envoy's URI template `*` and `**`.
        AuthzField::Path if v.contains("{*}") || v.contains("{**}") => {
            use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3::UriTemplateMatchConfig;
            R::UriTemplate(
                envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig {
                    name: "uri-template".into(),
                    typed_config: Some(pack_any(UriTemplateMatchConfig {
                        path_template: v.replace("{**}", "**").replace("{*}", "*"),
                    })),
                },
            )
        }
        AuthzField::Path => R::UrlPath(envoy_types::pb::envoy::r#type::matcher::v3::PathMatcher {
            rule: Some(
                envoy_types::pb::envoy::r#type::matcher::v3::path_matcher::Rule::Path(pattern(
                    v, "", false,
                )),
            ),
        }),
        AuthzField::Port => R::DestinationPort(v.parse().unwrap_or(0)),
        AuthzField::DestinationIp => R::DestinationIp(cidr(v)),
        AuthzField::Sni => R::RequestedServerName(pattern(v, "", false)),
        AuthzField::FilterMetadata { filter, key } => {
            use value_matcher::MatchPattern as V;
            let value = match v.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                Some(item) => V::ListMatch(Box::new(ListMatcher {
                    match_pattern: Some(list_matcher::MatchPattern::OneOf(Box::new(
                        ValueMatcher {
                            match_pattern: Some(V::StringMatch(pattern(item, "", false))),
                        },
                    ))),
                })),
                None => V::StringMatch(pattern(v, "", false)),
            };
            R::SourcedMetadata(SourcedMetadata {
                metadata_matcher: Some(MetadataMatcher {
                    filter: filter.clone(),
                    path: vec![metadata_matcher::PathSegment {
                        segment: Some(metadata_matcher::path_segment::Segment::Key(key.clone())),
                    }],
                    value: Some(ValueMatcher {
                        match_pattern: Some(value),
                    }),
                    ..Default::default()
                }),
                metadata_source: MetadataSource::Dynamic as i32,
            })
        }
        // Source-side and unevaluable fields are not given here.
        _ => R::NotRule(Box::new(Permission {
            rule: Some(R::Any(true)),
        })),
    }
}

/// A principal value for each trust domain of the mesh (`tds`: its own and its aliases), as
/// Istio migrates them: `TD/ns/NS/sa/SA` whose `TD` is one of them (or Istio's default
/// `cluster.local`) stands for the same account in every one, since inbound mTLS accepts
/// them all; anything else as written.
fn in_trust_domains(v: &str, tds: &[String]) -> Vec<String> {
    let parts: Vec<&str> = v.split('/').collect();
    match parts.as_slice() {
        [td, "ns", _, "sa", _]
            if !tds.is_empty() && (*td == "cluster.local" || tds.iter().any(|t| t == td)) =>
        {
            let rest = &v[td.len()..];
            tds.iter().map(|t| format!("{t}{rest}")).collect()
        }
        _ => vec![v.to_string()],
    }
}

fn source_match(m: &AuthzMatch, ns: &str, tds: &[String]) -> Principal {
    use principal::Identifier as I;
    let values: Vec<String> = match m.field {
        AuthzField::Principal => m
            .values
            .iter()
            .flat_map(|v| in_trust_domains(v, tds))
            .collect(),
        _ => m.values.clone(),
    };
    let ids: Vec<Principal> = values
        .iter()
        .map(|v| Principal {
            identifier: Some(source_value(&m.field, v, ns)),
        })
        .collect();
    let any_of = match <[Principal; 1]>::try_from(ids) {
        Ok([one]) => one,
        Err(ids) => Principal {
            identifier: Some(I::OrIds(principal::Set { ids })),
        },
    };
    if m.not {
        Principal {
            identifier: Some(I::NotId(Box::new(any_of))),
        }
    } else {
        any_of
    }
}

fn operation_match(m: &AuthzMatch) -> Permission {
    use permission::Rule as R;
    let rules: Vec<Permission> = m
        .values
        .iter()
        .map(|v| Permission {
            rule: Some(operation_value(&m.field, v)),
        })
        .collect();
    let any_of = match <[Permission; 1]>::try_from(rules) {
        Ok([one]) => one,
        Err(rules) => Permission {
            rule: Some(R::OrRules(permission::Set { rules })),
        },
    };
    if m.not {
        Permission {
            rule: Some(R::NotRule(Box::new(any_of))),
        }
    } else {
        any_of
    }
}

/// One rule as Envoy's policy: any of its sources (each all of its matches) and any of its
/// operations (likewise).
pub(super) fn policy_of(rule: &CheckedRule, ns: &str, tds: &[String]) -> Policy {
    use permission::Rule as R;
    use principal::Identifier as I;
    let principals = rule
        .sources
        .iter()
        .map(|ms| match ms.as_slice() {
            [] => Principal {
                identifier: Some(I::Any(true)),
            },
            ms => Principal {
                identifier: Some(I::AndIds(principal::Set {
                    ids: ms.iter().map(|m| source_match(m, ns, tds)).collect(),
                })),
            },
        })
        .collect();
    let permissions = rule
        .operations
        .iter()
        .map(|ms| match ms.as_slice() {
            [] => Permission {
                rule: Some(R::Any(true)),
            },
            ms => Permission {
                rule: Some(R::AndRules(permission::Set {
                    rules: ms.iter().map(operation_match).collect(),
                })),
            },
        })
        .collect();
    Policy {
        permissions,
        principals,
        ..Default::default()
    }
}

/// The policies of one action's filter, by name: those enforced (`None`: no policy of the
/// action is, so the filter has no `rules` and enforces nothing) and the dry-run ones, its
/// `shadow_rules` (`None`: none).
#[derive(Default)]
pub(super) struct ActionRules {
    pub(super) enforced: Option<BTreeMap<String, Policy>>,
    pub(super) shadow: Option<BTreeMap<String, Policy>>,
}

/// Per action present (AUDIT, DENY, ALLOW, in Envoy's order of filters), its policies by
/// name: the rules of every policy of that action, as a chain (`http` or not) checks them.
/// An enforced ALLOW policy whose rules all go (or that has none) still makes the ALLOW
/// filter's `rules` present, so what no other ALLOW policy allows is denied, as in Istio.
fn by_action(authz: &[NamedAuthz], tds: &[String], http: bool) -> Vec<(AuthzAction, ActionRules)> {
    let mut out: BTreeMap<AuthzAction, ActionRules> = BTreeMap::new();
    for a in authz {
        let entry = out.entry(a.policy.action).or_default();
        let policies = if a.policy.dry_run {
            entry.shadow.get_or_insert_with(BTreeMap::new)
        } else {
            entry.enforced.get_or_insert_with(BTreeMap::new)
        };
        for (i, rule) in a.policy.rules.iter().enumerate() {
            if let Some(checked) = rule.on_chain(a.policy.action, http) {
                policies.insert(a.rule_name(i), policy_of(&checked, &a.namespace, tds));
            }
        }
    }
    out.into_iter().collect()
}

/// Istio's stat prefix of a filter's shadow (dry-run) rules (none without them).
fn shadow_prefix(action: AuthzAction, rules: &ActionRules) -> String {
    let prefix = match action {
        AuthzAction::Allow => "istio_dry_run_allow_",
        AuthzAction::Deny => "istio_dry_run_deny_",
        AuthzAction::Audit => "",
    };
    rules
        .shadow
        .as_ref()
        .map(|_| prefix.to_string())
        .unwrap_or_default()
}

/// A filter's config: `head` (its other fields) with `rules` (field 1 of both RBAC filters'
/// configs) and `shadow_rules` (field 2) written after it.
pub(super) fn rbac_config(
    head: Vec<u8>,
    action: AuthzAction,
    rules: &ActionRules,
    type_url: &str,
) -> Any {
    use prost::encoding::{encode_key, encode_varint, WireType};
    let mut value = head;
    for (field, policies) in [(1, &rules.enforced), (2, &rules.shadow)] {
        if let Some(policies) = policies {
            let bytes = rbac_bytes(action, policies);
            encode_key(field, WireType::LengthDelimited, &mut value);
            encode_varint(bytes.len() as u64, &mut value);
            value.extend_from_slice(&bytes);
        }
    }
    Any {
        type_url: type_url.into(),
        value,
    }
}

/// Envoy's RBAC message with its `policies` in name order: prost keeps maps in a hash
/// map, whose order would change the bytes (the resource's version) from one build to the
/// next. The map's entries are written after the other fields, which protobuf allows.
fn rbac_bytes(action: AuthzAction, policies: &BTreeMap<String, Policy>) -> Vec<u8> {
    use prost::encoding::{encode_key, encode_varint, WireType};
    let envoy_action = match action {
        AuthzAction::Audit => Action::Log,
        AuthzAction::Deny => Action::Deny,
        AuthzAction::Allow => Action::Allow,
    };
    let mut buf = Rbac {
        action: envoy_action as i32,
        ..Default::default()
    }
    .encode_to_vec();
    for (name, policy) in policies {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, name, &mut entry);
        prost::encoding::message::encode(2, policy, &mut entry);
        // `policies` is field 2 of envoy.config.rbac.v3.RBAC.
        encode_key(2, WireType::LengthDelimited, &mut buf);
        encode_varint(entry.len() as u64, &mut buf);
        buf.extend_from_slice(&entry);
    }
    buf
}

/// One network RBAC filter of `action` with `rules` (Istio's `tcp.` stat prefix) and, when
/// it has shadow rules, their stat prefix `shadow_prefix`.
pub(super) fn network_rbac_filter(
    action: AuthzAction,
    rules: &ActionRules,
    shadow_prefix: String,
) -> Filter {
    let head = NetworkRbac {
        stat_prefix: "tcp.".into(),
        shadow_rules_stat_prefix: shadow_prefix,
        ..Default::default()
    }
    .encode_to_vec();
    let any = rbac_config(
        head,
        action,
        rules,
        "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC",
    );
    Filter {
        name: NETWORK_RBAC.into(),
        config_type: Some(filter::ConfigType::TypedConfig(any)),
    }
}

/// One HTTP RBAC filter of `action` with `rules`, as [`network_rbac_filter`].
pub(super) fn http_rbac_filter(
    action: AuthzAction,
    rules: &ActionRules,
    shadow_prefix: String,
) -> HttpFilter {
    let head = HttpRbac {
        shadow_rules_stat_prefix: shadow_prefix,
        ..Default::default()
    }
    .encode_to_vec();
    let any = rbac_config(
        head,
        action,
        rules,
        "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
    );
    HttpFilter {
        name: HTTP_RBAC.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(any)),
        ..Default::default()
    }
}

/// The network RBAC filters of the AuthorizationPolicies on a chain that proxies bytes,
/// AUDIT, DENY, ALLOW (Istio's `tcp.` stat prefix).
/// `tds`: the mesh's trust domains ([`in_trust_domains`]).
pub fn network_authz_filters(authz: &[NamedAuthz], tds: &[String]) -> Vec<Filter> {
    by_action(authz, tds, false)
        .into_iter()
        .map(|(action, rules)| network_rbac_filter(action, &rules, shadow_prefix(action, &rules)))
        .collect()
}

/// The HTTP RBAC filters of the AuthorizationPolicies on a connection manager, AUDIT,
/// DENY, ALLOW.
/// `tds`: the mesh's trust domains ([`in_trust_domains`]).
pub fn http_authz_filters(authz: &[NamedAuthz], tds: &[String]) -> Vec<HttpFilter> {
    by_action(authz, tds, true)
        .into_iter()
        .map(|(action, rules)| http_rbac_filter(action, &rules, shadow_prefix(action, &rules)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A principal of the mesh's trust domain (or Istio's default) stands for the same
    /// account in each alias, which inbound mTLS accepts too: a DENY on it cannot be passed
    /// with an alias's certificate. Other values stay as written.
    #[test]
    fn principals_cover_every_trust_domain_of_the_mesh() {
        let tds = vec!["corp.example".to_string(), "old.example".to_string()];
        for v in [
            "corp.example/ns/a/sa/b",
            "old.example/ns/a/sa/b",
            "cluster.local/ns/a/sa/b",
        ] {
            assert_eq!(
                in_trust_domains(v, &tds),
                ["corp.example/ns/a/sa/b", "old.example/ns/a/sa/b"],
                "{v}"
            );
        }
        for v in ["other.example/ns/a/sa/b", "*", "corp.example/ns/a/*"] {
            assert_eq!(in_trust_domains(v, &tds), [v], "{v}");
        }
        assert_eq!(
            in_trust_domains("cluster.local/ns/a/sa/b", &[]),
            ["cluster.local/ns/a/sa/b"]
        );
    }
}
