//! Connected proxies and the scopes they share: [`ScopeKey`] (what a proxy's configuration
//! is computed for), [`ScopeSpec`] (what it depends on besides the hosts it sees), and who
//! holds a resource, for provenance.

use super::names::{BLACKHOLE_CLUSTER, PASSTHROUGH_CLUSTER};
use super::{
    ConfigKey, EgressProxy, InboundMtls, InboundSecurity, Labels, MeshSettings, PathNormalization,
    ProxyId, ResourceType, Retries, Sidecar, DEFAULT_CONNECT_TIMEOUT_MS,
};
use serde::{Deserialize, Serialize};

/// What a proxy's configuration is computed for. Proxies with the same scope share all
/// scope-level work; only the inbound part is per proxy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScopeKey {
    /// A sidecar in `namespace`, under the Sidecar resource in effect (if any).
    Sidecar {
        namespace: String,
        sidecar: Option<ConfigKey>,
        interception_none: bool,
        /// Proxyless gRPC: API listeners named `host:port` instead of socket listeners.
        proxyless: bool,
        /// The VirtualServices' `sourceLabels` selectors these proxies match (sorted).
        #[serde(default)]
        source_labels: Vec<Labels>,
        /// The proxies' locality, where locality load balancing may make their load
        /// assignments differ (see [`ScopeKey::with_locality`]); `None`: unknown or unused.
        #[serde(default)]
        locality: Option<String>,
        /// The proxies' values of the labels some `failoverPriority` reads (see
        /// [`ScopeKey::with_priority_labels`]); `None`: none read.
        #[serde(default)]
        priority_labels: Option<Vec<(String, String)>>,
        /// The proxies' node metadata `IDLE_TIMEOUT` ([`Proxy::idle_timeout_ns`]; never for
        /// proxyless clients, which Istio does not give it): their listeners carry it.
        #[serde(default)]
        idle_timeout_ns: Option<u64>,
        /// The mesh's `pathNormalization`, where it is not `BASE`: its listeners' connection
        /// managers carry it.
        #[serde(default, skip_serializing_if = "PathNormalization::is_base")]
        path_normalization: PathNormalization,
        /// What the security policies selecting its proxies make the Sidecar `ingress`
        /// listeners they bind themselves refuse (the fail-closed stopgap; only where the
        /// Sidecar in effect binds one, so other scopes are not split by policy).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        security: Option<Box<InboundSecurity>>,
    },
    /// A gateway proxy in `namespace` selected by these Gateways (sorted).
    Router {
        namespace: String,
        gateways: Vec<ConfigKey>,
        /// As for sidecars.
        #[serde(default)]
        source_labels: Vec<Labels>,
        /// As for sidecars.
        #[serde(default)]
        locality: Option<String>,
        /// As for sidecars.
        #[serde(default)]
        priority_labels: Option<Vec<(String, String)>>,
        /// As for sidecars.
        #[serde(default)]
        idle_timeout_ns: Option<u64>,
        /// As for sidecars.
        #[serde(default, skip_serializing_if = "PathNormalization::is_base")]
        path_normalization: PathNormalization,
        /// `(service port, target port)`: where a server of a service port listens, as
        /// Istio's gateways listen on the target port of the Service of their pods that has
        /// the server's port ([`crate::rules::gateway_ports`]); a port not here is listened
        /// on as written.
        #[serde(default)]
        ports: Vec<(u16, u16)>,
        /// What the security policies selecting its proxies make every listener refuse
        /// (the fail-closed stopgap, [`InboundSecurity::for_router`]); `None`: nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        security: Option<Box<InboundSecurity>>,
    },
}

impl ScopeKey {
    /// A proxyless gRPC client's scope.
    pub fn is_proxyless(&self) -> bool {
        matches!(
            self,
            ScopeKey::Sidecar {
                proxyless: true,
                ..
            }
        )
    }

