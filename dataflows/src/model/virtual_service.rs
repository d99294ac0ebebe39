//! VirtualService: its HTTP, TLS and TCP routes, their matches, and what an HTTP route
//! does to a request (redirects, rewrites, header edits, mirrors, CORS, faults).

use super::{ConfigKey, Hostname, Labels, Source};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VirtualService {
    pub key: ConfigKey,
    /// Hosts, fully qualified (short names expanded in the VirtualService's namespace); may be
    /// wildcards such as `*` or `*.example.com` for gateways.
    pub hosts: Vec<String>,
    /// Gateways as `namespace/name`, or `mesh`. Empty means `mesh`.
    pub gateways: Vec<String>,
    pub export_to: Vec<String>,
    pub http: Vec<HttpRoute>,
    /// `tcp[]`: routes for the TCP ports of the hosts, in order (the first that matches wins).
    pub tcp: Vec<L4Route>,
    /// `tls[]`: routes of TLS passthrough by SNI (gateways' PASSTHROUGH servers, sidecars'
    /// TLS ports), in order.
    #[serde(default)]
    pub tls: Vec<L4Route>,
}

impl VirtualService {
    /// The `sourceLabels` selectors of its matches (HTTP, TCP and TLS).
    pub fn source_selectors(&self) -> Vec<Labels> {
        let http = self
            .http
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let tcp = self
            .tcp
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let tls = self
            .tls
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let mut out: Vec<Labels> = http.chain(tcp).chain(tls).flatten().cloned().collect();
        out.sort();
        out.dedup();
        out
    }

