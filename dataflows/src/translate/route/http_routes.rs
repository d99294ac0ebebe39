//! A VirtualService's HTTP routes as Envoy routes: one per match that applies to the
//! proxies and the port, each with its action, header edits, and the per-route
//! configuration of the fault and CORS filters.

use super::actions::{
    action, direct_response_action, fraction, headers_to_add, redirect_action, At,
};
use super::matches::{route_match, string_matcher};
use crate::model::{
    AbortStatus, Cors, Fault, Hashing, HeaderEdits, HttpMatch, HttpRoute, ResolvedVs,
    RouteDestination, Source,
};
use crate::translate::duration_ms;
use envoy_types::pb::envoy::config::route::v3::{route::Action, Route};
use envoy_types::pb::envoy::extensions::filters::common::fault::v3::{
    fault_delay::FaultDelaySecifier, FaultDelay,
};
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
    fault_abort::ErrorType, FaultAbort, HttpFault,
};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;

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
        (Some(r), _) => Action::Redirect(redirect_action(r, at)),
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
/// `source`: the proxies the configuration is for (`sourceNamespace`, `sourceLabels`);
/// `tls`: the route configuration is for a server that terminates TLS.
pub fn vs_routes(
    vs: &ResolvedVs,
    current: u16,
    tls: bool,
    via: &[String],
    source: Source,
    hashing: &Hashing,
) -> Vec<Route> {
    // Sidecars apply a VirtualService through the mesh; gateways through themselves.
    let at = At {
        port: current,
        sidecar: via.iter().any(|v| v == MESH),
        tls,
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let routes = vs_routes(
                &vs,
                9080,
                false,
                &[MESH.to_string()],
                source,
                &Hashing::new(),
            );
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
