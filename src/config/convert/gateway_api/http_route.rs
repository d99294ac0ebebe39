//! An HTTPRoute: its parents, hostnames and rules. Each rule becomes the VirtualService
//! route Istio makes of it (matches, filters, timeouts) with its backends beside it; a
//! filter meshflow cannot apply makes the rule answer 500, as the spec requires of a filter
//! an implementation does not support — never skipped.

use super::super::fields::{fqdn, spec, string_match};
use super::super::route_actions::header_edits;
use super::super::{parse_duration_ms, Result};
use super::{created, hostnames, parents, port, report_route_fields};
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, istio, Invalid};
use dataflows::model::{self as m, ConfigKey, MeshConfig, Record};
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn http_route(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::HttpRouteSpec, _) = spec(value)?;
    report_route_fields(&ignored, findings);
    let ns = &key.namespace;
    let parents = parents(&s.parent_refs, ns, false, findings)?;
    hostnames(&s.hostnames)?;
    let rules = s
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule(r, &format!("spec.rules[{i}]"), ns, mesh, findings))
        .collect::<Result<Vec<_>>>()?;
    let created = created(value);
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::HttpRoute(
        m::KubeHttpRoute {
            key: key.clone(),
            created,
            parents,
            hostnames: s.hostnames.clone(),
            rules,
        },
    ))])
}

/// A GRPCRoute: an HTTPRoute whose matches are on the gRPC service and method (the path
/// `/Service/Method`); its filters and backends are an HTTPRoute's.
pub(in crate::config::convert) fn grpc_route(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::GrpcRouteSpec, _) = spec(value)?;
    report_route_fields(&ignored, findings);
    let ns = &key.namespace;
    let parents = parents(&s.parent_refs, ns, false, findings)?;
    hostnames(&s.hostnames)?;
    let mut rules = Vec::new();
    for (i, r) in s.rules.iter().enumerate() {
        let f = format!("spec.rules[{i}]");
        let matches = r
            .matches
            .iter()
            .enumerate()
            .map(|(j, mt)| grpc_match(mt, &format!("{f}.matches[{j}]"), mesh))
            .collect::<Result<Vec<_>>>()?;
        let http = api::HttpRouteRule {
            name: r.name.clone(),
            matches: Vec::new(),
            filters: Vec::new(),
            backend_refs: Vec::new(),
            timeouts: None,
            retry: None,
        };
        let mut converted = rule_with(&http, &r.filters, &r.backend_refs, &f, ns, mesh, findings)?;
        converted.matches = matches;
        rules.push(converted);
    }
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::HttpRoute(
        m::KubeHttpRoute {
            key: key.clone(),
            created: created(value),
            parents,
            hostnames: s.hostnames.clone(),
            rules,
        },
    ))])
}

/// A gRPC method match as a path match (Istio's form): the exact `/Service/Method`, a
/// service's `/Service/` prefix, any service's method by expression, or expressions of both.
fn grpc_match(mt: &api::GrpcRouteMatch, f: &str, mesh: &MeshConfig) -> Result<m::HttpMatch> {
    let mut out = m::HttpMatch::default();
    if let Some(method) = &mt.method {
        let exact = method.kind.as_deref().unwrap_or("Exact");
        let (svc, meth) = (method.service.as_deref(), method.method.as_deref());
        out.uri = Some(match (exact, svc, meth) {
            (_, None, None) => {
                return Err(Invalid::field(
                    format!("{f}.method"),
                    "a method match needs a service or a method",
                ))
            }
            ("Exact", Some(s), Some(m)) => m::StringMatch::Exact(format!("/{s}/{m}")),
            ("Exact", Some(s), None) => m::StringMatch::Prefix(format!("/{s}/")),
            ("Exact", None, Some(m)) => regex(
                &format!("/[^/]+/{}", regex::escape(m)),
                &format!("{f}.method"),
                mesh,
            )?,
            ("RegularExpression", s, m) => regex(
                &format!("/{}/{}", s.unwrap_or("[^/]+"), m.unwrap_or("[^/]+")),
                &format!("{f}.method"),
                mesh,
            )?,
            (other, _, _) => {
                return Err(Invalid::field(
                    format!("{f}.method.type"),
                    format!("{other:?} is not one of Exact, RegularExpression"),
                ))
            }
        });
    }
    for (k, h) in mt.headers.iter().enumerate() {
        let hf = format!("{f}.headers[{k}]");
        let name = h.name.to_ascii_lowercase();
        if !super::super::fields::is_header_token(&name) {
            return Err(Invalid::field(
                format!("{hf}.name"),
                format!("{:?} is not a header name", h.name),
            ));
        }
        if let std::collections::btree_map::Entry::Vacant(e) = out.headers.entry(name) {
            e.insert(value_match(h, &hf, mesh)?);
        }
    }
    Ok(out)
}

