//! Steps 3 to 6: the HTTP connection manager's route configuration, the virtual host by
//! domain, the first route whose match holds (path, headers, query parameters) and its action.

use super::effects::{header_edits, Effects};
use super::request::{
    full_match, header_matches, merge_slashes, normalize_path, query_matches, to_duration, Request,
};
use super::{Action, Call, HeaderLevel, MatchedRoute, NoMatch, Outcome, ProxyConfig, Retry};
use envoy_types::pb::envoy::config::route::v3::{
    redirect_action, route::Action as RouteActionKind, route_action::ClusterSpecifier,
    route_match::PathSpecifier, RetryPolicy, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, http_connection_manager::StripPortMode,
    HttpConnectionManager,
};
use std::collections::BTreeMap;

impl ProxyConfig {
    /// Steps 3–6 for an HTTP connection manager.
    pub(super) fn http(
        &self,
        call: &Call,
        port: u16,
        hcm: &HttpConnectionManager,
        out: &mut Outcome,
    ) -> Result<Action, NoMatch> {
        let rc = match &hcm.route_specifier {
            Some(RouteSpecifier::Rds(rds)) => {
                out.route_config = Some(rds.route_config_name.clone());
                self.routes.get(&rds.route_config_name).ok_or_else(|| {
                    NoMatch::RouteConfigMissing {
                        name: rds.route_config_name.clone(),
                    }
                })?
            }
            Some(RouteSpecifier::RouteConfig(rc)) => {
                out.route_config = Some(rc.name.clone());
                rc
            }
            Some(RouteSpecifier::ScopedRoutes(_)) => {
                return Err(NoMatch::Unsupported("scoped routes".into()))
            }
            None => return Err(NoMatch::Unsupported("no route specifier".into())),
        };
        let mut authority = call.authority.to_ascii_lowercase();
        let strip_any = matches!(
            hcm.strip_port_mode,
            Some(StripPortMode::StripAnyHostPort(true))
        );
        let strip_matching = hcm.strip_matching_host_port
            && port_of(&authority).is_some_and(|p| p == port.to_string());
        if strip_any || strip_matching || rc.ignore_port_in_host_matching {
            authority = strip_port(&authority).to_string();
        }
        // The connection manager's path handling, before any filter: escaped slashes
        // (`%2F`, `%5C`) redirected to the decoded path, dot segments resolved, slashes
        // merged.
        use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::PathWithEscapedSlashesAction as Escaped;
        if hcm.path_with_escaped_slashes_action == Escaped::UnescapeAndRedirect as i32 {
            let p = call
                .path
                .split(['?', '#'])
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            if p.contains("%2f") || p.contains("%5c") {
                return Ok(Action::Redirect {
                    status: 307,
                    scheme: None,
                    host: None,
                    port: None,
                    path: Some(
                        call.path
                            .replace("%2F", "/")
                            .replace("%2f", "/")
                            .replace("%5C", "\\")
                            .replace("%5c", "\\"),
                    ),
                    prefix: None,
                });
            }
        }
        // `UNESCAPE_AND_FORWARD` (the mesh's `DECODE_AND_MERGE_SLASHES`): decoded in place.
        let raw = if hcm.path_with_escaped_slashes_action == Escaped::UnescapeAndForward as i32 {
            let (p, rest) = match call.path.find(['?', '#']) {
                Some(i) => call.path.split_at(i),
                None => (call.path.as_str(), ""),
            };
            let decoded = p
                .replace("%2F", "/")
                .replace("%2f", "/")
                .replace("%5C", "\\")
                .replace("%5c", "\\");
            format!("{decoded}{rest}")
        } else {
            call.path.clone()
        };
        let mut path = if hcm.normalize_path.is_some_and(|b| b.value) {
            normalize_path(&raw)
        } else {
            raw
        };
        if hcm.merge_slashes {
            path = merge_slashes(&path);
        }
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        let pseudo = [
            (":authority", authority.as_str()),
            ("host", authority.as_str()),
            (":path", path.as_str()),
            (":method", call.method.as_str()),
            (":scheme", "http"),
        ];
        let given = call.headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in pseudo.into_iter().chain(given) {
            headers
                .entry(k.to_ascii_lowercase())
                .and_modify(|old| {
                    old.push(',');
                    old.push_str(v);
                })
                .or_insert_with(|| v.to_string());
        }
        let req = Request {
            call,
            path,
            headers,
        };
        // The filters that refuse run before the router looks for a route.
        let payload = super::authz::http(hcm, &req, out)?;
        let vh = select_virtual_host(rc, &authority).ok_or_else(|| NoMatch::NoVirtualHost {
            authority: authority.clone(),
        })?;
        out.virtual_host = Some(vh.name.clone());
        let (index, route) = vh
            .routes
            .iter()
            .enumerate()
            .find(|(_, r)| {
                r.r#match
                    .as_ref()
                    .is_some_and(|m| route_matches(m, &req, payload.as_ref(), &mut out.warnings))
            })
            .ok_or(NoMatch::NoRoute)?;
        out.route = Some(MatchedRoute {
            index,
            name: route.name.clone(),
        });
        let result = self.action(route, vh, &req);
        let mut effects = Effects {
            hcm,
            rc,
            vh,
            route,
            req: &req,
            proxy: self,
            warnings: &mut out.warnings,
        };
        out.http = Some(effects.read(result.as_ref().ok()));
        result
    }

