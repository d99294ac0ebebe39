//! Simulated proxies: real gRPC ADS clients (Delta or State-of-the-World) over loopback,
//! many streams multiplexed on a few HTTP/2 connections, each speaking for one Istio sidecar.
//!
//! Proxy `p` of a mesh with `K` namespaces is `client-p` in namespace `ns-{p mod K}`, node id
//! `sidecar~10.255.{p/256}.{p%256}~client-p.ns-K~ns-K.svc.cluster.local`, node metadata
//! `NAMESPACE` and `LABELS {app: client-p}` — exactly the proxy records of
//! `dataflows::synth::proxy`, so a harness can compute what each should hold. Gateway
//! proxies follow the sidecars: `dataflows::synth::router` (`router~…`, `istio:
//! ingressgateway`). [`Loadgen::start_nodes`] speaks for nodes given instead
//! (`meshflow demo --no-envoy`: the identities of the bookinfo Envoy bootstraps), and can
//! keep the bodies each proxy holds, so its config can be read as Envoy's would be.
//!
//! Each subscribes the way Envoy does: wildcard CDS; when clusters arrive, the EDS names of
//! the EDS clusters (`eds_cluster_config.service_name`, else the cluster name) and wildcard
//! LDS; when listeners arrive, the RDS names their HTTP connection managers reference
//! (Listener → filter chains → HttpConnectionManager → `rds.route_config_name`, decoded with
//! prost). Subscriptions follow every CDS/LDS change (subscribe and unsubscribe), and
//! resources of names no longer subscribed are dropped, as Envoy does. Every response is
//! ACKed (never NACKed).
//!
//! Recorded per proxy: for every `(type, name)` the version held and when it arrived, when
//! each name was last removed, and messages / resources / bytes received per type. Bytes are
//! the protobuf-encoded size of each response message (`encoded_len`), without gRPC and
//! HTTP/2 framing. Versions: Delta carries them; for SotW the version of a resource is the
//! content hash meshflow uses ([`dataflows::model::version_of`] of the encoded body), and for
//! Delta the loadgen checks the two agree (`version_mismatches`).

use crate::xds::node::proxy_from_node;
use crate::xds::vhds::VIRTUAL_HOST_TYPE_URL;
use dataflows::model::{version_of, Proxy, ResourceType};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use prost::Message;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// Which ADS flavour the simulated proxies speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Delta,
    Sotw,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Delta => "delta",
            Protocol::Sotw => "sotw",
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    pub xds_addr: SocketAddr,
    /// Number of proxies, numbered from `first_proxy`.
    pub proxies: usize,
    pub first_proxy: usize,
    /// Namespaces of the mesh: proxy `p` lives in `ns-{p mod namespaces}`.
    pub namespaces: usize,
    pub protocol: Protocol,
    /// ADS streams multiplexed on one HTTP/2 connection.
    pub streams_per_connection: usize,
    /// Gateway proxies after the sidecars: `dataflows::synth::router(g)` for g in 0..gateways
    /// (position `proxies + g`), in `root_namespace`.
    pub gateways: usize,
    pub root_namespace: String,
}

/// The index of a resource type in per-type arrays (CDS, EDS, LDS, RDS).
pub fn type_index(t: ResourceType) -> usize {
    t.index()
}

/// The node id of proxy `p` (as `dataflows::synth::proxy` spells it).
pub fn node_id(p: usize, namespaces: usize) -> String {
    let ns = dataflows::synth::namespace(p % namespaces.max(1));
    format!(
        "sidecar~10.255.{}.{}~client-{p}.{ns}~{ns}.svc.cluster.local",
        (p / 256) % 256,
        p % 256
    )
}

/// The xDS node of proxy `p`: Istio node id plus NAMESPACE and LABELS metadata.
pub fn node(p: usize, namespaces: usize) -> Node {
    let s = |v: String| Value {
        kind: Some(Kind::StringValue(v)),
    };
    let mut labels = Struct::default();
    labels.fields.insert("app".into(), s(format!("client-{p}")));
    let mut meta = Struct::default();
    meta.fields.insert(
        "NAMESPACE".into(),
        s(dataflows::synth::namespace(p % namespaces.max(1))),
    );
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(labels)),
        },
    );
    Node {
        id: node_id(p, namespaces),
        metadata: Some(meta),
        ..Default::default()
    }
}

/// The proxy record the server derives from proxy `p`'s node (meshflow's own parser).
pub fn proxy_record(p: usize, namespaces: usize) -> Result<Proxy, String> {
    proxy_from_node(Some(&node(p, namespaces))).map_err(|e| e.to_string())
}

