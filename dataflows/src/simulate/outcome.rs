//! What a simulation reports ([`Outcome`]): what matched at each step and where the call
//! goes, down to clusters, endpoints, transports and the route's effects. Data only: the walk
//! that fills it lives in the sibling modules.

use std::time::Duration;

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
    /// What each filter that may refuse said, in order (`jwt_authn`, RBAC and their dry-run
    /// rules), e.g. `HTTP RBAC: DENY by ns[default]-policy[deny]-rule[0]`.
    pub authz: Vec<String>,
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
    /// A weighted cluster's own request header edits, applied when the request is sent to
    /// it (before the route's); empty for a route to a single cluster.
    pub request_headers: Vec<HeaderEdit>,
    /// A weighted cluster's own response header edits.
    pub response_headers: Vec<HeaderEdit>,
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
    /// A filter refused the call (`by`: which, and why): Envoy answers `status` (401 or
    /// 403), or closes the connection (`None`: a network RBAC filter).
    Denied { status: Option<u32>, by: String },
    /// A CUSTOM policy's rule (`by`) matches: the external authorization service behind
    /// `cluster` decides, and the call does not say what it answers
    /// ([`super::Call::external_authz`]).
    External { cluster: String, by: String },
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
            Err(NoMatch::Denied { status, .. }) => *status,
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
