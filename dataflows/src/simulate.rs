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
//! HTTP filters other than fault and CORS (RBAC, ext_authz, Lua, rate limits…: not run), the
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

use crate::model::{Resource, ResourceType};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{
    address, socket_address, Address, HealthStatus, TransportSocket,
};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    redirect_action, route::Action as RouteActionKind, route_action::ClusterSpecifier,
    route_match::PathSpecifier, HeaderMatcher, QueryParameterMatcher, RetryPolicy, RouteAction,
    RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::{RouteSpecifier, StripPortMode},
    http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// One HTTP request on a fresh connection (plaintext unless made over TLS) from the proxy's
/// workload (a sidecar), from a client (a gateway), or from another workload to the proxy's
/// own ([`Call::inbound`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The destination port of the connection.
    pub port: u16,
    /// The destination address, when known (`None`: any address; a captured call then goes to
    /// the wildcard listener of its port).
    pub address: Option<String>,
    /// `Host` / `:authority`, as sent (`reviews`, `reviews:9080`).
    pub authority: String,
    /// `:path`, with its query string if any.
    pub path: String,
    pub method: String,
    /// Other request headers; names are compared case-insensitively.
    pub headers: Vec<(String, String)>,
    /// The name a TLS client sends in its handshake (SNI), which listeners running the TLS
    /// inspector match chains on; `None`: a plaintext connection, or TLS without a name.
    pub sni: Option<String>,
    /// Its first bytes are an HTTP/1.1 request (which the HTTP inspector reports as
    /// `http/1.1`); false for a connection carrying other bytes ([`Call::connect`]). Over TLS:
    /// what the connection carries once decrypted.
    pub http: bool,
    /// The connection opens with a TLS handshake (also implied by `sni`).
    pub tls: bool,
    /// The protocols the TLS client offers (ALPN), which listeners running the TLS inspector
    /// match chains on: `istio-peer-exchange`/`istio` for Istio's mTLS, `h2`/`http/1.1` for
    /// an HTTPS client. Empty: none offered (or plaintext).
    pub alpn: Vec<String>,
    /// The connection was captured on its way in to the proxy's workload: it reaches the
    /// inbound capture listener (Istio's `virtualInbound`, whose chains match on the
    /// original destination `address:port`), not a listener of its port.
    pub inbound: bool,
}

/// The ALPN Istio's sidecars offer on mTLS connections to each other (meshflow's outbound
/// side offers these two).
pub const ISTIO_MTLS_ALPN: [&str; 2] = ["istio-peer-exchange", "istio"];

impl Call {
    /// `GET path` with `Host: authority` to port `port`.
    pub fn get(authority: &str, port: u16, path: &str) -> Call {
        Call {
            port,
            address: None,
            authority: authority.to_string(),
            path: path.to_string(),
            method: "GET".into(),
            headers: Vec::new(),
            sni: None,
            http: true,
            tls: false,
            alpn: Vec::new(),
            inbound: false,
        }
    }

    /// `GET path` with `Host: authority` to port `port` over TLS whose handshake names
    /// `sni` and offers ALPN `h2` and `http/1.1`, as an HTTPS client does; a proxy that
    /// terminates it routes the request inside.
    pub fn https(authority: &str, port: u16, path: &str, sni: &str) -> Call {
        Call::get(authority, port, path).over_tls(Some(sni), &["h2", "http/1.1"])
    }

    /// The same call over TLS, with SNI `sni` (`None`: no name) and ALPN `alpn`.
    pub fn over_tls(mut self, sni: Option<&str>, alpn: &[&str]) -> Call {
        self.tls = true;
        self.sni = sni.map(str::to_string);
        self.alpn = alpn.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The same call over Istio's mutual TLS between sidecars: TLS with SNI `sni` and ALPN
    /// [`ISTIO_MTLS_ALPN`].
    pub fn istio_mtls(self, sni: &str) -> Call {
        self.over_tls(Some(sni), &ISTIO_MTLS_ALPN)
    }

    /// The same call arriving at the proxy's workload from outside (captured inbound): it
    /// reaches the inbound capture listener, whose chains match on this call's port and
    /// address.
    pub fn inbound(mut self) -> Call {
        self.inbound = true;
        self
    }

    /// Whether the connection is TLS (`tls`, or a name sent in a handshake).
    pub fn is_tls(&self) -> bool {
        self.tls || self.sni.is_some()
    }

    /// A TLS connection to port `port` whose handshake names `sni`, which the proxy passes
    /// through without terminating it (a `tcp_proxy` chain forwards it).
    pub fn tls(port: u16, sni: &str) -> Call {
        Call {
            sni: Some(sni.to_string()),
            tls: true,
            ..Call::connect(port)
        }
    }

    /// A plain TCP connection to port `port`, with no HTTP request on it: what a `tcp_proxy`
    /// chain forwards. Should it land on an HTTP chain instead, it is taken as a request
    /// without `Host` or path (which no virtual host but `*` matches).
    pub fn connect(port: u16) -> Call {
        Call {
            http: false,
            ..Call::get("", port, "")
        }
    }

    /// The same call to destination address `ip`.
    pub fn to_address(mut self, ip: &str) -> Call {
        self.address = Some(ip.to_string());
        self
    }

    /// The same call with one more request header.
    pub fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The same call with another method.
    pub fn method(mut self, method: &str) -> Call {
        self.method = method.to_string();
        self
    }
}

/// One proxy's resources, decoded.
#[derive(Clone, Debug, Default)]
pub struct ProxyConfig {
    pub listeners: BTreeMap<String, Listener>,
    pub routes: BTreeMap<String, RouteConfiguration>,
    pub clusters: BTreeMap<String, Cluster>,
    pub endpoints: BTreeMap<String, ClusterLoadAssignment>,
    /// Bodies that did not decode: type, name and prost's message.
    pub undecodable: Vec<(ResourceType, String, String)>,
}

impl ProxyConfig {
    /// Decodes the resources one proxy holds (as the dataflow encodes them).
    pub fn from_resources<'a>(resources: impl IntoIterator<Item = &'a Resource>) -> ProxyConfig {
        ProxyConfig::from_bodies(
            resources
                .into_iter()
                .map(|r| (r.rtype, r.name.as_str(), &r.body.0[..])),
        )
    }

    /// Decodes `(type, name, encoded body)` triples.
    pub fn from_bodies<'a>(
        bodies: impl IntoIterator<Item = (ResourceType, &'a str, &'a [u8])>,
    ) -> ProxyConfig {
        fn put<M: Message + Default>(
            map: &mut BTreeMap<String, M>,
            bad: &mut Vec<(ResourceType, String, String)>,
            (t, name, bytes): (ResourceType, &str, &[u8]),
        ) {
            match M::decode(bytes) {
                Ok(m) => {
                    map.insert(name.to_string(), m);
                }
                Err(e) => bad.push((t, name.to_string(), e.to_string())),
            }
        }
        let mut c = ProxyConfig::default();
        for body in bodies {
            let bad = &mut c.undecodable;
            match body.0 {
                ResourceType::Listener => put(&mut c.listeners, bad, body),
                ResourceType::Route => put(&mut c.routes, bad, body),
                ResourceType::Cluster => put(&mut c.clusters, bad, body),
                ResourceType::Endpoint => put(&mut c.endpoints, bad, body),
                // Certificates route nothing: TLS contexts are reported by the SDS names
                // they refer to.
                ResourceType::Secret => {}
            }
        }
        c
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------------------------

/// What a call matched, step by step, and where it ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The listener that handled the connection (after any original-destination hand-off).
    pub listener: Option<String>,
    /// The capture listener that handed the connection over (`virtualOutbound`), if any.
    pub captured_by: Option<String>,
    /// The filter chain's name (`#index` when it has none, `default_filter_chain` for the
    /// listener's default).
    pub filter_chain: Option<String>,
    pub route_config: Option<String>,
    pub virtual_host: Option<String>,
    pub route: Option<MatchedRoute>,
    pub result: Result<Action, NoMatch>,
    /// The TLS the filter chain terminates (its `transport_socket`): what the proxy presents
    /// and what it asks of the client. `None`: the chain reads the bytes as they come.
    pub downstream_tls: Option<Transport>,
    /// What the HTTP filters and the matched route do to the request besides choosing where
    /// it goes (faults, rewrites, header edits, CORS, mirrors). `None` when no route matched.
    pub http: Option<HttpEffects>,
    /// Things met on the way that the simulation could not judge exactly (invalid regexes,
    /// matchers not modelled, ambiguous listeners).
    pub warnings: Vec<String>,
}

/// The route that matched: its position in the virtual host and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchedRoute {
    pub index: usize,
    pub name: String,
}

/// Where a matched call goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// An HTTP route to one cluster (`weight: None`) or weighted clusters.
    Route {
        upstreams: Vec<Upstream>,
        /// The route's timeout (`None`: Envoy's default of 15 s; zero: disabled).
        timeout: Option<Duration>,
        retry: Option<Retry>,
    },
    /// A `tcp_proxy` filter chain (no HTTP routing), e.g. `virtualOutbound`'s passthrough.
    Tcp {
        upstreams: Vec<Upstream>,
    },
    DirectResponse {
        status: u32,
        body: Option<String>,
    },
    Redirect {
        status: u32,
        scheme: Option<String>,
        host: Option<String>,
        port: Option<u32>,
        /// `path_redirect`.
        path: Option<String>,
        /// `prefix_rewrite`: replaces the matched prefix.
        prefix: Option<String>,
    },
}

/// A route's retry policy, as Envoy will apply it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retry {
    pub retry_on: String,
    /// `num_retries` (Envoy's default is 1).
    pub num_retries: u32,
    pub per_try_timeout: Option<Duration>,
    pub retriable_status_codes: Vec<u32>,
    /// Hosts already tried are avoided (`previous_hosts`).
    pub avoids_previous_hosts: bool,
    /// A retry may go on to the next priority (`previous_priorities`): other localities.
    pub to_other_localities: bool,
    /// The base interval between retries (Envoy's default 25 ms when unset).
    pub backoff: Option<Duration>,
}

/// One cluster a call may be sent to, with its endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    pub cluster: String,
    /// The weight among weighted clusters; `None` for a route to a single cluster.
    pub weight: Option<u32>,
    pub discovery: Discovery,
    pub endpoints: Vec<UpstreamEndpoint>,
    /// How connections to the cluster's endpoints are made: the cluster's `transport_socket`
    /// (plaintext without one), for every endpoint no `socket_matches` entry takes.
    pub transport: Transport,
    /// The cluster's `transport_socket_matches`, in order: each endpoint uses the first whose
    /// criteria its metadata under `envoy.transport_socket_match` holds (else its locality's
    /// metadata; else `transport`). See [`UpstreamEndpoint::socket`].
    pub socket_matches: Vec<SocketMatch>,
}

