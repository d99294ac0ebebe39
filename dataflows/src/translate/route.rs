//! RDS: sidecar route configurations named by port (`9080`) with one virtual host per
//! visible service, and gateway route configurations (`http.8080`) from the
//! VirtualServices bound to the gateway.

use super::{duration_ms, outbound_cluster_name};
use crate::model::{
    AbortStatus, Cors, DirectResponse, Fault, HashKey, Hashing, HeaderEdits, HttpMatch, HttpRoute,
    PerMillion, Redirect, ResolvedVs, Resource, ResourceType, Retries, RouteDestination, ScopeKey,
    Service, Source, StringMatch, UnknownHosts,
};
use envoy_types::pb::envoy::config::core::v3::{
    data_source, header_value_option::HeaderAppendAction, DataSource, HeaderValue,
    HeaderValueOption, RuntimeFractionalPercent,
};
use envoy_types::pb::envoy::config::route::v3::retry_policy::{
    retry_host_predicate, retry_priority, RetryBackOff, RetryHostPredicate, RetryPriority,
};
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::{
    ConnectionProperties, Cookie, Header, PolicySpecifier, QueryParameter,
};
use envoy_types::pb::envoy::config::route::v3::virtual_host;
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier,
    weighted_cluster::ClusterWeight, HeaderMatcher, QueryParameterMatcher, RetryPolicy, Route,
    RouteAction, RouteConfiguration, RouteMatch, VirtualHost, WeightedCluster,
};
use envoy_types::pb::envoy::config::route::v3::{
    redirect_action,
    route_action::{HashPolicy, HostRewriteSpecifier, RequestMirrorPolicy},
    DirectResponseAction, RedirectAction,
};
use envoy_types::pb::envoy::extensions::filters::common::fault::v3::{
    fault_delay::FaultDelaySecifier, FaultDelay,
};
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
    fault_abort::ErrorType, FaultAbort, HttpFault,
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::retry::priority::previous_priorities::v3::PreviousPrioritiesConfig;
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatchAndSubstitute;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    string_matcher::MatchPattern, RegexMatcher, StringMatcher,
};
use envoy_types::pb::envoy::r#type::v3::{fractional_percent::DenominatorType, FractionalPercent};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;
use std::collections::BTreeSet;

/// Istio's default retry policy for mesh routes: retry elsewhere (previous hosts are
/// avoided) on connection failures and 503s.
fn default_retry_policy() -> RetryPolicy {
    RetryPolicy {
        retry_on: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
            .into(),
        num_retries: Some(UInt32Value { value: 2 }),
        retriable_status_codes: vec![503],
        retry_host_predicate: vec![RetryHostPredicate {
            name: "envoy.retry_host_predicates.previous_hosts".into(),
            config_type: Some(retry_host_predicate::ConfigType::TypedConfig(pack_any(
                PreviousHostsPredicate {},
            ))),
        }],
        host_selection_retry_max_attempts: 5,
        ..Default::default()
    }
}

/// A VirtualService's `retries`, on top of the default policy. `retryOn` may mix Envoy
/// retry conditions and HTTP status codes (`503,connect-failure`), as Istio accepts.
fn retry_policy(route: &HttpRoute) -> Option<RetryPolicy> {
    retries_policy(route.retries.as_ref())
}

/// A route's hash policy from the consistent hash of its destination (the first destination
/// that has one, when several do: Envoy takes one hash per route), and its retry policy
/// adjusted to it: with consistent hashing a retry stays on the hashed host, as Istio's does,
/// so previous hosts are not avoided.
fn hashed(
    hash: Option<&HashKey>,
    retry: Option<RetryPolicy>,
) -> (Vec<HashPolicy>, Option<RetryPolicy>) {
    let Some(key) = hash else {
        return (Vec::new(), retry);
    };
    let retry = retry.map(|mut r| {
        r.retry_host_predicate.clear();
        r.host_selection_retry_max_attempts = 0;
        r
    });
    (vec![hash_policy(key)], retry)
}

fn hash_policy(key: &HashKey) -> HashPolicy {
    let specifier = match key {
        HashKey::Header(name) => PolicySpecifier::Header(Header {
            header_name: name.clone(),
            ..Default::default()
        }),
        HashKey::Cookie { name, path, ttl_ms } => PolicySpecifier::Cookie(Cookie {
            name: name.clone(),
            path: path.clone().unwrap_or_default(),
            ttl: ttl_ms.map(duration_ms),
            ..Default::default()
        }),
        HashKey::SourceIp => {
            PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true })
        }
        HashKey::QueryParameter(name) => {
            PolicySpecifier::QueryParameter(QueryParameter { name: name.clone() })
        }
    };
    HashPolicy {
        policy_specifier: Some(specifier),
        ..Default::default()
    }
}

/// The hash key of the cluster `dest` goes to (on `port`), if its rule hashes there.
fn dest_hash<'h>(hashing: &'h Hashing, dest: &RouteDestination, port: u16) -> Option<&'h HashKey> {
    crate::model::host_hash(hashing.get(&dest.host)?, &dest.subset, port)
}