    /// Step 6: what the matched route does.
    fn action(
        &self,
        route: &envoy_types::pb::envoy::config::route::v3::Route,
        vh: &VirtualHost,
        req: &Request,
    ) -> Result<Action, NoMatch> {
        match &route.action {
            Some(RouteActionKind::Route(ra)) => self.route_action(ra, vh, req),
            Some(RouteActionKind::DirectResponse(d)) => Ok(Action::DirectResponse {
                status: d.status,
                body: d.body.as_ref().and_then(|b| match &b.specifier {
                    Some(envoy_types::pb::envoy::config::core::v3::data_source::Specifier::InlineString(s)) => Some(s.clone()),
                    Some(envoy_types::pb::envoy::config::core::v3::data_source::Specifier::InlineBytes(b)) => {
                        Some(String::from_utf8_lossy(b).into_owned())
                    }
                    _ => None,
                }),
            }),
            Some(RouteActionKind::Redirect(r)) => {
                use redirect_action::{
                    PathRewriteSpecifier as P, RedirectResponseCode as C,
                    SchemeRewriteSpecifier as S,
                };
                let status = match C::try_from(r.response_code) {
                    Ok(C::MovedPermanently) | Err(_) => 301,
                    Ok(C::Found) => 302,
                    Ok(C::SeeOther) => 303,
                    Ok(C::TemporaryRedirect) => 307,
                    Ok(C::PermanentRedirect) => 308,
                };
                Ok(Action::Redirect {
                    status,
                    scheme: match &r.scheme_rewrite_specifier {
                        Some(S::HttpsRedirect(true)) => Some("https".into()),
                        Some(S::SchemeRedirect(s)) => Some(s.clone()),
                        _ => None,
                    },
                    host: Some(r.host_redirect.clone()).filter(|h| !h.is_empty()),
                    port: Some(r.port_redirect).filter(|p| *p != 0),
                    path: match &r.path_rewrite_specifier {
                        Some(P::PathRedirect(p)) => Some(p.clone()),
                        _ => None,
                    },
                    prefix: match &r.path_rewrite_specifier {
                        Some(P::PrefixRewrite(p)) => Some(p.clone()),
                        _ => None,
                    },
                })
            }
            Some(_) => Err(NoMatch::Unsupported(format!(
                "route {:?}: a non-forwarding or filter action",
                route.name
            ))),
            None => Err(NoMatch::Unsupported(format!(
                "route {:?} has no action",
                route.name
            ))),
        }
    }

