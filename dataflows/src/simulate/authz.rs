//! What refuses a call before it is routed, as Envoy runs it: the network RBAC filters of a
//! filter chain (before its connection manager or TCP proxy), then, in the connection
//! manager, `jwt_authn` (a token present must verify for some provider; its payload becomes
//! the dynamic metadata RBAC reads) and the HTTP RBAC filters in their order (LOG, DENY,
//! ALLOW as Istio writes them), after the CUSTOM policies' external authorization (an RBAC
//! filter whose shadow rules name the matching rule, then an ext_authz filter enabled by
//! that name: the service's answer is the call's [`Call::external_authz`]). Each filter's
//! verdict is recorded ([`Outcome::authz`]), a dry-run policy's (shadow rules) too; the
//! first refusal ends the call.
//!
//! Tokens are not verified cryptographically: a [`Token::Signed`] verifies with a provider
//! of its issuer (and audience) whose key set holds a key, one of meshflow's key sets
//! without keys verifies nothing.

use super::request::{header_matches, string_matches, Request};
use super::{Call, NoMatch, Outcome, Token};
use envoy_types::pb::envoy::config::core::v3::{data_source, CidrRange};
use envoy_types::pb::envoy::config::core::v3::{
    grpc_service::TargetSpecifier, http_uri::HttpUpstreamType,
};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain};
use envoy_types::pb::envoy::config::rbac::v3::{
    permission, principal, rbac::Action, Permission, Principal, Rbac,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3::{
    ext_authz::Services, ExtAuthz as HttpExtAuthz,
};
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3::{
    jwt_provider::JwksSourceSpecifier, jwt_requirement::RequiresType,
    requirement_rule::RequirementType, JwtAuthentication, JwtRequirement,
};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::ext_authz::v3::ExtAuthz as NetExtAuthz;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3::UriTemplateMatchConfig;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    list_matcher, metadata_matcher::path_segment::Segment, string_matcher, value_matcher,
    MetadataMatcher, ValueMatcher,
};
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;

const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";
/// The shadow stat prefix of a CUSTOM policy's RBAC filter.
const CUSTOM_PREFIX: &str = "istio_ext_authz_";
/// Where the providers keep the verified payload (`payload_in_metadata`, Istio's key).
const PAYLOAD_KEY: &str = "payload";
/// The kid of the key meshflow serves in a key set it holds no key of.
const NO_KEYS_KID: &str = "meshflow-no-keys";

/// What the filters see: the connection, and for HTTP the request and the verified payload.
struct Seen<'a> {
    call: &'a Call,
    req: Option<&'a Request<'a>>,
    payload: Option<&'a Value>,
}

/// Runs the network RBAC filters of `chain` on `call`: `Err` when one refuses the
/// connection (Envoy closes it).
pub(super) fn network(chain: &FilterChain, call: &Call, out: &mut Outcome) -> Result<(), NoMatch> {
    let mut custom = None;
    for f in &chain.filters {
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            continue;
        };
        if any.type_url.ends_with("network.ext_authz.v3.ExtAuthz") {
            let cfg = NetExtAuthz::decode(&any.value[..])
                .map_err(|e| NoMatch::Unsupported(format!("ext_authz did not decode: {e}")))?;
            let cluster = match cfg.grpc_service.and_then(|g| g.target_specifier) {
                Some(TargetSpecifier::EnvoyGrpc(g)) => g.cluster_name,
                _ => String::new(),
            };
            let enabled = cfg.filter_enabled_metadata;
            // A refusal closes the connection: no status.
            external(enabled.as_ref(), &custom, cluster, call, out).map_err(|e| match e {
                NoMatch::Denied { by, .. } => NoMatch::Denied { status: None, by },
                e => e,
            })?;
            continue;
        }
        if !any
            .type_url
            .ends_with("envoy.extensions.filters.network.rbac.v3.RBAC")
        {
            continue;
        }
        let rbac = NetworkRbac::decode(&any.value[..])
            .map_err(|e| NoMatch::Unsupported(format!("network RBAC did not decode: {e}")))?;
        let seen = Seen {
            call,
            req: None,
            payload: None,
        };
        if rbac.shadow_rules_stat_prefix == CUSTOM_PREFIX {
            asks(&rbac.shadow_rules, &seen, &mut custom, out);
            if rbac.rules.is_none() {
                continue;
            }
        }
        run(
            &rbac.rules,
            &rbac.shadow_rules,
            &seen,
            None,
            "network RBAC",
            out,
        )?;
    }
    Ok(())
}

