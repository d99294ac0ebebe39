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
use std::collections::BTreeMap;

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
    let written = spec.rules.unwrap_or_default();
    if matches!(action, "DENY" | "CUSTOM") && written.is_empty() {
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
    let provider = match action {
        "CUSTOM" => Some(custom_provider(spec.provider.as_ref())?),
        _ => None,
    };
    // Read (and checked) whatever the action, so a bad value is refused alike.
    let mut rules = Vec::with_capacity(written.len());
    for (i, r) in written.into_iter().enumerate() {
        let r = r.unwrap_or_default();
        if provider.is_some() {
            custom_rule_fields(&r, i)?;
        }
        rules.push(authz_rule(r, i, &key.namespace)?);
    }
    if target_refs(
        &spec.target_ref,
        &spec.target_refs,
        selector.is_some(),
        findings,
    )? {
        return Ok(Vec::new());
    }
    // Istio reads the annotation as Go's `ParseBool`; a value it cannot read leaves the
    // policy enforced.
    let dry_run = match super::fields::metadata_map(value, "annotations")
        .get(DRY_RUN)
        .map(String::as_str)
    {
        None => false,
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
        Some(other) => {
            findings.push(Finding::warning(
                format!("metadata.annotations[{DRY_RUN}]"),
                format!("{other:?} is not a boolean: the policy is enforced, as in Istio"),
            ));
            false
        }
    };
    if dry_run && action == "CUSTOM" {
        findings.push(Finding::warning(
            format!("metadata.annotations[{DRY_RUN}]"),
            "a dry-run CUSTOM policy is neither enforced nor evaluated (its external \
             authorization service is not asked): it is left out",
        ));
        return Ok(Vec::new());
    }
    let effect = match provider {
        Some(provider) => m::PolicyEffect::Custom(m::CustomAuthz { provider, rules }),
        None => m::PolicyEffect::Authz(m::AuthzPolicy {
            action: match action {
                "ALLOW" => m::AuthzAction::Allow,
                "DENY" => m::AuthzAction::Deny,
                _ => m::AuthzAction::Audit,
            },
            rules,
            dry_run,
        }),
    };
    Ok(vec![Record::Security(m::SecurityPolicy {
        key: key.clone(),
        created: created(value),
        selector,
        effect,
    })])
}

/// A CUSTOM policy's `provider.name` (required, as Istio's validation says).
fn custom_provider(provider: Option<&Value>) -> Result<String> {
    let name = provider
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(Invalid::field(
            "spec.provider.name",
            "a CUSTOM policy names its extension provider",
        ));
    }
    Ok(name.to_string())
}

/// Istio refuses, in a CUSTOM rule, what its external authorization filter runs too early
/// to know: the peer's identity (it runs before the RBAC that reads it, as in Istio) and
/// the request's token (before `jwt_authn`).
fn custom_rule_fields(r: &s::Rule, i: usize) -> Result<()> {
    for (j, f) in r.from.iter().enumerate() {
        let Some(src) = &f.source else { continue };
        let refused = [
            ("principals", src.principals.is_empty()),
            ("notPrincipals", src.not_principals.is_empty()),
            ("requestPrincipals", src.request_principals.is_empty()),
            (
                "notRequestPrincipals",
                src.not_request_principals.is_empty(),
            ),
            ("namespaces", src.namespaces.is_empty()),
            ("notNamespaces", src.not_namespaces.is_empty()),
            ("serviceAccounts", src.service_accounts.is_empty()),
            ("notServiceAccounts", src.not_service_accounts.is_empty()),
            ("trustDomains", src.trust_domains.is_empty()),
            ("notTrustDomains", src.not_trust_domains.is_empty()),
        ];
        if let Some((name, _)) = refused.iter().find(|(_, empty)| !empty) {
            return Err(Invalid::field(
                format!("spec.rules[{i}].from[{j}].source.{name}"),
                "not supported with action CUSTOM (as in Istio)",
            ));
        }
    }
    for (j, w) in r.when.iter().enumerate() {
        let k = w.key.as_str();
        if matches!(
            k,
            "source.namespace"
                | "source.serviceAccount"
                | "source.trustDomain"
                | "source.principal"
        ) || k.starts_with("request.auth.")
        {
            return Err(Invalid::field(
                format!("spec.rules[{i}].when[{j}].key"),
                format!("{k:?} is not supported with action CUSTOM (as in Istio)"),
            ));
        }
    }
    Ok(())
}