fn rule(
    r: &api::HttpRouteRule,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<m::HttpRouteRule> {
    let matches = r
        .matches
        .iter()
        .enumerate()
        .map(|(j, mt)| route_match(mt, &format!("{f}.matches[{j}]"), mesh))
        .collect::<Result<Vec<_>>>()?;
    prefix_replacement_has_one_prefix_match(r, f)?;
    let mut out = rule_with(r, &r.filters, &r.backend_refs, f, ns, mesh, findings)?;
    out.matches = matches;
    Ok(out)
}

/// A rule's route (its filters and timeouts) and backends; the matches are the caller's.
fn rule_with(
    r: &api::HttpRouteRule,
    filters: &[api::HttpRouteFilter],
    backend_refs: &[api::HttpBackendRef],
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<m::HttpRouteRule> {
    let mut template = m::HttpRoute {
        name: r.name.clone(),
        ..m::HttpRoute::default()
    };
    let mut unsupported = false;
    for (j, filter) in filters.iter().enumerate() {
        let ff = format!("{f}.filters[{j}]");
        unsupported |= !apply_filter(filter, &ff, ns, mesh, &mut template, findings)?;
    }
    // The one backend's redirect or rewrite is the rule's: every request of the rule goes
    // to that backend (HTTPRouteBackendRequestRedirect, HTTPRouteBackendURLRewrite).
    let hoisted = hoisted_filters(filters, backend_refs);
    for &j in &hoisted {
        let ff = format!("{f}.backendRefs[0].filters[{j}]");
        let filter = &backend_refs[0].filters[j];
        unsupported |= !apply_filter(filter, &ff, ns, mesh, &mut template, findings)?;
    }
    template.retries = r
        .retry
        .as_ref()
        .map(|rt| retry(rt, &format!("{f}.retry")))
        .transpose()?;
    if let Some(t) = &r.timeouts {
        if let Some(req) = &t.request {
            template.timeout_ms = Some(parse_duration_ms(req, &format!("{f}.timeouts.request"))?);
        }
        // With a retry policy, the backend request's timeout is each attempt's (as Istio).
        // Without one, the route's timeout is the smaller of the two: every attempt is then
        // within `backendRequest` and the whole request within `request` (the spec has
        // `backendRequest` no longer than `request`; the mesh's default retries of a refused
        // connection then share the smaller bound rather than exceed one of them).
        if let Some(backend) = &t.backend_request {
            let ms = parse_duration_ms(backend, &format!("{f}.timeouts.backendRequest"))?;
            if let Some(retries) = template.retries.as_mut() {
                retries.per_try_timeout_ms = Some(ms);
            } else {
                // `0s` is "no timeout" for either field.
                template.timeout_ms = match template.timeout_ms {
                    Some(req) if req != 0 && (ms == 0 || req < ms) => Some(req),
                    _ => Some(ms),
                };
            }
        }
    }
    if unsupported {
        // The spec's answer to a filter the implementation cannot apply.
        template.redirect = None;
        template.direct_response = Some(m::DirectResponse {
            status: 500,
            body: None,
        });
    }
    let backends = backend_refs
        .iter()
        .enumerate()
        .map(|(j, b)| {
            let taken = if j == 0 { hoisted.as_slice() } else { &[] };
            backend(
                b,
                &format!("{f}.backendRefs[{j}]"),
                ns,
                mesh,
                taken,
                findings,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(m::HttpRouteRule {
        template,
        matches: Vec::new(),
        backends,
    })
}

/// The filters of a rule's backend that are the rule's own, by index: a `RequestRedirect` or
/// a `URLRewrite` on the rule's only backend (of a weight above 0), where the rule has no
/// filter of that type itself. Anywhere else such a filter cannot be applied to one backend
/// apart from the others, and that backend is not routed to.
fn hoisted_filters(rule: &[api::HttpRouteFilter], backends: &[api::HttpBackendRef]) -> Vec<usize> {
    let [only] = backends else {
        return Vec::new();
    };
    if only.weight == Some(0) {
        return Vec::new();
    }
    let whole_rule = |kind: &str| matches!(kind, "RequestRedirect" | "URLRewrite");
    only.filters
        .iter()
        .enumerate()
        .filter(|(_, filter)| {
            whole_rule(&filter.kind) && !rule.iter().any(|r| r.kind == filter.kind)
        })
        .map(|(j, _)| j)
        .collect()
}

/// `ReplacePrefixMatch` (a redirect's or a rewrite's) replaces the prefix a `PathPrefix`
/// match matched: the API's validation asks for exactly one match, of that type (a rule
/// without matches has the default one, `PathPrefix /`). With another, the replacement
/// would take the whole path.
fn prefix_replacement_has_one_prefix_match(r: &api::HttpRouteRule, f: &str) -> Result<()> {
    let replaces_prefix =
        |p: Option<&api::PathModifier>| p.is_some_and(|p| p.kind == "ReplacePrefixMatch");
    let replaces = |filter: &api::HttpRouteFilter| {
        replaces_prefix(
            filter
                .request_redirect
                .as_ref()
                .and_then(|r| r.path.as_ref()),
        ) || replaces_prefix(filter.url_rewrite.as_ref().and_then(|r| r.path.as_ref()))
    };
    let own = r
        .filters
        .iter()
        .position(replaces)
        .map(|j| format!("{f}.filters[{j}]"));
    let backend = hoisted_filters(&r.filters, &r.backend_refs)
        .into_iter()
        .find(|&j| replaces(&r.backend_refs[0].filters[j]))
        .map(|j| format!("{f}.backendRefs[0].filters[{j}]"));
    let Some(field) = own.or(backend) else {
        return Ok(());
    };
    let prefix_match = |mt: &api::HttpRouteMatch| {
        mt.path
            .as_ref()
            .and_then(|p| p.kind.as_deref())
            .is_none_or(|k| k == "PathPrefix")
    };
    match r.matches.as_slice() {
        [] => Ok(()),
        [one] if prefix_match(one) => Ok(()),
        _ => Err(Invalid::field(
            field,
            "ReplacePrefixMatch needs the rule to have exactly one match, a PathPrefix",
        )),
    }
}

/// A rule's `retry`: the spec's connection errors (a failed connect, a refused stream, and a
/// connection dropped or reset before the response — Envoy's `reset`, which also retries an
/// attempt that ran past `timeouts.backendRequest`) and the codes listed; two attempts when
/// none are given (Istio's default), none at all for `attempts: 0`.
fn retry(rt: &api::HttpRouteRetry, f: &str) -> Result<m::Retries> {
    let attempts = match rt.attempts {
        None => 2,
        Some(n) => u32::try_from(n).map_err(|_| {
            Invalid::field(format!("{f}.attempts"), format!("{n} is not at least 0"))
        })?,
    };
    let mut on = vec![
        "connect-failure".to_string(),
        "refused-stream".into(),
        "unavailable".into(),
        "cancelled".into(),
        "reset".into(),
    ];
    for (i, code) in rt.codes.iter().enumerate() {
        if !(400..=599).contains(code) {
            return Err(Invalid::field(
                format!("{f}.codes[{i}]"),
                format!("{code} is not a status code in 400-599"),
            ));
        }
        on.push(code.to_string());
    }
    Ok(m::Retries {
        attempts,
        per_try_timeout_ms: None,
        retry_on: Some(on.join(",")),
        remote_localities: false,
        ignore_previous_hosts: None,
        backoff_ms: rt
            .backoff
            .as_deref()
            .map(|b| parse_duration_ms(b, &format!("{f}.backoff")))
            .transpose()?,
    })
}

fn route_match(mt: &api::HttpRouteMatch, f: &str, mesh: &MeshConfig) -> Result<m::HttpMatch> {
    let mut out = m::HttpMatch::default();
    let path = mt.path.as_ref();
    let kind = path.and_then(|p| p.kind.as_deref()).unwrap_or("PathPrefix");
    let value = path
        .and_then(|p| p.value.clone())
        .unwrap_or_else(|| "/".into());
    out.uri = Some(match kind {
        "PathPrefix" | "Exact" if !value.starts_with('/') => {
            return Err(Invalid::field(
                format!("{f}.path.value"),
                format!("{value:?} must start with /"),
            ))
        }
        "PathPrefix" => {
            // "A trailing / is ignored": /foo/ is the prefix /foo.
            let trimmed = value.trim_end_matches('/');
            if trimmed.is_empty() {
                m::StringMatch::Prefix("/".into())
            } else {
                m::StringMatch::SegmentPrefix(trimmed.to_string())
            }
        }
        "Exact" => m::StringMatch::Exact(value),
        "RegularExpression" => regex(&value, &format!("{f}.path"), mesh)?,
        other => {
            return Err(Invalid::field(
                format!("{f}.path.type"),
                format!("{other:?} is not one of Exact, PathPrefix, RegularExpression"),
            ))
        }
    });
    for (k, h) in mt.headers.iter().enumerate() {
        let hf = format!("{f}.headers[{k}]");
        let name = h.name.to_ascii_lowercase();
        if !super::super::fields::is_header_token(&name) {
            return Err(Invalid::field(
                format!("{hf}.name"),
                format!("{:?} is not an HTTP header name", h.name),
            ));
        }
        // "The first entry with an equivalent name MUST be considered for a match."
        if out.headers.contains_key(&name) {
            continue;
        }
        let value = value_match(h, &hf, mesh)?;
        out.headers.insert(name, value);
    }
    for (k, q) in mt.query_params.iter().enumerate() {
        let qf = format!("{f}.queryParams[{k}]");
        if q.name.is_empty() {
            return Err(Invalid::field(format!("{qf}.name"), "a name is required"));
        }
        if out.query_params.contains_key(&q.name) {
            continue;
        }
        let value = value_match(q, &qf, mesh)?;
        out.query_params.insert(q.name.clone(), value);
    }
    if let Some(method) = &mt.method {
        out.headers
            .insert(":method".into(), m::StringMatch::Exact(method.clone()));
    }
    Ok(out)
}

fn value_match(v: &api::NameValueMatch, f: &str, mesh: &MeshConfig) -> Result<m::StringMatch> {
    match v.kind.as_deref().unwrap_or("Exact") {
        "Exact" => Ok(m::StringMatch::Exact(v.value.clone())),
        "RegularExpression" => regex(&v.value, f, mesh),
        other => Err(Invalid::field(
            format!("{f}.type"),
            format!("{other:?} is not one of Exact, RegularExpression"),
        )),
    }
}

/// A regular expression, checked as a VirtualService's is (RE2, Envoy's program size).
fn regex(r: &str, f: &str, mesh: &MeshConfig) -> Result<m::StringMatch> {
    let sm = istio::StringMatch {
        regex: Some(r.to_string()),
        ..istio::StringMatch::default()
    };
    string_match(&sm, f, mesh).map_err(|mut e| {
        e.field = format!("{f}.value");
        e
    })
}

/// Applies one filter to the rule's route; `false` for one meshflow cannot apply (reported).
fn apply_filter(
    filter: &api::HttpRouteFilter,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    route: &mut m::HttpRoute,
    findings: &mut Vec<Finding>,
) -> Result<bool> {
    let missing = |field: &str| {
        Invalid::field(
            format!("{f}.{field}"),
            format!("a {} filter needs {field}", filter.kind),
        )
    };
    match filter.kind.as_str() {
        "RequestHeaderModifier" => {
            let h = filter
                .request_header_modifier
                .as_ref()
                .ok_or_else(|| missing("requestHeaderModifier"))?;
            merge_edits(
                &mut route.headers.request,
                headers(h, &format!("{f}.requestHeaderModifier"), true)?,
            );
        }
        "ResponseHeaderModifier" => {
            let h = filter
                .response_header_modifier
                .as_ref()
                .ok_or_else(|| missing("responseHeaderModifier"))?;
            merge_edits(
                &mut route.headers.response,
                headers(h, &format!("{f}.responseHeaderModifier"), false)?,
            );
        }
        "RequestRedirect" => {
            let r = filter
                .request_redirect
                .as_ref()
                .ok_or_else(|| missing("requestRedirect"))?;
            let rf = format!("{f}.requestRedirect");
            let code = r.status_code.unwrap_or(302);
            if !matches!(code, 301 | 302 | 303 | 307 | 308) {
                return Err(Invalid::field(
                    format!("{rf}.statusCode"),
                    format!("{code} is not one of 301, 302, 303, 307, 308"),
                ));
            }
            let (uri, prefix) = match &r.path {
                None => (None, None),
                Some(p) if p.kind == "ReplaceFullPath" => (
                    Some(p.replace_full_path.clone().unwrap_or_else(|| "/".into())),
                    None,
                ),
                Some(p) if p.kind == "ReplacePrefixMatch" => (
                    None,
                    Some(p.replace_prefix_match.clone().unwrap_or_else(|| "/".into())),
                ),
                Some(p) => {
                    return Err(Invalid::field(
                        format!("{rf}.path.type"),
                        format!(
                            "{:?} is not one of ReplaceFullPath, ReplacePrefixMatch",
                            p.kind
                        ),
                    ))
                }
            };
            let scheme = match r.scheme.as_deref() {
                None => None,
                Some(s @ ("http" | "https")) => Some(s.to_string()),
                Some(other) => {
                    return Err(Invalid::field(
                        format!("{rf}.scheme"),
                        format!("{other:?} is not one of http, https"),
                    ))
                }
            };
            // The spec's port: the one written; else the scheme's well-known port when a
            // scheme is written (no port in the location); else the listener's — the port
            // of the route configuration, which is the port the request came to.
            let port = r.port.map(|n| port(n, &format!("{rf}.port"))).transpose()?;
            route.redirect = Some(m::Redirect {
                uri,
                prefix,
                authority: r.hostname.clone(),
                from_request_port: port.is_none() && scheme.is_none(),
                port,
                scheme,
                code: code as u32,
            });
        }
        "URLRewrite" => {
            let r = filter
                .url_rewrite
                .as_ref()
                .ok_or_else(|| missing("urlRewrite"))?;
            let mut rw = m::Rewrite {
                authority: r.hostname.clone(),
                ..m::Rewrite::default()
            };
            match &r.path {
                None => {}
                Some(p) if p.kind == "ReplacePrefixMatch" => {
                    rw.uri = Some(p.replace_prefix_match.clone().unwrap_or_else(|| "/".into()));
                }
                Some(p) if p.kind == "ReplaceFullPath" => {
                    let full = p.replace_full_path.clone().unwrap_or_else(|| "/".into());
                    rw.uri_regex = Some(("^.*$".into(), full));
                }
                Some(p) => {
                    return Err(Invalid::field(
                        format!("{f}.urlRewrite.path.type"),
                        format!(
                            "{:?} is not one of ReplaceFullPath, ReplacePrefixMatch",
                            p.kind
                        ),
                    ))
                }
            }
            route.rewrite = Some(rw);
        }
        "RequestMirror" => {
            let r = filter
                .request_mirror
                .as_ref()
                .ok_or_else(|| missing("requestMirror"))?;
            let mf = format!("{f}.requestMirror.backendRef");
            let b = &r.backend_ref;
            let kind = b.kind.as_deref().unwrap_or("Service");
            let group = b.group.as_deref().unwrap_or("");
            let target_ns = b.namespace.clone().unwrap_or_else(|| ns.to_string());
            if !group.is_empty() || kind != "Service" || target_ns != ns {
                findings.push(Finding::error(
                    mf,
                    "only a Service of the route's namespace is mirrored to yet; nothing is mirrored",
                ));
                return Ok(true);
            }
            let fraction = match (&r.percent, &r.fraction) {
                (Some(p), _) => Some((*p).clamp(0, 100) as u32 * 10_000),
                (None, Some(fr)) => {
                    // In i128: a numerator near i64's end times a million would overflow.
                    let den = i128::from(fr.denominator.unwrap_or(100).max(1));
                    let num = i128::from(fr.numerator).clamp(0, den);
                    Some(u32::try_from(num * 1_000_000 / den).unwrap_or(1_000_000))
                }
                (None, None) => None,
            };
            route.mirrors.push(m::Mirror {
                destination: m::RouteDestination {
                    host: fqdn(&b.name, ns, mesh),
                    subset: None,
                    port: b.port.map(|n| port(n, &format!("{mf}.port"))).transpose()?,
                    weight: 100,
                    headers: m::HeaderOps::default(),
                    via_alias: None,
                },
                fraction,
            });
        }
        "CORS" => {
            let c = filter.cors.as_ref().ok_or_else(|| missing("cors"))?;
            route.cors = Some(Box::new(cors(c, &format!("{f}.cors"))?));
        }
        other => {
            findings.push(Finding::error(
                f.to_string(),
                format!("the filter {other:?} is not supported by meshflow; the rule answers 500"),
            ));
            return Ok(false);
        }
    }
    Ok(true)
}

/// The `CORS` filter as the VirtualService's `corsPolicy` Envoy's CORS filter takes: an
/// origin `*` any origin, one with a `*` in its host a pattern (the `*` greedy to the left
/// over any number of DNS labels, as the spec says: host characters and periods, nothing
/// that would let an origin of another scheme or port through), the rest exact.
fn cors(c: &api::CorsFilter, f: &str) -> Result<m::Cors> {
    let allow_origins = c
        .allow_origins
        .iter()
        .map(|o| {
            if o == "*" {
                m::StringMatch::Regex(".*".into())
            } else if o.contains('*') {
                let pattern = regex::escape(o).replace(r"\*", "[A-Za-z0-9.-]+");
                m::StringMatch::Regex(pattern)
            } else {
                m::StringMatch::Exact(o.clone())
            }
        })
        .collect();
    let max_age_s = match c.max_age {
        Some(a) if a < 0 => {
            return Err(Invalid::field(
                format!("{f}.maxAge"),
                format!("{a} is not a number of seconds"),
            ))
        }
        a => a.map(|a| a as u64),
    };
    Ok(m::Cors {
        allow_origins,
        allow_methods: c.allow_methods.clone(),
        allow_headers: c.allow_headers.clone(),
        expose_headers: c.expose_headers.clone(),
        max_age_s,
        allow_credentials: c.allow_credentials,
        forward_unmatched_preflights: true,
    })
}

/// A header modifier as a VirtualService's header edits (the same checks).
fn headers(h: &api::HeaderFilter, f: &str, request: bool) -> Result<m::HeaderEdits> {
    let ops = istio::HeaderOperations {
        set: h
            .set
            .iter()
            .map(|v| (v.name.to_ascii_lowercase(), v.value.clone()))
            .collect(),
        add: h
            .add
            .iter()
            .map(|v| (v.name.to_ascii_lowercase(), v.value.clone()))
            .collect(),
        remove: h.remove.iter().map(|n| n.to_ascii_lowercase()).collect(),
    };
    header_edits(&ops, f, request)
}

fn merge_edits(into: &mut m::HeaderEdits, more: m::HeaderEdits) {
    into.set.extend(more.set);
    into.add.extend(more.add);
    into.remove.extend(more.remove);
    if more.authority.is_some() {
        into.authority = more.authority;
    }
}

/// A backend reference; `taken`: the indices of its filters its rule applies as its own
/// ([`hoisted_filters`]).
pub(super) fn backend(
    b: &api::HttpBackendRef,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    taken: &[usize],
    findings: &mut Vec<Finding>,
) -> Result<m::BackendRef> {
    let group = b.group.as_deref().unwrap_or("");
    let kind = b.kind.as_deref().unwrap_or("Service");
    let namespace = b.namespace.clone().unwrap_or_else(|| ns.to_string());
    let port_number = b.port.map(|n| port(n, &format!("{f}.port"))).transpose()?;
    let weight = b.weight.unwrap_or(1);
    if !(0..=1_000_000).contains(&weight) {
        return Err(Invalid::field(
            format!("{f}.weight"),
            format!("{weight} is not a weight (0-1000000)"),
        ));
    }
    let host = match (group, kind) {
        ("" | "core", "Service") if port_number.is_none() => {
            findings.push(Finding::error(
                format!("{f}.port"),
                "a Service backend needs a port; its share of requests is answered 500",
            ));
            None
        }
        ("" | "core", "Service") => {
            Some(format!("{}.{namespace}.svc.{}", b.name, mesh.domain_suffix))
        }
        ("networking.istio.io", "Hostname") => Some(b.name.clone()),
        _ => {
            findings.push(Finding::error(
                f.to_string(),
                format!("a {kind} of group {group:?} is not a backend meshflow routes to; its share of requests is answered 500"),
            ));
            None
        }
    };
    // A kind meshflow does not route to keeps its group in its name (`Kind.group`), so that
    // the route's status and messages say which kind it was (`InvalidKind`).
    let kind = match (group, kind) {
        ("" | "core", k) => k.to_string(),
        ("networking.istio.io", "Hostname") => kind.to_string(),
        (g, k) => format!("{k}.{g}"),
    };
    let mut headers = m::HeaderOps::default();
    for (j, filter) in b.filters.iter().enumerate() {
        if taken.contains(&j) {
            continue;
        }
        let ff = format!("{f}.filters[{j}]");
        match (
            filter.kind.as_str(),
            &filter.request_header_modifier,
            &filter.response_header_modifier,
        ) {
            ("RequestHeaderModifier", Some(h), _) => merge_edits(
                &mut headers.request,
                self::headers(h, &format!("{ff}.requestHeaderModifier"), true)?,
            ),
            ("ResponseHeaderModifier", _, Some(h)) => merge_edits(
                &mut headers.response,
                self::headers(h, &format!("{ff}.responseHeaderModifier"), false)?,
            ),
            (other, _, _) => {
                findings.push(Finding::error(
                    ff,
                    format!("the backend filter {other:?} is applied only on a rule's one backend (a RequestRedirect or URLRewrite the rule has not itself) or as a header modifier; the backend is not routed to"),
                ));
                return Ok(m::BackendRef {
                    host: None,
                    namespace,
                    kind,
                    name: b.name.clone(),
                    port: port_number,
                    weight: weight as u32,
                    headers,
                });
            }
        }
    }
    Ok(m::BackendRef {
        host,
        namespace,
        kind,
        name: b.name.clone(),
        port: port_number,
        weight: weight as u32,
        headers,
    })
}