/// Runs the connection manager's `jwt_authn` and RBAC filters on the request `req`.
/// `Ok` holds the verified payload when the route is chosen after verification (a provider
/// clears the route cache, as on gateways): what route matches on claims see.
pub(super) fn http(
    hcm: &HttpConnectionManager,
    req: &Request,
    out: &mut Outcome,
) -> Result<Option<Value>, NoMatch> {
    let mut payload: Option<Value> = None;
    let mut clears_route = false;
    let mut custom = None;
    for f in &hcm.http_filters {
        let Some(http_filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            continue;
        };
        if any.type_url.ends_with("http.ext_authz.v3.ExtAuthz") {
            let cfg = HttpExtAuthz::decode(&any.value[..])
                .map_err(|e| NoMatch::Unsupported(format!("ext_authz did not decode: {e}")))?;
            let cluster = match cfg.services {
                Some(Services::GrpcService(g)) => match g.target_specifier {
                    Some(TargetSpecifier::EnvoyGrpc(g)) => g.cluster_name,
                    _ => String::new(),
                },
                Some(Services::HttpService(h)) => {
                    match h.server_uri.and_then(|u| u.http_upstream_type) {
                        Some(HttpUpstreamType::Cluster(c)) => c,
                        None => String::new(),
                    }
                }
                None => String::new(),
            };
            let enabled = cfg.filter_enabled_metadata;
            external(enabled.as_ref(), &custom, cluster, req.call, out)?;
        } else if any.type_url.ends_with("jwt_authn.v3.JwtAuthentication") {
            let cfg = JwtAuthentication::decode(&any.value[..])
                .map_err(|e| NoMatch::Unsupported(format!("jwt_authn did not decode: {e}")))?;
            clears_route = cfg.providers.values().any(|p| p.clear_route_cache);
            payload = jwt(&cfg, req.call, out)?;
        } else if any
            .type_url
            .ends_with("envoy.extensions.filters.http.rbac.v3.RBAC")
        {
            let rbac = HttpRbac::decode(&any.value[..])
                .map_err(|e| NoMatch::Unsupported(format!("HTTP RBAC did not decode: {e}")))?;
            let seen = Seen {
                call: req.call,
                req: Some(req),
                payload: payload.as_ref(),
            };
            if rbac.shadow_rules_stat_prefix == CUSTOM_PREFIX {
                asks(&rbac.shadow_rules, &seen, &mut custom, out);
                if rbac.rules.is_none() {
                    continue;
                }
            }
            run(
                &rbac.rules,
                &rbac.shadow_rules,
                &seen,
                Some(403),
                "HTTP RBAC",
                out,
            )?;
        }
    }
    Ok(payload.filter(|_| clears_route))
}

/// The shadow rules of a CUSTOM policy's RBAC filter: the first that matches is named in
/// the dynamic metadata (`custom`), which enables the ext_authz filter after it.
fn asks(shadow: &Option<Rbac>, seen: &Seen, custom: &mut Option<String>, out: &mut Outcome) {
    let Some(s) = shadow else { return };
    match first_match(s, seen, &mut out.warnings) {
        Some(name) => {
            out.authz.push(format!(
                "CUSTOM: {name} matches: the external service is asked"
            ));
            *custom = Some(name.clone());
        }
        None => out
            .authz
            .push("CUSTOM: no rule matches: the external service is not asked".into()),
    }
}

