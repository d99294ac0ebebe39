//! Route effects: faults, header edits by level, rewrites and mirrors, and the share and
//! substitution conversions behind them.

use super::{hcm_chain, listener};
use crate::simulate::effects::{per_million, re2_substitution};
use crate::simulate::{Call, FaultAbort, HeaderLevel, HeaderOp, Mirror, ProxyConfig, ALL};
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, route::Action as RouteActionKind,
    route_action::ClusterSpecifier, route_match::PathSpecifier, HeaderMatcher, Route, RouteAction,
    RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
    fault_abort::ErrorType, FaultAbort as EnvoyAbort, HttpFault,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::r#type::v3::{fractional_percent::DenominatorType, FractionalPercent};

/// A header set at a level (`OVERWRITE_IF_EXISTS_OR_ADD`).
fn set(k: &str, v: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        }),
        append_action: 2,
        ..Default::default()
    }
}

/// A fault aborting `numerator`% of the requests with `status`, under `headers`.
fn abort(status: u32, numerator: u32, headers: Vec<HeaderMatcher>) -> HttpFault {
    HttpFault {
        abort: Some(EnvoyAbort {
            error_type: Some(ErrorType::HttpStatus(status)),
            percentage: Some(FractionalPercent {
                numerator,
                denominator: DenominatorType::Hundred as i32,
            }),
            ..Default::default()
        }),
        headers,
        ..Default::default()
    }
}

/// A route on `prefix` to cluster `app` that sets `x-level: route`.
fn route(name: &str, prefix: &str) -> Route {
    Route {
        name: name.into(),
        r#match: Some(RouteMatch {
            path_specifier: Some(PathSpecifier::Prefix(prefix.into())),
            ..Default::default()
        }),
        action: Some(RouteActionKind::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster("app".into())),
            ..Default::default()
        })),
        request_headers_to_add: vec![set("x-level", "route")],
        ..Default::default()
    }
}

/// Routes with a fault of their own, a disabled fault, a rewrite and a mirror, and a plain
/// one, under a virtual host whose fault needs `x-fault`; each level sets `x-level`.
fn effects_route_config() -> RouteConfiguration {
    use envoy_types::pb::envoy::config::route::v3::{
        route_action::RequestMirrorPolicy, FilterConfig,
    };
    use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatchAndSubstitute, RegexMatcher};
    use envoy_types::util::pack_any;
    let mut aborted = route("aborted", "/abort");
    aborted
        .typed_per_filter_config
        .insert("fault".into(), pack_any(abort(429, 100, Vec::new())));
    let mut off = route("off", "/off");
    off.typed_per_filter_config.insert(
        "fault".into(),
        pack_any(FilterConfig {
            disabled: true,
            ..Default::default()
        }),
    );
    let mut rewritten = route("rewritten", "/re");
    if let Some(RouteActionKind::Route(ra)) = &mut rewritten.action {
        ra.regex_rewrite = Some(RegexMatchAndSubstitute {
            pattern: Some(RegexMatcher {
                regex: "/re/(\\w+)".into(),
                ..Default::default()
            }),
            substitution: "/\\1/$x".into(),
        });
        ra.request_mirror_policies = vec![RequestMirrorPolicy {
            cluster: "shadow".into(),
            ..Default::default()
        }];
    }
    let mut vh = VirtualHost {
        name: "all".into(),
        domains: vec!["*".into()],
        routes: vec![aborted, off, rewritten, route("rest", "/")],
        request_headers_to_add: vec![set("x-level", "vhost")],
        request_headers_to_remove: vec!["x-drop".into()],
        ..Default::default()
    };
    // The virtual host's fault applies where a route has none: only with `x-fault`.
    let cond = HeaderMatcher {
        name: "x-fault".into(),
        header_match_specifier: Some(HeaderMatchSpecifier::PresentMatch(true)),
        ..Default::default()
    };
    vh.typed_per_filter_config
        .insert("fault".into(), pack_any(abort(418, 50, vec![cond])));
    RouteConfiguration {
        name: "rc".into(),
        virtual_hosts: vec![vh],
        request_headers_to_add: vec![set("x-level", "config")],
        ..Default::default()
    }
}

/// The fault filter, with no fault of its own.
fn fault_filter() -> HttpFilter {
    use envoy_types::util::pack_any;
    HttpFilter {
        name: "fault".into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            HttpFault::default(),
        ))),
        ..Default::default()
    }
}