    fn route_action(
        &self,
        ra: &RouteAction,
        vh: &VirtualHost,
        req: &Request,
    ) -> Result<Action, NoMatch> {
        let targets: Vec<(String, Option<u32>)> = match &ra.cluster_specifier {
            Some(ClusterSpecifier::Cluster(c)) => vec![(c.clone(), None)],
            Some(ClusterSpecifier::ClusterHeader(h)) => {
                let name = req
                    .headers
                    .get(&h.to_ascii_lowercase())
                    .ok_or_else(|| NoMatch::ClusterHeaderMissing { header: h.clone() })?;
                vec![(name.clone(), None)]
            }
            Some(ClusterSpecifier::WeightedClusters(w)) => w
                .clusters
                .iter()
                .map(|c| (c.name.clone(), Some(c.weight.map_or(0, |w| w.value))))
                .collect(),
            Some(_) => return Err(NoMatch::Unsupported("cluster specifier plugins".into())),
            None => {
                return Err(NoMatch::Unsupported(
                    "route action without a cluster".into(),
                ))
            }
        };
        // A weighted cluster's own header edits travel with it: they apply when it is picked.
        let own_edits = |i: usize| match &ra.cluster_specifier {
            Some(ClusterSpecifier::WeightedClusters(w)) => w.clusters.get(i).map(|c| {
                (
                    header_edits(
                        HeaderLevel::WeightedCluster,
                        &c.request_headers_to_remove,
                        &c.request_headers_to_add,
                    ),
                    header_edits(
                        HeaderLevel::WeightedCluster,
                        &c.response_headers_to_remove,
                        &c.response_headers_to_add,
                    ),
                )
            }),
            _ => None,
        };
        Ok(Action::Route {
            upstreams: targets
                .into_iter()
                .enumerate()
                .map(|(i, (c, w))| {
                    let mut up = self.upstream(&c, w, req.call);
                    if let Some((request, response)) = own_edits(i) {
                        up.request_headers = request;
                        up.response_headers = response;
                    }
                    up
                })
                .collect(),
            timeout: ra.timeout.as_ref().map(to_duration),
            retry: ra
                .retry_policy
                .as_ref()
                .or(vh.retry_policy.as_ref())
                .map(retry),
        })
    }
}

pub(super) fn strip_port(host: &str) -> &str {
    match port_of(host) {
        Some(p) => &host[..host.len() - p.len() - 1],
        None => host,
    }
}

/// The `:port` of an authority (IPv6 literals in brackets kept whole).
pub(super) fn port_of(host: &str) -> Option<&str> {
    let (head, port) = host.rsplit_once(':')?;
    let bracketed_v6 = head.starts_with('[') && head.ends_with(']');
    let plain = !head.contains(':');
    ((bracketed_v6 || plain) && port.bytes().all(|b| b.is_ascii_digit()) && !port.is_empty())
        .then_some(port)
}

/// Envoy's virtual host selection for `authority` (already lower-cased): exact domain, then
/// the longest suffix wildcard, then the longest prefix wildcard, then `*`.
pub fn select_virtual_host<'a>(
    rc: &'a RouteConfiguration,
    authority: &str,
) -> Option<&'a VirtualHost> {
    let host = authority.to_ascii_lowercase();
    let domains = || {
        rc.virtual_hosts
            .iter()
            .flat_map(|vh| vh.domains.iter().map(move |d| (d.to_ascii_lowercase(), vh)))
    };
    if let Some((_, vh)) = domains().find(|(d, _)| *d == host) {
        return Some(vh);
    }
    let wildcard = |suffix: bool| {
        domains()
            .filter(|(d, _)| {
                d.len() > 1
                    && (if suffix {
                        d.starts_with('*')
                    } else {
                        d.ends_with('*')
                    })
            })
            .filter_map(|(d, vh)| {
                let fixed = if suffix { &d[1..] } else { &d[..d.len() - 1] };
                let hit = host.len() > fixed.len()
                    && if suffix {
                        host.ends_with(fixed)
                    } else {
                        host.starts_with(fixed)
                    };
                hit.then_some((fixed.len(), vh))
            })
            // Longest first; among equals the first declared (Envoy rejects duplicates).
            .fold(
                None,
                |best: Option<(usize, &VirtualHost)>, (n, vh)| match best {
                    Some((b, _)) if b >= n => best,
                    _ => Some((n, vh)),
                },
            )
            .map(|(_, vh)| vh)
    };
    wildcard(true)
        .or_else(|| wildcard(false))
        .or_else(|| domains().find(|(d, _)| d == "*").map(|(_, vh)| vh))
}