/// An ext_authz filter: asked when the CUSTOM rule last named (`custom`) enables it; the
/// call's [`Call::external_authz`] is the answer (`None` ends the simulation there).
fn external(
    enabled: Option<&MetadataMatcher>,
    custom: &Option<String>,
    cluster: String,
    call: &Call,
    out: &mut Outcome,
) -> Result<(), NoMatch> {
    let prefix = match enabled
        .and_then(|m| m.value.as_ref())
        .and_then(|v| v.match_pattern.as_ref())
    {
        Some(value_matcher::MatchPattern::StringMatch(m)) => match &m.match_pattern {
            Some(string_matcher::MatchPattern::Prefix(p)) => p.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let Some(by) = custom.as_ref().filter(|n| n.starts_with(&prefix)) else {
        return Ok(());
    };
    match call.external_authz {
        None => Err(NoMatch::External {
            cluster,
            by: by.clone(),
        }),
        Some(true) => {
            out.authz
                .push(format!("ext_authz ({cluster}): allowed (for {by})"));
            Ok(())
        }
        Some(false) => {
            // The service's refusal: Envoy answers with the status it gives (403 here; a
            // network ext_authz closes the connection).
            let line = format!("ext_authz ({cluster}): denied (for {by})");
            out.authz.push(line.clone());
            Err(NoMatch::Denied {
                status: Some(403),
                by: line,
            })
        }
    }
}

/// One RBAC filter: its enforced rules decide, its shadow rules are only recorded.
fn run(
    rules: &Option<Rbac>,
    shadow: &Option<Rbac>,
    seen: &Seen,
    status: Option<u32>,
    what: &str,
    out: &mut Outcome,
) -> Result<(), NoMatch> {
    if let Some(s) = shadow {
        let (would, line) = verdict(s, seen, &mut out.warnings);
        out.authz.push(format!(
            "{what} (dry-run): would {} — {line}",
            if would { "allow" } else { "deny" }
        ));
    }
    let Some(r) = rules else { return Ok(()) };
    let (allowed, line) = verdict(r, seen, &mut out.warnings);
    out.authz.push(format!("{what}: {line}"));
    if allowed {
        Ok(())
    } else {
        Err(NoMatch::Denied { status, by: line })
    }
}

/// Whether `r` lets the call through, and why (the policy that decided).
fn verdict(r: &Rbac, seen: &Seen, w: &mut Vec<String>) -> (bool, String) {
    match (Action::try_from(r.action), first_match(r, seen, w)) {
        (Ok(Action::Allow), Some(name)) => (true, format!("ALLOW by {name}")),
        (Ok(Action::Allow), None) => (false, "ALLOW: no policy matches (denied)".into()),
        (Ok(Action::Deny), Some(name)) => (false, format!("DENY by {name}")),
        (Ok(Action::Deny), None) => (true, "DENY: no policy matches".into()),
        (_, Some(name)) => (true, format!("LOG by {name}")),
        (_, None) => (true, "LOG: no policy matches".into()),
    }
}

/// The policy of `r` that matches first: Envoy stops there, taking names in order, as the
/// map is written.
fn first_match<'a>(r: &'a Rbac, seen: &Seen, w: &mut Vec<String>) -> Option<&'a String> {
    let sorted: BTreeMap<&String, _> = r.policies.iter().collect();
    sorted
        .into_iter()
        .find(|(_, p)| {
            p.permissions.iter().any(|x| permits(x, seen, w))
                && p.principals.iter().any(|x| is_principal(x, seen, w))
        })
        .map(|(name, _)| name)
}

fn in_cidr(ip: Option<&str>, c: &CidrRange) -> bool {
    let len = c.prefix_len.as_ref().map_or(0, |l| l.value);
    ip.is_some_and(|ip| super::listener::in_cidr(ip, &c.address_prefix, len).is_some())
}

fn is_principal(p: &Principal, seen: &Seen, w: &mut Vec<String>) -> bool {
    use principal::Identifier as I;
    match &p.identifier {
        Some(I::Any(any)) => *any,
        Some(I::AndIds(set)) => set.ids.iter().all(|x| is_principal(x, seen, w)),
        Some(I::OrIds(set)) => set.ids.iter().any(|x| is_principal(x, seen, w)),
        Some(I::NotId(x)) => !is_principal(x, seen, w),
        Some(I::Authenticated(a)) => match (&seen.call.peer, &a.principal_name) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(peer), Some(m)) => string_matches(m, peer, w),
        },
        Some(I::DirectRemoteIp(c) | I::RemoteIp(c)) => in_cidr(seen.call.source_ip.as_deref(), c),
        Some(I::Header(h)) => seen.req.is_some_and(|r| header_matches(h, r, w)),
        Some(I::SourcedMetadata(s)) => s
            .metadata_matcher
            .as_ref()
            .is_some_and(|m| metadata(m, seen, w)),
        #[allow(deprecated)]
        Some(I::Metadata(m)) => metadata(m, seen, w),
        other => {
            w.push(format!(
                "RBAC principal {other:?} not modelled: taken as not matching"
            ));
            false
        }
    }
}