/// A listener on port 80 whose connection manager runs `filters` over `rc`.
fn config(filters: Vec<HttpFilter>, rc: RouteConfiguration) -> ProxyConfig {
    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(rc)),
        http_filters: filters,
        ..Default::default()
    };
    ProxyConfig {
        listeners: [(
            "l".to_string(),
            listener(80, vec![hcm_chain("h", hcm)], false),
        )]
        .into(),
        ..Default::default()
    }
}

/// What a route does to the request: the fault filter's per-route config (at the most
/// specific level; not without the filter in the chain; disabled by a `FilterConfig`;
/// under its header condition), header edits in Envoy's order of levels (and reversed by
/// `most_specific_header_mutations_wins`), rewrites and mirrors.
#[test]
fn route_effects_follow_envoys_levels_and_conditions() {
    let rc = effects_route_config();
    let fault_filter = fault_filter();
    let with = config(vec![fault_filter.clone()], rc.clone());
    let o = with.simulate(&Call::get("a", 80, "/abort"));
    assert_eq!(o.fault_status(), Some(429));
    assert_eq!(o.effective_status(), Some(429), "before the router's 503");
    assert_eq!(o.status(), Some(503), "no cluster app");
    assert_eq!(o.cluster(), Some("app"), "the route itself is unchanged");
    let fx = o.http.as_ref().expect("effects");
    // Default order: route, virtual host, route configuration — the last write wins.
    let levels: Vec<(HeaderLevel, HeaderOp)> =
        fx.request_headers.iter().map(|e| (e.level, e.op)).collect();
    assert_eq!(
        levels,
        [
            (HeaderLevel::Route, HeaderOp::Set),
            (HeaderLevel::VirtualHost, HeaderOp::Remove),
            (HeaderLevel::VirtualHost, HeaderOp::Set),
            (HeaderLevel::RouteConfiguration, HeaderOp::Set),
        ]
    );
    let o = with.simulate(&Call::get("a", 80, "/").header("x-drop", "1"));
    let fx = o.http.as_ref().expect("effects");
    assert_eq!(
        fx.upstream_headers,
        [("x-level".to_string(), "config".to_string())]
    );
    assert_eq!(o.fault(), None, "the virtual host's fault needs x-fault");
    let o = with.simulate(&Call::get("a", 80, "/").header("x-fault", "1"));
    assert_eq!(
        o.fault().and_then(|f| f.abort.clone()),
        Some((FaultAbort::Http(418), ALL / 2))
    );
    assert_eq!(o.fault_status(), None, "half of them");
    let o = with.simulate(&Call::get("a", 80, "/off").header("x-fault", "1"));
    assert_eq!(o.fault(), None, "disabled on the route");
    let o = with.simulate(&Call::get("a", 80, "/re/abc?q"));
    let fx = o.http.as_ref().expect("effects");
    assert_eq!(fx.upstream_path, "/abc/$x?q", "RE2's \\1; a literal $");
    assert_eq!(
        fx.mirrors,
        [Mirror {
            cluster: "shadow".into(),
            per_million: ALL,
            cluster_found: false
        }]
    );

    // Without the filter in the chain, nothing is injected (and that is said).
    let o = config(Vec::new(), rc.clone()).simulate(&Call::get("a", 80, "/abort"));
    assert_eq!(o.fault(), None);
    assert_eq!(o.effective_status(), Some(503), "the router's");
    assert!(
        o.warnings.iter().any(|w| w.contains("no fault filter")),
        "{:?}",
        o.warnings
    );

    // The most specific level last: the route's value wins.
    let specific = RouteConfiguration {
        most_specific_header_mutations_wins: true,
        ..rc
    };
    let o = config(Vec::new(), specific).simulate(&Call::get("a", 80, "/"));
    let fx = o.http.as_ref().expect("effects");
    assert_eq!(
        fx.upstream_headers,
        [("x-level".to_string(), "route".to_string())]
    );
    assert_eq!(fx.request_headers[0].level, HeaderLevel::RouteConfiguration);
}

#[test]
fn shares_and_substitutions_convert_like_envoy() {
    use envoy_types::pb::envoy::r#type::v3::{
        fractional_percent::DenominatorType, FractionalPercent,
    };
    let share = |numerator, d: DenominatorType| {
        per_million(Some(&FractionalPercent {
            numerator,
            denominator: d as i32,
        }))
    };
    assert_eq!(share(100, DenominatorType::Hundred), ALL);
    assert_eq!(share(250, DenominatorType::Hundred), ALL, "capped");
    assert_eq!(share(1, DenominatorType::TenThousand), 100);
    assert_eq!(share(7, DenominatorType::Million), 7);
    assert_eq!(per_million(None), 0);
    assert_eq!(re2_substitution("/a/\\1-\\2\\\\$"), "/a/${1}-${2}\\$$");
}
