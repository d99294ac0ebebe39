//! DestinationRule: subsets and traffic policies (load balancing, connection pools,
//! outlier detection, TLS), merged per subset and port, and what routes and clusters read
//! of them (hash keys, TCP timeouts, inbound pools).

use super::{
    failover_priority_keys, ConfigKey, Hostname, InboundPool, InboundRulePools, Labels,
    LocalityLbSetting, UpstreamTls,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DestinationRule {
    pub key: ConfigKey,
    /// Fully qualified host the rule applies to.
    pub host: Hostname,
    pub export_to: Vec<String>,
    pub traffic_policy: Option<TrafficPolicy>,
    pub subsets: Vec<Subset>,
    /// `workloadSelector`: only for the proxies of its namespace carrying these labels, for
    /// which it goes before every rule without one.
    #[serde(default)]
    pub selector: Option<Labels>,
}

impl DestinationRule {
    /// Whether some cluster of the rule may balance by locality (an `outlierDetection`,
    /// which turns on Istio's default locality failover, or a `distribute`): while one
    /// such rule exists, proxies with a locality are scoped by it.
    pub fn may_balance_by_locality(&self) -> bool {
        self.policies().any(|p| {
            p.outlier_detection.is_some()
                || p.locality_lb
                    .as_ref()
                    .is_some_and(|l| !l.distribute.is_empty())
        })
    }

    /// The label keys its `failoverPriority` lists read of a client (`key=value` entries
    /// fix their value and read none).
    pub fn failover_priority_keys(&self) -> Vec<String> {
        self.policies()
            .filter_map(|p| p.locality_lb.as_deref())
            .flat_map(failover_priority_keys)
            .collect()
    }

    /// Every policy of the rule: its own, its subsets', and their port entries.
    fn policies(&self) -> impl Iterator<Item = &TrafficPolicy> {
        std::iter::once(self.traffic_policy.as_ref())
            .chain(self.subsets.iter().map(|s| s.traffic_policy.as_ref()))
            .flatten()
            .flat_map(TrafficPolicy::with_ports)
    }

    /// Some cluster of the rule (the host's or a subset's) uses `ISTIO_MUTUAL`: the proxies
    /// holding them need their workload certificate.
    pub fn uses_istio_mutual(&self) -> bool {
        self.policies()
            .any(|p| p.tls.as_ref().is_some_and(|t| t.istio_mutual))
    }

    /// Every `tls` of the rule that takes its certificates from a Secret (`credentialName`).
    pub fn credential_tls(&self) -> Vec<&UpstreamTls> {
        self.policies()
            .filter_map(|p| p.tls.as_deref())
            .filter(|t| t.credential.is_some())
            .collect()
    }

    /// Every `tls` of the rule that encrypts (`SIMPLE`, `MUTUAL`, `ISTIO_MUTUAL`): what a
    /// proxyless gRPC client cannot be given (see [`ErrorCode::ProxylessTls`]).
    ///
    /// [`ErrorCode::ProxylessTls`]: super::ErrorCode::ProxylessTls
    pub fn encrypting_tls(&self) -> Vec<&UpstreamTls> {
        self.policies().filter_map(|p| p.tls.as_deref()).collect()
    }

    /// The Secrets (by name) the rule's `credentialName`s need in a proxy's namespace: each
    /// named one and its `-cacert` companion.
    pub fn wanted_secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .credential_tls()
            .into_iter()
            .filter_map(|t| t.credential.clone())
            .flat_map(|n| [format!("{n}-cacert"), n])
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The rule's own [`TcpTimeout`], if it sets either.
    pub fn tcp_timeout(&self) -> Option<TcpTimeout> {
        let pool = self.traffic_policy.as_ref()?.connection_pool.as_ref()?;
        let t = TcpTimeout {
            idle_ms: pool.tcp_idle_timeout_ms,
            max_duration_ms: pool.max_connection_duration_ms,
        };
        (t != TcpTimeout::default()).then_some(t)
    }

    /// This rule's [`InboundRulePools`].
    pub fn inbound_pools(&self) -> InboundRulePools {
        let Some(policy) = &self.traffic_policy else {
            return Vec::new();
        };
        let out: InboundRulePools = std::iter::once(None)
            .chain(policy.port_level.iter().map(|(p, _)| Some(*p)))
            .map(|port| (port, InboundPool::of_policy(&policy.at_port(port).0)))
            .collect();
        if out.iter().all(|(_, p)| p.is_none()) {
            return Vec::new();
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Subset {
    pub name: String,
    pub labels: Labels,
    pub traffic_policy: Option<TrafficPolicy>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct TrafficPolicy {
    pub load_balancer: Option<LoadBalancer>,
    pub warmup: Option<Warmup>,
    /// `loadBalancer.localityLbSetting` (part of `loadBalancer`: merged with it).
    #[serde(default)]
    pub locality_lb: Option<Box<LocalityLbSetting>>,
    pub connect_timeout_ms: Option<u64>,
    /// TLS to the upstream (`SIMPLE`, `MUTUAL` with certificate files, `ISTIO_MUTUAL`).
    /// (Boxed, as the other rarely set parts: every `Record` is as large as its largest
    /// variant, and endpoints are most of them.)
    pub tls: Option<Box<UpstreamTls>>,
    /// `connectionPool` beyond `tcp.connectTimeout`: circuit-breaker limits and connection
    /// lifetimes; `None` fields keep Istio's defaults (no limit).
    pub connection_pool: Option<Box<ConnectionPool>>,
    pub outlier_detection: Option<Box<OutlierDetection>>,
    /// `tls` given with mode `DISABLE`: it replaces an inherited `tls` (a subset's over the
    /// rule's) as Istio's merge does, though nothing is generated for it.
    #[serde(default)]
    pub tls_disabled: bool,
    /// `portLevelSettings[]`: per port number, the policy that replaces this one's
    /// `loadBalancer`, `connectionPool`, `outlierDetection` and `tls` on that port, whole
    /// (a setting the entry leaves out takes its default; nothing is inherited, as Istio's
    /// docs say). The entries' own `port_level` is empty.
    #[serde(default)]
    pub port_level: Vec<(u16, TrafficPolicy)>,
}

impl TrafficPolicy {
    /// The policy on `port`: a `portLevelSettings` entry for it in place of the four
    /// settings, else this one (without its port entries); and whether an entry applied.
    /// `None`: a port no entry names.
    pub fn at_port(&self, port: Option<u16>) -> (TrafficPolicy, bool) {
        match self.port_level.iter().find(|(p, _)| Some(*p) == port) {
            Some((_, entry)) => (
                TrafficPolicy {
                    port_level: Vec::new(),
                    ..entry.clone()
                },
                true,
            ),
            None => (
                TrafficPolicy {
                    port_level: Vec::new(),
                    ..self.clone()
                },
                false,
            ),
        }
    }

    /// Whether `loadBalancer` is given (a warmup alone is part of it).
    fn sets_load_balancer(&self) -> bool {
        self.load_balancer.is_some() || self.warmup.is_some() || self.locality_lb.is_some()
    }

    /// Whether `connectionPool` is given (its connect timeout is part of it).
    fn sets_connection_pool(&self) -> bool {
        self.connect_timeout_ms.is_some() || self.connection_pool.is_some()
    }

    /// Whether `tls` is given, `DISABLE` included.
    pub fn sets_tls(&self) -> bool {
        self.tls.is_some() || self.tls_disabled
    }

    /// Istio's merge of a rule's policy and a subset's on one port: first each level's
    /// `portLevelSettings` entry for the port (which replaces that level's four settings
    /// whole); then a subset's entry for the port wins whole, else each setting the
    /// subset gives replaces the rule's.
    /// `port` `None`: a port no entry of either names.
    pub fn merged(
        rule: Option<&TrafficPolicy>,
        subset: Option<&TrafficPolicy>,
        port: Option<u16>,
    ) -> TrafficPolicy {
        let base = rule.map(|r| r.at_port(port).0).unwrap_or_default();
        let Some(subset) = subset else {
            return base;
        };
        let (sub, whole) = subset.at_port(port);
        if whole || rule.is_none() {
            return sub;
        }
        let mut out = base;
        if sub.sets_load_balancer() {
            out.load_balancer = sub.load_balancer.clone();
            out.warmup = sub.warmup.clone();
            out.locality_lb = sub.locality_lb.clone();
        }
        if sub.sets_connection_pool() {
            out.connect_timeout_ms = sub.connect_timeout_ms;
            out.connection_pool = sub.connection_pool.clone();
        }
        if sub.outlier_detection.is_some() {
            out.outlier_detection = sub.outlier_detection.clone();
        }
        if sub.sets_tls() {
            out.tls = sub.tls.clone();
            out.tls_disabled = sub.tls_disabled;
        }
        out
    }

    /// This policy and its port entries.
    pub fn with_ports(&self) -> impl Iterator<Item = &TrafficPolicy> {
        std::iter::once(self).chain(self.port_level.iter().map(|(_, p)| p))
    }
}

/// `loadBalancer.warmup`: new endpoints ramp up over `duration_ms` (Envoy's slow start).
/// The fractions are kept in millionths, so the record compares and hashes exactly.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Warmup {
    pub duration_ms: u64,
    /// Percent of its weight a new endpoint starts at, in millionths (Istio's default 10%).
    pub minimum_percent_micros: u64,
    /// Envoy's aggression, in millionths (Istio's default 1.0: linear).
    pub aggression_micros: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LoadBalancer {
    RoundRobin,
    LeastRequest,
    Random,
    /// `simple: PASSTHROUGH`: to the connection's original destination, no endpoints.
    Passthrough,
    /// `consistentHash`: RING_HASH or MAGLEV clusters, and the hash on the routes to them.
    ConsistentHash(Box<ConsistentHash>),
}

/// A DestinationRule's `consistentHash`: what a request is hashed by, and the table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsistentHash {
    pub key: HashKey,
    pub table: HashTable,
}

/// What a route hashes a request by (the route's `hash_policy`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HashKey {
    Header(String),
    /// A cookie; with a TTL Envoy sets it when the request has none.
    Cookie {
        name: String,
        path: Option<String>,
        ttl_ms: Option<u64>,
    },
    SourceIp,
    QueryParameter(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HashTable {
    /// `ringHash` (or no table named): Istio's minimum ring size defaults to 1024.
    Ring {
        minimum_size: Option<u64>,
    },
    Maglev {
        table_size: Option<u64>,
    },
}

/// The consistent-hash keys of one host's clusters under the DestinationRule a scope has in
/// effect: per subset (`None`: the host's own cluster) and port. A `None` port stands for
/// every port no `portLevelSettings` entry names, and is there only where it hashes; a port
/// an entry names (of the rule or the subset) has its own row, `None` where that port does
/// not hash. Look it up with [`host_hash`].
pub type HostHashing = BTreeMap<(Option<String>, Option<u16>), Option<HashKey>>;

/// The hash key of the cluster of `subset` on `port` in `hh`, if it hashes.
pub fn host_hash<'h>(
    hh: &'h HostHashing,
    subset: &Option<String>,
    port: u16,
) -> Option<&'h HashKey> {
    match hh.get(&(subset.clone(), Some(port))) {
        Some(at_port) => at_port.as_ref(),
        None => hh.get(&(subset.clone(), None)).and_then(Option::as_ref),
    }
}

/// [`HostHashing`] per host, for the routes of one route configuration.
pub type Hashing = BTreeMap<Hostname, HostHashing>;

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnectionPool {
    pub max_connections: Option<u32>,
    /// `http.http1MaxPendingRequests`.
    pub max_pending_requests: Option<u32>,
    /// `http.http2MaxRequests`.
    pub max_requests: Option<u32>,
    pub max_retries: Option<u32>,
    pub max_requests_per_connection: Option<u32>,
    /// `http.idleTimeout`.
    pub idle_timeout_ms: Option<u64>,
    /// `tcp.maxConnectionDuration`.
    pub max_connection_duration_ms: Option<u64>,
    /// `tcp.tcpKeepalive`: (probes, time s, interval s).
    pub tcp_keepalive: Option<(Option<u32>, Option<u64>, Option<u64>)>,
    /// `tcp.idleTimeout`: the idle timeout of the cluster's HTTP connections where
    /// `http.idleTimeout` sets none, as Istio falls back to it (0: none).
    #[serde(default)]
    pub tcp_idle_timeout_ms: Option<u64>,
    /// `http.h2UpgradePolicy` (`None`: `DEFAULT`, the mesh's policy, Istio's default
    /// `DO_NOT_UPGRADE`).
    #[serde(default)]
    pub h2_upgrade: Option<H2Upgrade>,
    /// `http.useClientProtocol`: the upstream connection speaks the protocol the request
    /// came in (Envoy's `use_downstream_protocol_config`); never upgraded.
    #[serde(default)]
    pub use_client_protocol: bool,
    /// `http.maxConcurrentStreams`: Envoy's `max_concurrent_streams` of an HTTP/2 cluster
    /// (0, like unset: Envoy's default).
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
}

/// `connectionPool.http.h2UpgradePolicy` other than `DEFAULT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum H2Upgrade {
    Upgrade,
    DoNotUpgrade,
}

/// `outlierDetection`, as Istio maps it: a set error count ejects at once (enforcing 100%).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OutlierDetection {
    pub consecutive_5xx: Option<u32>,
    pub consecutive_gateway_errors: Option<u32>,
    pub consecutive_local_origin_failures: Option<u32>,
    pub split_external_local_origin_errors: bool,
    pub interval_ms: Option<u64>,
    pub base_ejection_time_ms: Option<u64>,
    pub max_ejection_percent: Option<u32>,
    pub min_health_percent: Option<u32>,
}

/// The limits Istio gives the `tcp_proxy` of a route to a host, from the rule in effect's
/// own `trafficPolicy.connectionPool.tcp` (not a subset's or a port's), as Istio reads it
/// for the route's first destination: `idleTimeout` (`None`: Envoy's 1h; 0: none) and
/// `maxConnectionDuration` (Envoy's `max_downstream_connection_duration`; `None`: no limit).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct TcpTimeout {
    pub idle_ms: Option<u64>,
    pub max_duration_ms: Option<u64>,
}

/// Per host a scope routes TCP connections to, its [`TcpTimeout`]. Hosts whose rule sets
/// neither are absent.
pub type TcpTimeouts = BTreeMap<Hostname, TcpTimeout>;