fn permits(p: &Permission, seen: &Seen, w: &mut Vec<String>) -> bool {
    use permission::Rule as R;
    match &p.rule {
        Some(R::Any(any)) => *any,
        Some(R::AndRules(set)) => set.rules.iter().all(|x| permits(x, seen, w)),
        Some(R::OrRules(set)) => set.rules.iter().any(|x| permits(x, seen, w)),
        Some(R::NotRule(x)) => !permits(x, seen, w),
        Some(R::Header(h)) => seen.req.is_some_and(|r| header_matches(h, r, w)),
        Some(R::UrlPath(m)) => seen.req.is_some_and(|r| {
            use envoy_types::pb::envoy::r#type::matcher::v3::path_matcher::Rule;
            match &m.rule {
                Some(Rule::Path(s)) => string_matches(s, r.path_only(), w),
                None => false,
            }
        }),
        Some(R::UriTemplate(t)) => seen.req.is_some_and(|r| {
            let template = t
                .typed_config
                .as_ref()
                .and_then(|a| UriTemplateMatchConfig::decode(&a.value[..]).ok());
            template.is_some_and(|t| uri_template(&t.path_template, r.path_only()))
        }),
        Some(R::DestinationPort(port)) => u32::from(seen.call.port) == *port,
        Some(R::DestinationIp(c)) => in_cidr(seen.call.address.as_deref(), c),
        Some(R::RequestedServerName(m)) => {
            string_matches(m, seen.call.sni.as_deref().unwrap_or(""), w)
        }
        Some(R::SourcedMetadata(s)) => s
            .metadata_matcher
            .as_ref()
            .is_some_and(|m| metadata(m, seen, w)),
        #[allow(deprecated)]
        Some(R::Metadata(m)) => metadata(m, seen, w),
        other => {
            w.push(format!(
                "RBAC permission {other:?} not modelled: taken as not matching"
            ));
            false
        }
    }
}

/// Envoy's URI template match on the path: `*` one segment, `**` any number (the rest).
fn uri_template(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    fn walk(t: &[&str], p: &[&str]) -> bool {
        match (t.first(), p.first()) {
            (None, None) => true,
            (Some(&"**"), _) => t.len() == 1 || (0..=p.len()).any(|i| walk(&t[1..], &p[i..])),
            (Some(&"*"), Some(seg)) => !seg.is_empty() && walk(&t[1..], &p[1..]),
            (Some(lit), Some(seg)) => lit == seg && walk(&t[1..], &p[1..]),
            _ => false,
        }
    }
    walk(&t, &p)
}

/// A metadata matcher over the request's dynamic metadata: only `jwt_authn`'s (the verified
/// payload); other filters' metadata is absent here.
fn metadata(m: &MetadataMatcher, seen: &Seen, w: &mut Vec<String>) -> bool {
    payload_matches(m, seen.payload, w)
}

/// A metadata matcher over `jwt_authn`'s verified payload (`None`: no token verified, or
/// none visible where the matcher runs).
pub(super) fn payload_matches(
    m: &MetadataMatcher,
    payload: Option<&Value>,
    w: &mut Vec<String>,
) -> bool {
    let found = (m.filter == JWT_FILTER)
        .then_some(payload)
        .flatten()
        .and_then(|payload| {
            let keys: Vec<&str> = m
                .path
                .iter()
                .filter_map(|s| s.segment.as_ref().map(|Segment::Key(k)| k.as_str()))
                .collect();
            // The payload sits under `payload` (the providers' `payload_in_metadata`).
            let (first, rest) = keys.split_first()?;
            (*first == PAYLOAD_KEY).then_some(())?;
            rest.iter().try_fold(payload, |v, k| v.get(*k))
        });
    let matched = match (found, &m.value) {
        (Some(v), Some(vm)) => value_matches(vm, v, w),
        _ => false,
    };
    matched != m.invert
}