    /// The VirtualServices its routes delegate to.
    pub fn delegates(&self) -> Vec<ConfigKey> {
        let mut out: Vec<ConfigKey> = self
            .http
            .iter()
            .filter_map(|r| r.delegate.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn binds_mesh(&self) -> bool {
        self.gateways.is_empty() || self.gateways.iter().any(|g| g == "mesh")
    }
}

/// A VirtualService with the ports of every destination host it names, so routes can
/// resolve an omitted destination port the way Istio does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResolvedVs {
    pub vs: VirtualService,
    pub dest_ports: BTreeMap<Hostname, Vec<u16>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpRoute {
    /// Its position in `spec.http` as written (routes not generated leave gaps): what
    /// analysis messages name.
    #[serde(default)]
    pub index: usize,
    pub name: Option<String>,
    /// Any of these matches (OR); empty matches everything.
    pub matches: Vec<HttpMatch>,
    /// Where matching requests go; empty when the route redirects or answers directly.
    pub route: Vec<RouteDestination>,
    pub timeout_ms: Option<u64>,
    pub retries: Option<Retries>,
    pub redirect: Option<Redirect>,
    pub direct_response: Option<DirectResponse>,
    pub rewrite: Option<Rewrite>,
    pub headers: HeaderOps,
    pub mirrors: Vec<Mirror>,
    pub fault: Option<Fault>,
    /// `corsPolicy`: the CORS filter's policy for this route.
    pub cors: Option<Box<Cors>>,
    /// `delegate`: the VirtualService whose routes take this route's place, each under
    /// this route's matches ([`crate::rules::expand_delegates`]).
    #[serde(default)]
    pub delegate: Option<ConfigKey>,
}

/// One `match` of an HTTP route: every condition must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpMatch {
    pub uri: Option<StringMatch>,
    /// `uri` ignores case (exact and prefix matches).
    pub ignore_uri_case: bool,
    /// By lower-cased name; Istio's `method`, `authority` and `scheme` are the pseudo-headers
    /// `:method`, `:authority`, `:scheme`.
    pub headers: BTreeMap<String, StringMatch>,
    /// Headers that must not match (`withoutHeaders`; `Present`: must be absent).
    pub without_headers: BTreeMap<String, StringMatch>,
    pub query_params: BTreeMap<String, StringMatch>,
    /// Only on route configurations of this port (the listener's, or the gateway server's).
    pub port: Option<u16>,
    /// Only for these gateways (`namespace/name`, or `mesh` for sidecars); empty: wherever
    /// the VirtualService applies.
    pub gateways: Vec<String>,
    /// Only for proxies in this namespace (sidecar route configurations are per namespace;
    /// gateway ones are not, so there such a match never applies: it fails closed).
    pub source_namespace: Option<String>,
    /// Only for proxies carrying these labels (sidecars and gateways alike): a scope knows
    /// which of the mesh's `sourceLabels` selectors its proxies match.
    #[serde(default)]
    pub source_labels: Option<Labels>,
}

/// The claim path of a `headers`/`withoutHeaders` condition on a JWT claim, as Istio reads
/// its name: `@request.auth.claims.a.b` or `@request.auth.claims[a][b]` (the prefix in any
/// case). `None`: not a claim condition (a request header), or a malformed one
/// ([`is_claim_condition`] tells them apart).
pub fn jwt_claim_path(name: &str) -> Option<Vec<String>> {
    const PREFIX: &str = "@request.auth.claims";
    if !is_claim_condition(name) {
        return None;
    }
    let rest = &name[PREFIX.len()..];
    let claims: Vec<String> = if let Some(dotted) = rest.strip_prefix('.') {
        dotted.split('.').map(str::to_string).collect()
    } else if rest.len() > 2 && rest.starts_with('[') && rest.ends_with(']') {
        rest[1..rest.len() - 1]
            .split("][")
            .map(str::to_string)
            .collect()
    } else {
        return None;
    };
    (!claims.iter().any(String::is_empty)).then_some(claims)
}

/// Whether a condition's name is on a JWT claim (starts `@request.auth.claims`, any case).
pub fn is_claim_condition(name: &str) -> bool {
    name.get(..20)
        .is_some_and(|p| p.eq_ignore_ascii_case("@request.auth.claims"))
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StringMatch {
    Exact(String),
    Prefix(String),
    Regex(String),
    /// A path prefix matched segment by segment (the Gateway API's `PathPrefix`): `/foo`
    /// matches `/foo` and `/foo/bar`, not `/foobar`. Never `/`, never ending in `/`; only
    /// on the path.
    SegmentPrefix(String),
    /// Any value, as long as there is one: Istio's empty match of a header or query
    /// parameter (never of the URI).
    Present,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RouteDestination {
    /// Fully qualified destination host.
    pub host: Hostname,
    pub subset: Option<String>,
    pub port: Option<u16>,
    pub weight: u32,
    /// `route[].headers`: edits of requests sent to, and responses from, this destination.
    #[serde(default)]
    pub headers: HeaderOps,
    /// Set where the destination named a Kubernetes `ExternalName` alias and was sent to the
    /// host the alias names ([`crate::rules::with_alias_destinations`]): the alias, whose
    /// ports decide the port a destination without one goes to. Sources leave it `None`.
    #[serde(default)]
    pub via_alias: Option<AliasVia>,
}

/// The `ExternalName` alias a route destination named, as Istio's `GetDestinationCluster`
/// reads it: its host and its ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AliasVia {
    pub host: Hostname,
    pub ports: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Retries {
    pub attempts: u32,
    pub per_try_timeout_ms: Option<u64>,
    pub retry_on: Option<String>,
    /// `retryRemoteLocalities`: a retry may move on to the next priority (the localities
    /// after the client's own), as Envoy's `previous_priorities` retry priority does.
    #[serde(default)]
    pub remote_localities: bool,
    /// `retryIgnorePreviousHosts`: `Some(false)` lets a retry pick a host already tried
    /// (unset and `true`: avoid them, Istio's default).
    #[serde(default)]
    pub ignore_previous_hosts: Option<bool>,
    /// `backoff`: the base interval between retries (Envoy's default, 25 ms, when unset).
    #[serde(default)]
    pub backoff_ms: Option<u64>,
}

/// A fraction of requests, in millionths (Istio's `percentage.value` 12.5 is 125,000): an
/// integer, so records stay hashable and ordered.
pub type PerMillion = u32;

/// `redirect`: answered by the proxy with a 3xx to the rewritten location.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Redirect {
    /// The whole path of the location.
    pub uri: Option<String>,
    /// The path's matched prefix replaced by this (the Gateway API's `ReplacePrefixMatch`;
    /// Envoy's `prefix_rewrite`); `uri` and `prefix` are alternatives.
    #[serde(default)]
    pub prefix: Option<String>,
    pub authority: Option<String>,
    pub port: Option<u16>,
    /// `derivePort: FROM_REQUEST_PORT`: the port of the route configuration the route is
    /// on (the port requests arrive on), as Istio writes it; Envoy cannot take it from the
    /// request itself. (`FROM_PROTOCOL_DEFAULT`, like no port: none in the location.)
    #[serde(default)]
    pub from_request_port: bool,
    pub scheme: Option<String>,
    /// 301, 302, 303, 307 or 308.
    pub code: u32,
}

/// `directResponse`: answered by the proxy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DirectResponse {
    pub status: u32,
    pub body: Option<String>,
}

/// `rewrite`: what the upstream sees instead of the request's path or authority.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Rewrite {
    /// Replaces the matched prefix (the whole path for an exact match).
    pub uri: Option<String>,
    pub authority: Option<String>,
    /// `uriRegexRewrite`: (pattern, substitution).
    pub uri_regex: Option<(String, String)>,
}

