//! AuthorizationPolicy translated into Envoy's RBAC on the inbound chains of the sidecars
//! it selects: in the connection manager of HTTP chains (AUDIT, DENY, ALLOW, each present
//! when a policy of its action applies), as network filters (`tcp.` stats) on chains that
//! proxy bytes, where an ALLOW rule with a match only HTTP has goes and a DENY rule loses
//! just that match, as Istio's TCP rules; rules named `ns[NS]-policy[NAME]-rule[I]`.

use crate::support::labels;
use dataflows::model::*;
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::rbac::v3::Rbac;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
use prost::Message;
use std::collections::BTreeSet;

fn authz(ns: &str, name: &str, action: AuthzAction, rules: Vec<AuthzRule>) -> Record {
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(Kind::AuthorizationPolicy, ns, name),
        created: String::new(),
        selector: Some(labels(&[("app", "ratings")])),
        effect: PolicyEffect::Authz(AuthzPolicy {
            action,
            rules,
            dry_run: false,
        }),
    })
}

fn to(field: AuthzField, value: &str) -> AuthzRule {
    AuthzRule {
        to: vec![vec![AuthzMatch {
            field,
            values: vec![value.into()],
            not: false,
        }]],
        ..Default::default()
    }
}

/// `(action, stat prefix, policy names)` of each RBAC filter of a chain, in order: HTTP
/// RBAC filters of its connection manager, else its network RBAC filters.
fn rbacs(c: &FilterChain) -> Vec<(i32, String, BTreeSet<String>)> {
    let summary = |r: Rbac, prefix: String| (r.action, prefix, r.policies.into_keys().collect());
    let mut out = Vec::new();
    for f in &c.filters {
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            continue;
        };
        if f.name == "envoy.filters.network.rbac" {
            let r = NetworkRbac::decode(&any.value[..]).expect("network RBAC");
            out.push(summary(r.rules.expect("rules"), r.stat_prefix));
        } else if f.name == "envoy.filters.network.http_connection_manager" {
            let hcm = HttpConnectionManager::decode(&any.value[..]).expect("HCM");
            for h in hcm
                .http_filters
                .iter()
                .filter(|h| h.name == "envoy.filters.http.rbac")
            {
                let Some(http_filter::ConfigType::TypedConfig(any)) = &h.config_type else {
                    continue;
                };
                let r = HttpRbac::decode(&any.value[..]).expect("HTTP RBAC");
                out.push(summary(r.rules.expect("rules"), String::new()));
            }
        }
    }
    out
}

fn names(xs: &[&str]) -> BTreeSet<String> {
    xs.iter().map(|x| x.to_string()).collect()
}

/// ratings (HTTP 9080) under an ALLOW policy of two rules (GET; port 9080) and a DENY one:
/// its HTTP chains run DENY then ALLOW with both rules; the catch-all (bytes) keeps the
/// DENY and only the port rule of the ALLOW; reviews is untouched; retracting opens it.
#[test]
fn authorization_policies_become_rbac_on_each_kind_of_chain() {
    let (mut m, ratings, reviews) = crate::security::two_workloads();
    let before_reviews = m.listener_body(&reviews, "virtualInbound");
    let allow = authz(
        "default",
        "allow",
        AuthzAction::Allow,
        vec![to(AuthzField::Method, "GET"), to(AuthzField::Port, "9080")],
    );
    let deny = authz(
        "default",
        "deny",
        AuthzAction::Deny,
        vec![to(AuthzField::Path, "/admin*")],
    );
    m.insert(vec![allow.clone(), deny.clone()]);
    let l: Listener = m.listener_body(&ratings, "virtualInbound");
    let (deny_action, allow_action) = (1, 0);
    let both_rules = names(&[
        "ns[default]-policy[allow]-rule[0]",
        "ns[default]-policy[allow]-rule[1]",
    ]);
    let deny_rule = names(&["ns[default]-policy[deny]-rule[0]"]);
    for c in &l.filter_chains {
        let got = rbacs(c);
        if c.name.starts_with("inbound|9080||") {
            assert_eq!(
                got,
                [
                    (deny_action, String::new(), deny_rule.clone()),
                    (allow_action, String::new(), both_rules.clone())
                ],
                "{}",
                c.name
            );
        } else {
            // Bytes: the path rule of the DENY loses its path (denies every connection,
            // as Istio's TCP rules), the ALLOW keeps the port rule only.
            assert_eq!(
                got,
                [
                    (deny_action, "tcp.".into(), deny_rule.clone()),
                    (
                        allow_action,
                        "tcp.".into(),
                        names(&["ns[default]-policy[allow]-rule[1]"])
                    )
                ],
                "{}",
                c.name
            );
            assert_eq!(
                c.filters.last().map(|f| f.name.as_str()),
                Some("envoy.filters.network.tcp_proxy")
            );
        }
    }
    assert_eq!(m.listener_body(&reviews, "virtualInbound"), before_reviews);
    // Translated: no error.
    assert!(crate::support::gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());
    m.retract(vec![allow, deny]);
    let l = m.listener_body(&ratings, "virtualInbound");
    assert!(l.filter_chains.iter().all(|c| rbacs(c).is_empty()));
}