fn value_matches(m: &ValueMatcher, v: &Value, w: &mut Vec<String>) -> bool {
    use value_matcher::MatchPattern as V;
    match &m.match_pattern {
        Some(V::StringMatch(s)) => v.as_str().is_some_and(|x| string_matches(s, x, w)),
        Some(V::ListMatch(l)) => match (&l.match_pattern, v.as_array()) {
            (Some(list_matcher::MatchPattern::OneOf(one)), Some(items)) => {
                items.iter().any(|i| value_matches(one, i, w))
            }
            _ => false,
        },
        Some(V::OrMatch(or)) => or.value_matchers.iter().any(|x| value_matches(x, v, w)),
        Some(V::PresentMatch(p)) => *p,
        Some(V::BoolMatch(b)) => v.as_bool() == Some(*b),
        other => {
            w.push(format!(
                "metadata value matcher {other:?} not modelled: taken as not matching"
            ));
            false
        }
    }
}

/// `jwt_authn`: the verified payload of the call's token (`None`: no token), or the answer
/// Envoy gives a token that does not verify (401) or whose audience is not allowed (403).
fn jwt(cfg: &JwtAuthentication, call: &Call, out: &mut Outcome) -> Result<Option<Value>, NoMatch> {
    let deny = |status, by: String, out: &mut Outcome| {
        out.authz.push(format!("jwt_authn: {by}"));
        Err(NoMatch::Denied {
            status: Some(status),
            by,
        })
    };
    let required = cfg.rules.iter().any(|r| match &r.requirement_type {
        Some(RequirementType::Requires(req)) => needs_token(req),
        _ => false,
    });
    let claims = match &call.token {
        None if required => return deny(401, "a token is required and there is none".into(), out),
        None => {
            out.authz
                .push("jwt_authn: no token (allowed: missing)".into());
            return Ok(None);
        }
        Some(Token::Invalid) => return deny(401, "the token does not verify".into(), out),
        Some(Token::Signed(c)) => c,
    };
    let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
    let sorted: BTreeMap<&String, _> = cfg.providers.iter().collect();
    let Some((name, provider)) = sorted
        .into_iter()
        .find(|(_, p)| p.issuer.is_empty() || p.issuer == iss)
    else {
        return deny(401, format!("no provider of issuer {iss:?}"), out);
    };
    let holds_keys = match &provider.jwks_source_specifier {
        Some(JwksSourceSpecifier::LocalJwks(d)) => match &d.specifier {
            Some(data_source::Specifier::InlineString(keys)) => {
                serde_json::from_str::<Value>(keys).ok().is_some_and(|set| {
                    set.get("keys").and_then(Value::as_array).is_some_and(|ks| {
                        ks.iter()
                            .any(|k| k.get("kid").and_then(Value::as_str) != Some(NO_KEYS_KID))
                    })
                })
            }
            _ => false,
        },
        // Fetched by Envoy: taken as holding the issuer's keys.
        Some(JwksSourceSpecifier::RemoteJwks(_)) => true,
        None => false,
    };
    if !holds_keys {
        return deny(
            401,
            format!("{name}: no keys of issuer {iss:?} (fails closed)"),
            out,
        );
    }
    let auds: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !provider.audiences.is_empty()
        && !auds
            .iter()
            .any(|a| provider.audiences.iter().any(|p| p == a))
    {
        return deny(403, format!("{name}: audience not allowed"), out);
    }
    out.authz
        .push(format!("jwt_authn: verified by {name} (issuer {iss:?})"));
    Ok(Some(claims.clone()))
}

/// Whether a requirement fails a request without a token.
fn needs_token(r: &JwtRequirement) -> bool {
    match &r.requires_type {
        Some(RequiresType::ProviderName(_) | RequiresType::ProviderAndAudiences(_)) => true,
        Some(RequiresType::RequiresAny(any)) => any.requirements.iter().all(needs_token),
        Some(RequiresType::RequiresAll(all)) => all.requirements.iter().any(needs_token),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::uri_template;

    #[test]
    fn uri_templates_match_segments_as_envoy_does() {
        assert!(uri_template("/files/*/private", "/files/a/private"));
        assert!(!uri_template("/files/*/private", "/files/a/b/private"));
        assert!(!uri_template("/files/*/private", "/files//private"));
        assert!(uri_template("/logs/**", "/logs/a/b/c"));
        assert!(uri_template("/logs/**", "/logs/a"));
        assert!(!uri_template("/logs/**", "/other/a"));
        assert!(uri_template("/**/x", "/a/b/x"));
    }
}
