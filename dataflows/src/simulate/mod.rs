//! An in-process routing simulation of one Envoy proxy, in the spirit of Istio's
//! `pilot/pkg/simulation`: given the resources a proxy holds (the encoded Listener,
//! RouteConfiguration, Cluster and ClusterLoadAssignment bodies the dataflow produces) and a
//! [`Call`], it follows Envoy's matching order and reports what matched and how the request
//! goes ([`Outcome`]), so routing can be asserted in milliseconds without starting Envoy. Pure
//! code: no I/O; every problem with the input (an undecodable body, an invalid regex, a feature
//! not modelled) is reported as data, never as a panic.
//!
//! The order followed is Envoy's:
//! 1. **Listener.** A listener bound to the destination `address:port` itself takes the
//!    connection. Otherwise, where the proxy captures traffic (it holds a bound listener with
//!    `use_original_dst`, Istio's `virtualOutbound`), the connection is handed to the listener
//!    of its original destination: exact `address:port` first, then the wildcard `0.0.0.0:port`;
//!    with neither, `virtualOutbound` handles it itself (its catch-all chain: passthrough or
//!    blackhole). Without capture (gateways, sidecars with `INTERCEPTION_MODE: NONE`) the
//!    connection reaches the bound wildcard listener on its port, if any. A call without an
//!    address is taken as going to the wildcard listener of its port (or, without capture, to
//!    the only bound listener on it). A call captured inbound ([`Call::inbound`]) reaches the
//!    inbound listener that reads the original destination (Istio's `virtualInbound`), which
//!    keeps it and matches its chains on that destination.
//! 2. **Filter chain**, by `FilterChainMatch` criteria in Envoy's order (destination port,
//!    destination IP ranges, server names, transport protocol, application protocols), most
//!    specific first, never going back to a less specific branch, else the
//!    `default_filter_chain`. A plaintext call has no SNI, transport protocol `raw_buffer`, and
//!    application protocol `http/1.1` only when the listener runs the HTTP inspector and the
//!    call is HTTP (not so for [`Call::connect`]). A TLS call ([`Call::tls`],
//!    [`Call::https`], [`Call::istio_mtls`], [`Call::over_tls`]) is `tls` with its SNI (server
//!    names matched exactly, else by the longest wildcard suffix) and its ALPN (any one the
//!    chain names) where the listener runs the TLS inspector — or Envoy adds it, as it does
//!    for a listener whose chains match on what it reports; without, it is `raw_buffer` with
//!    neither. The chain's `transport_socket` is the TLS it terminates
//!    ([`Outcome::downstream_tls`]: certificates, client certificate required, validation): a
//!    plaintext call there fails the handshake; a TLS call on an HTTP chain that does not
//!    terminate it cannot be read.
//! 3. **HTTP connection manager**: its `rds.route_config_name` (or inline route
//!    configuration); a `tcp_proxy` chain forwards to its cluster(s) instead.
//! 4. **Virtual host** by `domains`, on the lower-cased authority (port stripped when the
//!    connection manager's `strip_*_host_port` or the route configuration's
//!    `ignore_port_in_host_matching` says so): exact, then the longest suffix wildcard `*x`,
//!    then the longest prefix wildcard `x*` (a wildcard matches at least one character), then
//!    `*`. None → 404.
//! 5. **Route**: the first route of the virtual host whose match holds — path (`prefix` on the
//!    whole `:path`; `path`, `safe_regex` (a full match) and `path_separated_prefix` on the path
//!    without its query; `case_sensitive`), every header matcher (as Envoy's
//!    `HeaderUtility::matchHeaders`, `invert_match` and `treat_missing_header_as_empty`
//!    included), every query parameter matcher, `grpc`. None → 404. The path is normalized
//!    (dot segments) first when the connection manager sets `normalize_path`.
//! 6. **Action**: `cluster`, `cluster_header`, `weighted_clusters` (every cluster with its
//!    weight), `direct_response` or `redirect`; the route's timeout and retry policy (the
//!    virtual host's when the route has none). Besides, what the route does to the request
//!    ([`Outcome::http`]): the fault filter's per-route config (the most specific of route,
//!    virtual host and route configuration, `FilterConfig`-wrapped or not, else the filter's
//!    own; only when the connection manager runs the fault filter, and under its `headers`,
//!    `upstream_cluster` and `downstream_nodes` conditions) — an abort of every request is the
//!    status Envoy answers ([`Outcome::effective_status`]) though `result` still names the
//!    route's clusters —; `prefix_rewrite`, `regex_rewrite` and the host rewrites, applied to
//!    give the path and authority the upstream receives; request and response header edits
//!    in Envoy's order (weighted cluster, route, virtual host, route configuration, or the
//!    most specific last under `most_specific_header_mutations_wins`; removals before
//!    additions at each level), applied to the call's headers; the CORS policy in effect; the
//!    mirror policies (route, else virtual host, else route configuration) with their shares.
//! 7. **Clusters → endpoints**: EDS clusters through their assignment
//!    (`eds_cluster_config.service_name`, else the cluster name), static and DNS clusters through
//!    their inline `load_assignment`, original-destination clusters to the call's destination.
//!    Each cluster's upstream transport ([`Upstream::transport`]: plaintext or TLS with its
//!    SNI or `auto_sni`, ALPN, SAN matchers, CA source — file, inline, SDS such as `ROOTCA` or
//!    `kubernetes://NAME-cacert`, the system store —, client certificates, whether it is
//!    Istio's mTLS), and per endpoint the `transport_socket_matches` entry its metadata under
//!    `envoy.transport_socket_match` selects, else its locality's, else none (the cluster's
//!    own socket), as Istio's auto mTLS uses them.
//!
//! Not modelled: the choice among weighted clusters or endpoints (load balancing, priorities,
//! outlier detection: every candidate is reported), the TLS handshake itself (certificates are
//! reported by source, never checked against the SANs or CAs named; a chain requiring a client
//! certificate takes any TLS call; `auto_sni` is reported, not resolved to the request's host),
//! the cluster's xDS `transport_socket_matcher` (reported; the metadata matches apply),
//! transport sockets other than TLS and raw buffer (reported as unsupported), source-address
//! criteria of filter chains, iptables details (which destinations are excluded from capture),
//! HTTP filters other than fault, CORS, RBAC and `jwt_authn` (ext_authz, Lua, rate limits…:
//! not run; RBAC and JWT as [`authz`] says), the
//! CORS filter's own answers to preflight requests (the policy is reported), header edits of
//! weighted clusters when several may be picked (reported), `%…%` substitutions in header values
//! and host rewrites (kept as written), `auto_host_rewrite`'s resulting host (reported), delays
//! taken from request headers, the fault filter's `max_active_faults`, runtime keys and response
//! rate limits, per-filter configs of weighted clusters, the headers Envoy's router adds itself
//! (`x-forwarded-*`, `x-request-id`, `x-envoy-*`), runtime fractions (taken as matching; a
//! fault's or mirror's share is reported as configured), cookie, dynamic metadata and filter
//! state matchers (taken as not matching, with a warning), scoped routes, cluster specifier
//! plugins, VHDS, proxyless gRPC API listeners, Envoy's limits on what it accepts (RE2 program
//! size: a route Envoy would NACK is simulated as if accepted), and what the upstream itself
//! answers.
//!
//! The walk itself is here; each step lives in its own module: `call` (the inputs),
//! `listener` (steps 1–2), `route` (3–6), `effects` (what the route does besides),
//! `upstream` (7) and `transport` (transport sockets), all reporting into `outcome`'s types.