/// One entry of a cluster's `transport_socket_matches`.
#[derive(Clone, Debug, PartialEq)]
pub struct SocketMatch {
    pub name: String,
    /// The criteria, `key=value` with the value as JSON would write it (`tlsMode="istio"`);
    /// empty: every endpoint.
    pub criteria: Vec<String>,
    pub transport: Transport,
}

/// How a connection is made (upstream) or accepted (downstream).
#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    /// No transport socket, or `raw_buffer`.
    Plaintext,
    /// Envoy's TLS transport socket.
    Tls(Box<Tls>),
    /// A transport socket this simulation does not read (or could not decode): its name,
    /// type and why.
    Unsupported {
        name: String,
        type_url: String,
        why: String,
    },
}

/// A TLS context, upstream (a cluster originating TLS) or downstream (a filter chain
/// terminating it).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Tls {
    /// The SNI sent (upstream; `None`: none configured).
    pub sni: Option<String>,
    /// Upstream: the SNI is taken from each request's host (the cluster's HTTP protocol
    /// options `auto_sni`).
    pub auto_sni: bool,
    /// Upstream: the server's certificate is checked for the request's host
    /// (`auto_san_validation`).
    pub auto_san_validation: bool,
    pub alpn: Vec<String>,
    /// The certificates presented: the client's (upstream) or the server's (downstream).
    pub certificates: Vec<Source>,
    /// What the peer's certificate is verified against (`None`: it is not verified).
    pub validation: Option<Source>,
    pub crl: Option<Source>,
    /// The names the peer's certificate must carry (any one of them).
    pub sans: Vec<SanMatcher>,
    /// Downstream: a client certificate is required.
    pub require_client_certificate: bool,
    /// Istio's mutual TLS: the workload certificate (SDS `default`) and the mesh's root (SDS
    /// `ROOTCA`).
    pub istio_mutual: bool,
    /// TLS protocol versions (`TLSv1_2`), minimum and maximum, where set.
    pub versions: (Option<String>, Option<String>),
}

/// Where TLS material comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file the proxy reads (a path).
    File(String),
    /// Inline in the configuration.
    Inline,
    /// An SDS secret, by name (`default`, `ROOTCA`, `kubernetes://NAME`).
    Sds(String),
    /// An environment variable of the proxy.
    Environment(String),
    /// The proxy's system trust store (`system_root_certs`).
    System,
    /// Something else (a certificate provider instance): what it is.
    Other(String),
}

/// One subject alternative name matcher: its SAN type (`DNS`, `URI`, `IP_ADDRESS`,
/// `EMAIL`, `OTHER_NAME`, or `ANY` for the older untyped matchers) and the string matcher
/// (`exact:…`, `prefix:…`, `suffix:…`, `contains:…`, `regex:…`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SanMatcher {
    pub san_type: String,
    pub matcher: String,
}

impl SanMatcher {
    /// `san_type`, `matcher` as strings (for assertions).
    pub fn new(san_type: &str, matcher: &str) -> SanMatcher {
        SanMatcher {
            san_type: san_type.into(),
            matcher: matcher.into(),
        }
    }
}

impl Transport {
    /// The TLS context, if TLS.
    pub fn tls(&self) -> Option<&Tls> {
        match self {
            Transport::Tls(t) => Some(t),
            _ => None,
        }
    }
}

impl Upstream {
    /// How connections to `endpoint` (one of this upstream's) are made: its socket match's
    /// transport, else the cluster's.
    pub fn transport_of(&self, endpoint: &UpstreamEndpoint) -> &Transport {
        endpoint
            .socket
            .as_ref()
            .and_then(|name| self.socket_matches.iter().find(|m| &m.name == name))
            .map_or(&self.transport, |m| &m.transport)
    }

    /// Every endpoint's address with how connections to it are made.
    pub fn transports(&self) -> Vec<(String, &Transport)> {
        self.endpoints
            .iter()
            .map(|e| (e.address.clone(), self.transport_of(e)))
            .collect()
    }
}

/// What the HTTP filters and the matched route do to a request besides choosing its
/// destination.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HttpEffects {
    /// The fault filter's injection for this request (the route's, else the virtual host's,
    /// else the route configuration's `typed_per_filter_config`, else the filter's own
    /// config), when the connection manager runs the fault filter and its conditions hold.
    pub fault: Option<Fault>,
    /// `prefix_rewrite`: the replacement of the matched prefix (of the whole path for `path`
    /// and regex routes).
    pub prefix_rewrite: Option<String>,
    /// `regex_rewrite`: pattern and substitution.
    pub regex_rewrite: Option<(String, String)>,
    pub host_rewrite: Option<HostRewrite>,
    /// Request header edits, in the order Envoy applies them (by default the weighted
    /// cluster's, the route's, the virtual host's, the route configuration's — reversed under
    /// `most_specific_header_mutations_wins` — and at each level removals before additions).
    pub request_headers: Vec<HeaderEdit>,
    /// Response header edits, in the same order.
    pub response_headers: Vec<HeaderEdit>,
    /// The CORS policy in effect (the CORS filter's per-route config, the route's or the
    /// virtual host's `cors`).
    pub cors: Option<Cors>,
    /// Where copies of the request go: the route's `request_mirror_policies`, else the
    /// virtual host's, else the route configuration's.
    pub mirrors: Vec<Mirror>,
    /// The request as it leaves for the upstream: path and authority after the rewrites,
    /// headers after the edits (lower-cased names, in order; values as configured, Envoy's
    /// `%…%` substitutions left as written).
    pub upstream_path: String,
    pub upstream_authority: String,
    pub upstream_headers: Vec<(String, String)>,
}

/// A fault the fault filter injects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// A fixed delay and the share of requests (per million) it applies to.
    pub delay: Option<(Duration, u32)>,
    /// An abort and the share of requests (per million) it answers.
    pub abort: Option<(FaultAbort, u32)>,
}

/// What an aborted request is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAbort {
    Http(u32),
    /// An HTTP 200 carrying this `grpc-status`.
    Grpc(u32),
    /// The status a request header (`x-envoy-fault-abort-request`) names.
    FromHeader,
}

/// How the upstream request's authority is rewritten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostRewrite {
    Literal(String),
    /// `auto_host_rewrite`: the upstream host's name (DNS and static clusters).
    Auto,
    /// From the value of this request header.
    Header(String),
    /// By a regex on the path (pattern, substitution).
    PathRegex(String, String),
    /// `host_rewrite`: a format string (`%REQ(…)%` substitutions), as written.
    Format(String),
}

/// Where a header edit is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderLevel {
    WeightedCluster,
    Route,
    VirtualHost,
    RouteConfiguration,
}

/// What a header edit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderOp {
    Remove,
    /// `APPEND_IF_EXISTS_OR_ADD` (Envoy's default; `append: true`).
    Append,
    AddIfAbsent,
    /// `OVERWRITE_IF_EXISTS_OR_ADD` (`append: false`): Istio's `set`.
    Set,
    OverwriteIfExists,
}

/// One header edit (`value` empty for a removal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderEdit {
    pub level: HeaderLevel,
    pub op: HeaderOp,
    pub name: String,
    pub value: String,
}

/// A CORS policy, as Envoy's CORS filter reads it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Cors {
    /// Origin matchers, `exact:…`/`prefix:…`/`regex:…`.
    pub allow_origins: Vec<String>,
    pub allow_methods: String,
    pub allow_headers: String,
    pub expose_headers: String,
    pub max_age: String,
    pub allow_credentials: Option<bool>,
    /// The share of requests (per million) the policy is enforced on
    /// (`filter_enabled`; unset: all).
    pub enabled_per_million: u32,
}

/// A copy of the request sent to another cluster (its answer is ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// The cluster (or, for `cluster_header`, `header:NAME`).
    pub cluster: String,
    /// The share of requests mirrored, per million (unset: all).
    pub per_million: u32,
    /// The proxy holds the cluster.
    pub cluster_found: bool,
}

/// Every request, per million.
pub const ALL: u32 = 1_000_000;

/// How a cluster finds its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// EDS, from the assignment `service_name` (`assignment_found: false`: the proxy holds
    /// none, so Envoy keeps the cluster warming).
    Eds {
        service_name: String,
        assignment_found: bool,
    },
    Static,
    StrictDns,
    LogicalDns,
    /// To the connection's original destination (`PassthroughCluster`).
    OriginalDst,
    /// The proxy holds no cluster of that name (Envoy answers 503).
    NotFound,
    Other(String),
}

/// One endpoint of an upstream cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamEndpoint {
    /// `ip:port` (or `host:port` for DNS clusters).
    pub address: String,
    /// `region/zone/sub_zone` when the locality names any.
    pub locality: Option<String>,
    pub locality_weight: Option<u32>,
    pub weight: Option<u32>,
    pub priority: u32,
    /// Health status UNKNOWN, HEALTHY or DEGRADED: Envoy may send traffic there.
    pub healthy: bool,
    /// The name of the cluster's `transport_socket_matches` entry connections to this
    /// endpoint use (`None`: the cluster's own transport socket).
    pub socket: Option<String>,
}

/// Why a call matched nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoMatch {
    /// No listener takes connections to this port (connection refused).
    NoListener { port: u16 },
    /// The listener has no filter chain for the connection (Envoy closes it).
    NoFilterChain { listener: String },
    /// The filter chain has no HTTP connection manager or TCP proxy this simulation reads.
    UnsupportedFilterChain { filters: Vec<String> },
    /// The connection manager names a route configuration the proxy does not hold.
    RouteConfigMissing { name: String },
    /// No virtual host's domains match the authority: Envoy answers 404.
    NoVirtualHost { authority: String },
    /// No route of the virtual host matches: Envoy answers 404.
    NoRoute,
    /// `cluster_header` names a header the request lacks: Envoy answers 503.
    ClusterHeaderMissing { header: String },
    /// A plaintext connection reached a chain that terminates TLS: the handshake fails and
    /// Envoy closes the connection.
    TlsExpected { filter_chain: String },
    /// A TLS connection reached an HTTP chain that does not terminate TLS: the connection
    /// manager cannot read the handshake and Envoy closes the connection.
    TlsNotTerminated { filter_chain: String },
    /// A configuration this simulation does not model (or cannot decode).
    Unsupported(String),
}

impl Outcome {
    /// The clusters the call may go to, with their weights (`None` for a single cluster).
    pub fn clusters(&self) -> Vec<(String, Option<u32>)> {
        self.upstreams()
            .iter()
            .map(|u| (u.cluster.clone(), u.weight))
            .collect()
    }

