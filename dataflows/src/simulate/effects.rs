//! What the HTTP filters and the matched route do to a request besides choosing where it
//! goes: faults, rewrites, header edits, CORS and mirrors ([`HttpEffects`]).

use super::request::{header_matches, to_duration, Request};
use super::transport::string_matcher_text;
use super::{
    Action, Cors, Fault, FaultAbort, HeaderEdit, HeaderLevel, HeaderOp, HostRewrite, HttpEffects,
    Mirror, ProxyConfig, ALL,
};
use envoy_types::pb::envoy::config::route::v3::{
    route::Action as RouteActionKind, route_action::ClusterSpecifier, route_match::PathSpecifier,
    RouteAction, RouteConfiguration, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

const FAULT_TYPE: &str = "envoy.extensions.filters.http.fault.v3.HTTPFault";
const CORS_TYPE: &str = "envoy.extensions.filters.http.cors.v3.Cors";
const FILTER_CONFIG_TYPE: &str = "envoy.config.route.v3.FilterConfig";

/// What is needed to read a matched route's effects.
pub(super) struct Effects<'a> {
    pub(super) hcm: &'a HttpConnectionManager,
    pub(super) rc: &'a RouteConfiguration,
    pub(super) vh: &'a VirtualHost,
    pub(super) route: &'a envoy_types::pb::envoy::config::route::v3::Route,
    pub(super) req: &'a Request<'a>,
    pub(super) proxy: &'a ProxyConfig,
    pub(super) warnings: &'a mut Vec<String>,
}

/// A share as a fraction of a million (at most all).
pub(super) fn per_million(
    f: Option<&envoy_types::pb::envoy::r#type::v3::FractionalPercent>,
) -> u32 {
    use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
    let Some(f) = f else {
        return 0;
    };
    let scale: u64 = match DenominatorType::try_from(f.denominator) {
        Ok(DenominatorType::Hundred) | Err(_) => 10_000,
        Ok(DenominatorType::TenThousand) => 100,
        Ok(DenominatorType::Million) => 1,
    };
    u32::try_from((u64::from(f.numerator) * scale).min(u64::from(ALL))).unwrap_or(ALL)
}

pub(super) fn header_edits(
    level: HeaderLevel,
    remove: &[String],
    add: &[envoy_types::pb::envoy::config::core::v3::HeaderValueOption],
) -> Vec<HeaderEdit> {
    use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction as A;
    // Envoy removes a level's headers before adding that level's.
    let removals = remove.iter().map(|name| HeaderEdit {
        level,
        op: HeaderOp::Remove,
        name: name.to_ascii_lowercase(),
        value: String::new(),
    });
    #[allow(deprecated)] // `append` is still valid config, and wins over `append_action`
    let additions = add.iter().filter_map(move |o| {
        let h = o.header.as_ref()?;
        let op = match (o.append.map(|b| b.value), A::try_from(o.append_action)) {
            (Some(true), _) => HeaderOp::Append,
            (Some(false), _) => HeaderOp::Set,
            (None, Ok(A::AppendIfExistsOrAdd) | Err(_)) => HeaderOp::Append,
            (None, Ok(A::AddIfAbsent)) => HeaderOp::AddIfAbsent,
            (None, Ok(A::OverwriteIfExistsOrAdd)) => HeaderOp::Set,
            (None, Ok(A::OverwriteIfExists)) => HeaderOp::OverwriteIfExists,
        };
        let value = if h.value.is_empty() {
            String::from_utf8_lossy(&h.raw_value).into_owned()
        } else {
            h.value.clone()
        };
        Some(HeaderEdit {
            level,
            op,
            name: h.key.to_ascii_lowercase(),
            value,
        })
    });
    removals.chain(additions).collect()
}

