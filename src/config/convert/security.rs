//! PeerAuthentication, AuthorizationPolicy and RequestAuthentication (security.istio.io)
//! into `dataflows::model::SecurityPolicy`: what selects the workloads, the mTLS modes
//! (PeerAuthentication is translated whole), and for the two kinds still under the
//! fail-closed stopgap whether an authorization restricts and where tokens are looked for:
//! each of their objects that restricts gets an error finding saying so and what fails
//! closed in its place. Each field not read is reported by its path.

use super::fields::{port_u16, report_ignored, spec};
use super::Result;
use crate::config::findings::Finding;
use crate::config::security as s;
use crate::config::Invalid;
use dataflows::model::{self as m, ConfigKey, Kind, Labels, MeshConfig, Record};
use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Istio's annotation that makes an AuthorizationPolicy log its decision without enforcing it.
const DRY_RUN: &str = "istio.io/dry-run";

/// `metadata.creationTimestamp` as written (empty when absent).
fn created(value: &Value) -> String {
    value
        .get("metadata")
        .and_then(|m| m.get("creationTimestamp"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `selector.matchLabels`, `None` when absent or empty (the whole namespace).
fn selector(sel: Option<s::Selector>) -> Option<Labels> {
    sel.map(|s| s.match_labels).filter(|l| !l.is_empty())
}

fn mode(written: Option<&str>, field: &str) -> Result<m::MtlsMode> {
    Ok(match written.unwrap_or("") {
        "" | "UNSET" => m::MtlsMode::Unset,
        "DISABLE" => m::MtlsMode::Disable,
        "PERMISSIVE" => m::MtlsMode::Permissive,
        "STRICT" => m::MtlsMode::Strict,
        other => {
            return Err(Invalid::field(
                field,
                format!("unknown mTLS mode {other:?} (UNSET, DISABLE, PERMISSIVE, STRICT)"),
            ))
        }
    })
}

pub(super) fn peer_authentication(
    key: &ConfigKey,
    value: &Value,
    root: &str,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (spec, ignored): (s::PeerAuthenticationSpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    let selector = selector(spec.selector);
    let workload_mode = mode(
        spec.mtls.as_ref().and_then(|t| t.mode.as_deref()),
        "spec.mtls.mode",
    )?;
    let mut ports = BTreeMap::new();
    if let Some(list) = spec.port_level_mtls {
        // Istio's validation: ports only with a selector, never an empty map.
        if selector.is_none() {
            return Err(Invalid::field(
                "spec.portLevelMtls",
                "portLevelMtls needs a selector (it is per workload port)",
            ));
        }
        if list.is_empty() {
            return Err(Invalid::field(
                "spec.portLevelMtls",
                "portLevelMtls is empty: name at least one port",
            ));
        }
        for (k, v) in list {
            let written = match &k {
                s::PortKey::Number(n) => n.to_string(),
                s::PortKey::Text(t) => t.clone(),
            };
            let field = format!("spec.portLevelMtls[{written}]");
            let n: i64 = written
                .parse()
                .map_err(|_| Invalid::field(&field, format!("{written:?} is not a port number")))?;
            let port = port_u16(n, &field)?;
            ports.insert(port, mode(v.mode.as_deref(), &format!("{field}.mode"))?);
        }
    }
    if selector.is_some() && key.namespace == root {
        findings.push(Finding::warning(
            "spec.selector",
            "a PeerAuthentication with a selector in the root namespace applies to no \
             workload, as in Istio",
        ));
    }
    Ok(vec![Record::Security(m::SecurityPolicy {
        key: key.clone(),
        created: created(value),
        selector,
        effect: m::PolicyEffect::Peer {
            mode: workload_mode,
            ports,
        },
    })])
}

/// `targetRef`/`targetRefs` attach a policy to Gateway API gateways and waypoints, which
/// meshflow does not serve: the policy is enforced nowhere, and says so.
fn target_refs(
    target_ref: &Option<Value>,
    target_refs: &Option<Value>,
    has_selector: bool,
    findings: &mut Vec<Finding>,
) -> Result<bool> {
    let field = match (target_ref, target_refs) {
        (Some(_), _) => "spec.targetRef",
        (None, Some(_)) => "spec.targetRefs",
        (None, None) => return Ok(false),
    };
    if has_selector {
        return Err(Invalid::field(
            field,
            "only one of selector, targetRef and targetRefs may be set",
        ));
    }
    findings.push(Finding::error(
        field,
        "attaches the policy to Gateway API gateways or waypoints, which meshflow does not \
         serve: this policy is NOT enforced anywhere (sidecars ignore targetRef policies, as \
         in Istio)",
    ));
    Ok(true)
}

pub(super) fn authorization_policy(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (spec, ignored): (s::AuthorizationPolicySpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    let selector = selector(spec.selector);
    let action = spec.action.as_deref().unwrap_or("ALLOW");
    if !matches!(action, "ALLOW" | "DENY" | "AUDIT" | "CUSTOM") {
        return Err(Invalid::field(
            "spec.action",
            format!("unknown action {action:?} (ALLOW, DENY, AUDIT, CUSTOM)"),
        ));
    }
    let rules: Vec<Value> = match &spec.rules {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(r)) => r.clone(),
        Some(_) => return Err(Invalid::field("spec.rules", "rules must be a list")),
    };
    if matches!(action, "DENY" | "CUSTOM") && rules.is_empty() {
        return Err(Invalid::field(
            "spec.rules",
            format!("a {action} policy needs rules"),
        ));
    }
    if spec.provider.is_some() && action != "CUSTOM" {
        return Err(Invalid::field(
            "spec.provider",
            "provider is only allowed with action CUSTOM",
        ));
    }
    if target_refs(
        &spec.target_ref,
        &spec.target_refs,
        selector.is_some(),
        findings,
    )? {
        return Ok(Vec::new());
    }
    let dry_run = super::fields::metadata_map(value, "annotations")
        .get(DRY_RUN)
        .is_some_and(|v| v == "true");
    // An empty rule matches every request: an ALLOW policy with one allows everything,
    // which is what meshflow does without it.
    let empty_rule = |r: &Value| r.as_mapping().is_none_or(|m| m.is_empty());
    let allows_all = action == "ALLOW" && rules.iter().any(empty_rule);
    let restricts = match action {
        "AUDIT" => {
            findings.push(Finding::warning(
                "spec.action",
                "AUDIT restricts nothing; it is not translated by meshflow yet (no audit log)",
            ));
            false
        }
        _ if dry_run => {
            findings.push(Finding::warning(
                format!("metadata.annotations[{DRY_RUN}]"),
                "a dry-run policy is not enforced, as in Istio; meshflow does not translate \
                 its shadow evaluation yet",
            ));
            false
        }
        _ if allows_all => {
            findings.push(Finding::warning(
                "spec.rules",
                "an empty rule allows every request, which is what meshflow does without this \
                 policy; it is not translated further",
            ));
            false
        }
        _ => true,
    };
    if !restricts {
        return Ok(Vec::new());
    }
    let what = if action == "ALLOW" && rules.is_empty() {
        // ALLOW without rules denies everything: the deny-all is exactly Istio's result.
        "allows nothing, as Istio reads an ALLOW policy without rules: every inbound \
         connection to the sidecars and gateways it selects is refused"
            .to_string()
    } else {
        format!(
            "{action} is not translated by meshflow yet (its rules are not evaluated; \
             fail-closed stopgap): every inbound connection to the sidecars and gateways it \
             selects is refused"
        )
    };
    findings.push(Finding::error("spec.action", what));
    Ok(vec![Record::Security(m::SecurityPolicy {
        key: key.clone(),
        created: created(value),
        selector,
        effect: m::PolicyEffect::DenyAll,
    })])
}

pub(super) fn request_authentication(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (spec, ignored): (s::RequestAuthenticationSpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    let selector = selector(spec.selector);
    if target_refs(
        &spec.target_ref,
        &spec.target_refs,
        selector.is_some(),
        findings,
    )? {
        return Ok(Vec::new());
    }
    let (mut headers, mut params, mut cookies) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (i, r) in spec.jwt_rules.iter().enumerate() {
        let f = format!("spec.jwtRules[{i}]");
        if r.issuer.is_none() && r.jwks_uri.is_none() {
            return Err(Invalid::field(&f, "a JWT rule needs issuer or jwksUri"));
        }
        let named = |n: &str, field: String| -> Result<String> {
            let n = n.trim();
            if n.is_empty() || n.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(Invalid::field(field, format!("{n:?} is not a valid name")));
            }
            Ok(n.to_string())
        };
        for (j, h) in r.from_headers.iter().enumerate() {
            let n = named(&h.name, format!("{f}.fromHeaders[{j}].name"))?;
            headers.insert(n.to_ascii_lowercase());
        }
        for (j, p) in r.from_params.iter().enumerate() {
            params.insert(named(p, format!("{f}.fromParams[{j}]"))?);
        }
        for (j, c) in r.from_cookies.iter().enumerate() {
            cookies.insert(named(c, format!("{f}.fromCookies[{j}]"))?);
        }
        // No location: Envoy's default, the `Authorization` header (`Bearer `) and the
        // `access_token` query parameter.
        if r.from_headers.is_empty() && r.from_params.is_empty() && r.from_cookies.is_empty() {
            headers.insert("authorization".into());
            params.insert("access_token".into());
        }
    }
    if spec.jwt_rules.is_empty() {
        return Ok(Vec::new());
    }
    findings.push(Finding::error(
        "spec.jwtRules",
        "not translated by meshflow yet (tokens are not validated; fail-closed stopgap): the \
         sidecars and gateways it selects refuse (403) every HTTP request that carries a \
         token where these rules look for one (any `Authorization` header by default), valid \
         or not, and the sidecars connections to ports no service declares",
    ));
    Ok(vec![Record::Security(m::SecurityPolicy {
        key: key.clone(),
        created: created(value),
        selector,
        effect: m::PolicyEffect::Tokens {
            headers,
            params,
            cookies,
        },
    })])
}

/// The kind's converter (`convert`'s dispatch).
pub(super) fn security(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    match key.kind {
        Kind::PeerAuthentication => peer_authentication(key, value, &mesh.root_namespace, findings),
        Kind::AuthorizationPolicy => authorization_policy(key, value, findings),
        _ => request_authentication(key, value, findings),
    }
}
