//! Envoy's RBAC filters of the security stopgap ([`crate::model::InboundSecurity`]): a
//! network filter that refuses every connection (an AuthorizationPolicy meshflow cannot
//! evaluate selects the workload), and an HTTP filter that refuses every request carrying a
//! token where a RequestAuthentication looks for one (meshflow cannot validate it).
//!
//! Each filter holds at most one policy: `policies` is a map, and one entry keeps the
//! encoded bytes (the resource's version) the same from one build to the next.

use envoy_types::pb::envoy::config::listener::v3::{filter, Filter};
use envoy_types::pb::envoy::config::rbac::v3::{
    permission, principal, rbac::Action, Permission, Policy, Principal, Rbac,
};
use envoy_types::pb::envoy::config::route::v3::{header_matcher, HeaderMatcher};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpFilter,
};
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher, RegexMatcher, StringMatcher};
use envoy_types::util::pack_any;
use std::collections::BTreeSet;

const NETWORK_RBAC: &str = "envoy.filters.network.rbac";
pub const HTTP_RBAC: &str = "envoy.filters.http.rbac";

/// The name of the one policy of the token filter, which Envoy reports in a refused
/// request's response details (`rbac_access_denied_matched_policy[…]`).
pub const TOKEN_POLICY: &str = "meshflow-unverified-request-token";

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

fn header_rule(name: &str, spec: header_matcher::HeaderMatchSpecifier) -> Permission {
    Permission {
        rule: Some(permission::Rule::Header(HeaderMatcher {
            name: name.into(),
            header_match_specifier: Some(spec),
            ..Default::default()
        })),
    }
}

/// The HTTP RBAC filter that refuses (403) a request carrying any of the headers, query
/// parameters or cookies named: a DENY policy on their presence, whatever their value.
/// `None` when nothing is named.
pub fn token_filter(
    headers: &BTreeSet<String>,
    params: &BTreeSet<String>,
    cookies: &BTreeSet<String>,
) -> Option<HttpFilter> {
    use header_matcher::HeaderMatchSpecifier as Spec;
    let mut rules: Vec<Permission> = headers
        .iter()
        .map(|h| header_rule(h, Spec::PresentMatch(true)))
        .collect();
    // A parameter of the query: `:path` holds it (RE2 matches the whole value).
    rules.extend(params.iter().map(|p| {
        header_rule(
            ":path",
            Spec::StringMatch(regex(format!("[^?]*\\?(.*&)?{}(=.*|&.*)?", quote(p)))),
        )
    }));
    // A cookie of the `cookie` header (`a=1; b=2`).
    rules.extend(cookies.iter().map(|c| {
        header_rule(
            "cookie",
            Spec::StringMatch(regex(format!("(.*;\\s*)?{}=.*", quote(c)))),
        )
    }));
    if rules.is_empty() {
        return None;
    }
    let policy = Policy {
        permissions: vec![Permission {
            rule: Some(permission::Rule::OrRules(
                envoy_types::pb::envoy::config::rbac::v3::permission::Set { rules },
            )),
        }],
        principals: vec![Principal {
            identifier: Some(principal::Identifier::Any(true)),
        }],
        ..Default::default()
    };
    let rbac = HttpRbac {
        rules: Some(Rbac {
            action: Action::Deny as i32,
            policies: [(TOKEN_POLICY.to_string(), policy)].into_iter().collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some(HttpFilter {
        name: HTTP_RBAC.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(rbac))),
        ..Default::default()
    })
}
