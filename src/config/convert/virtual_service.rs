//! A VirtualService: its hosts and gateways, its HTTP routes with their matches, its TCP
//! and TLS routes, delegation, and the routes left out where a match condition is not
//! read. What an HTTP route does besides choosing destinations is [`super::route_actions`]'s.

use super::fields::{
    cidr, destination, export_to, fqdn, is_header_token, parse_duration_ms, port_u16,
    report_ignored, source_labels, spec, string_match,
};
use super::route_actions::{
    cors, direct_response, fault, header_ops, mirrors, redirect, retries, rewrite,
};
use super::Result;
use crate::config::findings::{FieldPath, Finding};
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, ConfigKey, MeshConfig, Record};
use serde_yaml_ng::Value;

pub(super) fn virtual_service(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::VirtualServiceSpec, _) = spec(value)?;
    let ns = &key.namespace;
    // Without hosts it can only be delegated to: it routes nothing of its own, binds no
    // gateway and delegates no further (Istio supports one level).
    let delegate_only = s.hosts.is_empty();
    if delegate_only {
        delegate_rules(&s)?;
    }
    let not_generated = routes_not_generated(&ignored, findings);
    let mut http = Vec::new();
    for (ri, r) in s.http.iter().enumerate() {
        if not_generated.http.contains(&ri) {
            continue;
        }
        let f = format!("spec.http[{ri}]");
        if let Some(route) = http_route(r, &f, ns, mesh, findings)? {
            http.push(m::HttpRoute { index: ri, ..route });
        }
    }
    let gateways = gateway_refs(&s.gateways, ns);
    let hosts: Vec<String> = s.hosts.iter().map(|h| fqdn(h, ns, mesh)).collect();
    let tls = tls_routes(&s.tls, &not_generated.tls, &hosts, ns, mesh)?;
    Ok(vec![Record::VirtualService(m::VirtualService {
        key: key.clone(),
        hosts,
        gateways,
        export_to: export_to(&s.export_to, "spec.exportTo")?,
        http,
        tcp: tcp_routes(&s.tcp, &not_generated.tcp, ns, mesh)?,
        tls,
    })])
}

/// The rules of a VirtualService without hosts, a delegate: it binds no gateway, has http
/// routes only and delegates no further.
fn delegate_rules(s: &istio::VirtualServiceSpec) -> Result<()> {
    if !s.gateways.is_empty() {
        return Err(Invalid::field(
            "spec.gateways",
            "a VirtualService without hosts is a delegate and cannot bind gateways",
        ));
    }
    if !s.tcp.is_empty() || !s.tls.is_empty() {
        return Err(Invalid::field(
            if s.tcp.is_empty() {
                "spec.tls"
            } else {
                "spec.tcp"
            },
            "a VirtualService without hosts is a delegate: only http routes are delegated",
        ));
    }
    if let Some(ri) = s.http.iter().position(|r| r.delegate.is_some()) {
        return Err(Invalid::field(
            format!("spec.http[{ri}].delegate"),
            "a delegate VirtualService cannot delegate further (one level only)",
        ));
    }
    Ok(())
}