    pub fn namespace(&self) -> &str {
        match self {
            ScopeKey::Sidecar { namespace, .. } | ScopeKey::Router { namespace, .. } => namespace,
        }
    }

    /// The `sourceLabels` selectors its proxies match.
    pub fn source_labels(&self) -> &[Labels] {
        match self {
            ScopeKey::Sidecar { source_labels, .. } | ScopeKey::Router { source_labels, .. } => {
                source_labels
            }
        }
    }

    /// Who its configuration is for, as route matches' source conditions see it.
    pub fn source(&self) -> Source<'_> {
        match self {
            ScopeKey::Sidecar {
                namespace,
                source_labels,
                proxyless,
                ..
            } => Source {
                namespace: Some(namespace),
                labels: source_labels,
                proxyless: *proxyless,
            },
            ScopeKey::Router {
                namespace,
                source_labels,
                ..
            } => Source {
                namespace: Some(namespace),
                labels: source_labels,
                proxyless: false,
            },
        }
    }

    /// The node metadata `IDLE_TIMEOUT` its proxies share, in nanoseconds.
    pub fn idle_timeout_ns(&self) -> Option<u64> {
        match self {
            ScopeKey::Sidecar {
                idle_timeout_ns, ..
            }
            | ScopeKey::Router {
                idle_timeout_ns, ..
            } => *idle_timeout_ns,
        }
    }

    /// The client locality its proxies share ("" where unknown or not used).
    pub fn locality(&self) -> &str {
        match self {
            ScopeKey::Sidecar { locality, .. } | ScopeKey::Router { locality, .. } => {
                locality.as_deref().unwrap_or_default()
            }
        }
    }

    /// The same scope for proxies in `locality`: only proxies with a locality, and only while
    /// some rule of the mesh may balance by locality (see
    /// [`DestinationRule::may_balance_by_locality`]), are split by it, so other meshes keep
    /// their scopes whole.
    ///
    /// [`DestinationRule::may_balance_by_locality`]: super::DestinationRule::may_balance_by_locality
    /// The mesh's `pathNormalization` its listeners carry.
    pub fn path_normalization(&self) -> PathNormalization {
        match self {
            ScopeKey::Sidecar {
                path_normalization, ..
            }
            | ScopeKey::Router {
                path_normalization, ..
            } => *path_normalization,
        }
    }

    /// The scope under the mesh's `pathNormalization` (proxyless clients have no connection
    /// manager of Istio's making: they keep theirs).
    pub fn with_path_normalization(mut self, n: PathNormalization) -> Self {
        if self.is_proxyless() {
            return self;
        }
        match &mut self {
            ScopeKey::Sidecar {
                path_normalization, ..
            }
            | ScopeKey::Router {
                path_normalization, ..
            } => *path_normalization = n,
        }
        self
    }

    pub fn with_locality(mut self, loc: String) -> Self {
        match &mut self {
            ScopeKey::Sidecar { locality, .. } | ScopeKey::Router { locality, .. } => {
                *locality = Some(loc)
            }
        }
        self
    }

    /// The values of the labels some `failoverPriority` reads its proxies share.
    pub fn priority_labels(&self) -> Option<&[(String, String)]> {
        match self {
            ScopeKey::Sidecar {
                priority_labels, ..
            }
            | ScopeKey::Router {
                priority_labels, ..
            } => priority_labels.as_deref(),
        }
    }

    /// The same scope for proxies with these values (sorted by key) of the labels the
    /// mesh's `failoverPriority` lists read: only while some list reads a label are proxies
    /// split by it, and only by the labels read.
    pub fn with_priority_labels(mut self, values: Vec<(String, String)>) -> Self {
        match &mut self {
            ScopeKey::Sidecar {
                priority_labels, ..
            }
            | ScopeKey::Router {
                priority_labels, ..
            } => *priority_labels = Some(values),
        }
        self
    }

    /// Where a router's servers of each service port listen (see [`ScopeKey::Router`]'s
    /// `ports`); empty for sidecars.
    pub fn gateway_ports(&self) -> &[(u16, u16)] {
        match self {
            ScopeKey::Router { ports, .. } => ports,
            ScopeKey::Sidecar { .. } => &[],
        }
    }

    /// What a router scope's listeners refuse (see [`ScopeKey::Router`]'s `security`).
    pub fn router_security(&self) -> Option<&InboundSecurity> {
        match self {
            ScopeKey::Router { security, .. } => security.as_deref(),
            ScopeKey::Sidecar { .. } => None,
        }
    }

    /// What a sidecar scope's bound `ingress` listeners refuse (see [`ScopeKey::Sidecar`]'s
    /// `security`).
    pub fn ingress_security(&self) -> Option<&InboundSecurity> {
        match self {
            ScopeKey::Sidecar { security, .. } => security.as_deref(),
            ScopeKey::Router { .. } => None,
        }
    }

    /// The same scope for proxies whose listeners (a router's) or bound `ingress` listeners
    /// (a sidecar's) refuse per `sec`.
    pub fn with_security(mut self, sec: InboundSecurity) -> Self {
        match &mut self {
            ScopeKey::Router { security, .. } | ScopeKey::Sidecar { security, .. } => {
                *security = Some(Box::new(sec))
            }
        }
        self
    }

    /// The same router scope for proxies whose servers listen per `map`.
    pub fn with_gateway_ports(mut self, map: Vec<(u16, u16)>) -> Self {
        if let ScopeKey::Router { ports, .. } = &mut self {
            *ports = map;
        }
        self
    }

    /// The same scope for proxies matching `selectors` (sorted, distinct).
    pub fn with_source_labels(mut self, selectors: Vec<Labels>) -> Self {
        match &mut self {
            ScopeKey::Sidecar { source_labels, .. } | ScopeKey::Router { source_labels, .. } => {
                *source_labels = selectors
            }
        }
        self
    }
}