/// The xDS node of gateway proxy `g` (the router `dataflows::synth::router` describes).
pub fn router_node(g: usize, root_namespace: &str) -> Node {
    let mesh = dataflows::model::MeshConfig {
        root_namespace: root_namespace.to_string(),
        ..Default::default()
    };
    let r = dataflows::synth::router(g, &mesh);
    let s = |v: String| Value {
        kind: Some(Kind::StringValue(v)),
    };
    let mut labels = Struct::default();
    for (k, v) in &r.labels {
        labels.fields.insert(k.clone(), s(v.clone()));
    }
    let mut meta = Struct::default();
    meta.fields
        .insert("NAMESPACE".into(), s(r.namespace.clone()));
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(labels)),
        },
    );
    Node {
        id: r.id,
        metadata: Some(meta),
        ..Default::default()
    }
}

/// The proxy record the server derives from gateway proxy `g`'s node.
pub fn router_record(g: usize, root_namespace: &str) -> Result<Proxy, String> {
    proxy_from_node(Some(&router_node(g, root_namespace))).map_err(|e| e.to_string())
}

/// A resource version held, and when it arrived.
#[derive(Clone, Debug)]
pub struct Held {
    pub version: String,
    pub at: Instant,
}

/// Counts of what was received, per type (CDS, EDS, LDS, RDS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub messages: [u64; ResourceType::COUNT],
    pub resources: [u64; ResourceType::COUNT],
    pub removed: [u64; ResourceType::COUNT],
    pub bytes: [u64; ResourceType::COUNT],
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        for i in 0..4 {
            self.messages[i] += o.messages[i];
            self.resources[i] += o.resources[i];
            self.removed[i] += o.removed[i];
            self.bytes[i] += o.bytes[i];
        }
    }

    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut out = Counters::default();
        for i in 0..4 {
            out.messages[i] = self.messages[i].saturating_sub(earlier.messages[i]);
            out.resources[i] = self.resources[i].saturating_sub(earlier.resources[i]);
            out.removed[i] = self.removed[i].saturating_sub(earlier.removed[i]);
            out.bytes[i] = self.bytes[i].saturating_sub(earlier.bytes[i]);
        }
        out
    }

    pub fn total_messages(&self) -> u64 {
        self.messages.iter().sum()
    }
    pub fn total_resources(&self) -> u64 {
        self.resources.iter().sum()
    }
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    pub fn json(&self) -> serde_json::Value {
        let per = |a: &[u64; ResourceType::COUNT]| serde_json::json!({"CDS": a[0], "EDS": a[1], "LDS": a[2], "RDS": a[3], "total": a.iter().sum::<u64>()});
        serde_json::json!({
            "messages": per(&self.messages),
            "resources": per(&self.resources),
            "removed": per(&self.removed),
            "bytes": per(&self.bytes),
        })
    }
}

/// Everything recorded for one simulated proxy.
#[derive(Debug, Default)]
pub struct ProxyState {
    /// Per type: name → version held and its arrival.
    pub held: [HashMap<String, Held>; ResourceType::COUNT],
    /// Per type: name → when it was last removed (by the server or by unsubscribing).
    pub removed_at: [HashMap<String, Instant>; ResourceType::COUNT],
    pub counters: Counters,
    pub connected_at: Option<Instant>,
    /// When it first held CDS, LDS and every EDS/RDS name it subscribed to.
    pub synced_at: Option<Instant>,
    pub last_message_at: Option<Instant>,
    /// The stream failed or ended: why.
    pub error: Option<String>,
    /// Per type: name → the body held, kept only when asked ([`Loadgen::start_nodes`]): a
    /// bench's thousands of proxies would each copy what the server shares.
    pub bodies: Option<[HashMap<String, Vec<u8>>; ResourceType::COUNT]>,
    /// Delta resources whose version is not the content hash of their body.
    pub version_mismatches: u64,
    /// Responses whose type URL or body could not be read.
    pub undecodable: u64,
    eds_subscribed: BTreeSet<String>,
    rds_subscribed: BTreeSet<String>,
    got: [bool; ResourceType::COUNT],
    /// Route configurations held that carry `vhds` (`serve --vhds`): their virtual hosts
    /// are subscribed to by the route configuration's name and held (and counted) as RDS
    /// resources named `ROUTE/HOST`.
    vhds_routes: BTreeSet<String>,
    vhds_subscribed: BTreeSet<String>,
    /// A VHDS subscription not answered yet.
    vhds_waiting: bool,
}

impl ProxyState {
    /// What it holds: (type, name) → version.
    pub fn held_versions(&self) -> BTreeMap<(ResourceType, String), String> {
        let mut out = BTreeMap::new();
        for t in ResourceType::ALL {
            for (name, h) in &self.held[type_index(t)] {
                out.insert((t, name.clone()), h.version.clone());
            }
        }
        out
    }