/// An HTTP route (at field `f`), or `None` where a match condition meshflow cannot honour
/// leaves it out (an error says which).
fn http_route(
    r: &istio::HttpRoute,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Option<m::HttpRoute>> {
    if let Some(path) = query_prefix_condition(r, f) {
        findings.push(Finding::error(
            path,
            format!(
                "a query parameter matches exact or regex (Istio does not support prefix \
                 there); the route {f} is not generated, so it never matches more \
                 traffic than written"
            ),
        ));
        return Ok(None);
    }
    let mut matches = Vec::new();
    for (mi, mr) in r.matches.iter().enumerate() {
        matches.push(http_match(
            mr,
            &format!("{f}.match[{mi}]"),
            ns,
            mesh,
            findings,
        )?);
    }
    // Istio's rule: exactly one of route, redirect, directResponse (or delegate).
    let actions = [
        ("route", !r.route.is_empty()),
        ("redirect", r.redirect.is_some()),
        ("directResponse", r.direct_response.is_some()),
        ("delegate", r.delegate.is_some()),
    ];
    let given: Vec<&str> = actions.iter().filter(|a| a.1).map(|a| a.0).collect();
    match given.as_slice() {
        [] => {
            return Err(Invalid::field(
                format!("{f}.route"),
                "a route needs destinations (route), a redirect, a directResponse or a \
                 delegate",
            ))
        }
        [_] => {}
        [a, b, ..] => {
            return Err(Invalid::field(
                format!("{f}.{b}"),
                format!("a route cannot have both {a} and {b}"),
            ))
        }
    }
    let delegate = match &r.delegate {
        None => None,
        Some(d) if d.name.is_empty() => {
            return Err(Invalid::field(
                format!("{f}.delegate.name"),
                "a delegate needs the name of a VirtualService",
            ))
        }
        Some(d) => Some(ConfigKey::new(
            dataflows::model::Kind::VirtualService,
            d.namespace.as_deref().unwrap_or(ns),
            &d.name,
        )),
    };
    let route = weighted_destinations(&r.route, f, ns, mesh, true)?;
    let timeout_ms = r
        .timeout
        .as_deref()
        .map(|t| parse_duration_ms(t, &format!("{f}.timeout")))
        .transpose()?;
    let retries = r
        .retries
        .as_ref()
        .map(|rt| retries(rt, &format!("{f}.retries")))
        .transpose()?;
    let rewrite = r
        .rewrite
        .as_ref()
        .map(|rw| rewrite(rw, &format!("{f}.rewrite"), mesh))
        .transpose()?;
    let headers = r
        .headers
        .as_ref()
        .map(|h| header_ops(h, &format!("{f}.headers")))
        .transpose()?
        .unwrap_or_default();
    // As Istio's validation: the authority is rewritten in one place of a route.
    if let (Some(rw), Some(_)) = (
        rewrite.as_ref().and_then(|rw| rw.authority.as_ref()),
        &headers.request.authority,
    ) {
        return Err(Invalid::field(
            format!("{f}.headers.request"),
            format!("the authority is already rewritten to {rw:?} by {f}.rewrite.authority"),
        ));
    }
    Ok(Some(m::HttpRoute {
        index: 0,
        name: r.name.clone(),
        matches,
        route,
        delegate,
        timeout_ms,
        retries,
        redirect: r
            .redirect
            .as_ref()
            .map(|rd| redirect(rd, &format!("{f}.redirect")))
            .transpose()?,
        direct_response: r
            .direct_response
            .as_ref()
            .map(|d| direct_response(d, &format!("{f}.directResponse")))
            .transpose()?,
        rewrite,
        headers,
        mirrors: mirrors(r, f, ns, mesh)?,
        fault: r
            .fault
            .as_ref()
            .map(|ft| fault(ft, &format!("{f}.fault"), findings))
            .transpose()?
            .flatten(),
        cors: r
            .cors_policy
            .as_ref()
            .map(|c| cors(c, &format!("{f}.corsPolicy"), mesh))
            .transpose()?
            .map(Box::new),
    }))
}

/// The routes of a VirtualService that cannot be generated as written: where a match
/// condition is not read, the route is left out (it would match more than written).
fn routes_not_generated(ignored: &[FieldPath], findings: &mut Vec<Finding>) -> NotGenerated {
    let mut out = NotGenerated::default();
    report_ignored(ignored, findings, |p| {
        // A TCP route whose match reads a condition meshflow cannot honour (`sourceSubnet`,
        // a misspelt one) would match more connections than written.
        if let (Some(ri), Some("match")) = (p.index_under("tls"), p.key_at(2)) {
            out.tls.push(ri);
            return Some(Finding::error(
                p.to_string(),
                format!(
                    "this match condition is not supported by meshflow yet; the route \
                     spec.tls[{ri}] is not generated, so it never matches more connections \
                     than written"
                ),
            ));
        }
        if let (Some(ri), Some("match")) = (p.index_under("tcp"), p.key_at(2)) {
            out.tcp.push(ri);
            return Some(Finding::error(
                p.to_string(),
                format!(
                    "this match condition is not supported by meshflow yet; the route \
                     spec.tcp[{ri}] is not generated, so it never matches more connections \
                     than written"
                ),
            ));
        }
        let ri = p.index_under("http");
        let finding = match (ri, p.key_at(2)) {
            // A match's name and stat prefix restrict nothing: plain warnings.
            (Some(ri), Some("match")) if !matches!(p.key_at(4), Some("name" | "statPrefix")) => {
                Finding::error(
                    p.to_string(),
                    format!(
                        "this match condition is not supported by meshflow yet; the route \
                     spec.http[{ri}] is not generated, so it never matches more traffic than \
                     written"
                    ),
                )
            }
            _ => return None,
        };
        if finding.level == crate::config::findings::Level::Error {
            out.http.extend(ri);
        }
        Some(finding)
    });
    out.tcp.sort();
    out.tcp.dedup();
    out.tls.sort();
    out.tls.dedup();
    out
}

/// The routes [`routes_not_generated`] leaves out, by index.
#[derive(Default)]
struct NotGenerated {
    http: Vec<usize>,
    tcp: Vec<usize>,
    tls: Vec<usize>,
}

/// The first `queryParams` condition of route `f` matching by `prefix`, which Istio's API
/// says is not supported for query parameters: the route is left out rather than matching
/// more than written.
fn query_prefix_condition(r: &istio::HttpRoute, f: &str) -> Option<String> {
    r.matches.iter().enumerate().find_map(|(mi, mr)| {
        mr.query_params
            .iter()
            .find(|(_, sm)| sm.prefix.is_some())
            .map(|(q, _)| format!("{f}.match[{mi}].queryParams.{q}.prefix"))
    })
}

/// One `match` of an HTTP route.
fn http_match(
    mr: &istio::HttpMatchRequest,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<m::HttpMatch> {
    let uri = mr
        .uri
        .as_ref()
        .map(|u| string_match(u, &format!("{f}.uri"), mesh))
        .transpose()?;
    let mut headers = std::collections::BTreeMap::new();
    for (h, sm) in &mr.headers {
        let field = format!("{f}.headers.{h}");
        if m::is_claim_condition(h) {
            headers.insert(claim_name(h, &field)?, value_match(sm, &field, mesh)?);
            continue;
        }
        match_header_name(h, &format!("{f}.headers"), true, findings)?;
        headers.insert(h.to_ascii_lowercase(), value_match(sm, &field, mesh)?);
    }
    // Istio matches these as the pseudo-headers Envoy sees.
    for (field, header, sm) in [
        ("method", ":method", &mr.method),
        ("authority", ":authority", &mr.authority),
        ("scheme", ":scheme", &mr.scheme),
    ] {
        if let Some(sm) = sm {
            headers.insert(
                header.to_string(),
                string_match(sm, &format!("{f}.{field}"), mesh)?,
            );
        }
    }
    let mut without_headers = std::collections::BTreeMap::new();
    for (h, sm) in &mr.without_headers {
        let field = format!("{f}.withoutHeaders.{h}");
        if m::is_claim_condition(h) {
            without_headers.insert(claim_name(h, &field)?, value_match(sm, &field, mesh)?);
            continue;
        }
        match_header_name(h, &format!("{f}.withoutHeaders"), false, findings)?;
        without_headers.insert(h.to_ascii_lowercase(), value_match(sm, &field, mesh)?);
    }
    let mut query_params = std::collections::BTreeMap::new();
    for (q, sm) in &mr.query_params {
        // A prefix never reaches here: its route is left out (see `query_prefix_condition`).
        let field = format!("{f}.queryParams.{q}");
        query_params.insert(q.clone(), value_match(sm, &field, mesh)?);
    }
    let port = mr
        .port
        .map(|p| port_u16(p, &format!("{f}.port")))
        .transpose()?;
    Ok(m::HttpMatch {
        uri,
        ignore_uri_case: mr.ignore_uri_case,
        headers,
        without_headers,
        query_params,
        port,
        gateways: gateway_refs(&mr.gateways, ns),
        source_namespace: mr.source_namespace.clone(),
        source_labels: source_labels(&mr.source_labels, &format!("{f}.sourceLabels"))?,
    })
}

/// A condition on a verified token's claim (`@request.auth.claims.a.b` or
/// `@request.auth.claims[a][b]`), kept as written: claim names are case-sensitive. It
/// matches what the proxy's `jwt_authn` verified (a RequestAuthentication selecting a
/// gateway); with no verified token, or on a sidecar (whose route is chosen before the token
/// is verified, as in Istio), it never matches.
fn claim_name(h: &str, field: &str) -> Result<String> {
    match m::jwt_claim_path(h) {
        Some(_) => Ok(h.to_string()),
        None => Err(Invalid::field(
            field,
            "a JWT claim condition is written @request.auth.claims.NAME[.NESTED] or \
             @request.auth.claims[NAME][NESTED]",
        )),
    }
}

/// A header's or query parameter's match, where Istio's empty match means "present".
fn value_match(sm: &istio::StringMatch, field: &str, mesh: &MeshConfig) -> Result<m::StringMatch> {
    match (&sm.exact, &sm.prefix, &sm.regex) {
        // Istio's catch-all header matches: none, an empty prefix (which Envoy's string
        // matcher would refuse) and the regex `*` (not RE2, which Istio's validation lets
        // through for withoutHeaders) each mean "present".
        (None, None, None) => Ok(m::StringMatch::Present),
        (None, Some(p), None) if p.is_empty() => Ok(m::StringMatch::Present),
        (None, None, Some(r)) if r == "*" => Ok(m::StringMatch::Present),
        _ => string_match(sm, field, mesh),
    }
}

/// The name of a `headers` (`present` true) or `withoutHeaders` condition at `field` (the
/// map). Refused as Istio's validation refuses it (empty) and where Envoy would refuse the
/// whole route configuration of the port (an empty name, or one with NUL, CR or LF).
/// Istio accepts any other name, and so does meshflow; a name that is neither a token nor a
/// pseudo-header (`:authority`) is never in a request, which a warning says. JWT claim
/// conditions (`@request.auth.claims.…`) never reach here (see [`claim_name`]).
fn match_header_name(
    name: &str,
    field: &str,
    present: bool,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    if name.is_empty() {
        return Err(Invalid::field(field, "a header name cannot be empty"));
    }
    if name.contains(['\0', '\r', '\n']) {
        return Err(Invalid::field(
            format!("{field}.{}", name.escape_debug()),
            format!(
                "{name:?} is not a header name: Envoy refuses NUL, CR and LF in one (and with \
                 it the route configuration of every route on the port)"
            ),
        ));
    }
    if !is_header_token(name.strip_prefix(':').unwrap_or(name)) {
        findings.push(Finding::warning(
            format!("{field}.{name}"),
            format!(
                "{name:?} is not an HTTP header name (a token, or a pseudo-header such as \
                 :authority): no request carries it, so this condition {}",
                if present {
                    "never holds and the match never applies"
                } else {
                    "always holds"
                }
            ),
        ));
    }
    Ok(())
}

/// Gateway references as `namespace/name` (a bare name is in `ns`), or `mesh`.
fn gateway_refs(list: &[String], ns: &str) -> Vec<String> {
    list.iter()
        .map(|g| {
            if g == "mesh" || g.contains('/') {
                g.clone()
            } else {
                format!("{ns}/{g}")
            }
        })
        .collect()
}

/// A route's `route[]`: destinations with weights (a lone destination takes 100; several
/// must add up to 100), as HTTP and TCP routes share them.
/// The destinations of an HTTP (`headers` read) or TCP route (`headers` is not a field of
/// Istio's TCP destinations: refused, as Istio's schema refuses it).
fn weighted_destinations(
    list: &[istio::HttpRouteDestination],
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    http: bool,
) -> Result<Vec<m::RouteDestination>> {
    let mut route = Vec::new();
    for (di, d) in list.iter().enumerate() {
        let df = format!("{f}.route[{di}]");
        let dest = destination(
            d.destination.as_ref(),
            &format!("{df}.destination"),
            ns,
            mesh,
        )?;
        let weight = match d.weight {
            None if list.len() == 1 => 100,
            None => 0,
            Some(w) if (0..=100).contains(&w) => w as u32,
            Some(w) => {
                return Err(Invalid::field(
                    format!("{df}.weight"),
                    format!("{w} is not in 0..100"),
                ))
            }
        };
        let headers = match &d.headers {
            Some(h) if http => header_ops(h, &format!("{df}.headers"))?,
            Some(_) => {
                return Err(Invalid::field(
                    format!("{df}.headers"),
                    "a TCP route's destination has no headers",
                ))
            }
            None => m::HeaderOps::default(),
        };
        route.push(m::RouteDestination {
            weight,
            headers,
            ..dest
        });
    }
    let total: u32 = route.iter().map(|d| d.weight).sum();
    if route.len() > 1 && total != 100 {
        return Err(Invalid::field(
            format!("{f}.route"),
            format!("weights add up to {total}, not 100"),
        ));
    }
    Ok(route)
}

/// `tcp[]`: each route's matches and weighted destinations; the routes in `skip` are left
/// out (a match condition meshflow cannot honour: reported by [`routes_not_generated`]).
fn tcp_routes(
    routes: &[istio::TcpRoute],
    skip: &[usize],
    ns: &str,
    mesh: &MeshConfig,
) -> Result<Vec<m::L4Route>> {
    let routes = routes.iter().map(|r| (&r.matches[..], &r.route[..]));
    l4_routes("tcp", routes, skip, ns, mesh, |mr, mf| {
        l4_match(mr, mf, ns, Vec::new())
    })
}

/// `tls[]`: each route's SNI matches and weighted destinations; the routes in `skip` are
/// left out (a match condition meshflow cannot honour). Istio requires `sniHosts` in every
/// match, each within the VirtualService's hosts.
fn tls_routes(
    routes: &[istio::TlsRoute],
    skip: &[usize],
    hosts: &[String],
    ns: &str,
    mesh: &MeshConfig,
) -> Result<Vec<m::L4Route>> {
    let routes = routes.iter().map(|r| (&r.matches[..], &r.route[..]));
    l4_routes("tls", routes, skip, ns, mesh, |mr, mf| {
        if mr.sni_hosts.is_empty() {
            return Err(Invalid::field(
                format!("{mf}.sniHosts"),
                "a TLS match needs sniHosts",
            ));
        }
        let mut sni_hosts = Vec::new();
        for (si, h) in mr.sni_hosts.iter().enumerate() {
            let full = fqdn(h, ns, mesh);
            let within = hosts.iter().any(|vh| {
                dataflows::rules::host_matches(vh, &full)
                    || dataflows::rules::host_matches(&full, vh)
            });
            if !within {
                return Err(Invalid::field(
                    format!("{mf}.sniHosts[{si}]"),
                    format!("{h:?} is not one of the VirtualService's hosts"),
                ));
            }
            sni_hosts.push(full);
        }
        l4_match(&mr.l4, mf, ns, sni_hosts)
    })
}

/// The routes of `spec.<field>[]` (`tcp` or `tls`) but those in `skip`, each with its
/// matches read by `read_match` and its weighted destinations.
fn l4_routes<'r, M: 'r>(
    field: &str,
    routes: impl Iterator<Item = (&'r [M], &'r [istio::HttpRouteDestination])>,
    skip: &[usize],
    ns: &str,
    mesh: &MeshConfig,
    read_match: impl Fn(&M, &str) -> Result<m::L4Match>,
) -> Result<Vec<m::L4Route>> {
    let mut out = Vec::new();
    for (ri, (matches, route)) in routes.enumerate() {
        if skip.contains(&ri) {
            continue;
        }
        let f = format!("spec.{field}[{ri}]");
        let kind = field.to_uppercase();
        if route.is_empty() {
            return Err(Invalid::field(
                format!("{f}.route"),
                format!("a {kind} route needs destinations"),
            ));
        }
        // Istio requires a match of every TLS route (its SNI hosts); a TCP route without
        // one matches every connection.
        if field == "tls" && matches.is_empty() {
            return Err(Invalid::field(
                format!("{f}.match"),
                format!("a {kind} route needs a match"),
            ));
        }
        let matches = matches
            .iter()
            .enumerate()
            .map(|(mi, mr)| read_match(mr, &format!("{f}.match[{mi}]")))
            .collect::<Result<Vec<_>>>()?;
        out.push(m::L4Route {
            index: ri,
            matches,
            route: weighted_destinations(route, &f, ns, mesh, false)?,
        });
    }
    Ok(out)
}

/// The conditions a TCP and a TLS match share, with the TLS match's `sni_hosts`.
fn l4_match(
    mr: &istio::L4MatchAttributes,
    mf: &str,
    ns: &str,
    sni_hosts: Vec<String>,
) -> Result<m::L4Match> {
    let destination_subnets = mr
        .destination_subnets
        .iter()
        .enumerate()
        .map(|(si, sn)| cidr(sn, &format!("{mf}.destinationSubnets[{si}]")))
        .collect::<Result<Vec<_>>>()?;
    Ok(m::L4Match {
        sni_hosts,
        port: mr
            .port
            .map(|p| port_u16(p, &format!("{mf}.port")))
            .transpose()?,
        destination_subnets,
        gateways: gateway_refs(&mr.gateways, ns),
        source_namespace: mr.source_namespace.clone(),
        source_labels: source_labels(&mr.source_labels, &format!("{mf}.sourceLabels"))?,
    })
}