/// Applies `edits` in order to `headers`.
fn apply_edits(headers: &mut Vec<(String, String)>, edits: &[HeaderEdit]) {
    for e in edits {
        let present = headers.iter().any(|(k, _)| *k == e.name);
        match e.op {
            HeaderOp::Remove => headers.retain(|(k, _)| *k != e.name),
            HeaderOp::Append => headers.push((e.name.clone(), e.value.clone())),
            HeaderOp::AddIfAbsent if !present => headers.push((e.name.clone(), e.value.clone())),
            HeaderOp::AddIfAbsent => {}
            HeaderOp::Set => {
                headers.retain(|(k, _)| *k != e.name);
                headers.push((e.name.clone(), e.value.clone()));
            }
            HeaderOp::OverwriteIfExists if present => {
                headers.retain(|(k, _)| *k != e.name);
                headers.push((e.name.clone(), e.value.clone()));
            }
            HeaderOp::OverwriteIfExists => {}
        }
    }
}

/// An RE2 substitution (`\1`) in the syntax of Rust's `regex` (`${1}`).
pub(super) fn re2_substitution(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek().copied() {
                Some(d) if d.is_ascii_digit() => {
                    chars.next();
                    out.push_str(&format!("${{{d}}}"));
                }
                Some('\\') => {
                    chars.next();
                    out.push('\\');
                }
                _ => out.push('\\'),
            },
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

impl Effects<'_> {
    /// The HTTP filter of type `type_name` the connection manager runs, by name.
    fn filter(&self, type_name: &str) -> Option<&HttpFilter> {
        self.hcm.http_filters.iter().find(|f| {
            matches!(&f.config_type, Some(http_filter::ConfigType::TypedConfig(a)) if a.type_url.ends_with(type_name))
        })
    }

    /// The per-route config of filter `name`, the most specific level first (route, virtual
    /// host, route configuration); `Err(())`: disabled there.
    fn per_route(&mut self, name: &str) -> Option<Result<Any, ()>> {
        let any = self
            .route
            .typed_per_filter_config
            .get(name)
            .or_else(|| self.vh.typed_per_filter_config.get(name))
            .or_else(|| self.rc.typed_per_filter_config.get(name))?;
        if !any.type_url.ends_with(FILTER_CONFIG_TYPE) {
            return Some(Ok(any.clone()));
        }
        match envoy_types::pb::envoy::config::route::v3::FilterConfig::decode(&any.value[..]) {
            Ok(fc) if fc.disabled => Some(Err(())),
            Ok(fc) => fc.config.map(Ok),
            Err(e) => {
                self.warnings
                    .push(format!("filter config of {name} did not decode: {e}"));
                None
            }
        }
    }

    pub(super) fn read(&mut self, action: Option<&Action>) -> HttpEffects {
        let mut fx = HttpEffects::default();
        let ra = match &self.route.action {
            Some(RouteActionKind::Route(ra)) => Some(ra),
            _ => None,
        };
        fx.fault = self.fault(action);
        fx.cors = self.cors(ra);
        if let Some(ra) = ra {
            fx.prefix_rewrite = Some(ra.prefix_rewrite.clone()).filter(|p| !p.is_empty());
            fx.regex_rewrite = ra.regex_rewrite.as_ref().map(|r| {
                (
                    r.pattern
                        .as_ref()
                        .map(|p| p.regex.clone())
                        .unwrap_or_default(),
                    r.substitution.clone(),
                )
            });
            use envoy_types::pb::envoy::config::route::v3::route_action::HostRewriteSpecifier as H;
            fx.host_rewrite = match &ra.host_rewrite_specifier {
                Some(H::HostRewriteLiteral(h)) => Some(HostRewrite::Literal(h.clone())),
                Some(H::AutoHostRewrite(b)) if b.value => Some(HostRewrite::Auto),
                Some(H::AutoHostRewrite(_)) | None => None,
                Some(H::HostRewriteHeader(h)) => Some(HostRewrite::Header(h.clone())),
                Some(H::HostRewrite(f)) => Some(HostRewrite::Format(f.clone())),
                Some(H::HostRewritePathRegex(r)) => Some(HostRewrite::PathRegex(
                    r.pattern
                        .as_ref()
                        .map(|p| p.regex.clone())
                        .unwrap_or_default(),
                    r.substitution.clone(),
                )),
            };
        }
        // The one weighted cluster the request can take carries edits of its own.
        let weighted = ra.and_then(|ra| match &ra.cluster_specifier {
            Some(ClusterSpecifier::WeightedClusters(w)) => {
                let live: Vec<_> = w
                    .clusters
                    .iter()
                    .filter(|c| c.weight.is_none_or(|w| w.value > 0))
                    .collect();
                match live.as_slice() {
                    [one] => Some(*one),
                    many => {
                        // Header edits travel with each upstream ([`Upstream::request_headers`]);
                        // a host rewrite of its own would change the authority below.
                        if many.iter().any(|c| c.host_rewrite_specifier.is_some()) {
                            self.warnings.push(
                                "weighted clusters rewrite the host themselves: the upstream \
                                 authority depends on the cluster picked and is not reported"
                                    .into(),
                            );
                        }
                        None
                    }
                }
            }
            _ => None,
        });
        if let Some(w) = weighted {
            use envoy_types::pb::envoy::config::route::v3::weighted_cluster::cluster_weight::HostRewriteSpecifier as W;
            if let Some(W::HostRewriteLiteral(h)) = &w.host_rewrite_specifier {
                fx.host_rewrite = Some(HostRewrite::Literal(h.clone()));
            }
        }
        let specific_last = self.rc.most_specific_header_mutations_wins;
        let mut levels = vec![
            (
                HeaderLevel::Route,
                &self.route.request_headers_to_remove,
                &self.route.request_headers_to_add,
                &self.route.response_headers_to_remove,
                &self.route.response_headers_to_add,
            ),
            (
                HeaderLevel::VirtualHost,
                &self.vh.request_headers_to_remove,
                &self.vh.request_headers_to_add,
                &self.vh.response_headers_to_remove,
                &self.vh.response_headers_to_add,
            ),
            (
                HeaderLevel::RouteConfiguration,
                &self.rc.request_headers_to_remove,
                &self.rc.request_headers_to_add,
                &self.rc.response_headers_to_remove,
                &self.rc.response_headers_to_add,
            ),
        ];
        if specific_last {
            levels.reverse();
        }
        // A weighted cluster's edits come first in either order.
        if let Some(w) = weighted {
            levels.insert(
                0,
                (
                    HeaderLevel::WeightedCluster,
                    &w.request_headers_to_remove,
                    &w.request_headers_to_add,
                    &w.response_headers_to_remove,
                    &w.response_headers_to_add,
                ),
            );
        }
        for (level, req_rm, req_add, resp_rm, resp_add) in levels {
            fx.request_headers
                .extend(header_edits(level, req_rm, req_add));
            fx.response_headers
                .extend(header_edits(level, resp_rm, resp_add));
        }
        fx.mirrors = self.mirrors(ra);
        self.forwarded(&mut fx);
        fx
    }

    /// The request as it leaves: path and authority rewritten, headers edited.
    fn forwarded(&mut self, fx: &mut HttpEffects) {
        let req = self.req;
        let path = req.path.clone();
        let (bare, query) = match path.find(['?', '#']) {
            Some(i) => path.split_at(i),
            None => (path.as_str(), ""),
        };
        let mut upstream_path = path.clone();
        if let Some(prefix) = &fx.prefix_rewrite {
            let matched = match self
                .route
                .r#match
                .as_ref()
                .and_then(|m| m.path_specifier.as_ref())
            {
                Some(PathSpecifier::Prefix(p) | PathSpecifier::PathSeparatedPrefix(p)) => p.len(),
                // `path` and regex routes: the whole path is replaced, the query kept.
                _ => bare.len(),
            };
            upstream_path = format!("{prefix}{}", path.get(matched..).unwrap_or_default());
        }
        if let Some((pattern, substitution)) = &fx.regex_rewrite {
            match regex::Regex::new(pattern) {
                Ok(re) => {
                    let replaced = re.replace_all(bare, re2_substitution(substitution).as_str());
                    upstream_path = format!("{replaced}{query}");
                }
                Err(e) => self
                    .warnings
                    .push(format!("regex_rewrite {pattern:?} does not compile: {e}")),
            }
        }
        let authority = req.call.authority.clone();
        fx.upstream_authority = match &fx.host_rewrite {
            Some(HostRewrite::Literal(h)) => h.clone(),
            Some(HostRewrite::Header(h)) => req
                .headers
                .get(&h.to_ascii_lowercase())
                .cloned()
                .unwrap_or(authority),
            Some(HostRewrite::Auto) => {
                self.warnings.push(
                    "auto_host_rewrite: the authority becomes the upstream host's name, \
                     which depends on the endpoint picked (kept as sent here)"
                        .into(),
                );
                authority
            }
            Some(HostRewrite::PathRegex(pattern, substitution)) => {
                match regex::Regex::new(pattern) {
                    Ok(re) => re
                        .replace_all(bare, re2_substitution(substitution).as_str())
                        .into_owned(),
                    Err(e) => {
                        self.warnings
                            .push(format!("host_rewrite_path_regex {pattern:?}: {e}"));
                        authority
                    }
                }
            }
            Some(HostRewrite::Format(f)) => {
                if f.contains('%') {
                    self.warnings.push(format!(
                        "host_rewrite {f:?}: format substitutions are not modelled"
                    ));
                }
                f.clone()
            }
            None => authority,
        };
        fx.upstream_path = upstream_path;
        let mut headers: Vec<(String, String)> = req
            .call
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .filter(|(k, _)| !k.starts_with(':') && k != "host")
            .collect();
        apply_edits(&mut headers, &fx.request_headers);
        fx.upstream_headers = headers;
    }

    /// The fault the fault filter injects on this request.
    fn fault(&mut self, action: Option<&Action>) -> Option<Fault> {
        use envoy_types::pb::envoy::extensions::filters::common::fault::v3::fault_delay::FaultDelaySecifier;
        use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
            fault_abort::ErrorType, HttpFault,
        };
        let any_fault = |a: &Any| a.type_url.ends_with(FAULT_TYPE);
        let filter = self.filter(FAULT_TYPE).cloned();
        let Some(filter) = filter else {
            // A fault configured for the route (by its type, or under the usual filter
            // name) that no filter of the connection manager would read.
            let configured = [
                &self.route.typed_per_filter_config,
                &self.vh.typed_per_filter_config,
                &self.rc.typed_per_filter_config,
            ]
            .into_iter()
            .flatten()
            .any(|(name, a)| any_fault(a) || name.contains("fault"));
            if configured {
                self.warnings.push(
                    "the route configures a fault, but the connection manager runs no fault \
                     filter: no fault is injected"
                        .into(),
                );
            }
            return None;
        };
        let own = match &filter.config_type {
            Some(http_filter::ConfigType::TypedConfig(a)) => HttpFault::decode(&a.value[..]).ok(),
            _ => None,
        };
        let config = match self.per_route(&filter.name) {
            Some(Err(())) => return None,
            Some(Ok(a)) if any_fault(&a) => match HttpFault::decode(&a.value[..]) {
                Ok(f) => Some(f),
                Err(e) => {
                    self.warnings
                        .push(format!("the route's fault did not decode: {e}"));
                    return None;
                }
            },
            Some(Ok(a)) => {
                self.warnings.push(format!(
                    "the route's config of {} is a {}, not a fault",
                    filter.name, a.type_url
                ));
                return None;
            }
            None if filter.disabled => None,
            None => own,
        }?;
        // The fault's own conditions: request headers, the upstream cluster, the caller.
        if !config
            .headers
            .iter()
            .all(|h| header_matches(h, self.req, self.warnings))
        {
            return None;
        }
        if !config.upstream_cluster.is_empty() {
            let cluster = match action {
                Some(Action::Route { upstreams, .. }) => match upstreams.as_slice() {
                    [one] => Some(one.cluster.as_str()),
                    _ => None,
                },
                _ => None,
            };
            if cluster != Some(config.upstream_cluster.as_str()) {
                return None;
            }
        }
        if !config.downstream_nodes.is_empty() {
            let node = self.req.headers.get("x-envoy-downstream-service-node");
            if !node.is_some_and(|n| config.downstream_nodes.contains(n)) {
                return None;
            }
        }
        let delay = config
            .delay
            .as_ref()
            .and_then(|d| match &d.fault_delay_secifier {
                Some(FaultDelaySecifier::FixedDelay(fixed)) => {
                    Some((to_duration(fixed), per_million(d.percentage.as_ref())))
                }
                _ => {
                    self.warnings
                        .push("a delay taken from a request header is not modelled".into());
                    None
                }
            });
        let abort = config.abort.as_ref().and_then(|a| {
            let kind = match a.error_type {
                Some(ErrorType::HttpStatus(s)) => FaultAbort::Http(s),
                Some(ErrorType::GrpcStatus(s)) => FaultAbort::Grpc(s),
                Some(ErrorType::HeaderAbort(_)) => FaultAbort::FromHeader,
                None => return None,
            };
            Some((kind, per_million(a.percentage.as_ref())))
        });
        (delay.is_some() || abort.is_some()).then_some(Fault { delay, abort })
    }

    /// The CORS policy in effect.
    #[allow(deprecated)] // the route's and virtual host's own `cors` are still valid config
    fn cors(&mut self, ra: Option<&RouteAction>) -> Option<Cors> {
        use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
        let filter = self.filter(CORS_TYPE)?.clone();
        let enabled = |f: Option<
            &envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent,
        >| { f.map_or(ALL, |r| per_million(r.default_value.as_ref())) };
        let origins =
            |m: &[StringMatcher]| m.iter().map(|m| string_matcher_text(Some(m))).collect();
        match self.per_route(&filter.name) {
            Some(Err(())) => return None,
            Some(Ok(a)) => {
                return match CorsPolicy::decode(&a.value[..]) {
                    Ok(p) => Some(Cors {
                        allow_origins: origins(&p.allow_origin_string_match),
                        allow_methods: p.allow_methods,
                        allow_headers: p.allow_headers,
                        expose_headers: p.expose_headers,
                        max_age: p.max_age,
                        allow_credentials: p.allow_credentials.map(|b| b.value),
                        enabled_per_million: enabled(p.filter_enabled.as_ref()),
                    }),
                    Err(e) => {
                        self.warnings
                            .push(format!("the route's CORS policy did not decode: {e}"));
                        None
                    }
                }
            }
            None => {}
        }
        let legacy = ra
            .and_then(|ra| ra.cors.as_ref())
            .or(self.vh.cors.as_ref())?;
        use envoy_types::pb::envoy::config::route::v3::cors_policy::EnabledSpecifier;
        Some(Cors {
            allow_origins: origins(&legacy.allow_origin_string_match),
            allow_methods: legacy.allow_methods.clone(),
            allow_headers: legacy.allow_headers.clone(),
            expose_headers: legacy.expose_headers.clone(),
            max_age: legacy.max_age.clone(),
            allow_credentials: legacy.allow_credentials.map(|b| b.value),
            enabled_per_million: match &legacy.enabled_specifier {
                Some(EnabledSpecifier::FilterEnabled(f)) => enabled(Some(f)),
                None => ALL,
            },
        })
    }

    /// The mirror policies in effect: the route's, else the virtual host's, else the route
    /// configuration's.
    fn mirrors(&self, ra: Option<&RouteAction>) -> Vec<Mirror> {
        let route = ra.map(|ra| &ra.request_mirror_policies[..]).unwrap_or(&[]);
        let policies = [
            route,
            &self.vh.request_mirror_policies[..],
            &self.rc.request_mirror_policies[..],
        ]
        .into_iter()
        .find(|p| !p.is_empty())
        .unwrap_or(&[]);
        policies
            .iter()
            .map(|m| {
                let cluster = if m.cluster.is_empty() {
                    format!("header:{}", m.cluster_header)
                } else {
                    m.cluster.clone()
                };
                Mirror {
                    cluster_found: self.proxy.clusters.contains_key(&cluster),
                    cluster,
                    per_million: m
                        .runtime_fraction
                        .as_ref()
                        .map_or(ALL, |r| per_million(r.default_value.as_ref())),
                }
            })
            .collect()
    }
}