    pub fn version(&self, t: ResourceType, name: &str) -> Option<&Held> {
        self.held[type_index(t)].get(name)
    }

    /// The bodies held, as `(type, name, encoded body)` (none unless kept).
    pub fn held_bodies(&self) -> impl Iterator<Item = (ResourceType, &str, &[u8])> {
        ResourceType::ALL
            .into_iter()
            .zip(self.bodies.iter().flatten())
            .flat_map(|(t, of_type)| {
                of_type
                    .iter()
                    .map(move |(name, body)| (t, name.as_str(), body.as_slice()))
            })
    }

    /// Drops `name` of type index `i` from what is held (removed by the server, or no
    /// longer subscribed).
    fn forget(&mut self, i: usize, name: &str, now: Instant) {
        if self.held[i].remove(name).is_some() {
            self.removed_at[i].insert(name.to_string(), now);
        }
        if let Some(bodies) = &mut self.bodies {
            bodies[i].remove(name);
        }
    }

    fn is_synced(&self) -> bool {
        self.got[0]
            && self.got[2]
            && self
                .eds_subscribed
                .iter()
                .all(|n| self.held[1].contains_key(n))
            && self
                .rds_subscribed
                .iter()
                .all(|n| self.held[3].contains_key(n))
            && !self.vhds_waiting
    }

    /// The VHDS subscription change the route configurations held call for: (subscribe,
    /// unsubscribe); the virtual hosts of a route configuration no longer subscribed are
    /// forgotten, as Envoy drops them with it.
    fn follow_vhds(&mut self, now: Instant) -> (Vec<String>, Vec<String>) {
        let wanted: BTreeSet<String> = self
            .vhds_routes
            .intersection(&self.rds_subscribed)
            .cloned()
            .collect();
        let (add, drop) = diff_sets(&self.vhds_subscribed, &wanted);
        for r in &drop {
            let prefix = format!("{r}/");
            let gone: Vec<String> = self.held[3]
                .keys()
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            for n in gone {
                self.forget(3, &n, now);
            }
        }
        if !add.is_empty() {
            self.vhds_waiting = true;
        }
        self.vhds_subscribed = wanted;
        (add, drop)
    }
}

/// One simulated proxy.
pub struct ProxyHandle {
    pub index: usize,
    pub id: String,
    state: Mutex<ProxyState>,
}

impl ProxyHandle {
    pub fn lock(&self) -> MutexGuard<'_, ProxyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    epoch: Instant,
    /// Nanoseconds after `epoch` of the last response received by any proxy.
    last_message_ns: AtomicU64,
}

