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
//! With several servers (replicas of one control plane), connection `c` goes to server
//! `c mod n`, as a Kubernetes Service spreads connections over its pods. With `failover`, a
//! Delta stream that ends (its server was killed) opens again on the next server at once,
//! resuming as Envoy does: every type it holds is asked for again with
//! `initial_resource_versions` (what it holds) and its EDS/RDS names, so the server sends
//! only what differs ([`failover`]).
//!
//! Recorded per proxy: for every `(type, name)` the version held and when it arrived, when
//! each name was last removed, and messages / resources / bytes received per type. Bytes are
//! the protobuf-encoded size of each response message (`encoded_len`), without gRPC and
//! HTTP/2 framing. Versions: Delta carries them; for SotW the version of a resource is the
//! content hash meshflow uses ([`dataflows::model::version_of`] of the encoded body), and for
//! Delta the loadgen checks the two agree (`version_mismatches`).

mod delta;
mod failover;
mod nodes;
mod sotw;
mod state;
mod subscribe;

use delta::*;
use failover::*;
pub use nodes::*;
use sotw::*;
pub use state::*;
use subscribe::*;

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
    /// Further servers, replicas of `xds_addr`: connection `c` goes to server `c mod n` of
    /// `[xds_addr, more_servers…]`.
    pub more_servers: Vec<SocketAddr>,
    /// A Delta stream that ends resumes on the next server instead of failing (SotW
    /// streams fail as before).
    pub failover: bool,
}

impl Config {
    /// Every server, `xds_addr` first.
    pub fn servers(&self) -> Vec<SocketAddr> {
        std::iter::once(self.xds_addr)
            .chain(self.more_servers.iter().copied())
            .collect()
    }
}

/// The index of a resource type in per-type arrays (CDS, EDS, LDS, RDS).
pub fn type_index(t: ResourceType) -> usize {
    t.index()
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
            more_servers: Vec::new(),
            failover: false,
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
        let servers = config.servers();
        let mut channels: Vec<Channel> = Vec::with_capacity(connections);
        for c in 0..connections {
            let uri = format!("http://{}", servers[c % servers.len()]);
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
        let pool = Arc::new(Pool::new(servers.clone(), per_conn));
        let mut proxies = Vec::with_capacity(streams);
        let mut tasks = Vec::with_capacity(streams);
        for (i, node) in nodes.into_iter().enumerate() {
            let server = (i / per_conn) % servers.len();
            let handle = Arc::new(ProxyHandle {
                index: config.first_proxy + i,
                id: node.id.clone(),
                state: Mutex::new(ProxyState {
                    bodies: keep_bodies.then(Default::default),
                    server,
                    ..Default::default()
                }),
            });
            let Some(channel) = channels.get(i / per_conn).cloned() else {
                return Err("internal: no connection for a proxy".into());
            };
            let (h, sh, protocol) = (handle.clone(), shared.clone(), config.protocol);
            let pool = (config.failover && protocol == Protocol::Delta).then(|| pool.clone());
            tasks.push(tokio::spawn(async move {
                let result = match (protocol, pool) {
                    (Protocol::Delta, Some(pool)) => {
                        run_failover(&h, &sh, &pool, channel, node).await
                    }
                    (Protocol::Delta, None) => {
                        run_delta(&h, &sh, channel, node, &mut Session::default()).await
                    }
                    (Protocol::Sotw, _) => run_sotw(&h, &sh, channel, node).await,
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

    /// How many proxies have their stream on each of `servers` servers now.
    pub fn proxies_per_server(&self, servers: usize) -> Vec<usize> {
        let mut on = vec![0; servers];
        for p in &self.proxies {
            if let Some(n) = on.get_mut(p.lock().server) {
                *n += 1;
            }
        }
        on
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
            "servers": self.config.servers().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
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