    /// The one cluster of a single-cluster route or TCP proxy.
    pub fn cluster(&self) -> Option<&str> {
        match self.upstreams() {
            [one] if one.weight.is_none() => Some(&one.cluster),
            _ => None,
        }
    }

    /// Every upstream of the action (empty for direct responses, redirects and no match).
    pub fn upstreams(&self) -> &[Upstream] {
        match &self.result {
            Ok(Action::Route { upstreams, .. } | Action::Tcp { upstreams }) => upstreams,
            _ => &[],
        }
    }

    /// The endpoint addresses of every upstream with a non-zero weight, sorted.
    pub fn endpoints(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .upstreams()
            .iter()
            .filter(|u| u.weight != Some(0))
            .flat_map(|u| u.endpoints.iter().map(|e| e.address.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The status Envoy itself answers, when it answers without an upstream: 404 for no virtual
    /// host or route, 503 when the cluster is missing or every cluster the route may pick has
    /// no healthy endpoint, the direct response's or redirect's status. `None` when the request
    /// is forwarded (or the connection fails before HTTP). Faults aside: an abort the fault
    /// filter answers before routing is in [`Outcome::effective_status`].
    pub fn status(&self) -> Option<u32> {
        match &self.result {
            Err(NoMatch::NoVirtualHost { .. } | NoMatch::NoRoute) => Some(404),
            Err(NoMatch::ClusterHeaderMissing { .. }) => Some(503),
            Err(_) | Ok(Action::Tcp { .. }) => None,
            Ok(Action::DirectResponse { status, .. } | Action::Redirect { status, .. }) => {
                Some(*status)
            }
            Ok(Action::Route { upstreams, .. }) => {
                let live = upstreams.iter().filter(|u| u.weight != Some(0));
                let unreachable = |u: &Upstream| match u.discovery {
                    Discovery::NotFound => true,
                    Discovery::OriginalDst => false,
                    _ => !u.endpoints.iter().any(|e| e.healthy),
                };
                let mut live = live.peekable();
                (live.peek().is_some() && live.all(unreachable)).then_some(503)
            }
        }
    }

    /// The fault injected on this request, if any.
    pub fn fault(&self) -> Option<&Fault> {
        self.http.as_ref()?.fault.as_ref()
    }

    /// The status the fault filter answers with when it aborts every such request (an HTTP
    /// abort at 100%): the request then reaches no cluster, whatever [`Outcome::result`]
    /// says it was routed to. gRPC aborts answer 200 (with a `grpc-status`).
    pub fn fault_status(&self) -> Option<u32> {
        match self.fault()?.abort.as_ref()? {
            (FaultAbort::Http(status), share) if *share >= ALL => Some(*status),
            (FaultAbort::Grpc(_), share) if *share >= ALL => Some(200),
            _ => None,
        }
    }

    /// The status Envoy answers without an upstream, faults included: an abort of every
    /// request first (the fault filter runs before the router), else [`Outcome::status`].
    pub fn effective_status(&self) -> Option<u32> {
        self.fault_status().or_else(|| self.status())
    }

    /// The delay the fault filter adds to every such request (a delay at 100%).
    pub fn fault_delay(&self) -> Option<Duration> {
        match self.fault()?.delay {
            Some((d, share)) if share >= ALL => Some(d),
            _ => None,
        }
    }

    /// How connections to `cluster` (one of the upstreams) are made by default.
    pub fn transport(&self, cluster: &str) -> Option<&Transport> {
        self.upstreams()
            .iter()
            .find(|u| u.cluster == cluster)
            .map(|u| &u.transport)
    }
}

// ---------------------------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------------------------

const HCM_TYPE: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const TCP_PROXY_TYPE: &str = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

/// What the HTTP layer sees of a call.
struct Request<'a> {
    call: &'a Call,
    /// The path used for matching (normalized when the connection manager says so).
    path: String,
    /// Lower-cased names; repeated headers joined with `,` as Envoy does for matching.
    headers: BTreeMap<String, String>,
}

impl Request<'_> {
    fn path_only(&self) -> &str {
        self.path
            .split(['?', '#'])
            .next()
            .unwrap_or(self.path.as_str())
    }

    fn query(&self) -> Vec<(&str, &str)> {
        let Some((_, q)) = self.path.split_once('?') else {
            return Vec::new();
        };
        let q = q.split('#').next().unwrap_or(q);
        q.split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .collect()
    }
}

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

    /// Step 1: the listener that handles a connection to `call`'s destination.
    fn select_listener<'a>(
        &'a self,
        call: &Call,
        out: &mut Outcome,
    ) -> Result<&'a Listener, NoMatch> {
        if call.inbound {
            // iptables sends captured inbound connections to the inbound capture listener
            // (an inbound listener reading the original destination: Istio's
            // `virtualInbound`), which keeps them and matches its chains on that
            // destination.
            let inbound = self.listeners.values().find(|l| {
                binds(l)
                    && l.traffic_direction
                        == envoy_types::pb::envoy::config::core::v3::TrafficDirection::Inbound
                            as i32
                    && l.listener_filters
                        .iter()
                        .any(|f| f.name.contains("original_dst"))
            });
            return inbound.ok_or(NoMatch::NoListener { port: call.port });
        }
        let capture = self
            .listeners
            .values()
            .find(|l| l.use_original_dst.is_some_and(|b| b.value) && binds(l));
        let on_port = |l: &&Listener| {
            listener_port(l) == call.port
                && l.api_listener.is_none()
                && Some(l.name.as_str()) != capture.map(|c| c.name.as_str())
        };
        let exact = |l: &&Listener| {
            call.address
                .as_deref()
                .is_some_and(|a| same_ip(&listener_ip(l), a))
        };
        let wildcard = |l: &&Listener| is_wildcard(&listener_ip(l));
        let bound: Vec<&Listener> = self
            .listeners
            .values()
            .filter(|l| binds(l))
            .filter(on_port)
            .collect();
        // A listener bound to the destination itself takes the connection (loopback
        // destinations are not redirected).
        if let Some(l) = bound.iter().copied().find(exact) {
            return Ok(l);
        }
        if let Some(c) = capture {
            // `use_original_dst`: hand-off to the listener of the original destination, exact
            // address first, then the wildcard on its port; else the capture listener itself.
            out.captured_by = Some(c.name.clone());
            let all: Vec<&Listener> = self.listeners.values().filter(on_port).collect();
            let target = all
                .iter()
                .copied()
                .find(exact)
                .or_else(|| all.iter().copied().find(wildcard));
            return Ok(target.unwrap_or(c));
        }
        if let Some(l) = bound.iter().copied().find(wildcard) {
            return Ok(l);
        }
        if call.address.is_none() && !bound.is_empty() {
            if bound.len() > 1 {
                out.warnings.push(format!(
                    "several listeners on port {} and no destination address: took {}",
                    call.port, bound[0].name
                ));
            }
            return Ok(bound[0]);
        }
        Err(NoMatch::NoListener { port: call.port })
    }

    /// Steps 3–6 for an HTTP connection manager.
    fn http(
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
        let path = if hcm.normalize_path.is_some_and(|b| b.value) {
            normalize_path(&call.path)
        } else {
            call.path.clone()
        };
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
                    .is_some_and(|m| route_matches(m, &req, &mut out.warnings))
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
        Ok(Action::Route {
            upstreams: targets
                .into_iter()
                .map(|(c, w)| self.upstream(&c, w, req.call))
                .collect(),
            timeout: ra.timeout.as_ref().map(to_duration),
            retry: ra
                .retry_policy
                .as_ref()
                .or(vh.retry_policy.as_ref())
                .map(retry),
        })
    }

    /// Step 7: a cluster and its endpoints.
    fn upstream(&self, cluster: &str, weight: Option<u32>, call: &Call) -> Upstream {
        let mut up = Upstream {
            cluster: cluster.to_string(),
            weight,
            discovery: Discovery::NotFound,
            endpoints: Vec::new(),
            transport: Transport::Plaintext,
            socket_matches: Vec::new(),
        };
        let Some(c) = self.clusters.get(cluster) else {
            return up;
        };
        let (auto_sni, auto_san_validation) = auto_sni(c);
        let upstream_transport = |t: Option<&TransportSocket>| {
            let mut t = t.map_or(Transport::Plaintext, |t| transport(t, Side::Upstream));
            if let Transport::Tls(tls) = &mut t {
                tls.auto_sni = auto_sni;
                tls.auto_san_validation = auto_san_validation;
            }
            t
        };
        up.transport = upstream_transport(c.transport_socket.as_ref());
        up.socket_matches = c
            .transport_socket_matches
            .iter()
            .map(|m| SocketMatch {
                name: m.name.clone(),
                criteria: m
                    .r#match
                    .iter()
                    .flat_map(|s| s.fields.iter())
                    .map(|(k, v)| format!("{k}={}", value_text(v)))
                    .collect(),
                transport: upstream_transport(m.transport_socket.as_ref()),
            })
            .collect();
        if c.transport_socket_matcher.is_some() {
            up.socket_matches.push(SocketMatch {
                name: "transport_socket_matcher".into(),
                criteria: Vec::new(),
                transport: Transport::Unsupported {
                    name: "transport_socket_matcher".into(),
                    type_url: String::new(),
                    why: "the cluster's xDS matcher of transport sockets is not modelled: \
                          endpoints are given the legacy metadata matches"
                        .into(),
                },
            });
        }
        let matches = &c.transport_socket_matches;
        let endpoints_of = |cla: &ClusterLoadAssignment| endpoints_of(cla, matches);
        let kind = match &c.cluster_discovery_type {
            None => Ok(DiscoveryType::Static),
            Some(ClusterDiscoveryType::Type(t)) => {
                DiscoveryType::try_from(*t).map_err(|_| format!("discovery type {t}"))
            }
            Some(ClusterDiscoveryType::ClusterType(t)) => Err(t.name.clone()),
        };
        let inline = || {
            c.load_assignment
                .as_ref()
                .map(endpoints_of)
                .unwrap_or_default()
        };
        (up.discovery, up.endpoints) = match kind {
            Ok(DiscoveryType::Eds) => {
                let service_name = c
                    .eds_cluster_config
                    .as_ref()
                    .map(|e| e.service_name.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| cluster.to_string());
                let cla = self.endpoints.get(&service_name);
                (
                    Discovery::Eds {
                        service_name,
                        assignment_found: cla.is_some(),
                    },
                    cla.map(endpoints_of).unwrap_or_default(),
                )
            }
            Ok(DiscoveryType::Static) => (Discovery::Static, inline()),
            Ok(DiscoveryType::StrictDns) => (Discovery::StrictDns, inline()),
            Ok(DiscoveryType::LogicalDns) => (Discovery::LogicalDns, inline()),
            Ok(DiscoveryType::OriginalDst) => {
                let dst = call.address.as_ref().map(|a| UpstreamEndpoint {
                    address: format!("{a}:{}", call.port),
                    locality: None,
                    locality_weight: None,
                    weight: None,
                    priority: 0,
                    healthy: true,
                    socket: None,
                });
                (Discovery::OriginalDst, dst.into_iter().collect())
            }
            Err(other) => (Discovery::Other(other), Vec::new()),
        };
        up
    }
}

