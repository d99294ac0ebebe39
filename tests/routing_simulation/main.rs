//! The routing assertions of the real-Envoy tests, checked in-process by the routing simulation
//! (`dataflows::simulate`) in milliseconds. Each test writes the same YAML as the Envoy test it
//! mirrors (the `reviews` fixture of `support::reviews`, or `examples/bookinfo/config` as
//! shipped), reads it with meshflow's file source exactly as `meshflow serve` does, runs the
//! changes through the incremental dataflow engine epoch by epoch, and asks the simulation where
//! a request from the Envoy test's proxy goes: which listener, route configuration, cluster
//! (subset, weight) and endpoints, or which 404/503 Envoy itself answers.
//!
//! The real-Envoy tests stay the final judge (they run Envoy on the same configuration); these
//! catch routing regressions without Envoy, and name the step that went wrong.
//!
//! This file holds the harness (`Mesh`) and the assertions on outcomes; `fixtures.rs` the
//! scenarios several files share; the other modules the tests, one topic each.

#[path = "../support/mod.rs"]
mod support;

mod authorization;
mod bookinfo;
mod fixtures;
mod gateway;
mod gateway_api;
mod gateway_api_filters;
mod matching;
mod route_actions;
mod services;
mod sidecar;
mod tasks;
mod tasks_edge;
mod tcp;
mod tls;

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::Materialized;
use dataflows::model::{
    ErrorCode, MeshConfig, ProvenanceRow, ProxyId, Record, Resource, ResourceKey,
};
use dataflows::simulate::{Call, Outcome, ProxyConfig, SanMatcher, Tls, Transport};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};
use meshflow::sources::files::FileSource;
use meshflow::xds::node::proxy_from_node;
use std::collections::BTreeMap;
use std::path::PathBuf;
use support::{envoy_bootstrap, ProxyNode, TestDir, XdsMode};

/// A config directory served to connected proxies, computed in-process.
struct Mesh {
    _dir: TestDir,
    config: PathBuf,
    source: FileSource,
    engine: Engine,
    epoch: u64,
    held: Materialized,
    bodies: BTreeMap<ResourceKey, (Resource, isize)>,
    /// The problems the file source reported at the last sync.
    errors: Vec<String>,
    /// The dataflow's analysis errors in effect (cross-object checks).
    dataflow_errors: BTreeMap<String, isize>,
    /// Subsets selecting none of their host's endpoints (MF0034), apart.
    idle_subsets: BTreeMap<String, isize>,
    /// What each resource was built from (`explain`), as the dataflow keeps it.
    provenance: BTreeMap<ProvenanceRow, isize>,
}

impl Mesh {
    fn new(label: &str) -> Mesh {
        let dir = TestDir::new(&format!("routing-simulation-{label}"));
        let config = dir.subdir("config");
        Mesh::over(dir, config)
    }

    /// A mesh reading `config` (which lives in `dir` or elsewhere).
    fn over(dir: TestDir, config: PathBuf) -> Mesh {
        let mesh = MeshConfig::default();
        Mesh {
            _dir: dir,
            source: FileSource::new(&config, mesh.clone()),
            config,
            engine: Engine::start(1, mesh),
            epoch: 0,
            held: Materialized::default(),
            bodies: BTreeMap::new(),
            errors: Vec::new(),
            dataflow_errors: BTreeMap::new(),
            idle_subsets: BTreeMap::new(),
            provenance: BTreeMap::new(),
        }
    }

    fn step(&mut self, changes: Vec<(Record, isize)>) {
        self.epoch += 1;
        let out = self
            .engine
            .step(Batch {
                epoch: self.epoch,
                changes,
            })
            .expect("the dataflow engine stopped");
        self.held.apply(&out, false);
        for (e, d) in &out.errors {
            let line = format!("{}: {}", e.object, e.message);
            // The fixtures copy Istio's DestinationRules, whose subsets name versions the
            // fixtures do not all deploy: MF0034 says so, apart from what tests assert on.
            let kept = match e.code {
                ErrorCode::SubsetSelectsNothing => &mut self.idle_subsets,
                _ => &mut self.dataflow_errors,
            };
            *kept.entry(line).or_default() += d;
        }
        self.dataflow_errors.retain(|_, d| *d != 0);
        self.idle_subsets.retain(|_, d| *d != 0);
        for (row, d) in &out.provenance {
            *self.provenance.entry(row.clone()).or_default() += d;
        }
        self.provenance.retain(|_, d| *d != 0);
        for (r, d) in out.bodies {
            self.bodies.entry(r.key()).or_insert((r, 0)).1 += d;
        }
        self.bodies.retain(|_, (_, d)| *d != 0);
    }

    /// Connects the proxy an Envoy with `node`'s bootstrap presents (parsed by the xDS
    /// server's own `proxy_from_node`); returns its id.
    fn connect(&mut self, node: &ProxyNode) -> ProxyId {
        let proxy = proxy_from_node(Some(&node_of(node))).expect("a valid node");
        let id = proxy.id.clone();
        self.step(vec![(Record::Proxy(proxy), 1)]);
        id
    }

    /// Connects `node` as a sidecar whose outbound traffic is captured (the Envoy tests'
    /// proxies run without capture: `INTERCEPTION_MODE: NONE`).
    fn connect_captured(&mut self, node: &ProxyNode) -> ProxyId {
        let mut node = node_of(node);
        if let Some(m) = node.metadata.as_mut() {
            m.fields.remove("INTERCEPTION_MODE");
        }
        let proxy = proxy_from_node(Some(&node)).expect("a valid node");
        let id = proxy.id.clone();
        self.step(vec![(Record::Proxy(proxy), 1)]);
        id
    }