/// One rule, each field checked as Istio's validation checks it.
fn authz_rule(r: s::Rule, i: usize, namespace: &str) -> Result<m::AuthzRule> {
    use m::AuthzField as F;
    let base = format!("spec.rules[{i}]");
    let mut out = m::AuthzRule::default();
    for (j, f) in r.from.into_iter().enumerate() {
        let Some(src) = f.source else { continue };
        let at = |name: &str| format!("{base}.from[{j}].source.{name}");
        let mut entry = Vec::new();
        let lists = [
            (F::Principal, "principals", src.principals, false),
            (F::Principal, "notPrincipals", src.not_principals, true),
            (F::Namespace, "namespaces", src.namespaces, false),
            (F::Namespace, "notNamespaces", src.not_namespaces, true),
            (
                F::ServiceAccount,
                "serviceAccounts",
                src.service_accounts,
                false,
            ),
            (
                F::ServiceAccount,
                "notServiceAccounts",
                src.not_service_accounts,
                true,
            ),
            (F::SourceIp, "ipBlocks", src.ip_blocks, false),
            (F::SourceIp, "notIpBlocks", src.not_ip_blocks, true),
            (F::RemoteIp, "remoteIpBlocks", src.remote_ip_blocks, false),
            (
                F::RemoteIp,
                "notRemoteIpBlocks",
                src.not_remote_ip_blocks,
                true,
            ),
            (F::TrustDomain, "trustDomains", src.trust_domains, false),
            (
                F::TrustDomain,
                "notTrustDomains",
                src.not_trust_domains,
                true,
            ),
            (
                F::RequestPrincipal,
                "requestPrincipals",
                src.request_principals,
                false,
            ),
            (
                F::RequestPrincipal,
                "notRequestPrincipals",
                src.not_request_principals,
                true,
            ),
        ];
        for (field, name, values, not) in lists {
            if values.is_empty() {
                continue;
            }
            check_values(&field, &values, &at(name), namespace)?;
            entry.push(m::AuthzMatch { field, values, not });
        }
        out.from.push(entry);
    }
    for (j, t) in r.to.into_iter().enumerate() {
        let Some(op) = t.operation else { continue };
        let at = |name: &str| format!("{base}.to[{j}].operation.{name}");
        let mut entry = Vec::new();
        let lists = [
            (F::Host, "hosts", op.hosts, false),
            (F::Host, "notHosts", op.not_hosts, true),
            (F::Port, "ports", op.ports, false),
            (F::Port, "notPorts", op.not_ports, true),
            (F::Method, "methods", op.methods, false),
            (F::Method, "notMethods", op.not_methods, true),
            (F::Path, "paths", op.paths, false),
            (F::Path, "notPaths", op.not_paths, true),
        ];
        for (field, name, values, not) in lists {
            if values.is_empty() {
                continue;
            }
            check_values(&field, &values, &at(name), namespace)?;
            entry.push(m::AuthzMatch { field, values, not });
        }
        out.to.push(entry);
    }
    for (j, c) in r.when.into_iter().enumerate() {
        let at = format!("{base}.when[{j}]");
        let field = condition_field(&c.key, &format!("{at}.key"))?;
        if c.values.is_empty() && c.not_values.is_empty() {
            return Err(Invalid::field(&at, "a condition needs values or notValues"));
        }
        for (values, not, name) in [
            (c.values, false, "values"),
            (c.not_values, true, "notValues"),
        ] {
            if values.is_empty() {
                continue;
            }
            check_values(&field, &values, &format!("{at}.{name}"), namespace)?;
            out.when.push(m::AuthzMatch {
                field: field.clone(),
                values,
                not,
            });
        }
    }
    Ok(out)
}