mod authz;
mod call;
mod effects;
mod listener;
mod outcome;
mod request;
mod route;
mod transport;
mod upstream;

#[cfg(test)]
mod tests;

pub use call::{Call, ProxyConfig, Token, ISTIO_MTLS_ALPN};
pub use outcome::{
    Action, Cors, Discovery, Fault, FaultAbort, HeaderEdit, HeaderLevel, HeaderOp, HostRewrite,
    HttpEffects, MatchedRoute, Mirror, NoMatch, Outcome, Retry, SanMatcher, SocketMatch, Source,
    Tls, Transport, Upstream, UpstreamEndpoint, ALL,
};
pub use route::select_virtual_host;

use envoy_types::pb::envoy::config::listener::v3::filter;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use listener::{listener_port, select_filter_chain};
use prost::Message;
use transport::{transport, Side};

const HCM_TYPE: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const TCP_PROXY_TYPE: &str = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

impl ProxyConfig {
    /// Follows `call` through this proxy's configuration in Envoy's order.
    pub fn simulate(&self, call: &Call) -> Outcome {
        let mut out = Outcome {
            listener: None,
            captured_by: None,
            filter_chain: None,
            route_config: None,
            virtual_host: None,
            route: None,
            result: Err(NoMatch::NoListener { port: call.port }),
            downstream_tls: None,
            http: None,
            warnings: Vec::new(),
            authz: Vec::new(),
        };
        for (t, name, e) in &self.undecodable {
            out.warnings
                .push(format!("{} {name} did not decode: {e}", t.short()));
        }
        out.result = self.walk(call, &mut out);
        // Transport sockets not modelled are reported, once each.
        let mut unsupported: Vec<String> = Vec::new();
        let mut note = |what: String, t: &Transport| {
            if let Transport::Unsupported {
                name,
                type_url,
                why,
            } = t
            {
                let line =
                    format!("{what}: transport socket {name:?} ({type_url}) not modelled: {why}");
                if !unsupported.contains(&line) {
                    unsupported.push(line);
                }
            }
        };
        if let Some(t) = &out.downstream_tls {
            note(
                format!("filter chain {}", out.filter_chain.as_deref().unwrap_or("")),
                t,
            );
        }
        for u in out.upstreams() {
            note(format!("cluster {}", u.cluster), &u.transport);
            for m in &u.socket_matches {
                note(
                    format!("cluster {} match {}", u.cluster, m.name),
                    &m.transport,
                );
            }
        }
        out.warnings.extend(unsupported);
        out
    }