/// Who a configuration is for, as a route match's `sourceNamespace` and `sourceLabels` see
/// it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Source<'a> {
    /// The proxies' namespace (sidecars' and gateways' alike, as Istio compares
    /// `sourceNamespace` with the proxy's own); `None` matches no `sourceNamespace`.
    pub namespace: Option<&'a str>,
    /// The mesh's `sourceLabels` selectors the proxies match.
    pub labels: &'a [Labels],
    /// Proxyless gRPC clients, which read a route's timeout from `max_stream_duration`.
    pub proxyless: bool,
}

impl Source<'_> {
    /// Whether a match with these source conditions applies to these proxies.
    pub fn admits(&self, namespace: Option<&String>, labels: Option<&Labels>) -> bool {
        namespace.is_none_or(|ns| Some(ns.as_str()) == self.namespace)
            && labels.is_none_or(|sel| self.labels.contains(sel))
    }
}

/// What a scope's configuration depends on besides the hosts it sees: the Sidecar in effect
/// (none: defaults; routers see everything exported) and the mesh defaults it applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScopeSpec {
    pub sidecar: Option<Sidecar>,
    /// Traffic to hosts outside the registry is blocked: the Sidecar's mode, else the mesh's.
    pub registry_only: bool,
    /// The retry policy of routes no VirtualService governs (the mesh's default).
    pub default_retries: Option<Retries>,
    /// The mesh's connect timeout, for the inbound clusters of the Sidecar's `ingress`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// The mesh's `protocolDetectionTimeout` ([`MeshSettings::protocol_detection_timeout_ms`]).
    #[serde(default)]
    pub detection_timeout_ms: Option<u64>,
    /// What the inbound mTLS chains of the Sidecar's bound `ingress` listeners accept.
    #[serde(default)]
    pub inbound_mtls: InboundMtls,
}

fn default_connect_timeout() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