impl Shared {
    fn touch(&self, now: Instant) {
        let ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.last_message_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// A running set of simulated proxies.
pub struct Loadgen {
    pub config: Config,
    pub proxies: Vec<Arc<ProxyHandle>>,
    pub started: Instant,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

const CDS: ResourceType = ResourceType::Cluster;
const EDS: ResourceType = ResourceType::Endpoint;
const LDS: ResourceType = ResourceType::Listener;
const RDS: ResourceType = ResourceType::Route;

/// Largest response accepted (a full CDS of a big unscoped mesh is several MB).
const MAX_RESPONSE_BYTES: usize = 512 * 1024 * 1024;

impl Loadgen {
    /// Opens the connections and starts every proxy's stream. Must run inside a tokio
    /// runtime; the streams live on it until [`Loadgen::stop`].
    pub async fn start(config: Config) -> Result<Loadgen, String> {
        if config.namespaces == 0 {
            return Err("--namespaces must be at least 1".into());
        }
        if config.first_proxy + config.proxies > super::mesh_gen::MAX_PROXIES {
            return Err(format!(
                "at most {} proxies (node IPs are 10.255.x.y)",
                super::mesh_gen::MAX_PROXIES
            ));
        }
        let nodes = (0..config.proxies + config.gateways)
            .map(|i| {
                if i < config.proxies {
                    node(config.first_proxy + i, config.namespaces)
                } else {
                    router_node(i - config.proxies, &config.root_namespace)
                }
            })
            .collect();
        Self::spawn_streams(config, nodes, false).await
    }

    /// Simulated proxies speaking for the nodes given (e.g. the identities of real Envoy
    /// bootstraps), all on one connection; with `keep_bodies`, each keeps the bodies of what
    /// it holds ([`ProxyState::held_bodies`]), so its config can be read as Envoy's would be.
    pub async fn start_nodes(
        xds_addr: SocketAddr,
        protocol: Protocol,
        nodes: Vec<Node>,
        keep_bodies: bool,
    ) -> Result<Loadgen, String> {
        let config = Config {
            xds_addr,
            proxies: nodes.len(),
            first_proxy: 0,
            namespaces: 1,
            protocol,
            streams_per_connection: nodes.len().max(1),
            gateways: 0,
            root_namespace: String::new(),
        };
        Self::spawn_streams(config, nodes, keep_bodies).await
    }

    /// Opens the connections and starts one stream per node (node `i` is proxy
    /// `config.first_proxy + i`).
    async fn spawn_streams(
        config: Config,
        nodes: Vec<Node>,
        keep_bodies: bool,
    ) -> Result<Loadgen, String> {
        let per_conn = config.streams_per_connection.max(1);
        let streams = nodes.len();
        let connections = streams.div_ceil(per_conn);
        let uri = format!("http://{}", config.xds_addr);
        let mut channels: Vec<Channel> = Vec::with_capacity(connections);
        for _ in 0..connections {
            let ch = Endpoint::from_shared(uri.clone())
                .map_err(|e| format!("xDS address {uri}: {e}"))?
                .connect_timeout(Duration::from_secs(10))
                .connect()
                .await
                .map_err(|e| format!("connecting to {uri}: {e}"))?;
            channels.push(ch);
        }
        let started = Instant::now();
        let shared = Arc::new(Shared {
            epoch: started,
            last_message_ns: AtomicU64::new(0),
        });
        let mut proxies = Vec::with_capacity(streams);
        let mut tasks = Vec::with_capacity(streams);
        for (i, node) in nodes.into_iter().enumerate() {
            let handle = Arc::new(ProxyHandle {
                index: config.first_proxy + i,
                id: node.id.clone(),
                state: Mutex::new(ProxyState {
                    bodies: keep_bodies.then(Default::default),
                    ..Default::default()
                }),
            });
            let Some(channel) = channels.get(i / per_conn).cloned() else {
                return Err("internal: no connection for a proxy".into());
            };
            let (h, sh, protocol) = (handle.clone(), shared.clone(), config.protocol);
            tasks.push(tokio::spawn(async move {
                let result = match protocol {
                    Protocol::Delta => run_delta(&h, &sh, channel, node).await,
                    Protocol::Sotw => run_sotw(&h, &sh, channel, node).await,
                };
                let mut st = h.lock();
                st.error = Some(match result {
                    Ok(()) => "the server closed the stream".into(),
                    Err(e) => e,
                });
            }));
            proxies.push(handle);
        }
        Ok(Loadgen {
            config,
            proxies,
            started,
            shared,
            tasks,
        })
    }

    pub fn synced(&self) -> usize {
        self.proxies
            .iter()
            .filter(|p| p.lock().synced_at.is_some())
            .count()
    }

    /// The first stream errors, as `node id: error`.
    pub fn errors(&self, limit: usize) -> Vec<String> {
        self.proxies
            .iter()
            .filter_map(|p| p.lock().error.clone().map(|e| format!("{}: {e}", p.id)))
            .take(limit)
            .collect()
    }

    /// Waits until every proxy is synced; `progress(synced)` is called as it goes.
    pub async fn wait_synced(
        &self,
        timeout: Duration,
        mut progress: impl FnMut(usize),
    ) -> Result<(), String> {
        let deadline = later(Instant::now(), timeout);
        loop {
            let n = self.synced();
            progress(n);
            if n == self.proxies.len() {
                return Ok(());
            }
            if let Some(e) = self.errors(1).into_iter().next() {
                return Err(format!("a simulated proxy failed: {e}"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "only {n} of {} proxies synced within {timeout:?}",
                    self.proxies.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// When any proxy last received a response.
    pub fn last_message_at(&self) -> Instant {
        self.shared.epoch
            + Duration::from_nanos(self.shared.last_message_ns.load(Ordering::Relaxed))
    }

    /// Waits until no proxy has received anything for `quiet` (at most `limit`).
    pub async fn wait_quiet(&self, quiet: Duration, limit: Duration) {
        let deadline = later(Instant::now(), limit);
        loop {
            let now = Instant::now();
            let idle = now.saturating_duration_since(self.last_message_at());
            if idle >= quiet || now >= deadline {
                return;
            }
            tokio::time::sleep((quiet - idle).min(Duration::from_millis(50))).await;
        }
    }

    /// Counters summed over every proxy.
    pub fn totals(&self) -> Counters {
        let mut c = Counters::default();
        for p in &self.proxies {
            c.add(&p.lock().counters);
        }
        c
    }

    /// Messages received by each proxy so far.
    pub fn messages_per_proxy(&self) -> Vec<u64> {
        self.proxies
            .iter()
            .map(|p| p.lock().counters.total_messages())
            .collect()
    }

    /// Ends every stream.
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    /// A JSON summary of the run so far.
    pub fn summary(&self) -> serde_json::Value {
        let mut sync_ms: Vec<f64> = Vec::new();
        let mut mismatches = 0;
        let mut undecodable = 0;
        for p in &self.proxies {
            let st = p.lock();
            if let Some(t) = st.synced_at {
                sync_ms.push(ms(t.saturating_duration_since(self.started)));
            }
            mismatches += st.version_mismatches;
            undecodable += st.undecodable;
        }
        sync_ms.sort_by(f64::total_cmp);
        let errors = self.errors(5);
        let failed = self
            .proxies
            .iter()
            .filter(|p| p.lock().error.is_some())
            .count();
        serde_json::json!({
            "xds_addr": self.config.xds_addr.to_string(),
            "protocol": self.config.protocol.name(),
            "proxies": self.proxies.len(),
            "first_proxy": self.config.first_proxy,
            "namespaces": self.config.namespaces,
            "gateways": self.config.gateways,
            "connections": self.proxies.len().div_ceil(self.config.streams_per_connection.max(1)),
            "elapsed_s": self.started.elapsed().as_secs_f64(),
            "synced": sync_ms.len(),
            "time_to_sync_ms": {
                "p50": percentile(&sync_ms, 0.50),
                "p99": percentile(&sync_ms, 0.99),
                "max": sync_ms.last().copied(),
            },
            "received": self.totals().json(),
            "version_mismatches": mismatches,
            "undecodable": undecodable,
            "failed_streams": failed,
            "errors": errors,
        })
    }
}

impl Drop for Loadgen {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `from + d`, saturating far in the future instead of overflowing on absurd durations.
pub fn later(from: Instant, d: Duration) -> Instant {
    from.checked_add(d)
        .or_else(|| from.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(from)
}

/// Milliseconds as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// What a resource body says about the names it makes the proxy subscribe to.
fn eds_name_of(body: &[u8]) -> Option<String> {
    let c = Cluster::decode(body).ok()?;
    let eds = matches!(c.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32);
    if !eds {
        return None;
    }
    let service_name = c
        .eds_cluster_config
        .map(|e| e.service_name)
        .filter(|n| !n.is_empty());
    Some(service_name.unwrap_or(c.name))
}

fn rds_names_of(body: &[u8]) -> Vec<String> {
    let Ok(l) = Listener::decode(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for chain in l.filter_chains.iter().chain(l.default_filter_chain.iter()) {
        for f in &chain.filters {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                continue;
            };
            if !any.type_url.ends_with(".HttpConnectionManager") {
                continue;
            }
            let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
                continue;
            };
            if let Some(RouteSpecifier::Rds(rds)) = hcm.route_specifier {
                out.push(rds.route_config_name);
            }
        }
    }
    out
}

/// The name inside a SotW resource body.
/// Whether a route configuration's virtual hosts come over VHDS: it has field 9
/// (`vhds`). Scans the top-level fields only, skipping their contents, so the virtual
/// hosts of every route configuration every simulated proxy receives are not decoded.
fn has_vhds(mut body: &[u8]) -> bool {
    use prost::encoding::{decode_varint, WireType};
    while !body.is_empty() {
        let Ok(key) = decode_varint(&mut body) else {
            return false;
        };
        if key >> 3 == 9 {
            return true;
        }
        let skip = match WireType::try_from(key & 7) {
            Ok(WireType::Varint) => decode_varint(&mut body).map(|_| 0),
            Ok(WireType::SixtyFourBit) => Ok(8),
            Ok(WireType::ThirtyTwoBit) => Ok(4),
            Ok(WireType::LengthDelimited) => decode_varint(&mut body),
            _ => return false,
        };
        match skip {
            Ok(n) if (n as usize) <= body.len() => body = &body[n as usize..],
            _ => return false,
        }
    }
    false
}

fn name_of(t: ResourceType, body: &[u8]) -> Option<String> {
    match t {
        ResourceType::Cluster => Cluster::decode(body).ok().map(|c| c.name),
        ResourceType::Endpoint => ClusterLoadAssignment::decode(body)
            .ok()
            .map(|c| c.cluster_name),
        ResourceType::Listener => Listener::decode(body).ok().map(|l| l.name),
        ResourceType::Route => RouteConfiguration::decode(body).ok().map(|r| r.name),
        ResourceType::Secret => {
            envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(body)
                .ok()
                .map(|s| s.name)
        }
    }
}

/// Per-stream subscription bookkeeping shared by both protocols: which EDS/RDS names the
/// clusters and listeners held call for.
#[derive(Default)]
struct Derived {
    cluster_eds: HashMap<String, Option<String>>,
    listener_rds: HashMap<String, Vec<String>>,
}

impl Derived {
    fn on_cluster(&mut self, name: &str, body: Option<&[u8]>) {
        match body {
            Some(b) => {
                self.cluster_eds.insert(name.to_string(), eds_name_of(b));
            }
            None => {
                self.cluster_eds.remove(name);
            }
        }
    }

    fn on_listener(&mut self, name: &str, body: Option<&[u8]>) {
        match body {
            Some(b) => {
                self.listener_rds.insert(name.to_string(), rds_names_of(b));
            }
            None => {
                self.listener_rds.remove(name);
            }
        }
    }

    fn eds(&self) -> BTreeSet<String> {
        self.cluster_eds.values().flatten().cloned().collect()
    }

    fn rds(&self) -> BTreeSet<String> {
        self.listener_rds.values().flatten().cloned().collect()
    }
}

/// A subscription change: (added, removed).
fn diff_sets(old: &BTreeSet<String>, new: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    (
        new.difference(old).cloned().collect(),
        old.difference(new).cloned().collect(),
    )
}

/// Applies a new EDS/RDS subscription to the recorded state: names dropped are removed from
/// what the proxy holds (Envoy forgets them). Returns (subscribe, unsubscribe).
fn resubscribe(
    st: &mut ProxyState,
    t: ResourceType,
    wanted: BTreeSet<String>,
    now: Instant,
) -> (Vec<String>, Vec<String>) {
    let current = if t == EDS {
        &st.eds_subscribed
    } else {
        &st.rds_subscribed
    };
    let (add, drop) = diff_sets(current, &wanted);
    for n in &drop {
        st.forget(type_index(t), n, now);
    }
    if t == EDS {
        st.eds_subscribed = wanted;
    } else {
        st.rds_subscribed = wanted;
    }
    (add, drop)
}

fn record_arrival(
    st: &mut ProxyState,
    t: ResourceType,
    (name, body): (String, Option<&[u8]>),
    version: String,
    now: Instant,
) {
    if let (Some(bodies), Some(body)) = (&mut st.bodies, body) {
        bodies[type_index(t)].insert(name.clone(), body.to_vec());
    }
    let map = &mut st.held[type_index(t)];
    match map.get_mut(&name) {
        Some(h) if h.version == version => {}
        Some(h) => {
            h.version = version;
            h.at = now;
        }
        None => {
            map.insert(name, Held { version, at: now });
        }
    }
}

async fn run_delta(
    h: &ProxyHandle,
    shared: &Shared,
    channel: Channel,
    node: Node,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (tx, rx) = mpsc::channel::<DeltaDiscoveryRequest>(16);
    let send = |req: DeltaDiscoveryRequest| {
        let tx = tx.clone();
        async move {
            tx.send(req)
                .await
                .map_err(|_| "the request stream closed".to_string())
        }
    };
    // Wildcard CDS (the legacy form: a first request naming nothing), carrying the node.
    send(DeltaDiscoveryRequest {
        node: Some(node),
        type_url: CDS.type_url().into(),
        ..Default::default()
    })
    .await?;
    let mut inbound = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("opening the Delta stream: {e}"))?
        .into_inner();
    h.lock().connected_at = Some(Instant::now());
    let mut derived = Derived::default();
    let mut lds_requested = false;
    while let Some(resp) = inbound
        .message()
        .await
        .map_err(|e| format!("Delta stream: {e}"))?
    {
        let now = Instant::now();
        shared.touch(now);
        let bytes = resp.encoded_len() as u64;
        // VHDS virtual hosts are route content: counted and held as RDS.
        let vhost = resp.type_url == VIRTUAL_HOST_TYPE_URL;
        let Some(t) =
            ResourceType::from_type_url(&resp.type_url).or(vhost.then_some(ResourceType::Route))
        else {
            h.lock().undecodable += 1;
            continue;
        };
        let i = type_index(t);
        let mut subs: Vec<DeltaDiscoveryRequest> = Vec::new();
        {
            let mut st = h.lock();
            if vhost {
                st.vhds_waiting = false;
            }
            st.last_message_at = Some(now);
            st.counters.messages[i] += 1;
            st.counters.bytes[i] += bytes;
            st.counters.resources[i] += resp.resources.len() as u64;
            st.counters.removed[i] += resp.removed_resources.len() as u64;
            st.got[i] = true;
            for r in &resp.resources {
                let body = r.resource.as_ref().map(|a| a.value.as_slice());
                if let Some(b) = body {
                    if version_of(b) != r.version {
                        st.version_mismatches += 1;
                    }
                }
                match t {
                    ResourceType::Cluster => derived.on_cluster(&r.name, body),
                    ResourceType::Listener => derived.on_listener(&r.name, body),
                    ResourceType::Route if !vhost => {
                        if body.is_some_and(has_vhds) {
                            st.vhds_routes.insert(r.name.clone());
                        } else {
                            st.vhds_routes.remove(&r.name);
                        }
                    }
                    _ => {}
                }
                record_arrival(&mut st, t, (r.name.clone(), body), r.version.clone(), now);
            }
            for n in &resp.removed_resources {
                st.forget(i, n, now);
                match t {
                    ResourceType::Cluster => derived.on_cluster(n, None),
                    ResourceType::Listener => derived.on_listener(n, None),
                    ResourceType::Route if !vhost => {
                        st.vhds_routes.remove(n);
                    }
                    _ => {}
                }
            }
            let mut follow = |st: &mut ProxyState, sub: ResourceType, wanted| {
                let (add, drop) = resubscribe(st, sub, wanted, now);
                if !add.is_empty() || !drop.is_empty() {
                    subs.push(DeltaDiscoveryRequest {
                        type_url: sub.type_url().into(),
                        resource_names_subscribe: add,
                        resource_names_unsubscribe: drop,
                        ..Default::default()
                    });
                }
            };
            match t {
                ResourceType::Cluster => follow(&mut st, EDS, derived.eds()),
                ResourceType::Listener => follow(&mut st, RDS, derived.rds()),
                _ => {}
            }
            if matches!(t, ResourceType::Listener | ResourceType::Route) && !vhost {
                let (add, drop) = st.follow_vhds(now);
                if !add.is_empty() || !drop.is_empty() {
                    subs.push(DeltaDiscoveryRequest {
                        type_url: VIRTUAL_HOST_TYPE_URL.into(),
                        resource_names_subscribe: add,
                        resource_names_unsubscribe: drop,
                        ..Default::default()
                    });
                }
            }
            if st.synced_at.is_none() && st.is_synced() {
                st.synced_at = Some(now);
            }
        }
        // As Envoy: new EDS/RDS subscriptions while the clusters/listeners warm, then the ACK.
        for req in subs {
            send(req).await?;
        }
        send(DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .await?;
        if t == CDS && !lds_requested {
            lds_requested = true;
            send(DeltaDiscoveryRequest {
                type_url: LDS.type_url().into(),
                ..Default::default()
            })
            .await?;
        }
    }
    Ok(())
}

#[derive(Default, Clone)]
struct SotwType {
    version_info: String,
    nonce: String,
}

async fn run_sotw(
    h: &ProxyHandle,
    shared: &Shared,
    channel: Channel,
    node: Node,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (tx, rx) = mpsc::channel::<DiscoveryRequest>(16);
    let send = |req: DiscoveryRequest| {
        let tx = tx.clone();
        async move {
            tx.send(req)
                .await
                .map_err(|_| "the request stream closed".to_string())
        }
    };
    send(DiscoveryRequest {
        node: Some(node),
        type_url: CDS.type_url().into(),
        ..Default::default()
    })
    .await?;
    let mut inbound = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("opening the SotW stream: {e}"))?
        .into_inner();
    h.lock().connected_at = Some(Instant::now());
    let mut derived = Derived::default();
    let mut types: [SotwType; ResourceType::COUNT] = Default::default();
    let mut lds_requested = false;
    while let Some(resp) = inbound
        .message()
        .await
        .map_err(|e| format!("SotW stream: {e}"))?
    {
        let now = Instant::now();
        shared.touch(now);
        let Some(t) = ResourceType::from_type_url(&resp.type_url) else {
            h.lock().undecodable += 1;
            continue;
        };
        let i = type_index(t);
        types[i] = SotwType {
            version_info: resp.version_info.clone(),
            nonce: resp.nonce.clone(),
        };
        let mut requests: Vec<DiscoveryRequest> = Vec::new();
        let (eds_names, rds_names);
        {
            let mut st = h.lock();
            sotw_apply(&mut st, &mut derived, t, &resp, now);
            let mut follow = |st: &mut ProxyState, sub: ResourceType, wanted| {
                let (add, drop) = resubscribe(st, sub, wanted, now);
                if !add.is_empty() || !drop.is_empty() {
                    let names = if sub == EDS {
                        &st.eds_subscribed
                    } else {
                        &st.rds_subscribed
                    };
                    let last = &types[type_index(sub)];
                    requests.push(DiscoveryRequest {
                        type_url: sub.type_url().into(),
                        version_info: last.version_info.clone(),
                        response_nonce: last.nonce.clone(),
                        resource_names: names.iter().cloned().collect(),
                        ..Default::default()
                    });
                }
            };
            match t {
                ResourceType::Cluster => follow(&mut st, EDS, derived.eds()),
                ResourceType::Listener => follow(&mut st, RDS, derived.rds()),
                _ => {}
            }
            if st.synced_at.is_none() && st.is_synced() {
                st.synced_at = Some(now);
            }
            eds_names = st.eds_subscribed.iter().cloned().collect::<Vec<_>>();
            rds_names = st.rds_subscribed.iter().cloned().collect::<Vec<_>>();
        }
        for req in requests {
            send(req).await?;
        }
        // The ACK carries the current subscription of its type (every SotW request does).
        let names = match t {
            ResourceType::Endpoint => eds_names,
            ResourceType::Route => rds_names,
            _ => Vec::new(),
        };
        send(DiscoveryRequest {
            type_url: resp.type_url.clone(),
            version_info: resp.version_info.clone(),
            response_nonce: resp.nonce.clone(),
            resource_names: names,
            ..Default::default()
        })
        .await?;
        if t == CDS && !lds_requested {
            lds_requested = true;
            send(DiscoveryRequest {
                type_url: LDS.type_url().into(),
                ..Default::default()
            })
            .await?;
        }
    }
    Ok(())
}

/// Applies a SotW response: CDS/LDS carry the full set (what is missing is removed),
/// EDS/RDS carry only the resources sent.
fn sotw_apply(
    st: &mut ProxyState,
    derived: &mut Derived,
    t: ResourceType,
    resp: &DiscoveryResponse,
    now: Instant,
) {
    let i = type_index(t);
    st.last_message_at = Some(now);
    st.counters.messages[i] += 1;
    st.counters.bytes[i] += resp.encoded_len() as u64;
    st.counters.resources[i] += resp.resources.len() as u64;
    st.got[i] = true;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for any in &resp.resources {
        let body = any.value.as_slice();
        let Some(name) = name_of(t, body) else {
            st.undecodable += 1;
            continue;
        };
        match t {
            ResourceType::Cluster => derived.on_cluster(&name, Some(body)),
            ResourceType::Listener => derived.on_listener(&name, Some(body)),
            _ => {}
        }
        let subscribed = match t {
            ResourceType::Endpoint => st.eds_subscribed.contains(&name),
            ResourceType::Route => st.rds_subscribed.contains(&name),
            _ => true,
        };
        if !subscribed {
            // Envoy ignores resources it did not ask for (a response that crossed an
            // unsubscription).
            continue;
        }
        seen.insert(name.clone());
        record_arrival(st, t, (name, Some(body)), version_of(body), now);
    }
    if matches!(t, ResourceType::Cluster | ResourceType::Listener) {
        let gone: Vec<String> = st.held[i]
            .keys()
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        st.counters.removed[i] += gone.len() as u64;
        for n in gone {
            st.forget(i, &n, now);
            match t {
                ResourceType::Cluster => derived.on_cluster(&n, None),
                _ => derived.on_listener(&n, None),
            }
        }
    }
}

/// `meshflow loadgen`: runs `config` until `duration` has passed (after every proxy synced,
/// or the sync timeout) or Ctrl-C, and returns the JSON summary.
pub async fn run_cli(
    config: Config,
    duration: Duration,
    sync_timeout: Duration,
) -> Result<serde_json::Value, String> {
    let mut lg = Loadgen::start(config).await?;
    let total = lg.proxies.len();
    let mut last_report = Instant::now();
    let synced = lg
        .wait_synced(sync_timeout, |n| {
            if last_report.elapsed() >= Duration::from_secs(2) {
                eprintln!("meshflow loadgen: {n}/{total} proxies synced");
                last_report = Instant::now();
            }
        })
        .await;
    if let Err(e) = &synced {
        eprintln!("meshflow loadgen: {e}");
    } else {
        eprintln!(
            "meshflow loadgen: {total} proxies synced in {:.0} ms",
            ms(lg.started.elapsed())
        );
    }
    tokio::select! {
        _ = tokio::time::sleep(duration) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let summary = lg.summary();
    lg.stop();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::route::v3::{Vhds, VirtualHost};

    /// A route configuration with `vhds` is recognised from its top-level fields, with or
    /// without virtual hosts before it; one without is not, nor a body that does not parse.
    #[test]
    fn has_vhds_reads_top_level_fields() {
        let mut rc = RouteConfiguration {
            name: "80".into(),
            virtual_hosts: vec![VirtualHost {
                name: "a:80".into(),
                domains: vec!["a".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(!has_vhds(&rc.encode_to_vec()));
        rc.vhds = Some(Vhds::default());
        assert!(has_vhds(&rc.encode_to_vec()));
        rc.virtual_hosts.clear();
        assert!(has_vhds(&rc.encode_to_vec()));
        assert!(!has_vhds(&[0x0a, 0xff]));
    }
}