    /// Rescans the config directory (as the server's watcher does) and applies the changes.
    fn sync(&mut self) {
        let rescan = self.source.rescan();
        self.errors = rescan.errors;
        self.step(rescan.changes);
    }

    /// As `sync`, asserting the directory holds no invalid config.
    fn sync_clean(&mut self) {
        self.sync();
        assert!(
            self.errors.is_empty(),
            "config problems: {:#?}",
            self.errors
        );
    }

    /// What `proxy` holds now, decoded.
    fn proxy(&self, proxy: &str) -> ProxyConfig {
        let snapshot = self.held.snapshot();
        let keys = snapshot
            .get(proxy)
            .unwrap_or_else(|| panic!("{proxy} holds nothing"));
        ProxyConfig::from_resources(keys.keys().map(|k| {
            &self
                .bodies
                .get(k)
                .unwrap_or_else(|| panic!("no body for {k:?}"))
                .0
        }))
    }

    /// Asserts the dataflow reports exactly one error, containing every one of `needles`.
    fn assert_one_error(&self, needles: &[&str]) {
        let reported: Vec<&String> = self.dataflow_errors.keys().collect();
        assert_eq!(reported.len(), 1, "{reported:?}");
        for n in needles {
            assert!(reported[0].contains(n), "{n:?} not in {reported:?}");
        }
    }

    /// Asserts the dataflow reports exactly one error per entry of `each`, in order (of the
    /// errors sorted), each containing every one of its needles.
    fn assert_errors(&self, each: &[&[&str]]) {
        let reported: Vec<&String> = self.dataflow_errors.keys().collect();
        assert_eq!(reported.len(), each.len(), "{reported:?}");
        for (r, needles) in reported.iter().zip(each) {
            for n in *needles {
                assert!(r.contains(n), "{n:?} not in {r:?}");
            }
        }
    }

    /// Asserts the dataflow reports no error.
    fn assert_no_errors(&self) {
        assert!(
            self.dataflow_errors.is_empty(),
            "{:?}",
            self.dataflow_errors
        );
    }

    /// Syncs, then simulates `call` from `proxy`.
    fn send(&mut self, proxy: &str, call: &Call) -> Outcome {
        self.sync_clean();
        self.proxy(proxy).simulate(call)
    }
}

/// The xDS `Node` of the bootstrap the Envoy tests give `node` (id and string metadata).
fn node_of(node: &ProxyNode) -> Node {
    let bootstrap = envoy_bootstrap(node, ([127, 0, 0, 1], 1).into(), XdsMode::Delta);
    let json = &bootstrap["node"];
    let string = |s: &str| Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    };
    let mut metadata = Struct::default();
    for (key, value) in json["metadata"].as_object().expect("node metadata") {
        let value = match value {
            serde_json::Value::Object(map) => Value {
                kind: Some(Kind::StructValue(Struct {
                    fields: map
                        .iter()
                        .map(|(k, v)| (k.clone(), string(v.as_str().unwrap_or_default())))
                        .collect(),
                })),
            },
            other => string(other.as_str().unwrap_or_default()),
        };
        metadata.fields.insert(key.clone(), value);
    }
    Node {
        id: json["id"].as_str().expect("node id").to_owned(),
        cluster: json["cluster"].as_str().unwrap_or_default().to_owned(),
        metadata: Some(metadata),
        ..Default::default()
    }
}

/// The EDS assignments `proxy` holds, by name.
fn eds_names(config: &ProxyConfig) -> Vec<String> {
    config.endpoints.keys().cloned().collect()
}

fn assert_holds_all(what: &str, held: &[String], expected: &[String]) {
    let missing: Vec<&String> = expected.iter().filter(|e| !held.contains(e)).collect();
    assert!(
        missing.is_empty(),
        "{what}: missing {missing:?} in {held:?}"
    );
}

/// The cluster `outcome` routes to alone, with the endpoints behind it.
#[track_caller]
fn assert_routes_to(outcome: &Outcome, cluster: &str, endpoints: &[String]) {
    assert_eq!(outcome.cluster(), Some(cluster), "{outcome:#?}");
    assert_eq!(outcome.endpoints(), endpoints, "{outcome:#?}");
    assert_eq!(outcome.status(), None, "forwarded: {outcome:#?}");
}

#[track_caller]
fn assert_status(outcome: &Outcome, status: u32) {
    assert_eq!(outcome.status(), Some(status), "{outcome:#?}");
}

/// Syncs, sends `call` from `proxy` and asserts it reaches `cluster` and only `pod`.
fn routes_to(mesh: &mut Mesh, proxy: &str, call: &Call, cluster: &str, pod: &String) {
    let o = mesh.send(proxy, call);
    assert_routes_to(&o, cluster, std::slice::from_ref(pod));
}

/// The TLS context connections to `cluster` (one of `outcome`'s upstreams) are made with,
/// asserting every endpoint uses the cluster's own.
#[track_caller]
fn upstream_tls(outcome: &Outcome, cluster: &str) -> Option<Tls> {
    let up = outcome
        .upstreams()
        .iter()
        .find(|u| u.cluster == cluster)
        .unwrap_or_else(|| panic!("no upstream {cluster}: {outcome:#?}"));
    assert!(up.socket_matches.is_empty(), "{up:#?}");
    for (address, t) in up.transports() {
        assert_eq!(t, &up.transport, "{address}");
    }
    match &up.transport {
        Transport::Plaintext => None,
        Transport::Tls(t) => Some((**t).clone()),
        other => panic!("{other:?}"),
    }
}

fn sans(pairs: &[(&str, &str)]) -> Vec<SanMatcher> {
    pairs.iter().map(|(t, m)| SanMatcher::new(t, m)).collect()
}