/// The field a `when` key names, as Istio reads the keys it accepts.
fn condition_field(key: &str, at: &str) -> Result<m::AuthzField> {
    use m::AuthzField as F;
    Ok(match key {
        "source.ip" => F::SourceIp,
        "remote.ip" => F::RemoteIp,
        "source.namespace" => F::Namespace,
        "source.principal" => F::Principal,
        "source.serviceAccount" => F::ServiceAccount,
        "destination.ip" => F::DestinationIp,
        "destination.port" => F::Port,
        "connection.sni" => F::Sni,
        k if k.starts_with("request.headers[") && k.ends_with(']') && k.len() > 17 => {
            F::Header(k["request.headers[".len()..k.len() - 1].to_string())
        }
        "request.auth.principal" => F::RequestPrincipal,
        "request.auth.audiences" => F::Audience,
        "request.auth.presenter" => F::Presenter,
        k if k.starts_with("request.auth.claims") => F::Claim(claim_path(k, at)?),
        k if k.starts_with("experimental.envoy.filters.") => {
            // `experimental.envoy.filters.a.b[c]`: filter `envoy.filters.a.b`, key `c`.
            let inner = k["experimental.".len()..].trim_end_matches(']');
            match inner.split_once('[') {
                Some((filter, key)) if !key.is_empty() && !key.contains(['[', ']']) => {
                    F::FilterMetadata {
                        filter: filter.to_string(),
                        key: key.to_string(),
                    }
                }
                _ => {
                    return Err(Invalid::field(
                        at,
                        format!("{k:?}: written experimental.envoy.filters.NAME[KEY]"),
                    ))
                }
            }
        }
        other => {
            return Err(Invalid::field(
                at,
                format!("{other:?} is not a condition key Istio accepts"),
            ))
        }
    })
}

/// A path template as Istio's validation takes it: `{*}` (one segment) and `{**}` (any
/// number, the last operator) as whole segments, the other segments of RFC 3986 path
/// characters.
fn path_template(v: &str) -> std::result::Result<(), String> {
    if !v.starts_with('/') {
        return Err(format!("{v:?}: a path template starts with /"));
    }
    let literal = |seg: &str| {
        !seg.is_empty()
            && seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~%!$&'()+,;:@=".contains(c))
    };
    let mut after_any = false;
    for seg in v.trim_matches('/').split('/') {
        match seg {
            "{*}" | "{**}" if after_any => {
                return Err(format!("{v:?}: {{**}} is not the last operator"))
            }
            "{**}" => after_any = true,
            "{*}" => {}
            s if literal(s) => {}
            s => {
                return Err(format!(
                    "{v:?}: segment {s:?} is neither {{*}}, {{**}} nor a literal"
                ))
            }
        }
    }
    Ok(())
}

/// `request.auth.claims[A][B]…`'s claim names (nested claims by path).
fn claim_path(key: &str, at: &str) -> Result<Vec<String>> {
    let bad = || {
        Invalid::field(
            at,
            format!("{key:?}: a claim is written request.auth.claims[NAME] (nested: [A][B])"),
        )
    };
    let mut rest = &key["request.auth.claims".len()..];
    let mut path = Vec::new();
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[').ok_or_else(bad)?;
        let (name, after) = inner.split_once(']').ok_or_else(bad)?;
        if name.is_empty() || name.contains('[') {
            return Err(bad());
        }
        path.push(name.to_string());
        rest = after;
    }
    if path.is_empty() {
        return Err(bad());
    }
    Ok(path)
}