/// `retries` (a route's, or the mesh's `defaultHttpRetryPolicy`) as Envoy's policy; none:
/// Istio's built-in default; zero attempts: no retries at all.
fn retries_policy(retries: Option<&Retries>) -> Option<RetryPolicy> {
    let r = match retries {
        None => return Some(default_retry_policy()),
        Some(r) if r.attempts == 0 => return None,
        Some(r) => r,
    };
    let mut policy = default_retry_policy();
    policy.num_retries = Some(UInt32Value { value: r.attempts });
    policy.per_try_timeout = r.per_try_timeout_ms.map(duration_ms);
    if r.ignore_previous_hosts == Some(false) {
        policy.retry_host_predicate.clear();
    }
    if r.remote_localities {
        // Istio's choice: after two attempts at a priority, the next retry may go on to the
        // next one (the localities after the client's own).
        policy.retry_priority = Some(RetryPriority {
            name: "envoy.retry_priorities.previous_priorities".into(),
            config_type: Some(retry_priority::ConfigType::TypedConfig(pack_any(
                PreviousPrioritiesConfig {
                    update_frequency: 2,
                },
            ))),
        });
    }
    policy.retry_back_off = r.backoff_ms.map(|ms| RetryBackOff {
        base_interval: Some(duration_ms(ms)),
        max_interval: None,
    });
    if let Some(on) = &r.retry_on {
        let (codes, conditions): (Vec<&str>, Vec<&str>) = on
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .partition(|c| c.parse::<u32>().is_ok());
        let mut conditions: Vec<String> = conditions.into_iter().map(String::from).collect();
        if !codes.is_empty() && !conditions.iter().any(|c| c == "retriable-status-codes") {
            conditions.push("retriable-status-codes".into());
        }
        policy.retry_on = conditions.join(",");
        policy.retriable_status_codes = codes.iter().filter_map(|c| c.parse().ok()).collect();
    }
    Some(policy)
}

/// The port a destination means, as Istio's `GetDestinationCluster` resolves it: explicit,
/// else the only port of the destination service — of the `ExternalName` alias it named,
/// where it named one ([`RouteDestination::via_alias`]) —, else the port of the listener the
/// request arrived on — even where the service has no such port (its cluster then does not
/// exist and Envoy answers 503; analysis reports the destination, Istio's IST0112).
pub fn resolve_port(dest: &RouteDestination, current: u16, vs: &ResolvedVs) -> u16 {
    if let Some(p) = dest.port {
        return p;
    }
    let ports = match &dest.via_alias {
        Some(alias) => Some(alias.ports.as_slice()),
        None => vs.dest_ports.get(&dest.host).map(Vec::as_slice),
    };
    match ports {
        Some([only]) => *only,
        _ => current,
    }
}

/// The route configuration HTTP routes are built for: its port (the port requests arrive
/// on) and whether it is a sidecar's (the mesh's) or a gateway's.
#[derive(Clone, Copy, Debug)]
struct At {
    port: u16,
    sidecar: bool,
}

/// The host and port of a destination's cluster. A sidecar's route configuration for port
/// `p` knows the services only at `p` (Istio's `servicesByName`, each service cut down to
/// that port), so a destination without a port goes to `p` whatever ports its service has:
/// where the service has no port `p`, its cluster does not exist and Envoy answers 503, as
/// in Istio (analysis asks for the port, `MF0014`). A destination that named an
/// `ExternalName` alias declaring `p` goes to the host the alias names; one whose alias does
/// not declare `p` keeps the alias's own host, which has no cluster either, as Istio's
/// `GetDestinationCluster` leaves a host it finds no service for. Elsewhere (gateways, TCP)
/// services are known whole: [`resolve_port`].
fn destination_at<'d>(dest: &'d RouteDestination, at: At, vs: &ResolvedVs) -> (&'d str, u16) {
    match &dest.via_alias {
        _ if !at.sidecar => (&dest.host, resolve_port(dest, at.port, vs)),
        Some(alias) if !alias.ports.contains(&at.port) => {
            (&alias.host, dest.port.unwrap_or(at.port))
        }
        _ => (&dest.host, dest.port.unwrap_or(at.port)),
    }
}

fn cluster_of(dest: &RouteDestination, at: At, vs: &ResolvedVs) -> String {
    let (host, port) = destination_at(dest, at, vs);
    outbound_cluster_name(port, dest.subset.as_deref(), host)
}

/// Envoy's matcher for a string match; `None` for [`StringMatch::Present`], which Envoy
/// expresses as `present_match` on the header or query parameter instead.
fn string_matcher(m: &StringMatch, ignore_case: bool) -> Option<StringMatcher> {
    let pattern = match m {
        StringMatch::Exact(s) => MatchPattern::Exact(s.clone()),
        StringMatch::Prefix(s) => MatchPattern::Prefix(s.clone()),
        StringMatch::Regex(s) => MatchPattern::SafeRegex(RegexMatcher {
            regex: s.clone(),
            ..Default::default()
        }),
        StringMatch::Present => return None,
    };
    Some(StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    })
}