// ---------------------------------------------------------------------------------------------
// Listeners and filter chains
// ---------------------------------------------------------------------------------------------

fn binds(l: &Listener) -> bool {
    l.bind_to_port.is_none_or(|b| b.value)
}

fn socket(a: Option<&Address>) -> Option<(&str, u32)> {
    match a?.address.as_ref()? {
        address::Address::SocketAddress(s) => {
            let port = match s.port_specifier {
                Some(socket_address::PortSpecifier::PortValue(p)) => p,
                _ => 0,
            };
            Some((s.address.as_str(), port))
        }
        _ => None,
    }
}

fn listener_port(l: &Listener) -> u16 {
    socket(l.address.as_ref())
        .and_then(|(_, p)| u16::try_from(p).ok())
        .unwrap_or(0)
}

fn listener_ip(l: &Listener) -> String {
    socket(l.address.as_ref())
        .map(|(ip, _)| ip.to_string())
        .unwrap_or_default()
}

fn is_wildcard(ip: &str) -> bool {
    ip.parse::<IpAddr>().is_ok_and(|a| a.is_unspecified())
}

fn same_ip(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Whether `ip` lies in `prefix/len`; the length of the match when it does.
fn in_cidr(ip: &str, prefix: &str, len: u32) -> Option<u32> {
    let (ip, prefix) = (ip.parse::<IpAddr>().ok()?, prefix.parse::<IpAddr>().ok()?);
    let (a, b, bits) = match (ip, prefix) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return None,
    };
    let len = len.min(bits);
    let shift = bits - len;
    let same = len == 0 || (a >> shift) == (b >> shift);
    same.then_some(len)
}

/// Step 2: Envoy's filter chain match. For each criterion in order, chains that name a value
/// matching the connection win over chains that name none; chains naming other values drop out.
fn select_filter_chain<'a>(
    l: &'a Listener,
    call: &Call,
    out: &mut Outcome,
) -> Option<(usize, &'a FilterChain)> {
    let http_inspector = l
        .listener_filters
        .iter()
        .any(|f| f.name.contains("http_inspector"));
    // The HTTP inspector reports plaintext HTTP only (it leaves TLS alone).
    let seen_http = http_inspector && call.http && !call.is_tls();
    // The TLS inspector (which Envoy adds by itself where a chain matches on what it
    // reports) tells TLS from plaintext and reads the handshake's SNI and ALPN; without
    // it a TLS connection is `raw_buffer` with neither.
    let tls_inspector = l
        .listener_filters
        .iter()
        .any(|f| f.name.contains("tls_inspector"))
        || l.filter_chains.iter().any(needs_tls_inspector);
    let tls = call.is_tls() && tls_inspector;
    let sni = call.sni.as_deref().filter(|_| tls);
    let alpn: Vec<&str> = if tls {
        call.alpn.iter().map(String::as_str).collect()
    } else if seen_http {
        vec!["http/1.1"]
    } else {
        Vec::new()
    };
    let mut chains: Vec<(usize, &FilterChain)> = l.filter_chains.iter().enumerate().collect();
    let m = |c: &FilterChain| c.filter_chain_match.clone().unwrap_or_default();
    // Each criterion gives, per chain: None (not named), Some(None) (named, no match),
    // Some(Some(specificity)) (named and matching).
    type Criterion<'c> = Box<dyn Fn(&FilterChain) -> Option<Option<u32>> + 'c>;
    let criteria: Vec<Criterion> = vec![
        Box::new(|c| {
            m(c).destination_port
                .map(|p| (p.value == u32::from(call.port)).then_some(0))
        }),
        Box::new(|c| {
            let ranges = m(c).prefix_ranges;
            (!ranges.is_empty()).then(|| {
                let ip = call.address.as_deref()?;
                ranges
                    .iter()
                    .filter_map(|r| {
                        in_cidr(ip, &r.address_prefix, r.prefix_len.map_or(0, |l| l.value))
                    })
                    .max()
            })
        }),
        // A plaintext call carries no SNI; a TLS one matches a name exactly, else the
        // longest wildcard suffix (`*.example.com`), as Envoy picks them.
        Box::new(|c| {
            let names = m(c).server_names;
            (!names.is_empty()).then(|| {
                let sni = sni?;
                names.iter().filter_map(|n| sni_match(n, sni)).max()
            })
        }),
        Box::new(|c| {
            let t = m(c).transport_protocol;
            let seen = if tls { "tls" } else { "raw_buffer" };
            (!t.is_empty()).then(|| (t == seen).then_some(0))
        }),
        // Any protocol the connection offers (TLS: its ALPN; plaintext: what the HTTP
        // inspector saw) that the chain names.
        Box::new(|c| {
            let protos = m(c).application_protocols;
            (!protos.is_empty()).then(|| {
                protos
                    .iter()
                    .any(|p| alpn.contains(&p.as_str()))
                    .then_some(0)
            })
        }),
    ];
    for criterion in &criteria {
        let judged: Vec<(usize, &FilterChain, Option<Option<u32>>)> =
            chains.iter().map(|(i, c)| (*i, *c, criterion(c))).collect();
        let best = judged.iter().filter_map(|(_, _, j)| j.flatten()).max();
        chains = judged
            .into_iter()
            .filter(|(_, _, j)| match best {
                Some(b) => *j == Some(Some(b)),
                None => j.is_none(),
            })
            .map(|(i, c, _)| (i, c))
            .collect();
    }
    if chains.len() > 1 {
        out.warnings.push(format!(
            "listener {}: {} filter chains match alike; took the first",
            l.name,
            chains.len()
        ));
    }
    chains
        .first()
        .copied()
        .or_else(|| l.default_filter_chain.as_ref().map(|c| (usize::MAX, c)))
}

/// Whether Envoy adds the TLS inspector for this chain: it matches on a TLS transport, or,
/// naming no transport, on server names or application protocols.
fn needs_tls_inspector(c: &FilterChain) -> bool {
    c.filter_chain_match.as_ref().is_some_and(|m| {
        m.transport_protocol == "tls"
            || (m.transport_protocol.is_empty()
                && (!m.server_names.is_empty() || !m.application_protocols.is_empty()))
    })
}

// ---------------------------------------------------------------------------------------------
// Virtual hosts and routes
// ---------------------------------------------------------------------------------------------

fn strip_port(host: &str) -> &str {
    match port_of(host) {
        Some(p) => &host[..host.len() - p.len() - 1],
        None => host,
    }
}

/// The `:port` of an authority (IPv6 literals in brackets kept whole).
fn port_of(host: &str) -> Option<&str> {
    let (head, port) = host.rsplit_once(':')?;
    let bracketed_v6 = head.starts_with('[') && head.ends_with(']');
    let plain = !head.contains(':');
    ((bracketed_v6 || plain) && port.bytes().all(|b| b.is_ascii_digit()) && !port.is_empty())
        .then_some(port)
}