impl ScopeSpec {
    /// Where a captured connection no service claims goes: `BlackHoleCluster` under
    /// REGISTRY_ONLY, else the Sidecar's `egressProxy` cluster, else `PassthroughCluster`.
    pub fn outbound_fallback(&self) -> String {
        if self.registry_only {
            return BLACKHOLE_CLUSTER.to_string();
        }
        self.sidecar
            .as_ref()
            .and_then(|s| s.egress_proxy.as_ref())
            .map_or_else(|| PASSTHROUGH_CLUSTER.to_string(), EgressProxy::cluster)
    }

    pub fn new(sidecar: Option<Sidecar>, mesh: &MeshSettings) -> ScopeSpec {
        let registry_only = sidecar
            .as_ref()
            .and_then(|s| s.registry_only)
            .unwrap_or(mesh.registry_only);
        ScopeSpec {
            sidecar,
            registry_only,
            default_retries: mesh.default_retries.clone(),
            connect_timeout_ms: mesh.connect_timeout_ms,
            detection_timeout_ms: mesh.protocol_detection_timeout_ms,
            inbound_mtls: mesh.inbound_mtls.clone(),
        }
    }
}

/// The virtual host a sidecar route configuration ends with, for hosts outside the registry:
/// Istio's `allow_any` (to `PassthroughCluster`, or the Sidecar's `egressProxy` cluster) or
/// `block_all` (a 502) on captured listeners, by `outboundTrafficPolicy`; none on bound ones.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UnknownHosts {
    None,
    /// To this cluster.
    AllowAny(String),
    BlockAll,
}

impl UnknownHosts {
    /// The catch-all of a captured listener of a scope of `spec`.
    pub fn captured(spec: &ScopeSpec) -> UnknownHosts {
        if spec.registry_only {
            UnknownHosts::BlockAll
        } else {
            UnknownHosts::AllowAny(spec.outbound_fallback())
        }
    }
}

/// Who holds a resource, for provenance: every proxy of a scope, or one proxy (its inbound
/// side).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Holder {
    Scope(ScopeKey),
    Proxy(ProxyId),
}

/// One provenance row: the resource `(holder, type, name)` was produced from input `.1`.
pub type ProvenanceRow = ((Holder, ResourceType, String), ConfigKey);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProxyKind {
    Sidecar,
    Router,
    /// A gRPC client or server using gRPC's xDS support (node metadata `GENERATOR: grpc`):
    /// scoped like a sidecar, but it looks listeners up by `host:port` (`xds:///host:port`)
    /// and has no traffic capture and no inbound side.
    Proxyless,
}

/// A connected proxy, from its node id and node metadata.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Proxy {
    pub id: ProxyId,
    pub kind: ProxyKind,
    pub ips: Vec<String>,
    pub namespace: String,
    pub labels: Labels,
    /// `INTERCEPTION_MODE: NONE`: no iptables capture, so no virtual listeners.
    pub interception_none: bool,
    /// Node metadata `SERVICE_ACCOUNT`: the workload identity's service account (`None`:
    /// `default`, as Kubernetes runs a Pod that names none).
    #[serde(default)]
    pub service_account: Option<String>,
    /// Where it runs (`region/zone/subzone`, empty: unknown): the node's `locality`, or
    /// the locality labels of its workload, as Istio reads it.
    #[serde(default)]
    pub locality: String,
    /// Node metadata `IDLE_TIMEOUT` (a Go duration), in nanoseconds: Istio's idle timeout of
    /// every connection manager and `tcp_proxy` of the proxy (see
    /// [`crate::assemble::apply_idle_timeout`]). `None`: not sent, or not a valid duration.
    #[serde(default)]
    pub idle_timeout_ns: Option<u64>,
}

impl Proxy {
    /// The service account the proxy's workload certificate names.
    pub fn service_account(&self) -> &str {
        self.service_account.as_deref().unwrap_or("default")
    }
}