/// A `headers` (`invert: false`) or `withoutHeaders` (`invert: true`) condition. As Istio
/// translates `withoutHeaders`, a value match treats a missing header as empty: a request
/// without the header is one whose header does not have the value, so it matches (Envoy
/// would otherwise fail an inverted value match on a missing header).
fn header_matcher(name: &str, m: &StringMatch, invert: bool) -> HeaderMatcher {
    let (spec, value) = match string_matcher(m, false) {
        Some(sm) => (HeaderMatchSpecifier::StringMatch(sm), true),
        None => (HeaderMatchSpecifier::PresentMatch(true), false),
    };
    HeaderMatcher {
        name: name.to_string(),
        header_match_specifier: Some(spec),
        invert_match: invert,
        treat_missing_header_as_empty: invert && value,
    }
}

fn route_match(m: Option<&HttpMatch>) -> RouteMatch {
    let path = match m.and_then(|m| m.uri.as_ref()) {
        None | Some(StringMatch::Present) => PathSpecifier::Prefix("/".into()),
        Some(StringMatch::Exact(s)) => PathSpecifier::Path(s.clone()),
        Some(StringMatch::Prefix(s)) => PathSpecifier::Prefix(s.clone()),
        Some(StringMatch::Regex(s)) => PathSpecifier::SafeRegex(RegexMatcher {
            regex: s.clone(),
            ..Default::default()
        }),
    };
    let Some(m) = m else {
        return RouteMatch {
            path_specifier: Some(path),
            ..Default::default()
        };
    };
    let headers = m
        .headers
        .iter()
        .map(|(name, sm)| header_matcher(name, sm, false))
        .chain(
            m.without_headers
                .iter()
                .map(|(name, sm)| header_matcher(name, sm, true)),
        )
        .collect();
    let query_parameters = m
        .query_params
        .iter()
        .map(|(name, sm)| QueryParameterMatcher {
            name: name.clone(),
            query_parameter_match_specifier: Some(match string_matcher(sm, false) {
                Some(sm) => QueryParameterMatchSpecifier::StringMatch(sm),
                None => QueryParameterMatchSpecifier::PresentMatch(true),
            }),
        })
        .collect();
    RouteMatch {
        path_specifier: Some(path),
        // Envoy's default is case-sensitive; only `ignoreUriCase` turns it off.
        case_sensitive: m.ignore_uri_case.then_some(BoolValue { value: false }),
        headers,
        query_parameters,
        ..Default::default()
    }
}