/// Whether route match `m` takes `req`; `payload`: the verified token's, when the route is
/// chosen after verification (what claim conditions match).
fn route_matches(
    m: &RouteMatch,
    req: &Request,
    payload: Option<&serde_json::Value>,
    warnings: &mut Vec<String>,
) -> bool {
    let case_sensitive = m.case_sensitive.is_none_or(|b| b.value);
    let eq = |a: &str, b: &str| {
        if case_sensitive {
            a == b
        } else {
            a.eq_ignore_ascii_case(b)
        }
    };
    let starts = |s: &str, p: &str| {
        s.len() >= p.len() && s.is_char_boundary(p.len()) && eq(&s[..p.len()], p)
    };
    let path_ok = match &m.path_specifier {
        Some(PathSpecifier::Prefix(p)) => starts(&req.path, p),
        Some(PathSpecifier::Path(p)) => eq(req.path_only(), p),
        Some(PathSpecifier::SafeRegex(r)) => full_match(&r.regex, req.path_only(), warnings),
        Some(PathSpecifier::PathSeparatedPrefix(p)) => {
            let path = req.path_only();
            eq(path, p) || starts(path, &format!("{p}/"))
        }
        Some(PathSpecifier::ConnectMatcher(_)) => req.call.method.eq_ignore_ascii_case("CONNECT"),
        Some(PathSpecifier::PathMatchPolicy(p)) => {
            warnings.push(format!("path match policy {} is not modelled", p.name));
            false
        }
        None => false,
    };
    if !path_ok {
        return false;
    }
    if !m.headers.iter().all(|h| header_matches(h, req, warnings)) {
        return false;
    }
    let query = req.query();
    if !m
        .query_parameters
        .iter()
        .all(|q| query_matches(q, &query, warnings))
    {
        return false;
    }
    if m.grpc.is_some()
        && !req
            .headers
            .get("content-type")
            .is_some_and(|c| c.starts_with("application/grpc"))
    {
        return false;
    }
    if m.tls_context.as_ref().is_some_and(|t| {
        t.presented.is_some_and(|b| b.value) || t.validated.is_some_and(|b| b.value)
    }) {
        return false;
    }
    if !m
        .dynamic_metadata
        .iter()
        .all(|d| super::authz::payload_matches(d, payload, warnings))
    {
        return false;
    }
    let unmodelled = [
        (!m.cookies.is_empty(), "cookie"),
        (!m.filter_state.is_empty(), "filter state"),
    ];
    for (present, what) in unmodelled {
        if present {
            warnings.push(format!(
                "{what} matchers are not modelled: taken as not matching"
            ));
            return false;
        }
    }
    if m.runtime_fraction.is_some() {
        warnings.push("runtime_fraction is not modelled: taken as matching".into());
    }
    true
}

fn retry(p: &RetryPolicy) -> Retry {
    Retry {
        retry_on: p.retry_on.clone(),
        num_retries: p.num_retries.map_or(1, |n| n.value),
        per_try_timeout: p.per_try_timeout.as_ref().map(to_duration),
        retriable_status_codes: p.retriable_status_codes.clone(),
        avoids_previous_hosts: p
            .retry_host_predicate
            .iter()
            .any(|h| h.name == "envoy.retry_host_predicates.previous_hosts"),
        to_other_localities: p
            .retry_priority
            .as_ref()
            .is_some_and(|r| r.name == "envoy.retry_priorities.previous_priorities"),
        backoff: p
            .retry_back_off
            .as_ref()
            .and_then(|b| b.base_interval.as_ref())
            .map(to_duration),
    }
}