/// `(enforced policy names, shadow policy names, shadow stat prefix)` of each HTTP RBAC
/// filter of a chain's connection manager, in order (`None`: the field is absent).
#[allow(clippy::type_complexity)]
fn shadows(c: &FilterChain) -> Vec<(Option<BTreeSet<String>>, Option<BTreeSet<String>>, String)> {
    let keys = |r: Option<Rbac>| r.map(|r| r.policies.into_keys().collect());
    let Some(hcm) = c.filters.iter().find_map(|f| match &f.config_type {
        Some(filter::ConfigType::TypedConfig(any))
            if f.name.ends_with("http_connection_manager") =>
        {
            HttpConnectionManager::decode(&any.value[..]).ok()
        }
        _ => None,
    }) else {
        return Vec::new();
    };
    hcm.http_filters
        .iter()
        .filter(|h| h.name == "envoy.filters.http.rbac")
        .filter_map(|h| match &h.config_type {
            Some(http_filter::ConfigType::TypedConfig(any)) => {
                HttpRbac::decode(&any.value[..]).ok()
            }
            _ => None,
        })
        .map(|r| {
            (
                keys(r.rules),
                keys(r.shadow_rules),
                r.shadow_rules_stat_prefix,
            )
        })
        .collect()
}

/// A dry-run policy (`istio.io/dry-run`) is evaluated, not enforced: its rules are the
/// filter's `shadow_rules` under Istio's stat prefix. A dry-run DENY alone makes a DENY
/// filter without `rules` (it enforces nothing); a dry-run ALLOW beside an enforced one
/// shares its filter, and a dry-run ALLOW alone leaves no `rules`, so it denies nothing.
#[test]
fn dry_run_policies_are_shadow_rules() {
    let (mut m, ratings, _) = crate::security::two_workloads();
    let dry = |name: &str, action| match authz(
        "default",
        name,
        action,
        vec![to(AuthzField::Method, "GET")],
    ) {
        Record::Security(mut p) => {
            if let PolicyEffect::Authz(a) = &mut p.effect {
                a.dry_run = true;
            }
            Record::Security(p)
        }
        other => other,
    };
    let http_chain = |m: &crate::support::Mesh| {
        let l: Listener = m.listener_body(&ratings, "virtualInbound");
        l.filter_chains
            .into_iter()
            .find(|c| c.name == "inbound|9080||")
            .expect("the HTTP chain")
    };
    m.insert(vec![dry("shadow-deny", AuthzAction::Deny)]);
    assert_eq!(
        shadows(&http_chain(&m)),
        [(
            None,
            Some(names(&["ns[default]-policy[shadow-deny]-rule[0]"])),
            "istio_dry_run_deny_".to_string()
        )]
    );
    m.insert(vec![
        dry("shadow-allow", AuthzAction::Allow),
        authz(
            "default",
            "allow",
            AuthzAction::Allow,
            vec![to(AuthzField::Port, "9080")],
        ),
    ]);
    assert_eq!(
        shadows(&http_chain(&m))[1],
        (
            Some(names(&["ns[default]-policy[allow]-rule[0]"])),
            Some(names(&["ns[default]-policy[shadow-allow]-rule[0]"])),
            "istio_dry_run_allow_".to_string()
        )
    );
    m.retract(vec![authz(
        "default",
        "allow",
        AuthzAction::Allow,
        vec![to(AuthzField::Port, "9080")],
    )]);
    assert_eq!(
        shadows(&http_chain(&m))[1].0,
        None,
        "a dry-run ALLOW alone denies nothing"
    );
}