/// Values a field can hold, as Istio's validation checks them: addresses and ranges,
/// port numbers, service accounts without wildcards, no empty value.
fn check_values(field: &m::AuthzField, values: &[String], at: &str, _ns: &str) -> Result<()> {
    use m::AuthzField as F;
    for (k, v) in values.iter().enumerate() {
        let at = format!("{at}[{k}]");
        if v.is_empty() {
            return Err(Invalid::field(&at, "an empty value"));
        }
        let ok = match field {
            F::SourceIp | F::RemoteIp | F::DestinationIp => cidr_ok(v),
            F::Port => v.parse::<u16>().is_ok_and(|p| p > 0),
            F::ServiceAccount => !v.contains('*') && v.split('/').count() <= 2,
            F::Path if v.contains(['{', '}']) => {
                path_template(v).map_err(|why| Invalid::field(&at, why))?;
                true
            }
            _ => true,
        };
        if !ok {
            return Err(Invalid::field(
                &at,
                format!("{v:?} is not a valid value for {field:?}"),
            ));
        }
    }
    Ok(())
}

/// An IP address, or an address and prefix length within its family.
fn cidr_ok(v: &str) -> bool {
    super::fields::cidr(v, "").is_ok()
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
    if spec.jwt_rules.is_empty() {
        return Ok(Vec::new());
    }
    let rules = spec
        .jwt_rules
        .into_iter()
        .enumerate()
        .map(|(i, r)| jwt_rule(r, &format!("spec.jwtRules[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![Record::Security(m::SecurityPolicy {
        key: key.clone(),
        created: created(value),
        selector,
        effect: m::PolicyEffect::Jwt(rules),
    })])
}

/// A name of a header, parameter or cookie: not empty, no space or control character.
fn location_name(n: &str, field: String) -> Result<String> {
    if n.is_empty() || n.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Invalid::field(field, format!("{n:?} is not a valid name")));
    }
    Ok(n.to_string())
}

/// An HTTP header name as Envoy takes it (RFC 9110 token characters).
fn header_name(n: &str, field: String) -> Result<String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if n.is_empty() || !n.chars().all(token) {
        return Err(Invalid::field(
            field,
            format!("{n:?} is not a valid header name"),
        ));
    }
    Ok(n.to_string())
}

/// A JSON Web Key Set (RFC 7517) Envoy can verify with: a JSON object whose `keys` is an
/// array of objects, each with a `kty`, and at least one a key Envoy reads (RSA `n` and `e`;
/// EC P-256/384/521 `x` and `y`; `oct` `k`; OKP Ed25519 `x`). Envoy takes no set without
/// one: the listener carrying it would be refused.
pub fn check_jwks(text: &str) -> std::result::Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let keys = v
        .get("keys")
        .and_then(|k| k.as_array())
        .ok_or("not a JSON Web Key Set (no `keys` array)")?;
    let has = |k: &serde_json::Value, m: &str| k.get(m).and_then(|x| x.as_str()).is_some();
    let mut usable = 0;
    for (i, k) in keys.iter().enumerate() {
        let kty = k
            .get("kty")
            .and_then(|t| t.as_str())
            .ok_or_else(|| format!("keys[{i}] has no `kty`"))?;
        let crv = k.get("crv").and_then(|c| c.as_str()).unwrap_or("");
        usable += usize::from(match kty {
            "RSA" => has(k, "n") && has(k, "e"),
            "EC" => ["P-256", "P-384", "P-521"].contains(&crv) && has(k, "x") && has(k, "y"),
            "oct" => has(k, "k"),
            "OKP" => crv == "Ed25519" && has(k, "x"),
            _ => false,
        });
    }
    if usable == 0 {
        return Err("no key Envoy can verify with (RSA, EC P-256/384/521, oct, Ed25519)".into());
    }
    Ok(())
}

/// A `jwksUri`: an absolute `http` or `https` URL with a host (Istio's `ParseJwksURI`).
fn check_jwks_uri(uri: &str, field: &str) -> Result<()> {
    let rest = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))
        .ok_or_else(|| Invalid::field(field, format!("{uri:?} is not an http or https URL")))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Invalid::field(field, format!("{uri:?} is not a valid URL")));
    }
    Ok(())
}