/// How specifically server name `name` matches SNI `sni`: exactly (above any wildcard), or
/// as a wildcard `*.suffix` by the suffix's length; `None`: no match.
fn sni_match(name: &str, sni: &str) -> Option<u32> {
    if name.eq_ignore_ascii_case(sni) {
        return Some(u32::MAX);
    }
    let suffix = name.strip_prefix('*')?;
    let longer = sni.len() > suffix.len();
    let ends = sni
        .get(sni.len().saturating_sub(suffix.len())..)
        .is_some_and(|end| end.eq_ignore_ascii_case(suffix));
    (suffix.starts_with('.') && longer && ends).then(|| u32::try_from(suffix.len()).unwrap_or(0))
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

/// Envoy's full-match regex (RE2 there; Rust's `regex` here, which agrees on the syntax Istio
/// emits).
fn full_match(re: &str, value: &str, warnings: &mut Vec<String>) -> bool {
    match regex::Regex::new(&format!("^(?:{re})$")) {
        Ok(r) => r.is_match(value),
        Err(e) => {
            warnings.push(format!("regex {re:?} does not compile: {e}"));
            false
        }
    }
}

fn route_matches(m: &RouteMatch, req: &Request, warnings: &mut Vec<String>) -> bool {
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
    let unmodelled = [
        (!m.cookies.is_empty(), "cookie"),
        (!m.dynamic_metadata.is_empty(), "dynamic metadata"),
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

fn string_matches(m: &StringMatcher, value: &str, warnings: &mut Vec<String>) -> bool {
    let fold = |s: &str| {
        if m.ignore_case {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let v = fold(value);
    match &m.match_pattern {
        Some(MatchPattern::Exact(s)) => v == fold(s),
        Some(MatchPattern::Prefix(s)) => v.starts_with(&fold(s)),
        Some(MatchPattern::Suffix(s)) => v.ends_with(&fold(s)),
        Some(MatchPattern::Contains(s)) => v.contains(&fold(s)),
        Some(MatchPattern::SafeRegex(r)) => full_match(&r.regex, value, warnings),
        Some(MatchPattern::Custom(c)) => {
            warnings.push(format!("custom string matcher {} is not modelled", c.name));
            false
        }
        None => false,
    }
}

/// Envoy's `HeaderUtility::matchHeaders`.
#[allow(deprecated)] // the deprecated specifiers are still valid config
fn header_matches(h: &HeaderMatcher, req: &Request, warnings: &mut Vec<String>) -> bool {
    let value = req.headers.get(&h.name.to_ascii_lowercase());
    let present_spec = match &h.header_match_specifier {
        Some(HeaderMatchSpecifier::PresentMatch(p)) => Some(*p),
        None => Some(true),
        Some(_) => None,
    };
    let value = match value {
        Some(v) => v.as_str(),
        None if h.treat_missing_header_as_empty => "",
        // A missing header matches only `present_match: false` (inverted: `true`).
        None => return present_spec.is_some_and(|p| p == h.invert_match),
    };
    let matched = match &h.header_match_specifier {
        Some(HeaderMatchSpecifier::ExactMatch(s)) => s.is_empty() || value == s,
        Some(HeaderMatchSpecifier::SafeRegexMatch(r)) => full_match(&r.regex, value, warnings),
        Some(HeaderMatchSpecifier::RangeMatch(r)) => value
            .parse::<i64>()
            .is_ok_and(|v| r.start <= v && v < r.end),
        Some(HeaderMatchSpecifier::PresentMatch(p)) => *p,
        Some(HeaderMatchSpecifier::PrefixMatch(s)) => value.starts_with(s.as_str()),
        Some(HeaderMatchSpecifier::SuffixMatch(s)) => value.ends_with(s.as_str()),
        Some(HeaderMatchSpecifier::ContainsMatch(s)) => value.contains(s.as_str()),
        Some(HeaderMatchSpecifier::StringMatch(sm)) => string_matches(sm, value, warnings),
        None => true,
    };
    matched != h.invert_match
}

fn query_matches(
    q: &QueryParameterMatcher,
    query: &[(&str, &str)],
    warnings: &mut Vec<String>,
) -> bool {
    let value = query.iter().find(|(k, _)| *k == q.name).map(|(_, v)| *v);
    match (&q.query_parameter_match_specifier, value) {
        (_, None) => false,
        (Some(QueryParameterMatchSpecifier::StringMatch(sm)), Some(v)) => {
            string_matches(sm, v, warnings)
        }
        (Some(QueryParameterMatchSpecifier::PresentMatch(p)), Some(_)) => *p,
        (None, Some(_)) => true,
    }
}

/// RFC 3986 dot-segment removal, as Envoy's `normalize_path` does, on the path (the query is
/// kept as is).
fn normalize_path(path: &str) -> String {
    let (p, rest) = match path.find(['?', '#']) {
        Some(i) => path.split_at(i),
        None => (path, ""),
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = p.split('/').skip(1).collect();
    let trailing = matches!(segments.last(), Some(&"." | &".."));
    for s in &segments {
        match *s {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut norm = format!("/{}", out.join("/"));
    if trailing && !norm.ends_with('/') {
        norm.push('/');
    }
    norm + rest
}

// ---------------------------------------------------------------------------------------------
// HTTP filters and route-level effects
// ---------------------------------------------------------------------------------------------

const FAULT_TYPE: &str = "envoy.extensions.filters.http.fault.v3.HTTPFault";
const CORS_TYPE: &str = "envoy.extensions.filters.http.cors.v3.Cors";
const FILTER_CONFIG_TYPE: &str = "envoy.config.route.v3.FilterConfig";

/// What is needed to read a matched route's effects.
struct Effects<'a> {
    hcm: &'a HttpConnectionManager,
    rc: &'a RouteConfiguration,
    vh: &'a VirtualHost,
    route: &'a envoy_types::pb::envoy::config::route::v3::Route,
    req: &'a Request<'a>,
    proxy: &'a ProxyConfig,
    warnings: &'a mut Vec<String>,
}

/// A share as a fraction of a million (at most all).
fn per_million(f: Option<&envoy_types::pb::envoy::r#type::v3::FractionalPercent>) -> u32 {
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

fn header_edits(
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
fn re2_substitution(s: &str) -> String {
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

    fn read(&mut self, action: Option<&Action>) -> HttpEffects {
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
                        let edits = many.iter().any(|c| {
                            !c.request_headers_to_add.is_empty()
                                || !c.request_headers_to_remove.is_empty()
                                || !c.response_headers_to_add.is_empty()
                                || !c.response_headers_to_remove.is_empty()
                                || c.host_rewrite_specifier.is_some()
                        });
                        if edits {
                            self.warnings.push(
                                "weighted clusters edit headers of their own: those depend on \
                                 the cluster picked and are not reported"
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

// ---------------------------------------------------------------------------------------------
// Transport sockets
// ---------------------------------------------------------------------------------------------

const RAW_BUFFER_TYPE: &str = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
const UPSTREAM_TLS_TYPE: &str = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DOWNSTREAM_TLS_TYPE: &str = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

/// Which end of a connection a transport socket is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Upstream,
    Downstream,
}

/// What a transport socket does, as far as this simulation reads it.
fn transport(t: &TransportSocket, side: Side) -> Transport {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        DownstreamTlsContext, UpstreamTlsContext,
    };
    let unsupported = |type_url: &str, why: String| Transport::Unsupported {
        name: t.name.clone(),
        type_url: type_url.to_string(),
        why,
    };
    let any = match &t.config_type {
        Some(ConfigType::TypedConfig(a)) => a,
        None if t.name == "envoy.transport_sockets.raw_buffer" => return Transport::Plaintext,
        None => return unsupported("", "no typed config".into()),
    };
    let type_name = any.type_url.rsplit('/').next().unwrap_or_default();
    match (type_name, side) {
        (RAW_BUFFER_TYPE, _) => Transport::Plaintext,
        (UPSTREAM_TLS_TYPE, Side::Upstream) => match UpstreamTlsContext::decode(&any.value[..]) {
            Ok(u) => {
                let mut tls = tls_context(u.common_tls_context.as_ref());
                tls.sni = Some(u.sni).filter(|s| !s.is_empty());
                Transport::Tls(Box::new(tls))
            }
            Err(e) => unsupported(&any.type_url, format!("did not decode: {e}")),
        },
        (DOWNSTREAM_TLS_TYPE, Side::Downstream) => {
            match DownstreamTlsContext::decode(&any.value[..]) {
                Ok(d) => {
                    let mut tls = tls_context(d.common_tls_context.as_ref());
                    tls.require_client_certificate =
                        d.require_client_certificate.is_some_and(|b| b.value);
                    Transport::Tls(Box::new(tls))
                }
                Err(e) => unsupported(&any.type_url, format!("did not decode: {e}")),
            }
        }
        (UPSTREAM_TLS_TYPE | DOWNSTREAM_TLS_TYPE, _) => unsupported(
            &any.type_url,
            "a TLS context for the other end of the connection".into(),
        ),
        _ => unsupported(&any.type_url, "a transport socket type not modelled".into()),
    }
}

fn data_source(d: &envoy_types::pb::envoy::config::core::v3::DataSource) -> Source {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    match &d.specifier {
        Some(Specifier::Filename(f)) => Source::File(f.clone()),
        Some(Specifier::InlineBytes(_) | Specifier::InlineString(_)) => Source::Inline,
        Some(Specifier::EnvironmentVariable(v)) => Source::Environment(v.clone()),
        None => Source::Other("an empty data source".into()),
    }
}

fn string_matcher_text(m: Option<&StringMatcher>) -> String {
    let (kind, value) = match m.and_then(|m| m.match_pattern.as_ref()) {
        Some(MatchPattern::Exact(v)) => ("exact", v.clone()),
        Some(MatchPattern::Prefix(v)) => ("prefix", v.clone()),
        Some(MatchPattern::Suffix(v)) => ("suffix", v.clone()),
        Some(MatchPattern::Contains(v)) => ("contains", v.clone()),
        Some(MatchPattern::SafeRegex(r)) => ("regex", r.regex.clone()),
        Some(MatchPattern::Custom(c)) => ("custom", c.name.clone()),
        None => ("none", String::new()),
    };
    let fold = if m.is_some_and(|m| m.ignore_case) {
        ",ignore_case"
    } else {
        ""
    };
    format!("{kind}{fold}:{value}")
}

/// The verification a validation context asks for: its CA, CRL and SAN matchers.
#[allow(deprecated)] // the untyped SAN matchers are still valid config
fn read_validation(
    t: &mut Tls,
    v: &envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CertificateValidationContext,
) {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::subject_alt_name_matcher::SanType;
    t.validation = v
        .trusted_ca
        .as_ref()
        .map(data_source)
        .or_else(|| v.system_root_certs.as_ref().map(|_| Source::System))
        .or_else(|| {
            v.ca_certificate_provider_instance
                .as_ref()
                .map(|p| Source::Other(format!("certificate provider {}", p.instance_name)))
        });
    t.crl = v.crl.as_ref().map(data_source);
    t.sans = v
        .match_typed_subject_alt_names
        .iter()
        .map(|m| SanMatcher {
            san_type: match SanType::try_from(m.san_type) {
                Ok(SanType::Dns) => "DNS".into(),
                Ok(SanType::Uri) => "URI".into(),
                Ok(SanType::IpAddress) => "IP_ADDRESS".into(),
                Ok(SanType::Email) => "EMAIL".into(),
                Ok(SanType::OtherName) => format!("OTHER_NAME({})", m.oid),
                Ok(SanType::Unspecified) | Err(_) => format!("UNKNOWN({})", m.san_type),
            },
            matcher: string_matcher_text(m.matcher.as_ref()),
        })
        .chain(v.match_subject_alt_names.iter().map(|m| SanMatcher {
            san_type: "ANY".into(),
            matcher: string_matcher_text(Some(m)),
        }))
        .collect();
}

/// The parts of a TLS context either end shares.
fn tls_context(
    c: Option<&envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CommonTlsContext>,
) -> Tls {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::ValidationContextType as V, tls_parameters::TlsProtocol,
    };
    let Some(c) = c else {
        return Tls::default();
    };
    let mut t = Tls {
        alpn: c.alpn_protocols.clone(),
        ..Default::default()
    };
    t.certificates = c
        .tls_certificates
        .iter()
        .map(|cert| {
            cert.certificate_chain.as_ref().map_or(
                Source::Other("a certificate without a chain".into()),
                data_source,
            )
        })
        .chain(
            c.tls_certificate_sds_secret_configs
                .iter()
                .map(|s| Source::Sds(s.name.clone())),
        )
        .chain(
            c.tls_certificate_provider_instance
                .as_ref()
                .map(|p| Source::Other(format!("certificate provider {}", p.instance_name))),
        )
        .collect();
    #[allow(deprecated)] // the deprecated providers are still valid config
    match &c.validation_context_type {
        Some(V::ValidationContext(v)) => read_validation(&mut t, v),
        Some(V::ValidationContextSdsSecretConfig(s)) => {
            t.validation = Some(Source::Sds(s.name.clone()))
        }
        Some(V::CombinedValidationContext(cv)) => {
            if let Some(d) = &cv.default_validation_context {
                read_validation(&mut t, d);
            }
            if let Some(s) = &cv.validation_context_sds_secret_config {
                t.validation = Some(Source::Sds(s.name.clone()));
            }
        }
        Some(V::ValidationContextCertificateProvider(p)) => {
            t.validation = Some(Source::Other(format!("certificate provider {}", p.name)))
        }
        Some(V::ValidationContextCertificateProviderInstance(p)) => {
            t.validation = Some(Source::Other(format!(
                "certificate provider {}",
                p.instance_name
            )))
        }
        None => {}
    }
    let version = |v: i32| match TlsProtocol::try_from(v) {
        Ok(TlsProtocol::TlsAuto) => None,
        Ok(p) => Some(p.as_str_name().to_string()),
        Err(_) => Some(format!("unknown({v})")),
    };
    if let Some(p) = &c.tls_params {
        t.versions = (
            version(p.tls_minimum_protocol_version),
            version(p.tls_maximum_protocol_version),
        );
    }
    t.istio_mutual = t.certificates == [Source::Sds("default".into())]
        && t.validation == Some(Source::Sds("ROOTCA".into()));
    t
}

/// A cluster's `auto_sni` and `auto_san_validation` (its HTTP protocol options').
fn auto_sni(c: &Cluster) -> (bool, bool) {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
    let options = c
        .typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .and_then(|a| HttpProtocolOptions::decode(&a.value[..]).ok())
        .and_then(|o| o.upstream_http_protocol_options);
    options.map_or((false, false), |o| (o.auto_sni, o.auto_san_validation))
}

/// Envoy's metadata label match: every criterion is a field of `metadata` under
/// `envoy.transport_socket_match` with an equal value (no criteria: any endpoint).
fn socket_criteria_hold(
    criteria: Option<&envoy_types::pb::google::protobuf::Struct>,
    metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>,
) -> bool {
    let Some(criteria) = criteria.filter(|c| !c.fields.is_empty()) else {
        return true;
    };
    let Some(fields) = metadata.and_then(|m| m.filter_metadata.get(SOCKET_MATCH_KEY)) else {
        return false;
    };
    criteria
        .fields
        .iter()
        .all(|(k, v)| fields.fields.get(k) == Some(v))
}

const SOCKET_MATCH_KEY: &str = "envoy.transport_socket_match";

fn value_text(v: &envoy_types::pb::google::protobuf::Value) -> String {
    use envoy_types::pb::google::protobuf::value::Kind;
    match &v.kind {
        Some(Kind::StringValue(s)) => format!("{s:?}"),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::NumberValue(n)) => n.to_string(),
        Some(Kind::NullValue(_)) | None => "null".into(),
        Some(Kind::StructValue(_)) => "{…}".into(),
        Some(Kind::ListValue(_)) => "[…]".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Actions and endpoints
// ---------------------------------------------------------------------------------------------

fn to_duration(d: &envoy_types::pb::google::protobuf::Duration) -> Duration {
    Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
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

/// The endpoints of an assignment, each with the first of `matches` its metadata (else its
/// locality's) selects.
fn endpoints_of(
    cla: &ClusterLoadAssignment,
    matches: &[envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch],
) -> Vec<UpstreamEndpoint> {
    let mut out = Vec::new();
    for group in &cla.endpoints {
        let locality = group.locality.as_ref().and_then(|l| {
            let parts = [&l.region, &l.zone, &l.sub_zone];
            parts
                .iter()
                .any(|p| !p.is_empty())
                .then(|| format!("{}/{}/{}", l.region, l.zone, l.sub_zone))
        });
        for lb in &group.lb_endpoints {
            let Some(lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
                continue;
            };
            let address = match e.address.as_ref().and_then(|a| a.address.as_ref()) {
                Some(address::Address::Pipe(p)) => format!("unix://{}", p.path),
                _ => match socket(e.address.as_ref()) {
                    Some((ip, port)) => format!("{ip}:{port}"),
                    None => continue,
                },
            };
            let healthy = matches!(
                HealthStatus::try_from(lb.health_status),
                Ok(HealthStatus::Unknown | HealthStatus::Healthy | HealthStatus::Degraded)
            );
            let by = |metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>| {
                matches
                    .iter()
                    .find(|m| socket_criteria_hold(m.r#match.as_ref(), metadata))
            };
            let socket = by(lb.metadata.as_ref())
                .or_else(|| by(group.metadata.as_ref()))
                .map(|m| m.name.clone());
            out.push(UpstreamEndpoint {
                address,
                locality: locality.clone(),
                locality_weight: group.load_balancing_weight.map(|w| w.value),
                weight: lb.load_balancing_weight.map(|w| w.value),
                priority: group.priority,
                healthy,
                socket,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::route::v3::Route;

    fn rc(hosts: &[(&str, &[&str])]) -> RouteConfiguration {
        RouteConfiguration {
            virtual_hosts: hosts
                .iter()
                .map(|(name, domains)| VirtualHost {
                    name: name.to_string(),
                    domains: domains.iter().map(|d| d.to_string()).collect(),
                    routes: vec![Route::default()],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn vh(rc: &RouteConfiguration, host: &str) -> Option<String> {
        select_virtual_host(rc, host).map(|v| v.name.clone())
    }

    /// Envoy's domain search order: exact, longest suffix wildcard, longest prefix wildcard,
    /// `*`; wildcards match at least one character; the port is part of the host.
    #[test]
    fn virtual_host_domains_follow_envoys_search_order() {
        let rc = rc(&[
            ("any", &["*"]),
            ("prefix-short", &["foo.*"]),
            ("prefix-long", &["foo.bar.*"]),
            ("suffix-short", &["*.com"]),
            ("suffix-long", &["*.example.com"]),
            ("exact", &["www.example.com", "reviews:9080"]),
            ("ported", &["api.example.com:*"]),
        ]);
        assert_eq!(vh(&rc, "www.example.com").as_deref(), Some("exact"));
        assert_eq!(vh(&rc, "WWW.Example.COM").as_deref(), Some("exact"));
        assert_eq!(vh(&rc, "a.example.com").as_deref(), Some("suffix-long"));
        assert_eq!(vh(&rc, "a.other.com").as_deref(), Some("suffix-short"));
        // A suffix wildcard beats a prefix wildcard, even a longer one.
        assert_eq!(vh(&rc, "foo.bar.com").as_deref(), Some("suffix-short"));
        assert_eq!(vh(&rc, "foo.bar.org").as_deref(), Some("prefix-long"));
        assert_eq!(vh(&rc, "foo.x").as_deref(), Some("prefix-short"));
        // The wildcard never matches the empty string.
        assert_eq!(vh(&rc, ".example.com").as_deref(), Some("suffix-short"));
        assert_eq!(vh(&rc, "foo.").as_deref(), Some("any"));
        // The port is compared as part of the host.
        assert_eq!(vh(&rc, "reviews:9080").as_deref(), Some("exact"));
        assert_eq!(vh(&rc, "reviews").as_deref(), Some("any"));
        assert_eq!(vh(&rc, "api.example.com:8443").as_deref(), Some("ported"));
        assert_eq!(vh(&rc, "api.example.com").as_deref(), Some("suffix-long"));
        let no_default = super::tests::rc(&[("exact", &["a"])]);
        assert_eq!(vh(&no_default, "b"), None);
    }

    fn request(headers: &[(&str, &str)]) -> (Call, BTreeMap<String, String>) {
        let call = Call::get("h", 80, "/p?a=1&flag&b=two");
        let map = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (call, map)
    }

    fn hm(name: &str, spec: Option<HeaderMatchSpecifier>, invert: bool) -> HeaderMatcher {
        HeaderMatcher {
            name: name.into(),
            header_match_specifier: spec,
            invert_match: invert,
            ..Default::default()
        }
    }

    fn exact(s: &str) -> Option<HeaderMatchSpecifier> {
        Some(HeaderMatchSpecifier::StringMatch(StringMatcher {
            match_pattern: Some(MatchPattern::Exact(s.into())),
            ..Default::default()
        }))
    }

    /// `HeaderUtility::matchHeaders`: a missing header fails every matcher but
    /// `present_match: false`; `invert_match` flips the result, missing headers included.
    #[test]
    fn header_matchers_follow_envoys_semantics() {
        let (call, headers) = request(&[("end-user", "jason"), ("n", "42")]);
        let req = Request {
            call: &call,
            path: call.path.clone(),
            headers,
        };
        let w = &mut Vec::new();
        let check = |m: HeaderMatcher, w: &mut Vec<String>| header_matches(&m, &req, w);
        assert!(check(hm("End-User", exact("jason"), false), w));
        assert!(!check(hm("end-user", exact("Jason"), false), w));
        assert!(check(hm("end-user", exact("bob"), true), w));
        assert!(!check(hm("missing", exact("x"), false), w));
        // Inverted, a missing header still fails a value matcher.
        assert!(!check(hm("missing", exact("x"), true), w));
        assert!(check(
            hm(
                "missing",
                Some(HeaderMatchSpecifier::PresentMatch(false)),
                false
            ),
            w
        ));
        assert!(check(
            hm(
                "missing",
                Some(HeaderMatchSpecifier::PresentMatch(true)),
                true
            ),
            w
        ));
        assert!(!check(hm("missing", None, false), w));
        assert!(check(hm("end-user", None, false), w));
        let range = envoy_types::pb::envoy::r#type::v3::Int64Range { start: 40, end: 43 };
        assert!(check(
            hm("n", Some(HeaderMatchSpecifier::RangeMatch(range)), false),
            w
        ));
        let re = |r: &str| {
            Some(HeaderMatchSpecifier::StringMatch(StringMatcher {
                match_pattern: Some(MatchPattern::SafeRegex(
                    envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
                        regex: r.into(),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }))
        };
        assert!(check(hm("end-user", re("ja.*"), false), w));
        assert!(
            !check(hm("end-user", re("ja"), false), w),
            "full match only"
        );
        assert!(w.is_empty());
        assert!(!check(hm("end-user", re("(unclosed"), false), w));
        assert_eq!(w.len(), 1, "an invalid regex is reported: {w:?}");

        let q = |name: &str, spec| QueryParameterMatcher {
            name: name.into(),
            query_parameter_match_specifier: spec,
        };
        let query = req.query();
        let string = |s: &str| {
            Some(QueryParameterMatchSpecifier::StringMatch(StringMatcher {
                match_pattern: Some(MatchPattern::Exact(s.into())),
                ..Default::default()
            }))
        };
        assert!(query_matches(&q("b", string("two")), &query, w));
        assert!(!query_matches(&q("a", string("2")), &query, w));
        assert!(query_matches(
            &q(
                "flag",
                Some(QueryParameterMatchSpecifier::PresentMatch(true))
            ),
            &query,
            w
        ));
        assert!(!query_matches(
            &q("c", Some(QueryParameterMatchSpecifier::PresentMatch(true))),
            &query,
            w
        ));
    }

    /// A hand-built listener the dataflow never emits: filter chains chosen by destination port
    /// and IP range (most specific first, else the default chain), an inline route
    /// configuration, and every kind of route action.
    #[test]
    fn hand_built_listener_covers_chains_and_actions() {
        use envoy_types::pb::envoy::config::core::v3::{data_source, CidrRange, DataSource};
        use envoy_types::pb::envoy::config::endpoint::v3::{
            Endpoint, LbEndpoint, LocalityLbEndpoints,
        };
        use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
        use envoy_types::pb::envoy::config::route::v3::{
            route, route_match, DirectResponseAction, RedirectAction, Route,
        };
        use envoy_types::pb::google::protobuf::UInt32Value;
        use envoy_types::util::pack_any;

        let addr = |ip: &str, port: u32| Address {
            address: Some(address::Address::SocketAddress(
                envoy_types::pb::envoy::config::core::v3::SocketAddress {
                    address: ip.into(),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                    ..Default::default()
                },
            )),
        };
        let route = |name: &str, prefix: &str, action: route::Action| Route {
            name: name.into(),
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix(prefix.into())),
                ..Default::default()
            }),
            action: Some(action),
            ..Default::default()
        };
        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
                name: "inline".into(),
                virtual_hosts: vec![VirtualHost {
                    name: "all".into(),
                    domains: vec!["*".into()],
                    routes: vec![
                        route(
                            "direct",
                            "/health",
                            route::Action::DirectResponse(DirectResponseAction {
                                status: 200,
                                body: Some(DataSource {
                                    specifier: Some(data_source::Specifier::InlineString(
                                        "ok".into(),
                                    )),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                        ),
                        route(
                            "redirect",
                            "/old",
                            route::Action::Redirect(RedirectAction {
                                host_redirect: "new.example.com".into(),
                                response_code: redirect_action::RedirectResponseCode::Found as i32,
                                ..Default::default()
                            }),
                        ),
                        route(
                            "by-header",
                            "/",
                            route::Action::Route(RouteAction {
                                cluster_specifier: Some(ClusterSpecifier::ClusterHeader(
                                    "x-cluster".into(),
                                )),
                                ..Default::default()
                            }),
                        ),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            })),
            strip_port_mode: Some(StripPortMode::StripAnyHostPort(true)),
            ..Default::default()
        };
        let chain = |name: &str, m: Option<FilterChainMatch>| FilterChain {
            name: name.into(),
            filter_chain_match: m,
            filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
                name: "hcm".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm.clone()))),
            }],
            ..Default::default()
        };
        let range = |ip: &str, len: u32| CidrRange {
            address_prefix: ip.into(),
            prefix_len: Some(UInt32Value { value: len }),
        };
        let listener = Listener {
            name: "l".into(),
            address: Some(addr("0.0.0.0", 80)),
            filter_chains: vec![
                chain(
                    "wide",
                    Some(FilterChainMatch {
                        prefix_ranges: vec![range("10.0.0.0", 8)],
                        ..Default::default()
                    }),
                ),
                chain(
                    "narrow",
                    Some(FilterChainMatch {
                        prefix_ranges: vec![range("10.1.0.0", 16)],
                        ..Default::default()
                    }),
                ),
                chain(
                    "other-port",
                    Some(FilterChainMatch {
                        destination_port: Some(UInt32Value { value: 81 }),
                        ..Default::default()
                    }),
                ),
                chain(
                    "tls-only",
                    Some(FilterChainMatch {
                        transport_protocol: "tls".into(),
                        ..Default::default()
                    }),
                ),
            ],
            default_filter_chain: Some(chain("", None)),
            ..Default::default()
        };
        let cluster = Cluster {
            name: "static".into(),
            load_assignment: Some(ClusterLoadAssignment {
                endpoints: vec![LocalityLbEndpoints {
                    locality: Some(envoy_types::pb::envoy::config::core::v3::Locality {
                        region: "r".into(),
                        zone: "z".into(),
                        ..Default::default()
                    }),
                    lb_endpoints: vec![LbEndpoint {
                        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                            address: Some(addr("10.5.5.5", 8080)),
                            ..Default::default()
                        })),
                        health_status: HealthStatus::Unhealthy as i32,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let config = ProxyConfig {
            listeners: [("l".to_string(), listener)].into(),
            clusters: [("static".to_string(), cluster)].into(),
            ..Default::default()
        };
        let sim = |call: Call| config.simulate(&call);

        let o = sim(Call::get("x:80", 80, "/health").to_address("10.1.2.3"));
        assert_eq!(o.filter_chain.as_deref(), Some("narrow"));
        assert_eq!(o.route_config.as_deref(), Some("inline"));
        assert_eq!(
            o.result,
            Ok(Action::DirectResponse {
                status: 200,
                body: Some("ok".into())
            })
        );
        assert_eq!(o.status(), Some(200));
        let o = sim(Call::get("x", 80, "/old").to_address("10.2.0.1"));
        assert_eq!(o.filter_chain.as_deref(), Some("wide"));
        assert_eq!(o.status(), Some(302));
        assert!(
            matches!(&o.result, Ok(Action::Redirect { host: Some(h), .. }) if h == "new.example.com")
        );
        let o = sim(Call::get("x", 80, "/").to_address("192.168.0.1"));
        assert_eq!(o.filter_chain.as_deref(), Some("default_filter_chain"));
        assert_eq!(
            o.result,
            Err(NoMatch::ClusterHeaderMissing {
                header: "x-cluster".into()
            })
        );
        assert_eq!(o.status(), Some(503));
        let o = sim(Call::get("x", 80, "/").header("X-Cluster", "static"));
        assert_eq!(o.cluster(), Some("static"));
        let up = &o.upstreams()[0];
        assert_eq!(up.discovery, Discovery::Static);
        assert_eq!(up.endpoints[0].locality.as_deref(), Some("r/z/"));
        assert!(!up.endpoints[0].healthy);
        assert_eq!(o.status(), Some(503), "only an unhealthy endpoint");
        let o = sim(Call::get("x", 80, "/").header("x-cluster", "nope"));
        assert_eq!(o.upstreams()[0].discovery, Discovery::NotFound);
        assert_eq!(o.status(), Some(503));
    }

    /// A listener on `0.0.0.0:port` with `chains` (and the TLS inspector when `inspect`).
    fn listener(port: u32, chains: Vec<FilterChain>, inspect: bool) -> Listener {
        use envoy_types::pb::envoy::config::listener::v3::ListenerFilter;
        Listener {
            name: format!("0.0.0.0_{port}"),
            address: Some(Address {
                address: Some(address::Address::SocketAddress(
                    envoy_types::pb::envoy::config::core::v3::SocketAddress {
                        address: "0.0.0.0".into(),
                        port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                        ..Default::default()
                    },
                )),
            }),
            filter_chains: chains,
            listener_filters: if inspect {
                vec![ListenerFilter {
                    name: "envoy.filters.listener.tls_inspector".into(),
                    ..Default::default()
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        }
    }

    fn tcp_chain(name: &str, cluster: &str) -> FilterChain {
        use envoy_types::util::pack_any;
        FilterChain {
            name: name.into(),
            filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
                name: "tcp".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
                    cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.into())),
                    ..Default::default()
                }))),
            }],
            ..Default::default()
        }
    }

    fn hcm_chain(name: &str, hcm: HttpConnectionManager) -> FilterChain {
        use envoy_types::util::pack_any;
        FilterChain {
            name: name.into(),
            filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
                name: "hcm".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
            }],
            ..Default::default()
        }
    }

    fn socket(name: &str, any: Any) -> TransportSocket {
        use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
        TransportSocket {
            name: name.into(),
            config_type: Some(ConfigType::TypedConfig(any)),
        }
    }

    fn string_struct(pairs: &[(&str, &str)]) -> envoy_types::pb::google::protobuf::Struct {
        use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
        Struct {
            fields: pairs
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        Value {
                            kind: Some(Kind::StringValue(v.to_string())),
                        },
                    )
                })
                .collect(),
        }
    }

    fn socket_metadata(
        pairs: &[(&str, &str)],
    ) -> Option<envoy_types::pb::envoy::config::core::v3::Metadata> {
        Some(envoy_types::pb::envoy::config::core::v3::Metadata {
            filter_metadata: [(SOCKET_MATCH_KEY.to_string(), string_struct(pairs))].into(),
            ..Default::default()
        })
    }

    /// Transport sockets this simulation does not read (an unknown type, a body that does not
    /// decode, a context for the other end, no config at all) are reported as such, in the
    /// outcome and its warnings: never a panic, never taken as plaintext.
    #[test]
    fn unknown_or_broken_transport_sockets_are_reported() {
        use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
        use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext;
        use envoy_types::util::pack_any;
        let alts = Any {
            type_url: "type.googleapis.com/envoy.extensions.transport_sockets.alts.v3.Alts".into(),
            value: vec![1, 2, 3],
        };
        let broken = Any {
            type_url: format!("type.googleapis.com/{UPSTREAM_TLS_TYPE}"),
            value: vec![0xff, 0xff, 0xff],
        };
        let cases = [
            (socket("alts", alts), "not modelled"),
            (socket("tls", broken), "did not decode"),
            (
                socket("tls", pack_any(DownstreamTlsContext::default())),
                "other end",
            ),
            (
                TransportSocket {
                    name: "custom".into(),
                    config_type: None,
                },
                "no typed config",
            ),
        ];
        for (ts, why) in cases {
            let cluster = Cluster {
                name: "c".into(),
                transport_socket: Some(ts.clone()),
                ..Default::default()
            };
            let config = ProxyConfig {
                listeners: [(
                    "l".to_string(),
                    listener(80, vec![tcp_chain("t", "c")], false),
                )]
                .into(),
                clusters: [("c".to_string(), cluster)].into(),
                ..Default::default()
            };
            let o = config.simulate(&Call::connect(80));
            match &o.upstreams()[0].transport {
                Transport::Unsupported { why: w, .. } => assert!(w.contains(why), "{w}"),
                other => panic!("{other:?}"),
            }
            assert!(
                o.warnings.iter().any(|w| w.contains("not modelled")),
                "{:?}",
                o.warnings
            );
        }
        // raw_buffer, typed or by name alone, is plaintext.
        let raw = TransportSocket {
            name: "envoy.transport_sockets.raw_buffer".into(),
            config_type: None,
        };
        assert_eq!(transport(&raw, Side::Upstream), Transport::Plaintext);
        let typed = TransportSocket {
            config_type: Some(ConfigType::TypedConfig(pack_any(
                envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer {},
            ))),
            ..raw
        };
        assert_eq!(transport(&typed, Side::Upstream), Transport::Plaintext);
    }

    /// Istio's auto mTLS: `transport_socket_matches` send mTLS to endpoints whose metadata
    /// under `envoy.transport_socket_match` says `tlsMode: istio` (or whose locality's does),
    /// plaintext to the rest by the empty match; without a matching entry an endpoint gets
    /// the cluster's own socket.
    #[test]
    fn transport_socket_matches_pick_each_endpoints_socket() {
        use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
        use envoy_types::pb::envoy::config::endpoint::v3::{
            Endpoint, LbEndpoint, LocalityLbEndpoints,
        };
        use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
            common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
            CommonTlsContext, SdsSecretConfig, UpstreamTlsContext,
        };
        use envoy_types::util::pack_any;
        let sds = |n: &str| SdsSecretConfig {
            name: n.into(),
            ..Default::default()
        };
        let mtls = UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
                tls_certificate_sds_secret_configs: vec![sds("default")],
                validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                    CombinedCertificateValidationContext {
                        validation_context_sds_secret_config: Some(sds("ROOTCA")),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }),
            sni: "outbound_.80_._.a.example".into(),
            ..Default::default()
        };
        let endpoint = |ip: &str, meta: &[(&str, &str)]| LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(
                        envoy_types::pb::envoy::config::core::v3::SocketAddress {
                            address: ip.into(),
                            port_specifier: Some(socket_address::PortSpecifier::PortValue(80)),
                            ..Default::default()
                        },
                    )),
                }),
                ..Default::default()
            })),
            metadata: (!meta.is_empty()).then(|| socket_metadata(meta)).flatten(),
            ..Default::default()
        };
        let assignment = ClusterLoadAssignment {
            endpoints: vec![
                LocalityLbEndpoints {
                    lb_endpoints: vec![
                        endpoint("10.0.0.1", &[("tlsMode", "istio")]),
                        endpoint("10.0.0.2", &[("tlsMode", "disabled")]),
                        endpoint("10.0.0.3", &[]),
                    ],
                    ..Default::default()
                },
                LocalityLbEndpoints {
                    metadata: socket_metadata(&[("tlsMode", "istio")]),
                    lb_endpoints: vec![endpoint("10.0.1.1", &[])],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let matches = |with_plaintext: bool| {
            let mut m = vec![TransportSocketMatch {
                name: "tlsMode-istio".into(),
                r#match: Some(string_struct(&[("tlsMode", "istio")])),
                transport_socket: Some(socket(
                    "envoy.transport_sockets.tls",
                    pack_any(mtls.clone()),
                )),
            }];
            if with_plaintext {
                m.push(TransportSocketMatch {
                    name: "tlsMode-disabled".into(),
                    r#match: Some(Default::default()),
                    transport_socket: Some(TransportSocket {
                        name: "envoy.transport_sockets.raw_buffer".into(),
                        config_type: None,
                    }),
                });
            }
            m
        };
        for with_plaintext in [true, false] {
            let cluster = Cluster {
                name: "c".into(),
                load_assignment: Some(assignment.clone()),
                transport_socket_matches: matches(with_plaintext),
                ..Default::default()
            };
            let config = ProxyConfig {
                listeners: [(
                    "l".to_string(),
                    listener(80, vec![tcp_chain("t", "c")], false),
                )]
                .into(),
                clusters: [("c".to_string(), cluster)].into(),
                ..Default::default()
            };
            let o = config.simulate(&Call::connect(80));
            let up = &o.upstreams()[0];
            assert_eq!(up.socket_matches.len(), if with_plaintext { 2 } else { 1 });
            assert_eq!(up.socket_matches[0].criteria, ["tlsMode=\"istio\""]);
            let sockets: Vec<(String, Option<String>, bool)> = up
                .endpoints
                .iter()
                .map(|e| {
                    let mutual = up.transport_of(e).tls().is_some_and(|t| t.istio_mutual);
                    (e.address.clone(), e.socket.clone(), mutual)
                })
                .collect();
            let plain = with_plaintext.then(|| "tlsMode-disabled".to_string());
            assert_eq!(
                sockets,
                [
                    ("10.0.0.1:80".into(), Some("tlsMode-istio".into()), true),
                    ("10.0.0.2:80".into(), plain.clone(), false),
                    ("10.0.0.3:80".into(), plain.clone(), false),
                    // The locality's metadata, where the endpoint's matches nothing.
                    (
                        "10.0.1.1:80".into(),
                        Some(if with_plaintext {
                            "tlsMode-disabled".into()
                        } else {
                            "tlsMode-istio".into()
                        }),
                        !with_plaintext
                    ),
                ],
                "with a plaintext entry: {with_plaintext}"
            );
            let t = up.transport_of(&up.endpoints[0]).tls().expect("mTLS");
            assert_eq!(t.sni.as_deref(), Some("outbound_.80_._.a.example"));
            assert_eq!(up.transport, Transport::Plaintext, "no socket of its own");
            assert!(o.warnings.is_empty(), "{:?}", o.warnings);
        }
    }

    /// TLS calls and chains: the TLS inspector reads SNI and ALPN (Envoy adds it where a
    /// chain matches on them); without it a TLS connection is `raw_buffer`. A chain that
    /// terminates TLS refuses plaintext, and an HTTP chain that does not cannot read TLS.
    #[test]
    fn tls_calls_select_chains_by_transport_and_alpn() {
        use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
        use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
            CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
        };
        use envoy_types::pb::google::protobuf::BoolValue;
        use envoy_types::util::pack_any;
        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
                name: "inline".into(),
                virtual_hosts: vec![VirtualHost {
                    name: "all".into(),
                    domains: vec!["*".into()],
                    routes: vec![Route {
                        r#match: Some(RouteMatch {
                            path_specifier: Some(PathSpecifier::Prefix("/".into())),
                            ..Default::default()
                        }),
                        action: Some(RouteActionKind::Route(RouteAction {
                            cluster_specifier: Some(ClusterSpecifier::Cluster("app".into())),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            })),
            ..Default::default()
        };
        let matching = |transport: &str, alpn: &[&str]| FilterChainMatch {
            transport_protocol: transport.into(),
            application_protocols: alpn.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        };
        let terminating = DownstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                    name: "kubernetes://cert".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            require_client_certificate: Some(BoolValue { value: true }),
            ..Default::default()
        };
        let mut mtls = hcm_chain("mtls", hcm.clone());
        mtls.filter_chain_match = Some(matching("tls", &["istio-peer-exchange", "istio"]));
        mtls.transport_socket = Some(socket(
            "envoy.transport_sockets.tls",
            pack_any(terminating.clone()),
        ));
        let mut tls_bytes = tcp_chain("tls-passthrough", "passthrough");
        tls_bytes.filter_chain_match = Some(matching("tls", &[]));
        let plain = hcm_chain("plain", hcm.clone());
        let config = |chains: Vec<FilterChain>, inspect: bool| ProxyConfig {
            listeners: [("l".to_string(), listener(80, chains, inspect))].into(),
            ..Default::default()
        };
        let permissive = config(vec![mtls.clone(), tls_bytes.clone(), plain.clone()], true);
        let get = || Call::get("a", 80, "/");
        let o = permissive.simulate(&get());
        assert_eq!(o.filter_chain.as_deref(), Some("plain"));
        assert_eq!(o.downstream_tls, None);
        let o = permissive.simulate(&get().istio_mtls("outbound_.80_._.a"));
        assert_eq!(o.filter_chain.as_deref(), Some("mtls"), "{o:#?}");
        let t = o
            .downstream_tls
            .as_ref()
            .and_then(Transport::tls)
            .expect("TLS");
        assert!(t.require_client_certificate && !t.istio_mutual);
        assert_eq!(t.certificates, [Source::Sds("kubernetes://cert".into())]);
        assert_eq!(o.cluster(), Some("app"));
        // Other TLS goes by its transport alone, to the chain naming no ALPN.
        let o = permissive.simulate(&Call::tls(80, "a").over_tls(Some("a"), &["h2"]));
        assert_eq!(o.filter_chain.as_deref(), Some("tls-passthrough"));
        assert_eq!(o.cluster(), Some("passthrough"));

        // Without an inspector (and no chain Envoy would add one for) TLS is raw_buffer.
        let blind = config(vec![plain.clone()], false);
        let o = blind.simulate(&get().istio_mtls("x"));
        assert_eq!(
            o.result,
            Err(NoMatch::TlsNotTerminated {
                filter_chain: "plain".into()
            })
        );
        // A chain matching on the transport makes Envoy add the inspector itself.
        let o = config(vec![mtls.clone()], false).simulate(&get().istio_mtls("x"));
        assert_eq!(o.filter_chain.as_deref(), Some("mtls"), "{o:#?}");
        // A terminating chain refuses plaintext.
        let mut only_tls = mtls;
        only_tls.filter_chain_match = None;
        let o = config(vec![only_tls], true).simulate(&get());
        assert_eq!(
            o.result,
            Err(NoMatch::TlsExpected {
                filter_chain: "mtls".into()
            })
        );
        assert_eq!(o.status(), None, "the connection is closed, no HTTP answer");
    }

    /// What a route does to the request: the fault filter's per-route config (at the most
    /// specific level; not without the filter in the chain; disabled by a `FilterConfig`;
    /// under its header condition), header edits in Envoy's order of levels (and reversed by
    /// `most_specific_header_mutations_wins`), rewrites and mirrors.
    #[test]
    fn route_effects_follow_envoys_levels_and_conditions() {
        use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
        use envoy_types::pb::envoy::config::route::v3::{
            route_action::RequestMirrorPolicy, FilterConfig,
        };
        use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
            fault_abort::ErrorType, FaultAbort as EnvoyAbort, HttpFault,
        };
        use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatchAndSubstitute, RegexMatcher};
        use envoy_types::pb::envoy::r#type::v3::{
            fractional_percent::DenominatorType, FractionalPercent,
        };
        use envoy_types::util::pack_any;
        let set = |k: &str, v: &str| HeaderValueOption {
            header: Some(HeaderValue {
                key: k.into(),
                value: v.into(),
                ..Default::default()
            }),
            append_action: 2,
            ..Default::default()
        };
        let abort = |status: u32, numerator: u32, headers: Vec<HeaderMatcher>| HttpFault {
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
        };
        let route = |name: &str, prefix: &str| Route {
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
        };
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
        let rc = RouteConfiguration {
            name: "rc".into(),
            virtual_hosts: vec![vh],
            request_headers_to_add: vec![set("x-level", "config")],
            ..Default::default()
        };
        let fault_filter = HttpFilter {
            name: "fault".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
                HttpFault::default(),
            ))),
            ..Default::default()
        };
        let config = |filters: Vec<HttpFilter>, rc: RouteConfiguration| {
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
        };
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

    #[test]
    fn paths_are_normalized_like_envoy() {
        assert_eq!(normalize_path("/a/./b/../c?x=/../"), "/a/c?x=/../");
        assert_eq!(normalize_path("/../../a"), "/a");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
        assert_eq!(normalize_path("/"), "/");
    }

    #[test]
    fn authority_ports_are_recognized() {
        assert_eq!(port_of("a:80"), Some("80"));
        assert_eq!(port_of("a"), None);
        assert_eq!(port_of("[::1]:80"), Some("80"));
        assert_eq!(port_of("::1"), None);
        assert_eq!(strip_port("a.b:9080"), "a.b");
        assert_eq!(in_cidr("10.1.2.3", "10.1.0.0", 16), Some(16));
        assert_eq!(in_cidr("10.2.2.3", "10.1.0.0", 16), None);
        assert_eq!(in_cidr("10.2.2.3", "0.0.0.0", 0), Some(0));
    }
}