    fn walk(&self, call: &Call, out: &mut Outcome) -> Result<Action, NoMatch> {
        let listener = self.select_listener(call, out)?;
        out.listener = Some(listener.name.clone());
        let (index, chain) =
            select_filter_chain(listener, call, out).ok_or_else(|| NoMatch::NoFilterChain {
                listener: listener.name.clone(),
            })?;
        let chain_name = match index {
            _ if !chain.name.is_empty() => chain.name.clone(),
            usize::MAX => "default_filter_chain".into(),
            i => format!("#{i}"),
        };
        out.filter_chain = Some(chain_name.clone());
        out.downstream_tls = chain
            .transport_socket
            .as_ref()
            .map(|t| transport(t, Side::Downstream));
        // A chain that terminates TLS takes only TLS; a plaintext one hands what it gets to
        // its filters, which only a TCP proxy forwards unread.
        let terminates = !matches!(out.downstream_tls, None | Some(Transport::Plaintext));
        if terminates && !call.is_tls() {
            return Err(NoMatch::TlsExpected {
                filter_chain: chain_name,
            });
        }
        let reads_http = chain.filters.iter().any(|f| {
            matches!(&f.config_type, Some(filter::ConfigType::TypedConfig(a)) if a.type_url.ends_with(HCM_TYPE))
        });
        if reads_http && call.is_tls() && !terminates {
            return Err(NoMatch::TlsNotTerminated {
                filter_chain: chain_name,
            });
        }
        authz::network(chain, call, out)?;
        for f in &chain.filters {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                continue;
            };
            if any.type_url.ends_with(HCM_TYPE) {
                let hcm = HttpConnectionManager::decode(&any.value[..]).map_err(|e| {
                    NoMatch::Unsupported(format!("HttpConnectionManager did not decode: {e}"))
                })?;
                return self.http(call, listener_port(listener), &hcm, out);
            }
            if any.type_url.ends_with(TCP_PROXY_TYPE) {
                let tcp = TcpProxy::decode(&any.value[..])
                    .map_err(|e| NoMatch::Unsupported(format!("TcpProxy did not decode: {e}")))?;
                let targets: Vec<(String, Option<u32>)> = match tcp.cluster_specifier {
                    Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => vec![(c, None)],
                    Some(tcp_proxy::ClusterSpecifier::WeightedClusters(w)) => w
                        .clusters
                        .into_iter()
                        .map(|c| (c.name, Some(c.weight)))
                        .collect(),
                    None => Vec::new(),
                };
                return Ok(Action::Tcp {
                    upstreams: targets
                        .into_iter()
                        .map(|(c, w)| self.upstream(&c, w, call))
                        .collect(),
                });
            }
        }
        Err(NoMatch::UnsupportedFilterChain {
            filters: chain.filters.iter().map(|f| f.name.clone()).collect(),
        })
    }
}
