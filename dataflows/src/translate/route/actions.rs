//! Envoy's route actions of a VirtualService's HTTP routes: the destinations (their ports
//! and clusters, weights, mirrors, rewrites), retries and consistent hashing, redirects and
//! direct responses, and header edits.

use crate::model::{
    DirectResponse, HashKey, Hashing, HeaderEdits, HttpRoute, PerMillion, Redirect, ResolvedVs,
    Retries, RouteDestination,
};
use crate::translate::{duration_ms, outbound_cluster_name};
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
use envoy_types::pb::envoy::config::route::v3::{
    redirect_action,
    route_action::{ClusterSpecifier, HashPolicy, HostRewriteSpecifier, RequestMirrorPolicy},
    weighted_cluster::ClusterWeight,
    DirectResponseAction, RedirectAction, RetryPolicy, RouteAction, WeightedCluster,
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::retry::priority::previous_priorities::v3::PreviousPrioritiesConfig;
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatchAndSubstitute, RegexMatcher};
use envoy_types::pb::envoy::r#type::v3::{fractional_percent::DenominatorType, FractionalPercent};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;

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
pub(super) fn hashed(
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
pub(super) fn retries_policy(retries: Option<&Retries>) -> Option<RetryPolicy> {
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
pub(super) struct At {
    pub(super) port: u16,
    pub(super) sidecar: bool,
    /// The route configuration is for a server that terminates TLS (requests arrive as
    /// https): a redirect without a scheme keeps https.
    pub(super) tls: bool,
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

pub(super) fn action(route: &HttpRoute, at: At, vs: &ResolvedVs, hashing: &Hashing) -> RouteAction {
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
pub(super) fn fraction(f: PerMillion) -> FractionalPercent {
    FractionalPercent {
        numerator: f,
        denominator: DenominatorType::Million as i32,
    }
}

/// A `redirect` on the route configuration at `at`: `derivePort: FROM_REQUEST_PORT` writes
/// its port, as Istio does (every route configuration is for one port, so it is the port
/// the request came to); as Istio, a location on its scheme's own port (`:80` for http,
/// `:443` for https — the scheme written, or the server's) names no port.
pub(super) fn redirect_action(r: &Redirect, at: At) -> RedirectAction {
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
    let port = match r.port {
        Some(p) => u32::from(p),
        None if r.from_request_port => u32::from(at.port),
        None => 0,
    };
    let scheme = r
        .scheme
        .as_deref()
        .unwrap_or(if at.tls { "https" } else { "http" });
    let port = match (scheme, port) {
        ("http", 80) | ("https", 443) => 0,
        _ => port,
    };
    let path = match (&r.uri, &r.prefix) {
        (Some(uri), _) => Some(PathRewriteSpecifier::PathRedirect(uri.clone())),
        (None, Some(prefix)) => Some(PathRewriteSpecifier::PrefixRewrite(prefix.clone())),
        (None, None) => None,
    };
    RedirectAction {
        host_redirect: r.authority.clone().unwrap_or_default(),
        port_redirect: port,
        response_code: code as i32,
        scheme_rewrite_specifier: r.scheme.clone().map(SchemeRewriteSpecifier::SchemeRedirect),
        path_rewrite_specifier: path,
        ..Default::default()
    }
}

pub(super) fn direct_response_action(d: &DirectResponse) -> DirectResponseAction {
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
pub(super) fn headers_to_add(e: &HeaderEdits) -> Vec<HeaderValueOption> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect(port: Option<u16>, from_request_port: bool, scheme: Option<&str>) -> Redirect {
        Redirect {
            uri: Some("/new".into()),
            prefix: None,
            authority: None,
            port,
            from_request_port,
            scheme: scheme.map(str::to_string),
            code: 301,
        }
    }

    fn port_at(r: &Redirect, port: u16, tls: bool) -> u32 {
        let at = At {
            port,
            sidecar: false,
            tls,
        };
        redirect_action(r, at).port_redirect
    }

    /// `derivePort: FROM_REQUEST_PORT` writes the route configuration's port; without it
    /// (`FROM_PROTOCOL_DEFAULT`) no port is written; an explicit `port` is kept — except a
    /// scheme's own port, which the location leaves out (the Gateway API's
    /// HTTPRouteRedirectPortAndScheme cases).
    #[test]
    fn redirect_port_from_the_request_is_the_route_configurations() {
        assert_eq!(port_at(&redirect(None, true, None), 8080, false), 8080);
        assert_eq!(port_at(&redirect(None, false, None), 8080, false), 0);
        assert_eq!(port_at(&redirect(Some(9), false, None), 8080, false), 9);
        // The scheme's own port: from the request, explicit, on http and on https.
        assert_eq!(port_at(&redirect(None, true, None), 80, false), 0);
        assert_eq!(port_at(&redirect(None, true, None), 443, true), 0);
        assert_eq!(port_at(&redirect(Some(80), false, None), 8080, false), 0);
        assert_eq!(port_at(&redirect(Some(443), false, None), 443, true), 0);
        assert_eq!(
            port_at(&redirect(Some(443), false, Some("https")), 80, false),
            0
        );
        assert_eq!(
            port_at(&redirect(Some(80), false, Some("http")), 443, true),
            0
        );
        // Another scheme's port is named.
        assert_eq!(port_at(&redirect(None, true, None), 443, false), 443);
        assert_eq!(
            port_at(&redirect(Some(80), false, Some("https")), 80, false),
            80
        );
        assert_eq!(
            port_at(&redirect(Some(8443), false, Some("https")), 80, false),
            8443
        );
        assert_eq!(
            port_at(&redirect(Some(8080), false, Some("http")), 443, true),
            8080
        );
    }

    /// `ReplacePrefixMatch` is Envoy's `prefix_rewrite`; a whole path wins over a prefix.
    #[test]
    fn a_redirects_prefix_is_a_prefix_rewrite() {
        use redirect_action::PathRewriteSpecifier as P;
        let at = At {
            port: 80,
            sidecar: false,
            tls: false,
        };
        let mut r = redirect(None, false, None);
        r.uri = None;
        r.prefix = Some("/replacement-prefix".into());
        assert_eq!(
            redirect_action(&r, at).path_rewrite_specifier,
            Some(P::PrefixRewrite("/replacement-prefix".into()))
        );
        r.uri = Some("/full".into());
        assert_eq!(
            redirect_action(&r, at).path_rewrite_specifier,
            Some(P::PathRedirect("/full".into()))
        );
    }
}