fn action(route: &HttpRoute, at: At, vs: &ResolvedVs, hashing: &Hashing) -> RouteAction {
    let live: Vec<&RouteDestination> = route.route.iter().filter(|d| d.weight > 0).collect();
    let (hash_policy, retry_policy) = hashed(
        live.iter().find_map(|d| {
            let (host, port) = destination_at(d, at, vs);
            (host == d.host)
                .then(|| dest_hash(hashing, d, port))
                .flatten()
        }),
        retry_policy(route),
    );
    let cluster_specifier = match live.as_slice() {
        [one] => ClusterSpecifier::Cluster(cluster_of(one, at, vs)),
        many => ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: many
                .iter()
                .map(|d| ClusterWeight {
                    name: cluster_of(d, at, vs),
                    weight: Some(UInt32Value { value: d.weight }),
                    request_headers_to_add: headers_to_add(&d.headers.request),
                    request_headers_to_remove: d.headers.request.remove.clone(),
                    response_headers_to_add: headers_to_add(&d.headers.response),
                    response_headers_to_remove: d.headers.response.remove.clone(),
                    host_rewrite_specifier: d.headers.request.authority.clone().map(
                        envoy_types::pb::envoy::config::route::v3::weighted_cluster::cluster_weight::HostRewriteSpecifier::HostRewriteLiteral,
                    ),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
    };
    let rewrite = route.rewrite.clone().unwrap_or_default();
    // The authority from `rewrite.authority` or a `host` header edit of the route (one of
    // the two, by validation), and a lone destination's own overriding both, as Istio folds
    // a single weighted destination into the route.
    let authority = match live.as_slice() {
        [one] => one.headers.request.authority.clone(),
        _ => None,
    }
    .or(rewrite.authority)
    .or_else(|| route.headers.request.authority.clone());
    RouteAction {
        cluster_specifier: Some(cluster_specifier),
        timeout: Some(duration_ms(route.timeout_ms.unwrap_or(0))),
        retry_policy,
        hash_policy,
        prefix_rewrite: rewrite.uri.unwrap_or_default(),
        host_rewrite_specifier: authority.map(HostRewriteSpecifier::HostRewriteLiteral),
        regex_rewrite: rewrite
            .uri_regex
            .map(|(pattern, substitution)| RegexMatchAndSubstitute {
                pattern: Some(RegexMatcher {
                    regex: pattern,
                    ..Default::default()
                }),
                substitution,
            }),
        request_mirror_policies: route
            .mirrors
            .iter()
            .map(|m| RequestMirrorPolicy {
                cluster: cluster_of(&m.destination, at, vs),
                runtime_fraction: m.fraction.map(|f| RuntimeFractionalPercent {
                    default_value: Some(fraction(f)),
                    ..Default::default()
                }),
                // Istio leaves the mirrored request's trace sampling to the original's.
                trace_sampled: Some(BoolValue { value: false }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// A share of requests as Envoy's fraction of a million.
fn fraction(f: PerMillion) -> FractionalPercent {
    FractionalPercent {
        numerator: f,
        denominator: DenominatorType::Million as i32,
    }
}

/// A `redirect` on the route configuration of port `current`: `derivePort:
/// FROM_REQUEST_PORT` writes that port, as Istio does (every route configuration is for one
/// port, so it is the port the request came to).
fn redirect_action(r: &Redirect, current: u16) -> RedirectAction {
    use redirect_action::{
        PathRewriteSpecifier, RedirectResponseCode as C, SchemeRewriteSpecifier,
    };
    let code = match r.code {
        302 => C::Found,
        303 => C::SeeOther,
        307 => C::TemporaryRedirect,
        308 => C::PermanentRedirect,
        _ => C::MovedPermanently,
    };
    RedirectAction {
        host_redirect: r.authority.clone().unwrap_or_default(),
        port_redirect: match r.port {
            Some(p) => u32::from(p),
            None if r.from_request_port => u32::from(current),
            None => 0,
        },
        response_code: code as i32,
        scheme_rewrite_specifier: r.scheme.clone().map(SchemeRewriteSpecifier::SchemeRedirect),
        path_rewrite_specifier: r.uri.clone().map(PathRewriteSpecifier::PathRedirect),
        ..Default::default()
    }
}

fn direct_response_action(d: &DirectResponse) -> DirectResponseAction {
    DirectResponseAction {
        status: d.status,
        body: d.body.clone().map(|b| DataSource {
            specifier: Some(data_source::Specifier::InlineString(b)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `set` overwrites, `add` appends, as Istio maps them.
fn headers_to_add(e: &HeaderEdits) -> Vec<HeaderValueOption> {
    let option = |(k, v): (&String, &String), action: HeaderAppendAction| HeaderValueOption {
        header: Some(HeaderValue {
            key: k.clone(),
            value: v.clone(),
            ..Default::default()
        }),
        append_action: action as i32,
        ..Default::default()
    };
    e.set
        .iter()
        .map(|kv| option(kv, HeaderAppendAction::OverwriteIfExistsOrAdd))
        .chain(
            e.add
                .iter()
                .map(|kv| option(kv, HeaderAppendAction::AppendIfExistsOrAdd)),
        )
        .collect()
}

/// A gateway route configuration's domains, each with its VirtualServices (in precedence
/// order) and the gateways (`namespace/name`) each came through.
pub type GatewayVhosts = std::collections::BTreeMap<String, Vec<(ResolvedVs, Vec<String>)>>;

/// How Istio names the sidecars' side of a VirtualService's `gateways`.
pub const MESH: &str = "mesh";

/// The name the fault filter has in every connection manager, and its per-route config.
pub const FAULT_FILTER: &str = "envoy.filters.http.fault";

fn http_fault(f: &Fault) -> HttpFault {
    HttpFault {
        delay: f.delay.map(|(ms, share)| FaultDelay {
            fault_delay_secifier: Some(FaultDelaySecifier::FixedDelay(duration_ms(ms))),
            percentage: Some(fraction(share)),
        }),
        abort: f.abort.map(|(status, share)| FaultAbort {
            error_type: Some(match status {
                AbortStatus::Http(code) => ErrorType::HttpStatus(code),
                AbortStatus::Grpc(code) => ErrorType::GrpcStatus(code),
            }),
            percentage: Some(fraction(share)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The name of Envoy's CORS filter, as routes configure it (`typed_per_filter_config`).
pub const CORS_FILTER: &str = "envoy.filters.http.cors";

/// A `corsPolicy` as Envoy's per-route CORS policy, as Istio writes it (always enabled; the
/// lists comma-joined; `maxAge` in whole seconds).
fn cors_policy(
    c: &Cors,
) -> envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy {
    use envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent;
    use envoy_types::pb::envoy::r#type::v3::{
        fractional_percent::DenominatorType, FractionalPercent,
    };
    envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy {
        allow_origin_string_match: c
            .allow_origins
            .iter()
            .filter_map(|m| string_matcher(m, false))
            .collect(),
        allow_methods: c.allow_methods.join(","),
        allow_headers: c.allow_headers.join(","),
        expose_headers: c.expose_headers.join(","),
        max_age: c.max_age_s.map(|s| s.to_string()).unwrap_or_default(),
        allow_credentials: c.allow_credentials.map(|value| BoolValue { value }),
        filter_enabled: Some(RuntimeFractionalPercent {
            default_value: Some(FractionalPercent {
                numerator: 100,
                denominator: DenominatorType::Hundred as i32,
            }),
            ..Default::default()
        }),
        forward_not_matching_preflights: Some(BoolValue {
            value: c.forward_unmatched_preflights,
        }),
        ..Default::default()
    }
}

/// One Envoy route of an HTTP route: its action (forward, redirect or answer) and what
/// applies around it (header edits, fault injection).
fn envoy_route(
    http: &HttpRoute,
    name: &str,
    m: Option<&HttpMatch>,
    at: At,
    vs: &ResolvedVs,
    hashing: &Hashing,
    proxyless: bool,
) -> Route {
    let action = match (&http.redirect, &http.direct_response) {
        (Some(r), _) => Action::Redirect(redirect_action(r, at.port)),
        (None, Some(d)) => Action::DirectResponse(direct_response_action(d)),
        (None, None) => {
            let mut a = action(http, at, vs, hashing);
            // gRPC's xDS client ignores `timeout` and bounds a call by the route's
            // `max_stream_duration` (gRFC A31), where Istio puts the timeout for it.
            if let Some(ms) = http.timeout_ms.filter(|ms| proxyless && *ms > 0) {
                a.max_stream_duration = Some(
                    envoy_types::pb::envoy::config::route::v3::route_action::MaxStreamDuration {
                        max_stream_duration: Some(duration_ms(ms)),
                        ..Default::default()
                    },
                );
            }
            Action::Route(a)
        }
    };
    // A single destination's header edits go on the route, after the route's own, as Istio
    // writes them; several destinations carry theirs on their weighted cluster.
    let live: Vec<&RouteDestination> = http.route.iter().filter(|d| d.weight > 0).collect();
    let forwards = http.redirect.is_none() && http.direct_response.is_none();
    let single = match live.as_slice() {
        [one] if forwards => Some(&one.headers),
        _ => None,
    };
    let edits = |route: &HeaderEdits, dest: Option<&HeaderEdits>| {
        let mut add = headers_to_add(route);
        let mut remove = route.remove.clone();
        if let Some(d) = dest {
            add.extend(headers_to_add(d));
            remove.extend(d.remove.iter().cloned());
        }
        (add, remove)
    };
    let (request_add, request_remove) = edits(&http.headers.request, single.map(|h| &h.request));
    let (response_add, response_remove) =
        edits(&http.headers.response, single.map(|h| &h.response));
    Route {
        name: name.to_string(),
        r#match: Some(route_match(m)),
        action: Some(action),
        request_headers_to_add: request_add,
        request_headers_to_remove: request_remove,
        response_headers_to_add: response_add,
        response_headers_to_remove: response_remove,
        typed_per_filter_config: http
            .fault
            .iter()
            .map(|f| (FAULT_FILTER.to_string(), pack_any(http_fault(f))))
            .chain(http.cors.iter().map(|c| {
                // Optional: a client without a CORS filter (proxyless gRPC) ignores it
                // instead of rejecting the whole route configuration.
                let optional = envoy_types::pb::envoy::config::route::v3::FilterConfig {
                    config: Some(pack_any(cors_policy(c))),
                    is_optional: true,
                    ..Default::default()
                };
                (CORS_FILTER.to_string(), pack_any(optional))
            }))
            .collect(),
        ..Default::default()
    }
}

/// Envoy routes for one VirtualService: one route per match of each HTTP route, in order.
/// `via`: the gateways (`namespace/name`) the VirtualService is applied through, or `mesh`;
/// `source`: the proxies the configuration is for (`sourceNamespace`, `sourceLabels`).
pub fn vs_routes(
    vs: &ResolvedVs,
    current: u16,
    via: &[String],
    source: Source,
    hashing: &Hashing,
) -> Vec<Route> {
    // Sidecars apply a VirtualService through the mesh; gateways through themselves.
    let at = At {
        port: current,
        sidecar: via.iter().any(|v| v == MESH),
    };
    let mut out = Vec::new();
    for (i, http) in vs.vs.http.iter().enumerate() {
        let name = http
            .name
            .clone()
            .unwrap_or_else(|| format!("{}.{}.{}", vs.vs.key.namespace, vs.vs.key.name, i));
        // A match for another port does not apply on this one; a route none of whose
        // matches applies is not on this port at all.
        let matches: Vec<Option<&HttpMatch>> = if http.matches.is_empty() {
            vec![None]
        } else {
            http.matches
                .iter()
                .filter(|m| m.port.is_none_or(|p| p == current))
                // Istio's `sourceMatchHTTP`: a match naming gateways applies through them,
                // whatever its source conditions; without, the source conditions decide.
                .filter(|m| {
                    if m.gateways.is_empty() {
                        source.admits(m.source_namespace.as_ref(), m.source_labels.as_ref())
                    } else {
                        m.gateways.iter().any(|g| via.contains(g))
                    }
                })
                .map(Some)
                .collect()
        };
        for m in matches {
            out.push(envoy_route(
                http,
                &name,
                m,
                at,
                vs,
                hashing,
                source.proxyless,
            ));
        }
    }
    out
}

fn default_route(
    service: &Service,
    port: u16,
    retries: Option<&Retries>,
    hashing: &Hashing,
) -> Route {
    let (hash_policy, retry_policy) = hashed(
        hashing
            .get(&service.hostname)
            .and_then(|h| crate::model::host_hash(h, &None, port)),
        retries_policy(retries),
    );
    Route {
        name: "default".into(),
        r#match: Some(route_match(None)),
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(outbound_cluster_name(
                port,
                None,
                &service.hostname,
            ))),
            timeout: Some(duration_ms(0)),
            retry_policy,
            hash_policy,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The names a client in `proxy_ns` may use for `host`: the FQDN, and for cluster-local
/// services `name.ns`, `name.ns.svc` and, from the same namespace, the bare `name`;
/// each with and without `:port`.
pub fn domains(host: &str, port: u16, proxy_ns: &str, domain_suffix: &str) -> Vec<String> {
    let mut names = vec![host.to_string()];
    let local_suffix = format!(".svc.{domain_suffix}");
    if let Some(prefix) = host.strip_suffix(&local_suffix) {
        if let Some((name, ns)) = prefix.split_once('.') {
            names.push(format!("{name}.{ns}.svc"));
            names.push(format!("{name}.{ns}"));
            if ns == proxy_ns {
                names.push(name.to_string());
            }
        }
    }
    let mut out = Vec::with_capacity(names.len() * 2);
    for n in names {
        out.push(format!("{n}:{port}"));
        out.push(n);
    }
    out
}

/// The hosts a virtual host's routes send to: the service's own (its default route), or
/// the destinations of its VirtualService's HTTP routes.
pub fn routed_hosts(service: &Service, vs: Option<&ResolvedVs>) -> Vec<String> {
    match vs {
        None => vec![service.hostname.clone()],
        Some(vs) => routed_hosts_of(vs),
    }
}

/// The hosts the HTTP routes of a VirtualService send to.
pub fn routed_hosts_of(vs: &ResolvedVs) -> Vec<String> {
    let mut hosts: Vec<String> = vs
        .vs
        .http
        .iter()
        .flat_map(|r| r.route.iter())
        .map(|d| d.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// One entry of a sidecar route configuration: a visible service and the VirtualService in
/// effect for it, if any.
pub type SidecarVhost = (Service, Option<ResolvedVs>);

/// What a sidecar route configuration's virtual hosts come from.
#[derive(Clone, Debug, Default)]
pub struct SidecarVhosts {
    /// The visible services on the port, each with the VirtualService in effect for it.
    pub services: Vec<SidecarVhost>,
    /// Mesh VirtualServices that name or cover no service of the registry at all, seen by
    /// the scope on this port (port 80 only: [`crate::rules::sidecar_sees_hostless_vs`]).
    pub hostless: Vec<ResolvedVs>,
    /// The visible Kubernetes `ExternalName` aliases that declare the port (HTTP), each with
    /// the mesh VirtualService in effect for its own host — only those that have one.
    pub aliases: Vec<(Service, ResolvedVs)>,
}

/// The sidecar route configuration for `port`, with a virtual host per service (sorted by
/// host so the encoding is canonical), one per VirtualService host that is not a service
/// on the port ([`vs_host_vhosts`]) and, on captured listeners, Istio's catch-all for
/// hosts outside the registry: `allow_any` (passthrough, or the Sidecar's `egressProxy`) or
/// `block_all` (502).
pub fn sidecar_route_config(
    port: u16,
    scope: &ScopeKey,
    domain_suffix: &str,
    vhosts: &SidecarVhosts,
    unknown: UnknownHosts,
    default_retries: Option<&Retries>,
    hashing: &Hashing,
) -> Resource {
    let (source, proxy_ns) = (scope.source(), scope.namespace());
    let mut sorted: Vec<&SidecarVhost> = vhosts.services.iter().collect();
    sorted.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
    let mut virtual_hosts: Vec<VirtualHost> = sorted
        .iter()
        .map(|(svc, vs)| VirtualHost {
            name: format!("{}:{}", svc.hostname, port),
            domains: domains(&svc.hostname, port, proxy_ns, domain_suffix),
            routes: match vs {
                Some(vs) => vs_routes(vs, port, &[MESH.to_string()], source, hashing),
                None => vec![default_route(svc, port, default_retries, hashing)],
            },
            ..Default::default()
        })
        .collect();
    let own = alias_vhosts(
        port,
        &sorted,
        &virtual_hosts,
        vhosts,
        scope,
        domain_suffix,
        hashing,
    );
    add_alias_domains(
        &mut virtual_hosts,
        &sorted,
        &own,
        port,
        proxy_ns,
        domain_suffix,
    );
    virtual_hosts.extend(own);
    let extra = vs_host_vhosts(port, vhosts, &virtual_hosts, source, hashing);
    virtual_hosts.extend(extra);
    let catch_all = |name: &str, action: Action| VirtualHost {
        name: name.into(),
        domains: vec!["*".into()],
        routes: vec![Route {
            name: name.into(),
            r#match: Some(route_match(None)),
            action: Some(action),
            ..Default::default()
        }],
        ..Default::default()
    };
    match unknown {
        UnknownHosts::None => {}
        UnknownHosts::AllowAny(cluster) => virtual_hosts.push(catch_all(
            "allow_any",
            Action::Route(RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(cluster)),
                timeout: Some(duration_ms(0)),
                ..Default::default()
            }),
        )),
        // Istio answers a host outside the registry itself under REGISTRY_ONLY.
        UnknownHosts::BlockAll => virtual_hosts.push(catch_all(
            "block_all",
            Action::DirectResponse(DirectResponseAction {
                status: 502,
                ..Default::default()
            }),
        )),
    }
    let rc = RouteConfiguration {
        name: port.to_string(),
        virtual_hosts,
        validate_clusters: Some(BoolValue { value: false }),
        ..Default::default()
    };
    Resource::new(ResourceType::Route, rc.name.clone(), rc.encode_to_vec())
}

/// The virtual hosts of `ExternalName` aliases a VirtualService of their own governs
/// ([`SidecarVhosts::aliases`]), as Istio's sidecars build them: an alias that declares the
/// port is a service of the route configuration for it (`servicesByName`), so a VirtualService
/// naming (or covering) its host gives it a virtual host `alias:port` with the alias's names,
/// in every form a client of `scope`'s namespace may use, and the VirtualService's routes. Istio
/// builds VirtualServices' virtual hosts before the default ones of services without one, in
/// VirtualService order (creation time; here by key): the service the alias names keeps the
/// alias's names only where its own VirtualService comes first. A name a service's own
/// virtual host has stays with it; a VirtualService none of whose routes applies to these
/// proxies adds nothing. `services[i]` is `service_vhosts[i]`'s.
fn alias_vhosts(
    port: u16,
    services: &[&SidecarVhost],
    service_vhosts: &[VirtualHost],
    vhosts: &SidecarVhosts,
    scope: &ScopeKey,
    domain_suffix: &str,
    hashing: &Hashing,
) -> Vec<VirtualHost> {
    if vhosts.aliases.is_empty() {
        return Vec::new();
    }
    let (source, proxy_ns) = (scope.source(), scope.namespace());
    let mut taken: BTreeSet<String> = service_vhosts
        .iter()
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    let mut aliases: Vec<&(Service, ResolvedVs)> = vhosts.aliases.iter().collect();
    aliases.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
    let mut out = Vec::new();
    for (alias, vs) in aliases {
        // The service the alias resolves to, where its VirtualService comes first.
        let named_first = services.iter().any(|(svc, svc_vs)| {
            svc.aliases.contains(&alias.hostname)
                && svc_vs.as_ref().is_some_and(|v| v.vs.key < vs.vs.key)
        });
        if named_first {
            continue;
        }
        let routes = vs_routes(vs, port, &[MESH.to_string()], source, hashing);
        if routes.is_empty() {
            continue;
        }
        let domains: Vec<String> = domains(&alias.hostname, port, proxy_ns, domain_suffix)
            .into_iter()
            .filter(|d| taken.insert(d.to_ascii_lowercase()))
            .collect();
        if domains.is_empty() {
            continue;
        }
        out.push(VirtualHost {
            name: format!("{}:{}", alias.hostname, port),
            domains,
            routes,
            ..Default::default()
        });
    }
    out
}

/// Each service's virtual host also answers to the names of its `ExternalName` aliases
/// ([`Service::aliases`]), in every form a client in `proxy_ns` may use, as Istio's
/// `generateVirtualHostDomains` adds them; a name some virtual host already has — an
/// alias's own (`own`, [`alias_vhosts`]) included — stays with it (Envoy refuses a domain
/// twice in one configuration). `services[i]` is `virtual_hosts[i]`'s.
fn add_alias_domains(
    virtual_hosts: &mut [VirtualHost],
    services: &[&SidecarVhost],
    own: &[VirtualHost],
    port: u16,
    proxy_ns: &str,
    domain_suffix: &str,
) {
    if services.iter().all(|(svc, _)| svc.aliases.is_empty()) {
        return;
    }
    let mut taken: BTreeSet<String> = virtual_hosts
        .iter()
        .chain(own)
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    for (vhost, (svc, _)) in virtual_hosts.iter_mut().zip(services) {
        for alias in &svc.aliases {
            for d in domains(alias, port, proxy_ns, domain_suffix) {
                if taken.insert(d.to_ascii_lowercase()) {
                    vhost.domains.push(d);
                }
            }
        }
    }
}

/// Istio's virtual hosts for the hosts of a sidecar's VirtualServices that are not services
/// on this port: a VirtualService governing services here also gets one per other host it
/// names (an alias such as `reviews.example.com`, a wildcard no service falls under), with
/// its own routes; so does each hostless VirtualService ([`SidecarVhosts::hostless`]).
/// Named `host:port`, with domains `host` and `host:port`; a name or domain an earlier
/// virtual host took stays with it (VirtualServices by key), and a VirtualService none of
/// whose routes apply to these proxies adds nothing, as in Istio.
fn vs_host_vhosts(
    port: u16,
    vhosts: &SidecarVhosts,
    services: &[VirtualHost],
    source: Source,
    hashing: &Hashing,
) -> Vec<VirtualHost> {
    let mut vss: Vec<&ResolvedVs> = vhosts
        .services
        .iter()
        .filter_map(|(_, vs)| vs.as_ref())
        .chain(vhosts.hostless.iter())
        .collect();
    vss.sort_by(|a, b| a.vs.key.cmp(&b.vs.key));
    vss.dedup_by(|a, b| a.vs.key == b.vs.key);
    let is_service = |host: &str| {
        vhosts.services.iter().any(|(svc, _)| {
            svc.hostname == host
                || (host.starts_with('*') && crate::rules::host_matches(host, &svc.hostname))
        })
    };
    let mut names: BTreeSet<String> = services.iter().map(|v| v.name.clone()).collect();
    let mut taken: BTreeSet<String> = services
        .iter()
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    let mut out = Vec::new();
    for vs in vss {
        let hosts: Vec<&String> = vs.vs.hosts.iter().filter(|h| !is_service(h)).collect();
        if hosts.is_empty() {
            continue;
        }
        let routes = vs_routes(vs, port, &[MESH.to_string()], source, hashing);
        if routes.is_empty() {
            continue;
        }
        for host in hosts {
            let host = host.to_ascii_lowercase();
            let name = format!("{host}:{port}");
            if !names.insert(name.clone()) {
                continue;
            }
            let domains: Vec<String> = [host, name.clone()]
                .into_iter()
                .filter(|d| taken.insert(d.clone()))
                .collect();
            if domains.is_empty() {
                continue;
            }
            out.push(VirtualHost {
                name,
                domains,
                routes: routes.clone(),
                ..Default::default()
            });
        }
    }
    out
}

/// A gateway route configuration `name` (`http.PORT`, or an HTTPS server's own): `vhosts`
/// maps each domain to the VirtualServices serving it, in precedence order; their routes are
/// concatenated. Domains in `require_tls` (an HTTP server's `httpsRedirect`) answer plaintext
/// requests with a 301 to https (`require_tls: ALL`). `hashing`: the consistent-hash keys of
/// the hosts the routes go to.
pub fn gateway_route_config(
    name: &str,
    port: u16,
    source: Source,
    vhosts: &GatewayVhosts,
    require_tls: &BTreeSet<String>,
    hashing: &Hashing,
) -> Resource {
    let virtual_hosts = vhosts
        .iter()
        .map(|(domain, vss)| VirtualHost {
            name: format!("{domain}:{port}"),
            // Exact hosts match on any port (behind a load balancer the port differs);
            // wildcard hosts as themselves and with the server's port, as Istio writes
            // them; the port of a `Host` is ignored anyway (below).
            domains: if domain == "*" {
                vec!["*".into()]
            } else if domain.starts_with('*') {
                vec![domain.clone(), format!("{domain}:{port}")]
            } else {
                vec![domain.clone(), format!("{domain}:*")]
            },
            routes: vss
                .iter()
                .flat_map(|(vs, via)| vs_routes(vs, port, via, source, hashing))
                .collect(),
            require_tls: if require_tls.contains(domain) {
                virtual_host::TlsRequirementType::All as i32
            } else {
                0
            },
            ..Default::default()
        })
        .collect();
    let rc = RouteConfiguration {
        name: name.to_string(),
        virtual_hosts,
        validate_clusters: Some(BoolValue { value: false }),
        // As Istio's gateway route configurations: a `Host` naming the port the gateway
        // listens on (a port-forward to the pod, not the load balancer's port) still
        // matches its host, wildcards included.
        ignore_port_in_host_matching: true,
        ..Default::default()
    };
    Resource::new(ResourceType::Route, rc.name.clone(), rc.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect(port: Option<u16>, from_request_port: bool) -> Redirect {
        Redirect {
            uri: Some("/new".into()),
            authority: None,
            port,
            from_request_port,
            scheme: None,
            code: 301,
        }
    }

    /// `derivePort: FROM_REQUEST_PORT` writes the route configuration's port; without it
    /// (`FROM_PROTOCOL_DEFAULT`) no port is written; an explicit `port` is kept.
    #[test]
    fn redirect_port_from_the_request_is_the_route_configurations() {
        assert_eq!(
            redirect_action(&redirect(None, true), 8080).port_redirect,
            8080
        );
        assert_eq!(redirect_action(&redirect(None, true), 80).port_redirect, 80);
        assert_eq!(
            redirect_action(&redirect(None, false), 8080).port_redirect,
            0
        );
        assert_eq!(
            redirect_action(&redirect(Some(9), false), 8080).port_redirect,
            9
        );
    }
    /// A route's timeout reaches proxyless gRPC clients as `max_stream_duration` (gRPC
    /// reads no `timeout`); Envoy's routes keep the plain `timeout` alone.
    #[test]
    fn proxyless_clients_get_the_timeout_as_max_stream_duration() {
        use crate::model::{ConfigKey, VirtualService};
        let host = "reviews.default.svc.cluster.local".to_string();
        let vs = ResolvedVs {
            vs: VirtualService {
                key: ConfigKey::new(crate::model::Kind::VirtualService, "default", "r"),
                hosts: vec![host.clone()],
                gateways: vec![],
                export_to: vec![],
                http: vec![HttpRoute {
                    route: vec![RouteDestination {
                        host: host.clone(),
                        subset: None,
                        port: Some(9080),
                        weight: 100,
                        headers: Default::default(),
                        via_alias: None,
                    }],
                    timeout_ms: Some(1500),
                    ..Default::default()
                }],
                tcp: vec![],
                tls: vec![],
            },
            dest_ports: std::collections::BTreeMap::from([(host, vec![9080])]),
        };
        let msd = |proxyless: bool| {
            let source = Source {
                proxyless,
                ..Default::default()
            };
            let routes = vs_routes(&vs, 9080, &[MESH.to_string()], source, &Hashing::new());
            let Some(Action::Route(a)) = &routes[0].action else {
                panic!("{routes:?}")
            };
            assert_eq!(a.timeout, Some(duration_ms(1500)));
            a.max_stream_duration
                .as_ref()
                .and_then(|m| m.max_stream_duration)
        };
        assert_eq!(msd(true), Some(duration_ms(1500)));
        assert_eq!(msd(false), None);
    }
}