/// `headers`: edits of request headers (before the upstream sees them) and of response
/// headers (before the client does).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeaderOps {
    pub request: HeaderEdits,
    pub response: HeaderEdits,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeaderEdits {
    /// Overwrite or add.
    pub set: BTreeMap<String, String>,
    /// Append to what is there.
    pub add: BTreeMap<String, String>,
    pub remove: Vec<String>,
    /// A request's `host` / `:authority` set or added: Envoy edits no pseudo-header (nor
    /// `host`) as a header, so, as Istio does, it becomes a host rewrite of the route (or of
    /// the destination, for `route[].headers`).
    #[serde(default)]
    pub authority: Option<String>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
            && self.add.is_empty()
            && self.remove.is_empty()
            && self.authority.is_none()
    }
}

/// `mirror` / `mirrors[]`: a copy of the request, its answer discarded.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Mirror {
    pub destination: RouteDestination,
    /// `None`: every request.
    pub fraction: Option<PerMillion>,
}

/// `corsPolicy`, as Envoy's CORS filter takes it per route.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cors {
    /// `allowOrigins` (or the older `allowOrigin`, exact names).
    pub allow_origins: Vec<StringMatch>,
    pub allow_methods: Vec<String>,
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    /// `maxAge`, whole seconds.
    pub max_age_s: Option<u64>,
    pub allow_credentials: Option<bool>,
    /// `unmatchedPreflights`: FORWARD (the default) passes a preflight whose origin does
    /// not match on to the upstream; IGNORE answers it without CORS headers.
    pub forward_unmatched_preflights: bool,
}

/// `fault`: delays and aborts injected by the client's proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fault {
    /// (delay, fraction of requests).
    pub delay: Option<(u64, PerMillion)>,
    /// (the status answered, fraction of requests).
    pub abort: Option<(AbortStatus, PerMillion)>,
}

/// What an injected abort answers: an HTTP status, or a gRPC status (by its code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AbortStatus {
    Http(u32),
    Grpc(u32),
}

/// One `match` of a `tcp[]` or `tls[]` route: every condition must hold. A TLS match names
/// its SNI hosts (required there); a TCP match has none. `sourceSubnet` is not modelled: a
/// TCP route using it is left out on input (fails closed).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct L4Match {
    /// `sniHosts` of a TLS match, fully qualified as the VirtualService's hosts are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni_hosts: Vec<String>,
    /// Only connections to this service port (or gateway server port).
    pub port: Option<u16>,
    /// Only connections whose destination IP is in one of these (canonical CIDRs).
    pub destination_subnets: Vec<String>,
    /// As [`HttpMatch::gateways`].
    pub gateways: Vec<String>,
    /// As [`HttpMatch::source_namespace`]: sidecars in that namespace, never a gateway.
    pub source_namespace: Option<String>,
    /// As [`HttpMatch::source_labels`].
    #[serde(default)]
    pub source_labels: Option<Labels>,
}

impl L4Match {
    /// Whether the match applies on `port` through one of `via` (gateways as
    /// `namespace/name`, or `mesh`) for the proxies of `source`.
    pub fn applies<V: AsRef<str>>(&self, port: u16, via: &[V], source: Source) -> bool {
        self.port.is_none_or(|p| p == port)
            && (self.gateways.is_empty()
                || self
                    .gateways
                    .iter()
                    .any(|g| via.iter().any(|v| v.as_ref() == g)))
            && source.admits(self.source_namespace.as_ref(), self.source_labels.as_ref())
    }
}

/// A VirtualService's `tcp[]` or `tls[]` route: where matching connections go.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct L4Route {
    /// Its position in `spec.tcp` or `spec.tls` as written (as [`HttpRoute::index`]).
    #[serde(default)]
    pub index: usize,
    /// Any of these matches (OR); empty matches every connection (TCP only: a TLS route
    /// needs a match).
    pub matches: Vec<L4Match>,
    pub route: Vec<RouteDestination>,
}