fn jwt_rule(mut r: s::JwtRule, f: &str) -> Result<m::JwtRule> {
    if r.jwks_uri.is_empty() {
        r.jwks_uri = std::mem::take(&mut r.jwks_uri_snake);
    }
    let required = match r.presence.as_deref() {
        None | Some("OPTIONAL") => false,
        Some("REQUIRED") => true,
        Some(other) => {
            return Err(Invalid::field(
                format!("{f}.presence"),
                format!("unknown presence {other:?} (OPTIONAL, REQUIRED)"),
            ))
        }
    };
    if r.issuer.is_empty() && r.jwks_uri.is_empty() {
        return Err(Invalid::field(f, "a JWT rule needs issuer or jwksUri"));
    }
    for (j, a) in r.audiences.iter().enumerate() {
        if a.is_empty() {
            return Err(Invalid::field(
                format!("{f}.audiences[{j}]"),
                "an empty audience",
            ));
        }
    }
    let jwks = if !r.jwks.is_empty() {
        check_jwks(&r.jwks).map_err(|e| Invalid::field(format!("{f}.jwks"), e))?;
        m::Jwks::Inline(r.jwks)
    } else if !r.jwks_uri.is_empty() {
        check_jwks_uri(&r.jwks_uri, &format!("{f}.jwksUri"))?;
        m::Jwks::Uri {
            uri: r.jwks_uri,
            keys: None,
            problem: None,
        }
    } else {
        // As Istio: the keys are where the issuer's OpenID configuration says.
        let uri = format!(
            "{}{}",
            r.issuer.trim_end_matches('/'),
            m::OPENID_CONFIGURATION
        );
        check_jwks_uri(&uri, &format!("{f}.issuer")).map_err(|_| {
            Invalid::field(
                format!("{f}.issuer"),
                format!(
                    "{:?}: with neither jwks nor jwksUri, the keys are discovered from the \
                     issuer's OpenID configuration, which needs an http or https issuer",
                    r.issuer
                ),
            )
        })?;
        m::Jwks::Uri {
            uri,
            keys: None,
            problem: None,
        }
    };
    let mut from_headers = Vec::new();
    for (j, h) in r.from_headers.iter().enumerate() {
        from_headers.push(m::TokenHeader {
            name: header_name(&h.name, format!("{f}.fromHeaders[{j}].name"))?,
            prefix: h.prefix.clone().unwrap_or_default(),
        });
    }
    let from_params = r
        .from_params
        .iter()
        .enumerate()
        .map(|(j, p)| location_name(p, format!("{f}.fromParams[{j}]")))
        .collect::<Result<Vec<_>>>()?;
    let from_cookies = r
        .from_cookies
        .iter()
        .enumerate()
        .map(|(j, c)| location_name(c, format!("{f}.fromCookies[{j}]")))
        .collect::<Result<Vec<_>>>()?;
    let mut output_claim_to_headers = Vec::new();
    for (j, c) in r.output_claim_to_headers.iter().enumerate() {
        let at = format!("{f}.outputClaimToHeaders[{j}]");
        if c.claim.is_empty() {
            return Err(Invalid::field(format!("{at}.claim"), "an empty claim"));
        }
        output_claim_to_headers.push((
            header_name(&c.header, format!("{at}.header"))?,
            c.claim.clone(),
        ));
    }
    if !r.output_payload_to_header.is_empty() {
        header_name(
            &r.output_payload_to_header,
            format!("{f}.outputPayloadToHeader"),
        )?;
    }
    let timeout_ms = match r.timeout.as_deref() {
        Some(t) => {
            let ms = super::fields::parse_duration_ms(t, &format!("{f}.timeout"))?;
            if ms == 0 {
                return Err(Invalid::field(format!("{f}.timeout"), "must be above zero"));
            }
            ms
        }
        None => m::DEFAULT_JWKS_TIMEOUT_MS,
    };
    Ok(m::JwtRule {
        issuer: r.issuer,
        audiences: r.audiences,
        jwks,
        from_headers,
        from_params,
        from_cookies,
        forward_original_token: r.forward_original_token,
        output_payload_to_header: r.output_payload_to_header,
        output_claim_to_headers,
        timeout_ms,
        space_delimited_claims: r.space_delimited_claims,
        required,
    })
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
