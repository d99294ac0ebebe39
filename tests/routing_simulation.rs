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

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::Materialized;
use dataflows::model::{
    ConfigKey, Holder, MeshConfig, ProvenanceRow, ProxyId, Record, Resource, ResourceKey,
    ResourceType,
};
use dataflows::simulate::{
    Call, Cors, Discovery, Fault, FaultAbort, HeaderEdit, HeaderLevel, HeaderOp, HostRewrite,
    Mirror, NoMatch, Outcome, ProxyConfig, SanMatcher, Source, Tls, Transport, ALL,
};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use meshflow::sources::files::FileSource;
use meshflow::xds::node::proxy_from_node;
use support::reviews::{client_sidecar_yaml, Binding, Reviews, FQDN};
use support::{envoy_bootstrap, write_config, ProxyNode, TestDir, XdsMode};

// ---------------------------------------------------------------------------------------------
// Harness: config directory → file source → dataflow engine → one proxy's resources
// ---------------------------------------------------------------------------------------------

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
            *self.dataflow_errors.entry(line).or_default() += d;
        }
        self.dataflow_errors.retain(|_, d| *d != 0);
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

// ---------------------------------------------------------------------------------------------
// The `reviews` fixture of tests/envoy_sidecar.rs, envoy_gateway.rs, envoy_faults.rs and
// debug_envoy.rs
// ---------------------------------------------------------------------------------------------

/// The Envoy tests take a free port; no socket is opened here, so any port will do.
const PORT: u16 = 18080;
const JASON: (&str, &str) = ("end-user", "jason");

/// The `reviews` mesh of the Envoy tests: Service, Pods and EndpointSlice for `versions`, and a
/// DestinationRule with a subset per version.
fn reviews_mesh(mesh: &Mesh, service_port: u16, versions: &[&str]) -> Reviews {
    let reviews = Reviews::new(60, service_port, &mesh.config);
    reviews.write_service();
    reviews.write_pods(versions);
    reviews.write_endpoints(versions);
    reviews.write_destination_rule(versions);
    reviews
}

/// `ip:port` of pod `reviews-<version>`.
fn pod(reviews: &Reviews, version: &str) -> String {
    format!("{}:{}", reviews.pod_ip(version), reviews.backend_port())
}

/// The sidecar scenario's setup (envoy_sidecar.rs, envoy_faults.rs, debug_envoy.rs): pod
/// `client-abc` without capture, scoped by Sidecar `client` (egress listener bound to
/// `127.0.0.1:PORT`); the `reviews` Service on that same port.
fn sidecar_setup(label: &str, versions: &[&str]) -> (Mesh, Reviews, ProxyId) {
    let mut mesh = Mesh::new(label);
    let reviews = reviews_mesh(&mesh, PORT, versions);
    write_config(&mesh.config, "sidecar.yaml", &client_sidecar_yaml(PORT));
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let id = mesh.connect(&node);
    mesh.sync_clean();
    (mesh, reviews, id)
}

/// A request through the sidecar's bound egress listener with `Host: host`.
fn via_sidecar(host: &str, path: &str) -> Call {
    Call::get(host, PORT, path).to_address("127.0.0.1")
}

/// Mirrors `envoy_sidecar.rs` step 1 (`sidecar_follows_config_changes_over_{delta,sotw}_ads`):
/// without a VirtualService the sidecar's listener `127.0.0.1_PORT` and route configuration
/// `PORT` send `/reviews/1` to the whole `reviews` cluster (both pods), under every host alias;
/// the proxy holds the EDS assignments of the service and of subsets v1 and v2.
#[test]
fn sidecar_default_route_reaches_both_pods_under_every_alias() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-default", &["v1", "v2"]);
    let both = [pod(&reviews, "v1"), pod(&reviews, "v2")];
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.listener, Some(format!("127.0.0.1_{PORT}")));
    assert_eq!(
        o.captured_by, None,
        "INTERCEPTION_MODE NONE: no virtualOutbound"
    );
    assert_eq!(o.route_config, Some(PORT.to_string()));
    assert_eq!(o.virtual_host, Some(format!("{FQDN}:{PORT}")));
    assert_routes_to(&o, &reviews.cluster(""), &both);
    for alias in [
        "reviews.default".to_owned(),
        FQDN.to_owned(),
        format!("reviews:{PORT}"),
        format!("{FQDN}:{PORT}"),
    ] {
        let o = mesh.send(&proxy, &via_sidecar(&alias, "/"));
        assert_routes_to(&o, &reviews.cluster(""), &both);
    }
    assert_holds_all(
        "EDS assignments",
        &eds_names(&mesh.proxy(&proxy)),
        &["", "v1", "v2"].map(|s| reviews.cluster(s)),
    );
}

/// Mirrors `envoy_sidecar.rs` step 2: with VirtualService `reviews` (jason → v2, `/reviews` →
/// v1 100 / v2 0), `end-user: jason` reaches only v2, `/reviews/1` only v1 (the 0-weight
/// subset is not a candidate), and `/ratings/1` matches no route: 404.
#[test]
fn sidecar_header_and_prefix_routes_pick_subsets() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-subsets", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    let jason = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_eq!(jason.route.as_ref().map(|r| r.name.as_str()), Some("jason"));
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let split = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(
        split.route.as_ref().map(|r| r.name.as_str()),
        Some("reviews-split")
    );
    assert_routes_to(&split, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let unmatched = mesh.send(&proxy, &via_sidecar("reviews", "/ratings/1"));
    assert_eq!(unmatched.result, Err(NoMatch::NoRoute));
    assert_status(&unmatched, 404);
}

/// Mirrors `envoy_sidecar.rs` step 3 and `envoy_faults.rs`
/// (`restart_under_load_fails_no_request_and_delta_resumes_with_only_changes`): the split
/// shifted to v1 0 / v2 100 sends `/reviews/1` only to v2.
#[test]
fn sidecar_weight_shift_moves_reviews_to_v2() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-shift", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    let before = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(before.cluster(), Some(reviews.cluster("v1").as_str()));
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let after = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&after, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy_sidecar.rs` steps 4–5: a third version (pod, endpoint, subset) takes all of
/// `/reviews` while jason stays on v2; when v3's endpoint leaves the slice its subset has no
/// endpoint and Envoy answers 503 (v3 gets nothing).
#[test]
fn sidecar_new_subset_v3_takes_traffic_then_answers_503_without_endpoints() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-v3", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    mesh.sync_clean();
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let v3 = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&v3, &reviews.cluster("v3"), &[pod(&reviews, "v3")]);
    let jason = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    reviews.write_endpoints(&["v1", "v2"]);
    let gone = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(gone.cluster(), Some(reviews.cluster("v3").as_str()));
    assert!(gone.endpoints().is_empty(), "{gone:#?}");
    assert_status(&gone, 503);
}

/// Istio's match conditions beyond URI and headers: `method`, `queryParams`, `ignoreUriCase`,
/// `withoutHeaders` (empty: the header must be absent), and `port` (a match for another port
/// never applies here, so a route with only that match is not on this port at all).
#[test]
fn sidecar_method_query_case_absence_and_port_conditions() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-conditions", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: conditions, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{method: {exact: POST}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{queryParams: {v: {exact: '2'}}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{uri: {prefix: /REVIEWS}, ignoreUriCase: true, withoutHeaders: {x-canary: {}}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n  - match: [{port: 1}]\n    route: [{destination: {host: reviews, subset: v2}}]\n";
    write_config(&mesh.config, "conditions.yaml", vs);
    let get = |path: &str| via_sidecar("reviews", path);
    let o = mesh.send(&proxy, &get("/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&proxy, &get("/reviews/1").header("x-canary", "yes"));
    assert_status(&o, 404);
    let o = mesh.send(&proxy, &get("/x").method("POST"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &get("/x?v=2"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &get("/x?v=3"));
    assert_status(&o, 404);
    let o = mesh.send(&proxy, &get("/x"));
    assert_status(&o, 404);
}

/// `withoutHeaders` with a value matches a request that lacks the header (it does not carry
/// that value), as Istio translates it (`treat_missing_header_as_empty`): a guard route
/// answering 403 to every request without the right key stops a request with no key at all,
/// and only the right key reaches the service.
#[test]
fn without_headers_value_match_takes_requests_lacking_the_header() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-without-value", &["v1"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: guard, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{withoutHeaders: {x-api-key: {exact: s3cret}}}]\n    directResponse: {status: 403}\n  - route: [{destination: {host: reviews, subset: v1}}]\n";
    write_config(&mesh.config, "guard.yaml", vs);
    let get = || via_sidecar("reviews", "/reviews/1");
    assert_status(&mesh.send(&proxy, &get()), 403);
    assert_status(&mesh.send(&proxy, &get().header("x-api-key", "guess")), 403);
    let o = mesh.send(&proxy, &get().header("x-api-key", "s3cret"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    // Istio's catch-all forms, `regex: "*"` and an empty prefix, mean "present": the
    // request without the header is the one answered 403.
    for catch_all in ["{regex: \"*\"}", "{prefix: \"\"}"] {
        write_config(
            &mesh.config,
            "guard.yaml",
            &vs.replace("{exact: s3cret}", catch_all),
        );
        assert_status(&mesh.send(&proxy, &get()), 403);
        let o = mesh.send(&proxy, &get().header("x-api-key", "anything"));
        assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
        assert!(mesh.errors.is_empty(), "{catch_all}: {:?}", mesh.errors);
    }
}

/// Redirects and direct responses are answered by the proxy: the simulation sees the status
/// Envoy sends without any upstream (tests/envoy_route_actions.rs checks the same in Envoy).
#[test]
fn sidecar_redirect_and_direct_response_answer_without_an_upstream() {
    let (mut mesh, _reviews, proxy) = sidecar_setup("sidecar-answers", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: answers, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{uri: {exact: /old}}]\n    redirect: {uri: /new, redirectCode: 308}\n  - match: [{uri: {exact: /health}}]\n    directResponse: {status: 204}\n";
    write_config(&mesh.config, "answers.yaml", vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/old"));
    assert_status(&o, 308);
    assert!(o.upstreams().is_empty(), "{o:#?}");
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/health"));
    assert_status(&o, 204);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/other"));
    assert_status(&o, 404);
}

/// `outboundTrafficPolicy.mode` of a namespace's Sidecar, for a captured sidecar: with
/// ALLOW_ANY (the default) a host outside the registry passes through to its original
/// destination; with REGISTRY_ONLY it does not (Istio's `block_all` virtual host answers
/// 502), and a connection to a port no service has goes to `BlackHoleCluster`.
#[test]
fn captured_sidecar_registry_only_blocks_unknown_hosts() {
    let mut mesh = Mesh::new("registry-only");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let unknown = Call::get("unknown.example.com", PORT, "/").to_address("203.0.113.7");
    let other_port = Call::get("unknown.example.com", 5555, "/").to_address("203.0.113.7");
    let sidecar = |mode: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: default}}\nspec:\n  egress: [{{hosts: ['./*']}}]\n  outboundTrafficPolicy: {{mode: {mode}}}\n")
    };
    write_config(&mesh.config, "sidecar.yaml", &sidecar("ALLOW_ANY"));
    let o = mesh.send(&proxy, &unknown);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let known = mesh.send(
        &proxy,
        &Call::get("reviews", PORT, "/").to_address("203.0.113.7"),
    );
    assert_routes_to(&known, &reviews.cluster(""), &[pod(&reviews, "v1")]);

    write_config(&mesh.config, "sidecar.yaml", &sidecar("REGISTRY_ONLY"));
    let o = mesh.send(&proxy, &unknown);
    assert_status(&o, 502);
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    let known = mesh.send(
        &proxy,
        &Call::get("reviews", PORT, "/").to_address("203.0.113.7"),
    );
    assert_routes_to(&known, &reviews.cluster(""), &[pod(&reviews, "v1")]);
}

/// A VirtualService host that is no service's gets a virtual host of its own, as in Istio: an
/// alias written beside a service host (`reviews.example.com` beside `reviews`) routes on the
/// service's port through the sidecar's bound egress listener, where it answered 404 before.
#[test]
fn an_alias_beside_a_service_host_is_routed_by_the_virtual_service() {
    let (mut mesh, reviews, proxy) = sidecar_setup("vs-alias", &["v1", "v2"]);
    let alias = via_sidecar("reviews.example.com", "/reviews/1");
    assert_status(&mesh.send(&proxy, &alias), 404);
    write_config(
        &mesh.config,
        "alias.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: alias, namespace: default}\nspec:\n  hosts: [reviews, reviews.example.com]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v2}\n",
    );
    let o = mesh.send(&proxy, &alias);
    assert_eq!(o.virtual_host, Some(format!("reviews.example.com:{PORT}")));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// A VirtualService whose only host is outside the registry (no ServiceEntry) routes that host
/// on a captured sidecar's port 80, as Istio does: the request that passed through to its
/// original destination goes to the VirtualService's destination instead, and passes through
/// again once the VirtualService is deleted. A destination without a port is taken at port 80
/// there (Istio's sidecars know services at the route configuration's port only), where
/// reviews has no cluster: 503 until the destination names reviews' port.
#[test]
fn a_virtual_service_for_a_host_outside_the_registry_routes_it_on_port_80() {
    let mut mesh = Mesh::new("vs-hostless");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    write_config(
        &mesh.config,
        "web.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80}\n",
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let legacy = Call::get("legacy.example.com", 80, "/reviews/1").to_address("203.0.113.7");
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    write_config(
        &mesh.config,
        "legacy.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: legacy, namespace: default}\nspec:\n  hosts: [legacy.example.com]\n  http:\n  - route:\n    - destination: {host: reviews}\n",
    );
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.virtual_host.as_deref(), Some("legacy.example.com:80"));
    assert_eq!(
        o.cluster(),
        Some(format!("outbound|80||{FQDN}").as_str()),
        "{o:#?}"
    );
    assert_status(&o, 503);
    write_config(
        &mesh.config,
        "legacy.yaml",
        &format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: legacy, namespace: default}}\nspec:\n  hosts: [legacy.example.com]\n  http:\n  - route:\n    - destination: {{host: reviews, port: {{number: {PORT}}}}}\n"),
    );
    let o = mesh.send(&proxy, &legacy);
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    std::fs::remove_file(mesh.config.join("legacy.yaml")).expect("remove legacy.yaml");
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// The mesh config's `outboundTrafficPolicy.mode` for a captured sidecar with no mode of its
/// own, read by the mesh config source as `serve --mesh-config` does: REGISTRY_ONLY blocks a
/// host outside the registry (502, and `BlackHoleCluster` for a port no service has); a
/// namespace Sidecar that says ALLOW_ANY overrides it; one that says nothing does not.
#[test]
fn mesh_outbound_policy_applies_unless_the_sidecar_sets_its_own() {
    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let mut mesh = Mesh::new("mesh-registry-only");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let mut set_mode = |mesh: &mut Mesh, mode: &str| {
        let yaml = format!("outboundTrafficPolicy: {{mode: {mode}}}\n");
        let report = state.update(&yaml, None).expect("a new config");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        mesh.step(report.changes);
    };
    let unknown = Call::get("unknown.example.com", PORT, "/").to_address("203.0.113.7");
    let other_port = Call::get("unknown.example.com", 5555, "/").to_address("203.0.113.7");
    let known = Call::get("reviews", PORT, "/").to_address("203.0.113.7");

    set_mode(&mut mesh, "REGISTRY_ONLY");
    assert_status(&mesh.send(&proxy, &unknown), 502);
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    assert_routes_to(
        &mesh.send(&proxy, &known),
        &reviews.cluster(""),
        &[pod(&reviews, "v1")],
    );

    let sidecar = |mode: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: default}}\nspec:\n  egress: [{{hosts: ['./*']}}]\n{mode}")
    };
    write_config(
        &mesh.config,
        "sidecar.yaml",
        &sidecar("  outboundTrafficPolicy: {mode: ALLOW_ANY}\n"),
    );
    mesh.sync_clean();
    let o = mesh.send(&proxy, &unknown);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");

    write_config(&mesh.config, "sidecar.yaml", &sidecar(""));
    mesh.sync_clean();
    assert_status(&mesh.send(&proxy, &unknown), 502);

    set_mode(&mut mesh, "ALLOW_ANY");
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// Analysis across objects: a route to a subset no DestinationRule defines is reported (Envoy
/// answers 503 for it), naming the VirtualService, and the report goes when a rule defines it.
#[test]
fn a_route_to_an_undefined_subset_is_reported_until_a_rule_defines_it() {
    let (mut mesh, reviews, proxy) = sidecar_setup("undefined-subset", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_status(&o, 503);
    mesh.assert_one_error(&[
        "VirtualService/default/reviews",
        "subset \"v3\"",
        "no DestinationRule",
    ]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    mesh.sync_clean();
    mesh.assert_no_errors();
}

/// Mirrors `envoy_sidecar.rs` steps 6–7: deleting the VirtualService restores the default
/// route over both pods; when v1's endpoint leaves, only v2 is behind it.
#[test]
fn sidecar_deleting_the_virtual_service_restores_the_default_route() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-delete", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let routed = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(routed.cluster(), Some(reviews.cluster("v3").as_str()));
    reviews.delete_virtual_service();
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.route.as_ref().map(|r| r.name.as_str()), Some("default"));
    assert_routes_to(
        &o,
        &reviews.cluster(""),
        &[pod(&reviews, "v1"), pod(&reviews, "v2")],
    );
    reviews.write_endpoints(&["v2"]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v2")]);
}

/// Mirrors `debug_envoy.rs` (`debug_views_match_envoy_over_{delta,sotw}_ads`): with the split
/// v1 90 / v2 10, `/reviews/1` is a weighted route over both subsets, and subset v1's EDS
/// assignment holds exactly pod v1.
#[test]
fn sidecar_weighted_split_reports_both_subsets_with_their_weights() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-weights", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 90), ("v2", 10)]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(
        o.clusters(),
        [
            (reviews.cluster("v1"), Some(90)),
            (reviews.cluster("v2"), Some(10))
        ]
    );
    let v1 = &o.upstreams()[0];
    let addresses: Vec<&str> = v1.endpoints.iter().map(|e| e.address.as_str()).collect();
    assert_eq!(addresses, [pod(&reviews, "v1")]);
}

/// Mirrors `envoy_faults.rs` (`invalid_edits_and_atomic_directory_swaps_never_retract_valid_config`):
/// the directory is a ConfigMap-style volume (`..data` symlink); swapping in a VirtualService
/// whose weights add up to 150 is reported and leaves the last valid routes (`/reviews/1` → v1);
/// swapping in the fixed split moves it to v2.
#[test]
fn invalid_edit_keeps_the_last_valid_routes_and_the_fix_applies() {
    let dir = TestDir::new("routing-simulation-hiccups");
    let root = dir.subdir("config");
    let v1 = root.join("..v1");
    std::fs::create_dir_all(&v1).unwrap();
    let mut mesh = Mesh::over(dir, root.clone());
    let reviews = Reviews::new(60, PORT, &v1);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    write_config(&v1, "sidecar.yaml", &client_sidecar_yaml(PORT));
    std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
    for entry in std::fs::read_dir(&v1).unwrap() {
        let name = entry.unwrap().file_name();
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(Path::new("..data").join(&name), root.join(&name)).unwrap();
        }
    }
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let proxy = mesh.connect(&node);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.cluster(), Some(reviews.cluster("v1").as_str()));

    // Swap in a copy whose VirtualService is invalid, then one with the fixed split.
    let vs = std::fs::read_to_string(v1.join("reviews-virtualservice.yaml")).unwrap();
    let swap_in = |version: &str, vs_text: &str| {
        let next = root.join(version);
        std::fs::create_dir_all(&next).unwrap();
        for entry in std::fs::read_dir(&v1).unwrap() {
            let e = entry.unwrap();
            std::fs::copy(e.path(), next.join(e.file_name())).unwrap();
        }
        std::fs::write(next.join("reviews-virtualservice.yaml"), vs_text).unwrap();
        std::os::unix::fs::symlink(version, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    };
    let broken = vs.replace("weight: 0", "weight: 50");
    assert_ne!(broken, vs);
    swap_in("..v2", &broken);
    mesh.sync();
    assert!(
        mesh.errors
            .iter()
            .any(|e| e.contains("weights add up to 150")),
        "the error is reported: {:?}",
        mesh.errors
    );
    let kept = mesh
        .proxy(&proxy)
        .simulate(&via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&kept, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    let fixed = vs
        .replace("weight: 100", "weight: X")
        .replace("weight: 0", "weight: 100")
        .replace("weight: X", "weight: 0");
    swap_in("..v3", &fixed);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

// ---------------------------------------------------------------------------------------------
// The gateway scenario of tests/envoy_gateway.rs
// ---------------------------------------------------------------------------------------------

const GATEWAY_HOST: &str = "reviews.example.com";

/// Gateway `bookinfo-gateway` on `127.0.0.1:PORT` for any host, selecting the router
/// `istio-ingressgateway-abc`; the `reviews` Service on 9080.
fn gateway_setup(label: &str, versions: &[&str]) -> (Mesh, Reviews, ProxyId, Binding) {
    let mut mesh = Mesh::new(label);
    let reviews = reviews_mesh(&mesh, 9080, versions);
    let gateway = format!(
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: bookinfo-gateway
  namespace: default
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: {PORT}
      name: http
      protocol: HTTP
    bind: 127.0.0.1
    hosts:
    - \"*\"
"
    );
    write_config(&mesh.config, "gateway.yaml", &gateway);
    // The gateway's pod, which the Gateway's selector finds.
    write_config(
        &mesh.config,
        "gateway-pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: istio-ingressgateway-abc, namespace: istio-system, labels: {istio: ingressgateway}}\nstatus: {podIP: 127.0.0.1}\n",
    );
    let node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let id = mesh.connect(&node);
    mesh.sync_clean();
    let binding = Binding::Gateway {
        gateway: "bookinfo-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    (mesh, reviews, id, binding)
}

fn via_gateway(host: &str, path: &str) -> Call {
    Call::get(host, PORT, path).to_address("127.0.0.1")
}

/// Analysis across objects: a VirtualService bound to a gateway no Gateway defines reaches no
/// proxy through it; that is reported naming the VirtualService and the gateway, and the
/// report goes when the Gateway exists (and the route works).
#[test]
fn a_virtual_service_bound_to_an_undefined_gateway_is_reported_until_it_exists() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("undefined-gateway", &["v1"]);
    let binding = Binding::Gateway {
        gateway: "other-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_status(&o, 404);
    mesh.assert_one_error(&[
        "VirtualService/default/reviews",
        "gateway default/other-gateway is defined by no Gateway",
    ]);
    // The same VirtualService through the Gateway that exists: routed, nothing reported.
    let binding = Binding::Gateway {
        gateway: "bookinfo-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// `sourceNamespace`: a match for sidecars of namespace `default` applies to the sidecar in
/// `default` only; at the gateway (whose routes are not per namespace) it never applies.
#[test]
fn match_source_namespace_applies_to_that_namespace_only() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("source-namespace", &["v1", "v2"]);
    let node = |ns: &str| ProxyNode::sidecar("client-abc", ns, &reviews.ip(20), &[("app", "c")]);
    let here = mesh.connect_captured(&node("default"));
    let there = mesh.connect_captured(&node("other"));
    let vs = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews.default.svc.cluster.local, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{sourceNamespace: default}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
    );
    write_config(&mesh.config, "split.yaml", &vs);
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let o = mesh.send(&here, &call);
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&there, &call);
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
}

/// Syncs, sends `call` from `proxy` and asserts it reaches `cluster` and only `pod`.
fn routes_to(mesh: &mut Mesh, proxy: &str, call: &Call, cluster: &str, pod: &String) {
    let o = mesh.send(proxy, call);
    assert_routes_to(&o, cluster, std::slice::from_ref(pod));
}

/// `sourceLabels`: a match for proxies labelled `app: productpage` applies to the sidecar
/// carrying that label and to no other, at a gateway as at a sidecar (the gateway's own
/// labels decide); relabelling the selector moves each proxy's route, and a route whose only
/// match selects a label nobody carries reaches no one.
#[test]
fn match_source_labels_apply_to_the_proxies_carrying_them() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("source-labels", &["v1", "v2"]);
    let node = |name: &str, app: &str, ip: u8| {
        ProxyNode::sidecar(name, "default", &reviews.ip(ip), &[("app", app)])
    };
    let productpage = mesh.connect_captured(&node("productpage-abc", "productpage", 20));
    let ratings = mesh.connect_captured(&node("ratings-abc", "ratings", 21));
    let vs = |selector: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews.default.svc.cluster.local, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{sourceLabels: {selector}}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
        )
    };
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let at_gateway = via_gateway(GATEWAY_HOST, "/");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));

    write_config(&mesh.config, "split.yaml", &vs("{app: productpage}"));
    routes_to(&mut mesh, &productpage, &call, &v2, &pod2);
    routes_to(&mut mesh, &ratings, &call, &v1, &pod1);
    routes_to(&mut mesh, &gateway, &at_gateway, &v1, &pod1);

    write_config(&mesh.config, "split.yaml", &vs("{app: ratings}"));
    routes_to(&mut mesh, &productpage, &call, &v1, &pod1);
    routes_to(&mut mesh, &ratings, &call, &v2, &pod2);

    // The gateway's own labels: the router carries `istio: ingressgateway`.
    write_config(&mesh.config, "split.yaml", &vs("{istio: ingressgateway}"));
    routes_to(&mut mesh, &gateway, &at_gateway, &v2, &pod2);
    routes_to(&mut mesh, &ratings, &call, &v1, &pod1);

    // Every label of the selector must be carried.
    write_config(
        &mesh.config,
        "split.yaml",
        &vs("{app: productpage, version: v9}"),
    );
    for proxy in [&productpage, &ratings] {
        routes_to(&mut mesh, proxy, &call, &v1, &pod1);
    }
    routes_to(&mut mesh, &gateway, &at_gateway, &v1, &pod1);
    mesh.assert_no_errors();
}

/// Two Gateways selecting one router, an HTTP server and a TCP server on the same address
/// and port: the HTTP server keeps the port (its routes still answer), and the TCP server of
/// the other Gateway is reported by name (Istio's ConflictingGateways) rather than vanishing;
/// the report goes with the second Gateway.
#[test]
fn a_tcp_server_on_another_gateways_http_port_is_reported() {
    let (mut mesh, reviews, gateway, binding) = gateway_setup("gateway-port-clash", &["v1"]);
    reviews.write_plain_routing(&binding);
    let tcp_gateway = format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: tcp-gateway, namespace: default}}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: {PORT}, name: tcp, protocol: TCP}}\n    bind: 127.0.0.1\n    hosts: ['*']\n"
    );
    write_config(&mesh.config, "tcp-gateway.yaml", &tcp_gateway);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_one_error(&[
        "Gateway/default/tcp-gateway",
        "spec.servers[0].port",
        &format!("port {PORT}"),
        "HTTP server's (Gateway default/bookinfo-gateway)",
    ]);
    std::fs::remove_file(mesh.config.join("tcp-gateway.yaml")).expect("remove");
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// A DestinationRule with a `workloadSelector` applies to the proxies of its namespace it
/// selects, ahead of the rule without one: its subset `v2` (here selecting the v1 pod) is
/// the productpage sidecar's, while the ratings sidecar keeps the namespace's rule (v2 is
/// the v2 pod), and a sidecar of another namespace carrying the label is not selected.
#[test]
fn destination_rule_workload_selector_picks_the_rule_per_workload() {
    let (mut mesh, reviews, _, _) = gateway_setup("dr-workload-selector", &["v1", "v2"]);
    let node = |name: &str, ns: &str, app: &str, ip: u8| {
        ProxyNode::sidecar(name, ns, &reviews.ip(ip), &[("app", app)])
    };
    let productpage = mesh.connect_captured(&node("productpage-abc", "default", "productpage", 20));
    let ratings = mesh.connect_captured(&node("ratings-abc", "default", "ratings", 21));
    let elsewhere = mesh.connect_captured(&node("productpage-xyz", "other", "productpage", 22));
    write_config(
        &mesh.config,
        "vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: to-v2, namespace: default}\nspec:\n  hosts: [reviews.default.svc.cluster.local]\n  http:\n  - route: [{destination: {host: reviews.default.svc.cluster.local, subset: v2}}]\n",
    );
    write_config(
        &mesh.config,
        "dr-productpage.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews-for-productpage, namespace: default}\nspec:\n  host: reviews\n  workloadSelector: {matchLabels: {app: productpage}}\n  subsets:\n  - {name: v1, labels: {version: v1}}\n  - {name: v2, labels: {version: v1}}\n",
    );
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let v2 = reviews.cluster("v2");
    let o = mesh.send(&productpage, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v1")]);
    let o = mesh.send(&ratings, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
    let o = mesh.send(&elsewhere, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
    // Without the selector's rule, every proxy is back on the namespace's rule.
    std::fs::remove_file(mesh.config.join("dr-productpage.yaml")).expect("remove");
    let o = mesh.send(&productpage, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
}

/// A match's `gateways` (Istio's egress-gateway pattern): one VirtualService bound to the
/// gateway and to `mesh`, whose first route matches only for `mesh`. Through the gateway that
/// route does not apply (v1); from a sidecar it does (v2).
#[test]
fn match_gateways_split_one_virtual_service_between_gateway_and_sidecars() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("match-gateways", &["v1", "v2"]);
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let vs = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{gateways: [mesh]}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
    );
    write_config(&mesh.config, "split.yaml", &vs);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(
        &sidecar,
        &Call::get("reviews", 9080, "/").to_address("203.0.113.9"),
    );
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy_gateway.rs` steps 1 and 7 (`gateway_follows_config_changes_over_*`): a
/// Gateway without a bound VirtualService routes nothing (404), again after the
/// VirtualService is deleted.
#[test]
fn gateway_without_virtual_service_answers_404() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-404", &["v1", "v2"]);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(o.listener, Some(format!("127.0.0.1_{PORT}")));
    assert_eq!(o.route_config, Some(format!("http.{PORT}.127.0.0.1")));
    assert_status(&o, 404);
    reviews.write_plain_routing(&binding);
    let routed = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(routed.cluster(), Some(reviews.cluster("").as_str()));
    reviews.delete_virtual_service();
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_status(&o, 404);
}

/// Mirrors `envoy_gateway.rs` steps 2, 8 and 9: the plain (subset-less) route reaches both
/// pods through the service's cluster; with v1's endpoint gone only v2 is left; the proxy
/// holds the EDS assignments of the service and of v1 and v2.
#[test]
fn gateway_plain_route_reaches_the_services_endpoints() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-plain", &["v1", "v2"]);
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(o.virtual_host, Some(format!("{GATEWAY_HOST}:{PORT}")));
    assert_routes_to(
        &o,
        &reviews.cluster(""),
        &[pod(&reviews, "v1"), pod(&reviews, "v2")],
    );
    assert_holds_all(
        "EDS assignments",
        &eds_names(&mesh.proxy(&proxy)),
        &["", "v1", "v2"].map(|s| reviews.cluster(s)),
    );
    reviews.write_endpoints(&["v2"]);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy_gateway.rs` steps 3–4: jason → v2, `/reviews` → v1 (100/0) then v2
/// (0/100), an unmatched path and an unknown host → 404.
#[test]
fn gateway_header_prefix_and_host_routing() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-subsets", &["v1", "v2"]);
    reviews.write_subset_routing(&binding, &[("v1", 100), ("v2", 0)]);
    let jason = mesh.send(
        &proxy,
        &via_gateway(GATEWAY_HOST, "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let split = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&split, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let path = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/ratings/1"));
    assert_eq!(path.result, Err(NoMatch::NoRoute));
    assert_status(&path, 404);
    let host = mesh.send(&proxy, &via_gateway("other.example.com", "/reviews/1"));
    assert!(
        matches!(host.result, Err(NoMatch::NoVirtualHost { .. })),
        "{host:#?}"
    );
    assert_status(&host, 404);

    reviews.write_subset_routing(&binding, &[("v1", 0), ("v2", 100)]);
    let shifted = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&shifted, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy_gateway.rs` steps 5–6: subset v3 takes `/reviews` while jason stays on v2;
/// without v3's endpoint the gateway answers 503.
#[test]
fn gateway_new_subset_v3_then_503_without_endpoints() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-v3", &["v1", "v2", "v3"]);
    reviews.write_subset_routing(&binding, &[("v3", 100)]);
    let v3 = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&v3, &reviews.cluster("v3"), &[pod(&reviews, "v3")]);
    let jason = mesh.send(
        &proxy,
        &via_gateway(GATEWAY_HOST, "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    reviews.write_endpoints(&["v1", "v2"]);
    let gone = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(gone.cluster(), Some(reviews.cluster("v3").as_str()));
    assert_status(&gone, 503);
}

// ---------------------------------------------------------------------------------------------
// The bookinfo example of tests/bookinfo.rs
// ---------------------------------------------------------------------------------------------

const BOOKINFO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo/config");

/// `examples/bookinfo/config` as shipped, with the two proxies of `tests/bookinfo.rs`.
fn bookinfo() -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::over(TestDir::new("routing-simulation-bookinfo"), BOOKINFO.into());
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-5d9f7c8b6-x2x7k",
        "istio-system",
        "127.0.0.1",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    let sleep = mesh.connect(&ProxyNode::sidecar(
        "sleep",
        "default",
        "127.0.1.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    (mesh, gateway, sleep)
}

fn bookinfo_cluster(subset: &str, service: &str) -> String {
    format!("outbound|9080|{subset}|{service}.default.svc.cluster.local")
}

/// Mirrors `tests/bookinfo.rs` part 1 (`bookinfo_example_serves_gateway_and_sidecar_over_delta_ads`):
/// through the ingress gateway (`127.0.0.1_8080`, `http.8080.127.0.0.1`), the five paths of
/// VirtualService `bookinfo` reach productpage-v1, other paths get 404, and any host is served.
#[test]
fn bookinfo_gateway_routes_the_productpage_paths() {
    let (mesh, gateway, _) = bookinfo();
    let config = mesh.proxy(&gateway);
    let call = |host: &str, path: &str| Call::get(host, 8080, path).to_address("127.0.0.1");
    let productpage = bookinfo_cluster("", "productpage");
    for path in [
        "/productpage",
        "/static/tailwind/tailwind.css",
        "/login",
        "/logout",
        "/api/v1/products/0",
    ] {
        let o = config.simulate(&call("bookinfo.example.com", path));
        assert_eq!(o.listener.as_deref(), Some("127.0.0.1_8080"), "{path}");
        assert_eq!(
            o.route_config.as_deref(),
            Some("http.8080.127.0.0.1"),
            "{path}"
        );
        assert_routes_to(&o, &productpage, &["127.0.1.41:9080".into()]);
    }
    for path in ["/", "/reviews/0", "/productpage/extra", "/loginx"] {
        let o = config.simulate(&call("bookinfo.example.com", path));
        assert_eq!(o.result, Err(NoMatch::NoRoute), "GET {path}");
        assert_status(&o, 404);
    }
    let other = config.simulate(&call("other.example.org", "/productpage"));
    assert_routes_to(&other, &productpage, &["127.0.1.41:9080".into()]);
}

/// Mirrors `tests/bookinfo.rs` part 2: through the `sleep` sidecar's egress listener
/// (`127.0.0.1_9080`, routes `9080`), `Host: reviews` reaches reviews-v1 (127.0.1.31), jason
/// reaches reviews-v2, and ratings, details and productpage reach their v1 pods under the
/// aliases the Envoy test uses.
#[test]
fn bookinfo_sleep_sidecar_routes_every_service_by_host() {
    let (mesh, _, sleep) = bookinfo();
    let config = mesh.proxy(&sleep);
    let call = |host: &str, path: &str| Call::get(host, 9080, path).to_address("127.0.0.1");
    let reviews = config.simulate(&call("reviews", "/reviews/0"));
    assert_eq!(reviews.listener.as_deref(), Some("127.0.0.1_9080"));
    assert_eq!(reviews.route_config.as_deref(), Some("9080"));
    assert_routes_to(
        &reviews,
        &bookinfo_cluster("v1", "reviews"),
        &["127.0.1.31:9080".into()],
    );
    let jason = config.simulate(&call("reviews", "/reviews/0").header(JASON.0, JASON.1));
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v2", "reviews"),
        &["127.0.1.32:9080".into()],
    );
    for (host, service, endpoint) in [
        ("ratings", "ratings", "127.0.1.21:9080"),
        ("details", "details", "127.0.1.11:9080"),
        ("productpage", "productpage", "127.0.1.41:9080"),
        (
            "reviews.default.svc.cluster.local:9080",
            "reviews",
            "127.0.1.31:9080",
        ),
        ("ratings.default", "ratings", "127.0.1.21:9080"),
    ] {
        let o = config.simulate(&call(host, "/"));
        assert_routes_to(&o, &bookinfo_cluster("v1", service), &[endpoint.into()]);
    }
    assert_holds_all(
        "sidecar EDS",
        &eds_names(&config),
        &[
            bookinfo_cluster("v1", "reviews"),
            bookinfo_cluster("v2", "reviews"),
            bookinfo_cluster("v3", "reviews"),
            bookinfo_cluster("v1", "ratings"),
        ],
    );
    // The sidecar has no capture: nothing listens on other ports.
    assert_eq!(
        config.simulate(&Call::get("reviews", 8080, "/")).result,
        Err(NoMatch::NoListener { port: 8080 })
    );
}

/// Analysis across objects: a route to a host no Service or ServiceEntry defines is reported
/// naming the VirtualService and the host (Envoy answers 503 for it), and the report goes
/// when a ServiceEntry defines the host.
#[test]
fn a_route_to_a_host_nobody_serves_is_reported_until_a_service_defines_it() {
    let (mut mesh, _reviews, _proxy) = sidecar_setup("undefined-host", &["v1"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: to-nowhere, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: nowhere.example.com}\n";
    write_config(&mesh.config, "to-nowhere.yaml", vs);
    mesh.sync_clean();
    mesh.assert_one_error(&[
        "VirtualService/default/to-nowhere",
        "host nowhere.example.com is defined by no Service",
    ]);
    let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: nowhere, namespace: default}\nspec:\n  hosts: [nowhere.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n";
    write_config(&mesh.config, "nowhere.yaml", se);
    mesh.sync_clean();
    mesh.assert_no_errors();
}

/// Analysis across objects: a Gateway whose selector matches no Pod is reported naming the
/// Gateway and its selector (no proxy serves it), and the report goes when such a Pod exists
/// and comes back when it goes.
#[test]
fn a_gateway_no_workload_matches_is_reported_while_it_matches_none() {
    let (mut mesh, _reviews, _gateway, _) = gateway_setup("unselected-gateway", &["v1"]);
    mesh.assert_no_errors();
    std::fs::remove_file(mesh.config.join("gateway-pod.yaml")).expect("remove the pod");
    mesh.sync_clean();
    mesh.assert_one_error(&[
        "Gateway/default/bookinfo-gateway",
        "selector {istio=ingressgateway} matches no workload",
    ]);
}

// ---------------------------------------------------------------------------------------------
// TCP traffic: the `mongo` fixture of tests/envoy_tcp.rs, and examples/tcp-echo
// ---------------------------------------------------------------------------------------------

/// `ip:port` of pod `mongo-<version>` of the fixture (net 60, backends on `PORT + 1`).
fn mongo_pod(version: u8) -> String {
    format!("{}:{}", support::mongo::ip(60, 10 + version), PORT + 1)
}

fn mongo_cluster(subset: &str) -> String {
    format!("outbound|{PORT}|{subset}|mongo.default.svc.cluster.local")
}

/// Mirrors `envoy_tcp.rs` (`tcp_routes_shift_connections_on_sidecar_and_gateway`): the
/// sidecar's bound TCP listener `127.0.0.1_PORT` proxies to the whole `mongo` cluster
/// (both pods) without a VirtualService; `tcp` route weights send every connection to v2,
/// then to v1, then split them 50/50; the gateway's TCP server forwards to subset v2.
#[test]
fn tcp_routes_shift_connections_between_subsets() {
    let mut mesh = Mesh::new("tcp-shift");
    let gateway_port = PORT + 2;
    support::mongo::write_mesh(&mesh.config, 60, PORT, PORT + 1, gateway_port);
    let sidecar = mesh.connect(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &support::mongo::ip(60, 20),
        &[("app", "client")],
    ));
    let conn = Call::connect(PORT).to_address("127.0.0.1");
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.listener.as_deref(), Some(&*format!("127.0.0.1_{PORT}")));
    let routes: Vec<String> = mesh.proxy(&sidecar).routes.into_keys().collect();
    assert!(
        routes.is_empty(),
        "a TCP listener needs no routes: {routes:?}"
    );
    assert_routes_to(&o, &mongo_cluster(""), &[mongo_pod(1), mongo_pod(2)]);

    support::mongo::write_split(&mesh.config, &[("v1", 0), ("v2", 100)]);
    let o = mesh.send(&sidecar, &conn);
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    support::mongo::write_split(&mesh.config, &[("v1", 100), ("v2", 0)]);
    let o = mesh.send(&sidecar, &conn);
    assert_routes_to(&o, &mongo_cluster("v1"), &[mongo_pod(1)]);
    support::mongo::write_split(&mesh.config, &[("v1", 50), ("v2", 50)]);
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(
        o.clusters(),
        vec![
            (mongo_cluster("v1"), Some(50)),
            (mongo_cluster("v2"), Some(50))
        ],
        "{o:#?}"
    );
    assert_eq!(o.endpoints(), vec![mongo_pod(1), mongo_pod(2)]);

    support::mongo::write_gateway_route(&mesh.config, gateway_port, PORT);
    let router = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-abc",
        "default",
        &support::mongo::ip(60, 30),
        &[("istio", "ingressgateway")],
    ));
    let o = mesh.send(
        &router,
        &Call::connect(gateway_port).to_address("127.0.0.1"),
    );
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
}

const TCP_ECHO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tcp-echo/config");

fn tcp_echo_cluster(port: u16, subset: &str) -> String {
    format!("outbound|{port}|{subset}|tcp-echo.default.svc.cluster.local")
}

/// A copy of `examples/tcp-echo/config` as shipped (tests add to it), with a captured
/// sidecar and the ingress gateway.
fn tcp_echo() -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::new("tcp-echo");
    for entry in std::fs::read_dir(TCP_ECHO).expect("examples/tcp-echo/config") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().expect("a file name");
        std::fs::copy(&path, mesh.config.join(name)).expect("copy the example");
    }
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-abc",
        "default",
        "127.0.2.50",
        &[("app", "sleep")],
    ));
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    ));
    mesh.sync_clean();
    (mesh, sidecar, gateway)
}

/// A captured sidecar's `0.0.0.0_9000` tells the services sharing port 9000 apart by the
/// connection's original destination: tcp-echo's cluster IP takes its VirtualService's
/// default route (v1), the ServiceEntry's address block its own cluster, and any other
/// address the HTTP chain of `web` (routed by `Host`). On 9001, tcp-echo's `port` match
/// sends connections to v2, and unknown addresses pass through.
#[test]
fn captured_sidecar_tells_tcp_services_apart_by_destination_address() {
    let (mut mesh, sidecar, _) = tcp_echo();
    let echo_v1 = "127.0.2.11:9000".to_string();
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.90"));
    assert_eq!(o.captured_by.as_deref(), Some("virtualOutbound"), "{o:#?}");
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_9000"));
    assert_routes_to(&o, &tcp_echo_cluster(9000, "v1"), &[echo_v1]);

    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.77"));
    assert_routes_to(
        &o,
        "outbound|9000||db.example.com",
        &["127.0.2.30:9000".to_string()],
    );

    let web = Call::get("web", 9000, "/").to_address("10.96.0.91");
    let o = mesh.send(&sidecar, &web);
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    assert_routes_to(
        &o,
        "outbound|9000||web.default.svc.cluster.local",
        &["127.0.2.20:8080".to_string()],
    );

    let o = mesh.send(&sidecar, &Call::connect(9001).to_address("10.96.0.90"));
    assert_routes_to(
        &o,
        &tcp_echo_cluster(9001, "v2"),
        &["127.0.2.12:9001".to_string()],
    );
    let o = mesh.send(&sidecar, &Call::connect(9001).to_address("203.0.113.9"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// A port that names no protocol (the example's `legacy` on 9000: no name, no `appProtocol`) is told
/// per connection, as Istio's protocol sniffing does, on the chains for the service's own
/// address: plaintext HTTP takes the port's routes (its VirtualService answers `/teapot`
/// itself), other bytes and TLS go to the service's cluster as TCP. Beside it on the same
/// port, tcp-echo stays TCP, `web` keeps the HTTP chain for other addresses; without
/// services sharing it, an unnamed port's unknown destinations pass through, HTTP or not.
#[test]
fn a_port_without_a_protocol_is_told_per_connection() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "legacy-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: legacy, namespace: default}
spec:
  hosts: [legacy]
  http:
  - match: [{uri: {prefix: /teapot}}]
    directResponse: {status: 418}
  - route: [{destination: {host: legacy}}]
",
    );
    let legacy = "outbound|9000||legacy.default.svc.cluster.local";
    let http = Call::get("legacy", 9000, "/teapot").to_address("10.96.0.92");
    let o = mesh.send(&sidecar, &http);
    assert_eq!(
        o.filter_chain.as_deref(),
        Some("legacy.default.svc.cluster.local:9000#http"),
        "{o:#?}"
    );
    assert_status(&o, 418);
    let o = mesh.send(
        &sidecar,
        &Call::get("legacy", 9000, "/").to_address("10.96.0.92"),
    );
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.92"));
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    assert_eq!(o.route_config, None, "proxied as TCP: {o:#?}");
    let o = mesh.send(
        &sidecar,
        &Call::tls(9000, "legacy").to_address("10.96.0.92"),
    );
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    // Its neighbours on the port keep their protocols.
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.90"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    let o = mesh.send(
        &sidecar,
        &Call::get("web", 9000, "/").to_address("10.96.0.91"),
    );
    assert_eq!(
        o.cluster(),
        Some("outbound|9000||web.default.svc.cluster.local"),
        "{o:#?}"
    );
    // A port of its own (9100, named `admin`: no protocol either): HTTP and TCP to the
    // service, anything to another address passes through.
    let admin = "outbound|9100||legacy.default.svc.cluster.local";
    let o = mesh.send(
        &sidecar,
        &Call::get("legacy", 9100, "/").to_address("10.96.0.92"),
    );
    assert_eq!(
        (o.cluster(), o.route_config.as_deref()),
        (Some(admin), Some("9100")),
        "{o:#?}"
    );
    let o = mesh.send(&sidecar, &Call::connect(9100).to_address("10.96.0.92"));
    assert_eq!(
        (o.cluster(), o.route_config.as_deref()),
        (Some(admin), None),
        "{o:#?}"
    );
    for call in [
        Call::connect(9100).to_address("203.0.113.9"),
        Call::get("elsewhere", 9100, "/").to_address("203.0.113.9"),
    ] {
        let o = mesh.send(&sidecar, &call);
        assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    }
}

/// A Sidecar egress listener whose port names no protocol tells HTTP from TCP per
/// connection for every service on it (the listener's protocol governs, as in Istio): on
/// the listener the proxy binds (no capture), an HTTP request takes the port's routes by
/// `Host`, other bytes the one service a bound listener serves (the first by host name).
#[test]
fn an_egress_listener_without_a_protocol_is_told_per_connection() {
    let (mut mesh, _, _) = tcp_echo();
    write_config(
        &mesh.config,
        "bound-sidecar.yaml",
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: bound, namespace: default}
spec:
  workloadSelector: {labels: {app: bound}}
  egress:
  - port: {number: 9000, name: any}
    hosts: ['./*']
",
    );
    let proxy = mesh.connect(&ProxyNode::sidecar(
        "bound-abc",
        "default",
        "127.0.2.60",
        &[("app", "bound")],
    ));
    let o = mesh.send(&proxy, &Call::get("web", 9000, "/").to_address("127.0.0.1"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_9000"), "{o:#?}");
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    assert_eq!(
        o.cluster(),
        Some("outbound|9000||web.default.svc.cluster.local"),
        "{o:#?}"
    );
    // tcp-echo's port is TCP, yet its HTTP is routed here too.
    let o = mesh.send(
        &proxy,
        &Call::get("tcp-echo", 9000, "/").to_address("127.0.0.1"),
    );
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&proxy, &Call::connect(9000).to_address("127.0.0.1"));
    assert_eq!(o.route_config, None, "proxied as TCP: {o:#?}");
    assert_eq!(o.cluster(), Some("outbound|9000||db.example.com"), "{o:#?}");
}

/// The task's gateway: TCP on 31400 split 80/20 between tcp-echo's v1 and v2.
#[test]
fn tcp_echo_gateway_splits_connections_80_20() {
    let (mut mesh, _, gateway) = tcp_echo();
    let o = mesh.send(&gateway, &Call::connect(31400).to_address("127.0.0.1"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_31400"), "{o:#?}");
    assert_eq!(
        o.clusters(),
        vec![
            (tcp_echo_cluster(9000, "v1"), Some(80)),
            (tcp_echo_cluster(9000, "v2"), Some(20))
        ]
    );
}

/// `destinationSubnets` narrows a route to the service's addresses inside them (a chain of
/// its own, more specific than the service's; a subnet wider than the service draws no
/// other destination to it), `sourceNamespace` to sidecars of that namespace, and the first
/// route that applies wins; an address the route does not name keeps the default.
#[test]
fn tcp_match_conditions_select_routes_as_written() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "db-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  tcp:
  - match: [{sourceNamespace: elsewhere}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
  - match: [{destinationSubnets: [192.0.2.128/25], port: 9000}]
    route: [{destination: {host: tcp-echo, subset: v1, port: {number: 9000}}}]
  - route: [{destination: {host: db.example.com}}]
",
    );
    // A subnet outside the service's own addresses draws no other destination to its
    // route: 10.96.0.77 is nobody's, so the port's HTTP chain (web's) takes it.
    let o = mesh.send(
        &sidecar,
        &Call::get("web", 9000, "/").to_address("10.96.0.77"),
    );
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.200"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some("outbound|9000||db.example.com"), "{o:#?}");
}

/// On TCP ports a sidecar tries the `tcp[]` routes of every VirtualService covering the host,
/// most specific first (Istio walks every VirtualService of the host): where the exact
/// host's VirtualService has no route that applies, a wildcard one's route takes the
/// connection, instead of the service's own cluster.
#[test]
fn tcp_routes_of_every_covering_virtual_service_are_tried_in_order() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "db-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  tcp:
  - match: [{sourceNamespace: elsewhere}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: example-wide, namespace: default}
spec:
  hosts: ['*.example.com']
  tcp:
  - route: [{destination: {host: tcp-echo, subset: v1, port: {number: 9000}}}]
",
    );
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    // The exact host's route, where it applies, comes first.
    write_config(
        &mesh.config,
        "db-routes.yaml",
        &std::fs::read_to_string(mesh.config.join("db-routes.yaml"))
            .expect("read")
            .replace("sourceNamespace: elsewhere", "port: 9000"),
    );
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v2")), "{o:#?}");
}

/// `explain` for the TCP listeners: a captured sidecar's `0.0.0.0_9000` comes from every
/// service on the port (TCP, HTTP and told per connection) and tcp-echo's VirtualService; the gateway's TCP
/// listener from its Gateway and the VirtualService bound to it.
#[test]
fn tcp_listeners_name_the_inputs_they_are_built_from() {
    let (mesh, _, _) = tcp_echo();
    let built_from = |router: bool, name: &str| -> Vec<String> {
        let mut out: Vec<String> = mesh
            .provenance
            .keys()
            .filter(|((holder, t, n), _)| {
                let is_router = matches!(
                    holder,
                    Holder::Scope(dataflows::model::ScopeKey::Router { .. })
                );
                *t == ResourceType::Listener && n == name && is_router == router
            })
            .map(|(_, k): &(_, ConfigKey)| format!("{:?} {}/{}", k.kind, k.namespace, k.name))
            .collect();
        out.dedup();
        out
    };
    assert_eq!(
        built_from(false, "0.0.0.0_9000"),
        vec![
            "Service default/legacy",
            "Service default/tcp-echo",
            "Service default/web",
            "VirtualService default/tcp-echo",
            "ServiceEntry default/external-db",
        ]
    );
    assert_eq!(
        built_from(true, "127.0.0.1_31400"),
        vec![
            "VirtualService default/tcp-echo-gateway",
            "Gateway default/tcp-echo-gateway",
        ]
    );
}

/// Two ServiceEntries without addresses on one TCP port: nothing tells their connections
/// apart, so the first (by host) takes the port and the second is an error naming it, until
/// it gets addresses of its own. A TLS port without addresses is told apart by SNI: a
/// connection without its name still passes through to where it was going, as before.
#[test]
fn tcp_services_a_sidecar_cannot_tell_apart_are_reported() {
    let mut mesh = Mesh::new("tcp-unreachable");
    let entry = |name: &str, protocol: &str, addresses: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
{addresses}  ports: [{{number: 7000, name: p, protocol: {protocol}}}]
  resolution: DNS
"
        )
    };
    write_config(&mesh.config, "a.yaml", &entry("a", "TCP", ""));
    write_config(&mesh.config, "b.yaml", &entry("b", "TCP", ""));
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.60.20",
        &[("app", "client")],
    ));
    let conn = Call::connect(7000).to_address("203.0.113.1");
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.cluster(), Some("outbound|7000||a.example.com"), "{o:#?}");
    let errors: Vec<&String> = mesh.dataflow_errors.keys().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "ServiceEntry/default/b: b.example.com: port 7000 (TCP) cannot be told apart"
        ),
        "{errors:?}"
    );

    write_config(
        &mesh.config,
        "b.yaml",
        &entry("b", "TCP", "  addresses: [198.51.100.0/24]\n"),
    );
    let o = mesh.send(&sidecar, &Call::connect(7000).to_address("198.51.100.9"));
    assert_eq!(o.cluster(), Some("outbound|7000||b.example.com"), "{o:#?}");
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{:?}",
        mesh.dataflow_errors
    );

    std::fs::remove_file(mesh.config.join("a.yaml")).expect("remove a.yaml");
    write_config(&mesh.config, "c.yaml", &entry("c", "TLS", ""));
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{:?}",
        mesh.dataflow_errors
    );
}

/// TLS ServiceEntries without addresses (Istio's egress task: `www.example.com` on 443,
/// resolution DNS; a wildcard `*.wikipedia.org`, NONE) on a captured sidecar: a connection
/// is routed by the name its client sends (SNI), a wildcard host by Envoy's wildcard match,
/// to the entry's own cluster whatever its destination address; a name no entry has passes
/// through (ALLOW_ANY) or is dropped (REGISTRY_ONLY), as without the entries; a `tls[]`
/// route for a host sends its name to the route's destination.
#[test]
fn tls_service_entries_without_addresses_are_routed_by_sni() {
    let mut mesh = Mesh::new("tls-sni-no-address");
    let entries = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: egress, namespace: default}
spec:
  hosts: [egress.example.com]
  ports: [{number: 443, name: https, protocol: HTTPS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wikipedia, namespace: default}
spec:
  hosts: ['*.wikipedia.org']
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: NONE
";
    write_config(&mesh.config, "entries.yaml", entries);
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.61.20",
        &[("app", "client")],
    ));
    let to = |sni: &str| Call::tls(443, sni).to_address("203.0.113.80");
    let o = mesh.send(&sidecar, &to("www.example.com"));
    assert_eq!(o.cluster(), Some("outbound|443||www.example.com"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("en.wikipedia.org"));
    assert_eq!(o.cluster(), Some("outbound|443||*.wikipedia.org"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("wikipedia.org"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("unknown.example.org"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(443).to_address("203.0.113.80"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{:?}",
        mesh.dataflow_errors
    );

    // As in Istio's egress gateway task: www.example.com's name goes elsewhere by a route.
    write_config(
        &mesh.config,
        "route.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  tls:
  - match: [{sniHosts: [www.example.com], port: 443}]
    route: [{destination: {host: egress.example.com, port: {number: 443}}}]
",
    );
    let o = mesh.send(&sidecar, &to("www.example.com"));
    assert_eq!(
        o.cluster(),
        Some("outbound|443||egress.example.com"),
        "{o:#?}"
    );
    let o = mesh.send(&sidecar, &to("egress.example.com"));
    assert_eq!(
        o.cluster(),
        Some("outbound|443||egress.example.com"),
        "{o:#?}"
    );

    write_config(
        &mesh.config,
        "sidecar.yaml",
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec:
  egress: [{hosts: ['./*']}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
",
    );
    let o = mesh.send(&sidecar, &to("unknown.example.org"));
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("en.wikipedia.org"));
    assert_eq!(o.cluster(), Some("outbound|443||*.wikipedia.org"), "{o:#?}");
}

// ---------------------------------------------------------------------------------------------
// Istio's traffic-management task pages, on the bookinfo example
// ---------------------------------------------------------------------------------------------

const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tasks");

/// `(kind, namespace, name)` of each document of a YAML stream.
fn doc_keys(text: &str) -> Vec<(String, String, String)> {
    meshflow::config::split_documents(text)
        .into_iter()
        .filter_map(|(_, doc)| {
            let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&doc).ok()?;
            let s = |v: &serde_yaml_ng::Value| v.as_str().unwrap_or_default().to_string();
            Some((
                s(&v["kind"]),
                s(&v["metadata"]["namespace"]),
                s(&v["metadata"]["name"]),
            ))
        })
        .collect()
}

/// Bookinfo as shipped with a task page's objects applied over it (as `kubectl apply` of the
/// task's file would replace bookinfo's own objects of the same name), and the `sleep` proxy.
fn bookinfo_with_task(task: &str) -> (Mesh, ProxyId) {
    let dir = TestDir::new(&format!("routing-simulation-task-{task}"));
    let config = dir.subdir("config");
    let fixture = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    let replaced = doc_keys(&fixture);
    for entry in std::fs::read_dir(BOOKINFO).expect("bookinfo") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("a bookinfo file");
        let kept: Vec<String> = meshflow::config::split_documents(&text)
            .into_iter()
            .map(|(_, doc)| doc)
            .filter(|doc| doc_keys(doc).first().is_none_or(|k| !replaced.contains(k)))
            .collect();
        let name = path.file_name().unwrap().to_str().unwrap();
        write_config(&config, name, &kept.join("\n---\n"));
    }
    write_config(&config, "task.yaml", &fixture);
    let mut mesh = Mesh::over(dir, config);
    let sleep = mesh.connect(&ProxyNode::sidecar(
        "sleep",
        "default",
        "127.0.1.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{task}: {:?}",
        mesh.dataflow_errors
    );
    (mesh, sleep)
}

fn via_sleep(host: &str, path: &str) -> Call {
    Call::get(host, 9080, path).to_address("127.0.0.1")
}

/// The route `host`'s virtual host sends `path` by, in the `sleep` sidecar's route
/// configuration `9080`.
fn sleep_route(
    config: &ProxyConfig,
    host: &str,
    route_index: usize,
) -> envoy_types::pb::envoy::config::route::v3::Route {
    let vhost = format!("{host}.default.svc.cluster.local:9080");
    config.routes["9080"]
        .virtual_hosts
        .iter()
        .find(|v| v.name == vhost)
        .unwrap_or_else(|| panic!("no virtual host {vhost}"))
        .routes[route_index]
        .clone()
}

/// TCP traffic shifting, as `tests/envoy_tasks.rs` serves it (the fixture unchanged, tcp-echo's
/// pods and the client's Sidecar added): the client's bound TCP listener on 9000 splits
/// tcp-echo's connections 80/20 between subsets v1 and v2 (a `tcp_proxy` over weighted
/// clusters, no route configuration), and so does the task's ingress gateway on 31400.
#[test]
fn task_tcp_traffic_shifting() {
    use support::tasks;
    // No socket is opened here: any /24 will do.
    let net = 60;
    let mut mesh = Mesh::new("task-tcp-traffic-shifting");
    tasks::apply_task(&mesh.config, "tcp-traffic-shifting");
    tasks::write_tcp_echo_workloads(&mesh.config, net);
    tasks::write_client_sidecar(&mesh.config, net, tasks::TCP_ECHO_PORT, "TCP");
    let client = mesh.connect(&tasks::client_node(net));
    let cluster =
        |subset: &str| format!("outbound|9000|{subset}|tcp-echo.default.svc.cluster.local");
    let split = vec![(cluster("v1"), Some(80)), (cluster("v2"), Some(20))];
    let pods = vec![
        format!("{}:9000", tasks::pod_ip(net, "tcp-echo", "v1")),
        format!("{}:9000", tasks::pod_ip(net, "tcp-echo", "v2")),
    ];
    let client_ip = tasks::client_ip(net);
    let o = mesh.send(&client, &Call::connect(9000).to_address(&client_ip));
    assert_eq!(o.listener, Some(format!("{client_ip}_9000")), "{o:#?}");
    assert_eq!(o.clusters(), split, "{o:#?}");
    assert_eq!(o.endpoints(), pods);
    assert!(mesh.proxy(&client).routes.is_empty(), "TCP needs no routes");

    let gateway = mesh.connect(&tasks::write_ingress_gateway(&mesh.config, net));
    let o = mesh.send(&gateway, &Call::connect(31400));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_31400"), "{o:#?}");
    assert_eq!(o.clusters(), split, "{o:#?}");
    assert_eq!(o.endpoints(), pods);
    mesh.assert_no_errors();
}

/// Mutual TLS by DestinationRule, over bookinfo: the `sleep` sidecar's calls to reviews and
/// ratings leave with Istio's mutual TLS — the workload certificate (SDS `default`) verified
/// against SDS `ROOTCA`, Istio's ALPN, the SNI `outbound_.9080_.SUBSET_.HOST` of the subset
/// the route picked, the pods' service account pinned — while details' `DISABLE` connects in
/// plaintext, with no auto-mTLS socket match left to pick TLS per endpoint.
#[test]
fn task_mtls_destination_rule() {
    let (mesh, sleep) = bookinfo_with_task("mtls-destination-rule");
    let config = mesh.proxy(&sleep);
    for (call, service, subset) in [
        (via_sleep("reviews", "/reviews/0"), "reviews", "v1"),
        (
            via_sleep("reviews", "/reviews/0").header(JASON.0, JASON.1),
            "reviews",
            "v2",
        ),
        (via_sleep("ratings", "/ratings/0"), "ratings", "v1"),
        (
            via_sleep("productpage", "/productpage"),
            "productpage",
            "v1",
        ),
    ] {
        let o = config.simulate(&call);
        let cluster = bookinfo_cluster(subset, service);
        assert_eq!(o.cluster(), Some(cluster.as_str()), "{o:#?}");
        let t = upstream_tls(&o, &cluster).expect("mTLS");
        assert!(t.istio_mutual, "{t:#?}");
        assert_eq!(t.certificates, [Source::Sds("default".into())]);
        assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
        assert_eq!(t.alpn, dataflows::simulate::ISTIO_MTLS_ALPN);
        assert_eq!(
            t.sni,
            Some(format!(
                "outbound_.9080_.{subset}_.{service}.default.svc.cluster.local"
            ))
        );
        assert_eq!(
            t.sans,
            sans(&[(
                "URI",
                &format!("exact:spiffe://cluster.local/ns/default/sa/bookinfo-{service}")
            )])
        );
    }
    let details = config.simulate(&via_sleep("details", "/details/0"));
    let cluster = bookinfo_cluster("v1", "details");
    assert_routes_to(&details, &cluster, &["127.0.1.11:9080".into()]);
    assert_eq!(upstream_tls(&details, &cluster), None, "DISABLE: plaintext");
    mesh.assert_no_errors();
}

/// Request routing: every service on v1, jason's reviews on v2.
#[test]
fn task_request_routing() {
    let (mesh, sleep) = bookinfo_with_task("request-routing");
    let config = mesh.proxy(&sleep);
    for (host, service, pod) in [
        ("productpage", "productpage", "127.0.1.41:9080"),
        ("reviews", "reviews", "127.0.1.31:9080"),
        ("ratings", "ratings", "127.0.1.21:9080"),
        ("details", "details", "127.0.1.11:9080"),
    ] {
        let o = config.simulate(&via_sleep(host, "/"));
        assert_routes_to(&o, &bookinfo_cluster("v1", service), &[pod.into()]);
    }
    let jason = config.simulate(&via_sleep("reviews", "/").header(JASON.0, JASON.1));
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v2", "reviews"),
        &["127.0.1.32:9080".into()],
    );
}

/// Traffic shifting: reviews split 50/50 between v1 and v3.
#[test]
fn task_traffic_shifting() {
    let (mesh, sleep) = bookinfo_with_task("traffic-shifting");
    let o = mesh
        .proxy(&sleep)
        .simulate(&via_sleep("reviews", "/reviews/0"));
    assert_eq!(
        o.clusters(),
        [
            (bookinfo_cluster("v1", "reviews"), Some(50)),
            (bookinfo_cluster("v3", "reviews"), Some(50))
        ]
    );
}

/// Request timeouts: reviews v2 answers within half a second or not at all; ratings is
/// delayed 2 s for everyone.
#[test]
fn task_request_timeouts() {
    let (mesh, sleep) = bookinfo_with_task("request-timeouts");
    let config = mesh.proxy(&sleep);
    let o = config.simulate(&via_sleep("reviews", "/"));
    match &o.result {
        Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
            assert_eq!(*timeout, Some(std::time::Duration::from_millis(500)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        o.cluster(),
        Some(bookinfo_cluster("v2", "reviews").as_str())
    );
    let fault = &sleep_route(&config, "ratings", 0).typed_per_filter_config;
    assert!(fault.contains_key("envoy.filters.http.fault"), "{fault:?}");
    let ratings = config.simulate(&via_sleep("ratings", "/ratings/0"));
    assert_eq!(
        ratings.fault_delay(),
        Some(std::time::Duration::from_secs(2)),
        "{ratings:#?}"
    );
    assert_eq!(ratings.effective_status(), None, "delayed, then forwarded");
    assert_eq!(o.fault(), None, "reviews is not delayed");
}

/// Fault injection: jason's ratings route carries an abort of every request with 500, the
/// others' route none.
#[test]
fn task_fault_injection() {
    use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
        fault_abort::ErrorType, HttpFault,
    };
    use prost::Message;
    let (mesh, sleep) = bookinfo_with_task("fault-injection");
    let config = mesh.proxy(&sleep);
    let jason = sleep_route(&config, "ratings", 0);
    let any = &jason.typed_per_filter_config["envoy.filters.http.fault"];
    let fault = HttpFault::decode(&any.value[..]).expect("an HTTPFault");
    let abort = fault.abort.expect("an abort");
    assert_eq!(abort.error_type, Some(ErrorType::HttpStatus(500)));
    assert_eq!(abort.percentage.map(|p| p.numerator), Some(1_000_000));
    assert!(sleep_route(&config, "ratings", 1)
        .typed_per_filter_config
        .is_empty());
    let o = config.simulate(&via_sleep("ratings", "/").header(JASON.0, JASON.1));
    assert_eq!(
        o.route.as_ref().map(|r| r.index),
        Some(0),
        "jason's route matches"
    );
    assert_eq!(o.fault_status(), Some(500), "{o:#?}");
    assert_eq!(o.effective_status(), Some(500));
    let others = config.simulate(&via_sleep("ratings", "/"));
    assert_eq!(others.fault(), None);
    assert_routes_to(
        &others,
        &bookinfo_cluster("v1", "ratings"),
        &["127.0.1.21:9080".into()],
    );
}

/// Fault injection, the delay step: jason's ratings requests wait 7 s, then go on to v1;
/// the others' go straight there.
#[test]
fn task_fault_injection_delay() {
    let (mesh, sleep) = bookinfo_with_task("fault-injection-delay");
    let config = mesh.proxy(&sleep);
    let jason = config.simulate(&via_sleep("ratings", "/").header(JASON.0, JASON.1));
    assert_eq!(
        jason.fault(),
        Some(&Fault {
            delay: Some((std::time::Duration::from_secs(7), ALL)),
            abort: None
        }),
        "{jason:#?}"
    );
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v1", "ratings"),
        &["127.0.1.21:9080".into()],
    );
    let others = config.simulate(&via_sleep("ratings", "/"));
    assert_eq!(others.fault(), None);
    assert_eq!(others.effective_status(), None);
}

/// Circuit breaking: reviews' clusters carry one connection, one pending request, and eject
/// on the first 5xx.
#[test]
fn task_circuit_breaking() {
    let (mesh, sleep) = bookinfo_with_task("circuit-breaking");
    let config = mesh.proxy(&sleep);
    for subset in ["", "v1", "v2", "v3"] {
        let c = &config.clusters[&bookinfo_cluster(subset, "reviews")];
        let t = &c.circuit_breakers.as_ref().expect("breakers").thresholds[0];
        assert_eq!(t.max_connections.map(|v| v.value), Some(1), "{subset}");
        assert_eq!(t.max_pending_requests.map(|v| v.value), Some(1), "{subset}");
        let od = c.outlier_detection.as_ref().expect("outlier detection");
        assert_eq!(od.consecutive_5xx.map(|v| v.value), Some(1), "{subset}");
    }
}

/// Mirroring: reviews go to v1, a copy of each to v2.
#[test]
fn task_mirroring() {
    let (mesh, sleep) = bookinfo_with_task("mirroring");
    let config = mesh.proxy(&sleep);
    let o = config.simulate(&via_sleep("reviews", "/"));
    assert_eq!(
        o.cluster(),
        Some(bookinfo_cluster("v1", "reviews").as_str())
    );
    let route = sleep_route(&config, "reviews", 0);
    let Some(envoy_types::pb::envoy::config::route::v3::route::Action::Route(action)) =
        route.action
    else {
        panic!("{route:?}")
    };
    let mirrors: Vec<&str> = action
        .request_mirror_policies
        .iter()
        .map(|m| m.cluster.as_str())
        .collect();
    assert_eq!(mirrors, [bookinfo_cluster("v2", "reviews")]);
    assert_eq!(
        o.http.as_ref().map(|h| h.mirrors.clone()),
        Some(vec![Mirror {
            cluster: bookinfo_cluster("v2", "reviews"),
            per_million: ALL,
            cluster_found: true,
        }])
    );
}

// ---------------------------------------------------------------------------------------------
// Istio's ingress and egress task pages: each fixture served alone, with the registry objects
// it carries (tests/fixtures/tasks/ingress-*.yaml, egress-*.yaml)
// ---------------------------------------------------------------------------------------------

/// The ingress gateway pod's address in the ingress fixtures.
const INGRESS_GATEWAY_IP: &str = "127.0.2.2";
const HTTPBIN_CLUSTER: &str = "outbound|8000||httpbin.default.svc.cluster.local";

/// A task fixture served alone, with two proxies connected: the ingress gateway of the
/// fixtures' pod (`istio: ingressgateway` in istio-system), with the Service Istio installs
/// for it (ports 80 and 443 to 8080 and 8443, where its servers listen), and a `sleep`
/// sidecar in `default` whose outbound traffic is captured, as an injected pod's is. Nothing
/// is reported.
fn task_mesh(task: &str) -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::new(&format!("task-{task}"));
    let fixture = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    write_config(&mesh.config, "task.yaml", &fixture);
    support::tasks::write_ingress_gateway_service(
        &mesh.config,
        "istio-system",
        INGRESS_GATEWAY_IP,
        &support::tasks::ISTIO_INGRESS_PORTS,
    );
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-6c8f9d7b5-q4x2m",
        "istio-system",
        INGRESS_GATEWAY_IP,
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    let sleep = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-5d8c7f6b9-z2x4v",
        "default",
        "127.0.2.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    mesh.assert_no_errors();
    (mesh, gateway, sleep)
}

/// A call to the ingress gateway's address.
fn to_ingress(call: Call) -> Call {
    call.to_address(INGRESS_GATEWAY_IP)
}

/// The SDS secret `name` as `proxy` holds it.
fn held_secret(
    mesh: &Mesh,
    proxy: &str,
    name: &str,
) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret {
    use prost::Message;
    let snapshot = mesh.held.snapshot();
    let key = snapshot[proxy]
        .keys()
        .find(|k| k.rtype == ResourceType::Secret && k.name == name)
        .unwrap_or_else(|| panic!("{proxy} holds no secret {name}"));
    let body = &mesh.bodies[key].0.body.0;
    envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(&body[..])
        .expect("a Secret")
}

/// The text of a `DataSource` held inline.
fn inline_text(source: Option<&envoy_types::pb::envoy::config::core::v3::DataSource>) -> String {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    match source.and_then(|s| s.specifier.as_ref()) {
        Some(Specifier::InlineBytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Specifier::InlineString(s)) => s.clone(),
        other => panic!("not inline: {other:?}"),
    }
}

/// Ingress Gateways: through the gateway's port 80 (the gateway Service's, which the pod
/// listens for on 8080), httpbin.example.com's `/status` and `/delay` reach the httpbin pod
/// (Service port 8000, container port 8080); any other path of that host, and any other
/// host, is answered 404 by the gateway; the pod listens on neither 80 nor 443. The VirtualService is bound
/// to the gateway only: the mesh's own calls to httpbin take the service's default route.
#[test]
fn task_ingress_http() {
    let (mesh, gateway, sleep) = task_mesh("ingress-http");
    let config = mesh.proxy(&gateway);
    let pod = ["127.0.2.10:8080".to_string()];
    for path in ["/status/200", "/delay/1"] {
        let o = config.simulate(&to_ingress(Call::get("httpbin.example.com", 8080, path)));
        assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8080"), "{o:#?}");
        assert_eq!(o.route_config.as_deref(), Some("http.8080"));
        assert_routes_to(&o, HTTPBIN_CLUSTER, &pod);
    }
    let o = config.simulate(&to_ingress(Call::get(
        "httpbin.example.com",
        8080,
        "/headers",
    )));
    assert_eq!(o.result, Err(NoMatch::NoRoute), "{o:#?}");
    assert_status(&o, 404);
    let o = config.simulate(&to_ingress(Call::get(
        "other.example.com",
        8080,
        "/status/200",
    )));
    assert_status(&o, 404);
    for port in [80, 443, 8443] {
        let o = config.simulate(&to_ingress(Call::get(
            "httpbin.example.com",
            port,
            "/status/200",
        )));
        assert_eq!(o.result, Err(NoMatch::NoListener { port }), "{o:#?}");
    }

    let o = mesh
        .proxy(&sleep)
        .simulate(&Call::get("httpbin:8000", 8000, "/headers").to_address("10.96.0.80"));
    assert_routes_to(&o, HTTPBIN_CLUSTER, &pod);
}

/// Secure Gateways (simple TLS): port 443 (8443 on the pod) takes TLS for httpbin.example.com by its SNI and
/// terminates it with `kubernetes://httpbin-credential`, which the gateway holds as the
/// Secret's own certificate and key (the Secret of the gateway's namespace); no client
/// certificate is asked for; the request inside is routed as over HTTP. A plaintext
/// connection or another name finds no filter chain; nothing listens on port 80.
#[test]
fn task_ingress_https() {
    let (mesh, gateway, _) = task_mesh("ingress-https");
    let config = mesh.proxy(&gateway);
    let https = |path: &str| {
        to_ingress(Call::https(
            "httpbin.example.com",
            8443,
            path,
            "httpbin.example.com",
        ))
    };
    let o = config.simulate(&https("/status/418"));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://httpbin-credential".into())]
    );
    assert!(
        !t.require_client_certificate && t.validation.is_none(),
        "{t:#?}"
    );
    assert_eq!(
        o.route_config.as_deref(),
        Some("https.443.https.mygateway.default")
    );
    assert_routes_to(&o, HTTPBIN_CLUSTER, &["127.0.2.10:8080".into()]);
    let o = config.simulate(&https("/headers"));
    assert_status(&o, 404);

    let fixture = std::fs::read_to_string(format!("{TASKS}/ingress-https.yaml")).expect("read");
    let doc: serde_yaml_ng::Value = meshflow::config::split_documents(&fixture)
        .into_iter()
        .map(|(_, d)| serde_yaml_ng::from_str(&d).expect("YAML"))
        .find(|d: &serde_yaml_ng::Value| d["kind"] == "Secret")
        .expect("the Secret");
    let secret = held_secret(&mesh, &gateway, "kubernetes://httpbin-credential");
    let Some(
        envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type::TlsCertificate(
            cert,
        ),
    ) = secret.r#type
    else {
        panic!("not a certificate: {secret:?}")
    };
    let pem = |s: &str| s.trim().to_string();
    assert_eq!(
        pem(&inline_text(cert.certificate_chain.as_ref())),
        pem(doc["stringData"]["tls.crt"].as_str().expect("tls.crt"))
    );
    assert_eq!(
        pem(&inline_text(cert.private_key.as_ref())),
        pem(doc["stringData"]["tls.key"].as_str().expect("tls.key"))
    );

    for call in [
        to_ingress(Call::get("httpbin.example.com", 8443, "/status/200")),
        to_ingress(Call::https(
            "other.example.com",
            8443,
            "/",
            "other.example.com",
        )),
    ] {
        let o = config.simulate(&call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
    for port in [80, 8080] {
        let o = config.simulate(&to_ingress(Call::get("httpbin.example.com", port, "/")));
        assert_eq!(o.result, Err(NoMatch::NoListener { port }), "{o:#?}");
    }
}

/// Secure Gateways (mutual TLS): the same server now requires a client certificate, verified
/// against `kubernetes://httpbin-credential-cacert`, which the gateway holds as the Secret's
/// `ca.crt`; the request inside is routed as before.
#[test]
fn task_ingress_https_mutual() {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type;
    let (mesh, gateway, _) = task_mesh("ingress-https-mutual");
    let config = mesh.proxy(&gateway);
    let o = config.simulate(&to_ingress(Call::https(
        "httpbin.example.com",
        8443,
        "/status/200",
        "httpbin.example.com",
    )));
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://httpbin-credential".into())]
    );
    assert!(t.require_client_certificate, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://httpbin-credential-cacert".into()))
    );
    assert_routes_to(&o, HTTPBIN_CLUSTER, &["127.0.2.10:8080".into()]);

    let fixture =
        std::fs::read_to_string(format!("{TASKS}/ingress-https-mutual.yaml")).expect("read");
    let doc: serde_yaml_ng::Value = meshflow::config::split_documents(&fixture)
        .into_iter()
        .map(|(_, d)| serde_yaml_ng::from_str(&d).expect("YAML"))
        .find(|d: &serde_yaml_ng::Value| d["metadata"]["name"] == "httpbin-credential")
        .expect("the Secret");
    let secret = held_secret(&mesh, &gateway, "kubernetes://httpbin-credential-cacert");
    let Some(Type::ValidationContext(ca)) = secret.r#type else {
        panic!("not a validation context: {secret:?}")
    };
    assert_eq!(
        inline_text(ca.trusted_ca.as_ref()).trim(),
        doc["stringData"]["ca.crt"].as_str().expect("ca.crt").trim()
    );
}

/// Ingress Gateway without TLS Termination: a TLS connection to port 443 (8443 on the pod) naming
/// nginx.example.com is passed through, not terminated, to the my-nginx pod's port 443; a
/// connection naming another host, or without TLS, finds no filter chain.
#[test]
fn task_ingress_tls_passthrough() {
    let (mesh, gateway, _) = task_mesh("ingress-tls-passthrough");
    let config = mesh.proxy(&gateway);
    let o = config.simulate(&to_ingress(Call::tls(8443, "nginx.example.com")));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    assert_eq!(o.downstream_tls, None, "passed through, not terminated");
    assert!(
        matches!(o.result, Ok(dataflows::simulate::Action::Tcp { .. })),
        "{o:#?}"
    );
    assert_routes_to(
        &o,
        "outbound|443||my-nginx.default.svc.cluster.local",
        &["127.0.2.30:443".into()],
    );
    // The pod runs no sidecar: auto mTLS leaves the client's own TLS as it is.
    let up = &o.upstreams()[0];
    assert!(
        up.transports()
            .iter()
            .all(|(_, t)| **t == Transport::Plaintext),
        "{up:#?}"
    );
    for call in [
        to_ingress(Call::tls(8443, "other.example.com")),
        to_ingress(Call::connect(8443)),
    ] {
        let o = config.simulate(&call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
}

/// Accessing External Services (controlled access): under the mesh config's REGISTRY_ONLY,
/// the captured `sleep` sidecar sends http://httpbin.org to the entry's DNS cluster (Envoy
/// resolves httpbin.org, port 80) with the VirtualService's 3 s timeout, and TLS naming
/// www.google.com to that entry's cluster; a host without an entry is refused (502 for HTTP,
/// the black hole for TLS), where ALLOW_ANY lets it pass through.
#[test]
fn task_egress_service_entry() {
    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let (mut mesh, _, sleep) = task_mesh("egress-service-entry");
    let external = "203.0.113.10";
    let httpbin = Call::get("httpbin.org", 80, "/delay/5").to_address(external);
    let google = Call::tls(443, "www.google.com").to_address(external);
    let cnn_http = Call::get("edition.cnn.com", 80, "/").to_address(external);
    let cnn_tls = Call::tls(443, "edition.cnn.com").to_address(external);

    // Istio's default, ALLOW_ANY: what no entry names passes through.
    let o = mesh.send(&sleep, &cnn_http);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");

    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let report = state
        .update("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n", None)
        .expect("a new config");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    mesh.step(report.changes);

    let o = mesh.send(&sleep, &httpbin);
    assert_eq!(o.cluster(), Some("outbound|80||httpbin.org"), "{o:#?}");
    assert_eq!(o.upstreams()[0].discovery, Discovery::StrictDns);
    assert_eq!(o.endpoints(), ["httpbin.org:80"]);
    match &o.result {
        Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
            assert_eq!(*timeout, Some(std::time::Duration::from_secs(3)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(upstream_tls(&o, "outbound|80||httpbin.org"), None);

    let o = mesh.send(&sleep, &google);
    assert_eq!(o.cluster(), Some("outbound|443||www.google.com"), "{o:#?}");
    assert_eq!(o.endpoints(), ["www.google.com:443"]);
    assert_eq!(
        upstream_tls(&o, "outbound|443||www.google.com"),
        None,
        "the application's own TLS passes through"
    );

    assert_status(&mesh.send(&sleep, &cnn_http), 502);
    let o = mesh.send(&sleep, &cnn_tls);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    mesh.assert_no_errors();
}

/// Egress TLS Origination: the application's plain HTTP to edition.cnn.com:80 leaves its
/// sidecar as TLS to the host's port 443 (the entry's `targetPort`), with the request's host
/// as SNI and as the name the certificate must carry, verified against the system CA bundle;
/// HTTPS from the application to port 443 passes through as it is.
#[test]
fn task_egress_tls_origination() {
    let (mut mesh, _, sleep) = task_mesh("egress-tls-origination");
    let external = "203.0.113.20";
    let o = mesh.send(
        &sleep,
        &Call::get("edition.cnn.com", 80, "/politics").to_address(external),
    );
    let cluster = "outbound|80||edition.cnn.com";
    assert_eq!(o.cluster(), Some(cluster), "{o:#?}");
    assert_eq!(o.endpoints(), ["edition.cnn.com:443"], "the targetPort");
    let t = upstream_tls(&o, cluster).expect("TLS originated");
    assert!(t.auto_sni && t.auto_san_validation, "{t:#?}");
    assert_eq!(t.sni, None, "the SNI is the request's host");
    assert_eq!(
        t.validation,
        Some(Source::File("/etc/ssl/certs/ca-certificates.crt".into()))
    );
    assert!(t.certificates.is_empty(), "SIMPLE: no client certificate");
    assert_eq!(
        o.http.as_ref().map(|h| h.upstream_authority.as_str()),
        Some("edition.cnn.com"),
        "the host auto SNI takes"
    );

    let o = mesh.send(
        &sleep,
        &Call::tls(443, "edition.cnn.com").to_address(external),
    );
    let cluster = "outbound|443||edition.cnn.com";
    assert_eq!(o.cluster(), Some(cluster), "{o:#?}");
    assert!(
        matches!(o.result, Ok(dataflows::simulate::Action::Tcp { .. })),
        "{o:#?}"
    );
    assert_eq!(upstream_tls(&o, cluster), None, "not originated twice");
    assert_eq!(o.endpoints(), ["edition.cnn.com:443"]);
    mesh.assert_no_errors();
}

/// A DNS ServiceEntry's endpoints are the hosts Envoy resolves, each at its own port, and a
/// DestinationRule subset keeps those of its labels (STRICT_DNS); DNS_ROUND_ROBIN resolves
/// its one endpoint (LOGICAL_DNS), and a subset that leaves it nothing answers 503 instead
/// of resolving something else.
#[test]
fn dns_service_entry_endpoints_are_resolved_per_subset() {
    let (mut mesh, _reviews, proxy) = sidecar_setup("dns-endpoints", &["v1"]);
    let entries = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  ports: [{number: THE_PORT, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: DNS
  endpoints:
  - {address: us.db.example.com, labels: {region: us}, locality: us, weight: 2}
  - {address: eu.db.example.com, labels: {region: eu}, ports: {http: 9090}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: one, namespace: default}
spec:
  hosts: [one.example.com]
  ports: [{number: THE_PORT, name: http, protocol: HTTP}]
  resolution: DNS_ROUND_ROBIN
  endpoints: [{address: one-backend.example.com, labels: {region: us}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.example.com
  subsets: [{name: eu, labels: {region: eu}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: one, namespace: default}
spec:
  host: one.example.com
  subsets: [{name: eu, labels: {region: eu}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com, one.example.com]
  http:
  - match: [{headers: {x-region: {exact: eu}}, authority: {prefix: db.}}]
    route: [{destination: {host: db.example.com, subset: eu}}]
  - match: [{headers: {x-region: {exact: eu}}}]
    route: [{destination: {host: one.example.com, subset: eu}}]
  - match: [{authority: {prefix: db.}}]
    route: [{destination: {host: db.example.com}}]
  - route: [{destination: {host: one.example.com}}]
"
    .replace("THE_PORT", &PORT.to_string());
    write_config(&mesh.config, "dns.yaml", &entries);
    let cluster = |subset: &str, host: &str| format!("outbound|{PORT}|{subset}|{host}");
    let o = mesh.send(&proxy, &via_sidecar("db.example.com", "/"));
    assert_eq!(
        o.cluster(),
        Some(cluster("", "db.example.com").as_str()),
        "{o:#?}"
    );
    assert_eq!(o.upstreams()[0].discovery, Discovery::StrictDns);
    assert_eq!(
        o.endpoints(),
        vec!["eu.db.example.com:9090", "us.db.example.com:8080"]
    );
    let eu = via_sidecar("db.example.com", "/").header("x-region", "eu");
    let o = mesh.send(&proxy, &eu);
    assert_eq!(
        o.cluster(),
        Some(cluster("eu", "db.example.com").as_str()),
        "{o:#?}"
    );
    assert_eq!(o.endpoints(), vec!["eu.db.example.com:9090"]);

    let o = mesh.send(&proxy, &via_sidecar("one.example.com", "/"));
    assert_eq!(o.upstreams()[0].discovery, Discovery::LogicalDns, "{o:#?}");
    assert_eq!(
        o.endpoints(),
        vec![format!("one-backend.example.com:{PORT}")]
    );
    let o = mesh.send(
        &proxy,
        &via_sidecar("one.example.com", "/").header("x-region", "eu"),
    );
    assert_eq!(
        o.cluster(),
        Some(cluster("eu", "one.example.com").as_str()),
        "{o:#?}"
    );
    assert!(o.endpoints().is_empty(), "{o:#?}");
    assert_eq!(o.status(), Some(503), "{o:#?}");
    mesh.assert_no_errors();
}

/// A mesh VirtualService whose host is a wildcard governs every service it covers, as
/// Istio's sidecars do: with ServiceEntries `a.example.com` and `b.example.com`, a request
/// for `a.example.com` follows the `*.example.com` VirtualService (to `reviews` v1), while
/// an exact VirtualService for `b.example.com` beats the wildcard for its host (to v2);
/// deleting the exact one hands `b.example.com` to the wildcard, deleting the wildcard
/// restores each entry's own default route.
#[test]
fn sidecar_wildcard_virtual_service_routes_the_hosts_it_covers() {
    let mut mesh = Mesh::new("wildcard-vs");
    let reviews = reviews_mesh(&mesh, PORT, &["v1", "v2"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let entry = |name: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: [{name}.example.com]\n  location: MESH_EXTERNAL\n  ports: [{{number: 80, name: http, protocol: HTTP}}]\n  resolution: DNS\n")
    };
    let vs = |name: &str, host: &str, subset: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: ['{host}']\n  http:\n  - route:\n    - destination: {{host: {FQDN}, subset: {subset}, port: {{number: {PORT}}}}}\n")
    };
    write_config(&mesh.config, "a.yaml", &entry("a"));
    write_config(&mesh.config, "b.yaml", &entry("b"));
    let call = |host: &str| Call::get(host, 80, "/").to_address("203.0.113.7");
    let o = mesh.send(&proxy, &call("a.example.com"));
    assert_eq!(o.cluster(), Some("outbound|80||a.example.com"), "{o:#?}");

    write_config(
        &mesh.config,
        "wild.yaml",
        &vs("wild", "*.example.com", "v1"),
    );
    write_config(
        &mesh.config,
        "exact.yaml",
        &vs("exact", "b.example.com", "v2"),
    );
    let v1 = reviews.cluster("v1");
    let v2 = reviews.cluster("v2");
    routes_to(
        &mut mesh,
        &proxy,
        &call("a.example.com"),
        &v1,
        &pod(&reviews, "v1"),
    );
    routes_to(
        &mut mesh,
        &proxy,
        &call("b.example.com"),
        &v2,
        &pod(&reviews, "v2"),
    );
    mesh.assert_no_errors();

    std::fs::remove_file(mesh.config.join("exact.yaml")).expect("remove exact.yaml");
    routes_to(
        &mut mesh,
        &proxy,
        &call("b.example.com"),
        &v1,
        &pod(&reviews, "v1"),
    );

    std::fs::remove_file(mesh.config.join("wild.yaml")).expect("remove wild.yaml");
    let o = mesh.send(&proxy, &call("b.example.com"));
    assert_eq!(o.cluster(), Some("outbound|80||b.example.com"), "{o:#?}");
}

// ---------------------------------------------------------------------------------------------
// How a request goes: the TLS of upstream clusters, inbound and gateway TLS chains, and what
// the matched route does to the request (faults, rewrites, header edits, mirrors)
// ---------------------------------------------------------------------------------------------

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

/// DestinationRule `tls` modes, as each `reviews` cluster of the client sidecar connects:
/// no `tls` and `DISABLE` in plaintext; `SIMPLE` with the rule's `sni`, `subjectAltNames`
/// (each a DNS and a URI SAN, an address also an IP SAN) and `caCertificates`, TLS 1.2–1.3,
/// no client certificate; `SIMPLE` without them takes the SNI from the request
/// (`auto_sni`, `auto_san_validation`) and trusts the system bundle; `MUTUAL` presents its
/// certificate files; `ISTIO_MUTUAL` the workload certificate (SDS `default`) verified
/// against SDS `ROOTCA`, Istio's SNI per subset and the service account's SPIFFE identity.
#[test]
fn destination_rule_tls_modes_set_how_clusters_connect() {
    let (mut mesh, reviews, proxy) = sidecar_setup("dr-tls-modes", &["v1", "v2"]);
    let all = reviews.cluster("");
    let call = via_sidecar("reviews", "/");
    let o = mesh.send(&proxy, &call);
    // No rule tls: auto mTLS, plaintext to these pods (none is labelled as running a
    // sidecar).
    let up = o
        .upstreams()
        .iter()
        .find(|u| u.cluster == all)
        .expect("the service's cluster");
    let names: Vec<&str> = up.socket_matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["tlsMode-istio", "tlsMode-disabled"], "{up:#?}");
    assert!(up
        .transports()
        .iter()
        .all(|(_, t)| **t == Transport::Plaintext));
    let policy = |tls: &str| format!("  trafficPolicy:\n    tls: {tls}\n");
    let both = ["v1", "v2"];

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: DISABLE}"));
    assert_eq!(upstream_tls(&mesh.send(&proxy, &call), &all), None);

    reviews.write_destination_rule_with_policy(
        &both,
        &policy("{mode: SIMPLE, sni: reviews.example.com, subjectAltNames: [reviews.example.com, 10.0.0.5], caCertificates: /etc/certs/ca.pem}"),
    );
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.auto_sni && !t.auto_san_validation, "{t:#?}");
    assert_eq!(t.validation, Some(Source::File("/etc/certs/ca.pem".into())));
    assert_eq!(
        t.sans,
        sans(&[
            ("DNS", "exact:reviews.example.com"),
            ("URI", "exact:reviews.example.com"),
            ("DNS", "exact:10.0.0.5"),
            ("URI", "exact:10.0.0.5"),
            ("IP_ADDRESS", "exact:10.0.0.5"),
        ])
    );
    assert!(t.certificates.is_empty(), "SIMPLE: no client certificate");
    assert!(!t.istio_mutual && t.alpn.is_empty(), "{t:#?}");
    assert_eq!(t.versions, (Some("TLSv1_2".into()), Some("TLSv1_3".into())));

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: SIMPLE}"));
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(t.sni, None);
    assert!(t.auto_sni && t.auto_san_validation, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::File("/etc/ssl/certs/ca-certificates.crt".into())),
        "the system bundle"
    );
    assert!(
        t.sans.is_empty(),
        "a Kubernetes Service has no SANs of its own"
    );

    reviews.write_destination_rule_with_policy(
        &both,
        &policy("{mode: MUTUAL, clientCertificate: /etc/certs/client.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, sni: reviews.example.com}"),
    );
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(
        t.certificates,
        [Source::File("/etc/certs/client.pem".into())]
    );
    assert_eq!(t.validation, Some(Source::File("/etc/certs/ca.pem".into())));
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.istio_mutual);

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: ISTIO_MUTUAL}"));
    let jason = via_sidecar("reviews", "/").header(JASON.0, JASON.1);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100)]);
    for (o, subset) in [
        (mesh.send(&proxy, &jason), "v2"),
        (
            mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1")),
            "v1",
        ),
    ] {
        let t = upstream_tls(&o, &reviews.cluster(subset)).expect("mTLS");
        assert!(t.istio_mutual, "{t:#?}");
        assert_eq!(t.certificates, [Source::Sds("default".into())]);
        assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
        assert_eq!(t.alpn, ["istio-peer-exchange", "istio"]);
        assert_eq!(
            t.sni,
            Some(format!("outbound_.{PORT}_.{subset}_.{FQDN}")),
            "Istio's SNI names the subset"
        );
        assert_eq!(
            t.sans,
            sans(&[("URI", "exact:spiffe://cluster.local/ns/default/sa/reviews")]),
            "the pods' service account"
        );
    }
    mesh.assert_no_errors();
}

/// `credentialName` on a sidecar's rule: the client certificate from SDS
/// `kubernetes://NAME` and the CA from `kubernetes://NAME-cacert`, the Secret of the client's
/// own namespace; without that Secret the cluster fails closed (no endpoints: 503) rather
/// than connect in plaintext.
#[test]
fn destination_rule_credential_name_uses_the_secrets_sds_names() {
    use base64::Engine;
    let (mut mesh, reviews, proxy) = sidecar_setup("dr-tls-credential", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: MUTUAL, credentialName: reviews-client, sni: reviews.example.com}\n",
    );
    let call = via_sidecar("reviews", "/");
    let o = mesh.send(&proxy, &call);
    assert_eq!(upstream_tls(&o, &reviews.cluster("")), None, "{o:#?}");
    assert_eq!(
        o.upstreams()[0].discovery,
        Discovery::Static,
        "fails closed"
    );
    assert_status(&o, 503);

    let ca = support::pki::ca("client-ca");
    let (cert, key) = support::pki::leaf(&ca, &["client.example.com"], None);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    write_config(
        &mesh.config,
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: reviews-client, namespace: default}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
            b64(&cert),
            b64(&key),
            b64(&ca.pem)
        ),
    );
    let o = mesh.send(&proxy, &call);
    let t = upstream_tls(&o, &reviews.cluster("")).expect("TLS");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://reviews-client".into())]
    );
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://reviews-client-cacert".into()))
    );
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.istio_mutual);
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// `portLevelSettings` replace the rule's `tls` on their port only, and a subset's `tls`
/// its own cluster's only: a two-port ServiceEntry whose rule says `ISTIO_MUTUAL`, SIMPLE on
/// port 7081, and a subset `plain` that DISABLEs TLS.
#[test]
fn port_level_and_subset_tls_override_the_rules_tls_where_they_apply() {
    let mut mesh = Mesh::new("dr-tls-port-level");
    write_config(
        &mesh.config,
        "db.yaml",
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.internal]
  addresses: [240.0.0.10]
  location: MESH_INTERNAL
  ports:
  - {number: 7080, name: http-a, protocol: HTTP}
  - {number: 7081, name: http-b, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - {address: 10.9.0.1, labels: {version: a}}
  - {address: 10.9.0.2, labels: {version: b}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.example.internal
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    portLevelSettings:
    - port: {number: 7081}
      tls: {mode: SIMPLE, sni: port.example}
  subsets:
  - name: plain
    labels: {version: b}
    trafficPolicy:
      tls: {mode: DISABLE}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.internal]
  http:
  - match: [{headers: {x-plain: {exact: 'yes'}}}]
    route: [{destination: {host: db.example.internal, subset: plain}}]
  - route: [{destination: {host: db.example.internal}}]
",
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.62.20",
        &[("app", "client")],
    ));
    let call = |port: u16| Call::get("db.example.internal", port, "/").to_address("240.0.0.10");
    let host = "db.example.internal";

    let o = mesh.send(&proxy, &call(7080));
    let t = upstream_tls(&o, &format!("outbound|7080||{host}")).expect("mTLS");
    assert!(t.istio_mutual, "the rule's tls on 7080: {t:#?}");
    assert_eq!(t.sni, Some(format!("outbound_.7080_._.{host}")));
    assert_eq!(o.endpoints(), ["10.9.0.1:7080", "10.9.0.2:7080"]);

    let o = mesh.send(&proxy, &call(7081));
    let t = upstream_tls(&o, &format!("outbound|7081||{host}")).expect("TLS");
    assert!(!t.istio_mutual, "the port's SIMPLE replaces it: {t:#?}");
    assert_eq!(t.sni.as_deref(), Some("port.example"));
    assert!(t.certificates.is_empty());

    let o = mesh.send(&proxy, &call(7080).header("x-plain", "yes"));
    assert_eq!(
        upstream_tls(&o, &format!("outbound|7080|plain|{host}")),
        None,
        "the subset's DISABLE"
    );
    assert_eq!(o.endpoints(), ["10.9.0.2:7080"]);
    // The route names no port on a two-port host: it takes the request's port (as meant
    // here), which Istio's analysis asks to be written out (IST0112).
    mesh.assert_one_error(&["db.example.internal", "IST0112"]);
}

/// Auto mTLS (Istio's default): a mesh service without a rule's `tls` carries Istio's
/// transport socket matches; the endpoint whose pod runs a sidecar (labelled
/// `security.istio.io/tlsMode: istio`) is reached over the mesh's mTLS — the workload
/// certificate, `ROOTCA`, SNI `outbound_.PORT_._.HOST`, the server pinned to the service's
/// account — and the one without a sidecar in plaintext; with `enableAutoMtls: false` both
/// are plaintext and no socket matches are sent.
#[test]
fn without_a_rules_tls_auto_mtls_reaches_sidecars_over_mtls_and_the_rest_in_plaintext() {
    let (mut mesh, reviews, proxy) = sidecar_setup("auto-mtls", &["v1", "v2"]);
    reviews.write_pods_labelled(&[("v1", "security.istio.io/tlsMode: istio"), ("v2", "")]);
    mesh.sync_clean();
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    let up = &o.upstreams()[0];
    let names: Vec<&str> = up.socket_matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["tlsMode-istio", "tlsMode-disabled"], "{up:#?}");
    let transports = up.transports();
    assert_eq!(transports.len(), 2, "{up:#?}");
    let (v1, v2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    let of = |addr: &str| {
        transports
            .iter()
            .find(|(a, _)| a == addr)
            .map(|(_, t)| *t)
            .expect("an endpoint")
    };
    let t = of(&v1).tls().expect("mTLS to the pod with a sidecar");
    assert!(t.istio_mutual, "{t:#?}");
    assert_eq!(t.certificates, [Source::Sds("default".into())]);
    assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
    assert_eq!(
        t.sni.as_deref(),
        Some(format!("outbound_.{PORT}_._.{FQDN}").as_str())
    );
    assert!(
        t.sans.iter().any(|s| s
            .matcher
            .contains("spiffe://cluster.local/ns/default/sa/reviews")),
        "{t:#?}"
    );
    assert_eq!(of(&v2), &Transport::Plaintext);

    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let report = state
        .update("enableAutoMtls: false\n", None)
        .expect("a new config");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    mesh.step(report.changes);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    let up = &o.upstreams()[0];
    assert!(up.socket_matches.is_empty(), "{up:#?}");
    assert!(up
        .transports()
        .iter()
        .all(|(_, t)| **t == Transport::Plaintext));
}

/// Inbound, Istio's PERMISSIVE mode: a captured `reviews-v1` sidecar's `virtualInbound`
/// takes a plaintext request to its port on the plaintext chain and one over Istio's mTLS
/// (TLS, ALPN `istio-peer-exchange`) on the mTLS chain, which presents the workload
/// certificate, requires a client certificate the mesh's root signed; both to
/// `inbound|PORT||`. A plaintext call to another port passes through.
#[test]
fn inbound_permissive_chains_take_plaintext_and_mtls_calls_apart() {
    let mut mesh = Mesh::new("inbound-permissive");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let ip = reviews.pod_ip("v1");
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let port = reviews.backend_port();
    let inbound = format!("inbound|{port}||");
    let call = || {
        Call::get("reviews:9080", port, "/reviews/1")
            .to_address(&ip)
            .inbound()
    };

    let o = mesh.send(&proxy, &call());
    assert_eq!(o.listener.as_deref(), Some("virtualInbound"), "{o:#?}");
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    assert_eq!(o.cluster(), Some(inbound.as_str()));

    let sni = format!("outbound_.9080_._.{FQDN}");
    let o = mesh.send(&proxy, &call().istio_mtls(&sni));
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(t.istio_mutual && t.require_client_certificate, "{t:#?}");
    assert_eq!(t.certificates, [Source::Sds("default".into())]);
    assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    assert_eq!(o.status(), None);
    // Every ALPN of Istio's clients reaches the mTLS chain.
    for alpn in ["istio", "istio-http/1.1", "istio-h2"] {
        let o = mesh.send(&proxy, &call().over_tls(Some(&sni), &[alpn]));
        assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{alpn}");
    }

    let o = mesh.send(&proxy, &Call::connect(5000).to_address(&ip).inbound());
    assert_eq!(
        o.filter_chain.as_deref(),
        Some("virtualInbound-catchall-tcp")
    );
    assert_eq!(o.cluster(), Some("PassthroughCluster"));
    mesh.assert_no_errors();
}

/// Mesh mTLS end to end: with `ISTIO_MUTUAL`, the TLS the client sidecar's cluster opens
/// (its SNI and ALPN) is what the server sidecar's `virtualInbound` takes on its mTLS chain,
/// which terminates it with the workload certificate the client pins (SDS `default` against
/// `ROOTCA` both ways) and forwards to the application; the same request in plaintext takes
/// the plaintext chain.
#[test]
fn istio_mutual_clients_reach_the_servers_mtls_chain() {
    let (mut mesh, reviews, client) = sidecar_setup("mtls-end-to-end", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    let ip = reviews.pod_ip("v1");
    let server = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let o = mesh.send(&client, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    let t = upstream_tls(&o, &reviews.cluster("")).expect("mTLS");
    assert!(t.istio_mutual, "{t:#?}");
    let alpn: Vec<&str> = t.alpn.iter().map(String::as_str).collect();
    let port = reviews.backend_port();
    let arriving = Call::get("reviews", port, "/reviews/1")
        .to_address(&ip)
        .inbound();
    let o = mesh.send(&server, &arriving.clone().over_tls(t.sni.as_deref(), &alpn));
    let inbound = format!("inbound|{port}||");
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let server_tls = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(server_tls.istio_mutual && server_tls.require_client_certificate);
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    let o = mesh.send(&server, &arriving);
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    mesh.assert_no_errors();
}

/// Mirrors `tests/envoy_istio_mutual.rs`: the server sidecar (pod `reviews-v1`, no capture)
/// binds its Sidecar `ingress` port on the pod's address (`inbound_IP_PORT`); the client
/// sidecar's `ISTIO_MUTUAL` connection to it (the cluster's SNI and ALPN) takes the mTLS chain,
/// a plaintext one the plaintext chain, both to `inbound|PORT||`; TLS without Istio's ALPN
/// (an HTTPS client's `h2`) finds no chain on an HTTP port, as in Istio.
#[test]
fn istio_mutual_reaches_a_bound_ingress_listeners_mtls_chain() {
    let (mut mesh, reviews, client) = sidecar_setup("mtls-ingress", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    let ip = reviews.pod_ip("v1");
    let target = reviews.backend_port();
    write_config(
        &mesh.config,
        "server-sidecar.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: reviews}}}}\n  ingress:\n  - port: {{number: {target}, protocol: HTTP, name: http}}\n    bind: {ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:9999\n  egress:\n  - hosts: ['./*']\n"
        ),
    );
    let server = mesh.connect(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let o = mesh.send(&client, &via_sidecar("reviews", "/"));
    let t = upstream_tls(&o, &reviews.cluster("")).expect("mTLS");
    let alpn: Vec<&str> = t.alpn.iter().map(String::as_str).collect();
    let direct = Call::get("reviews", target, "/").to_address(&ip);
    let listener = format!("inbound_{ip}_{target}");
    let inbound = format!("inbound|{target}||");

    let o = mesh.send(&server, &direct.clone().over_tls(t.sni.as_deref(), &alpn));
    assert_eq!(o.listener.as_deref(), Some(listener.as_str()), "{o:#?}");
    assert_eq!(o.captured_by, None);
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")));
    let server_tls = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(server_tls.istio_mutual && server_tls.require_client_certificate);
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    assert_eq!(o.endpoints(), ["127.0.0.1:9999"]);

    let o = mesh.send(&server, &direct);
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    assert_eq!(o.cluster(), Some(inbound.as_str()));

    let o = mesh.send(&server, &direct.clone().over_tls(t.sni.as_deref(), &["h2"]));
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "{o:#?}"
    );
    mesh.assert_no_errors();
}

/// Inbound PERMISSIVE on a TCP port: as Istio, three chains — Istio's mTLS (TLS with its
/// ALPN, terminated), TLS of the application's own (TLS with other or no ALPN, passed on as
/// bytes) and plaintext — so a client outside the mesh speaking TLS to, say, a database
/// reaches it (without the second chain, such a connection would match the mTLS chain's
/// transport and then no ALPN: no chain, Envoy would close it).
#[test]
fn inbound_permissive_tcp_ports_pass_the_applications_own_tls_through() {
    let mut mesh = Mesh::new("inbound-permissive-tcp");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let ip = reviews.pod_ip("v1");
    write_config(
        &mesh.config,
        "db.yaml",
        &format!(
            "apiVersion: v1
kind: Service
metadata: {{name: reviews-db, namespace: default}}
spec:
  selector: {{app: reviews}}
  ports: [{{name: tcp-db, port: 27017, targetPort: 27017, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-db-1
  namespace: default
  labels: {{kubernetes.io/service-name: reviews-db}}
addressType: IPv4
ports: [{{name: tcp-db, port: 27017, protocol: TCP}}]
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: reviews-v1, namespace: default}}
"
        ),
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let inbound = "inbound|27017||";
    let o = mesh.send(&proxy, &Call::connect(27017).to_address(&ip).inbound());
    assert_eq!(o.cluster(), Some(inbound), "plaintext: {o:#?}");
    let mtls = Call::connect(27017)
        .to_address(&ip)
        .inbound()
        .istio_mtls("outbound_.27017_._.reviews-db.default.svc.cluster.local");
    let o = mesh.send(&proxy, &mtls);
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let own_tls = Call::tls(27017, "db.example.com").to_address(&ip).inbound();
    let o = mesh.send(&proxy, &own_tls);
    assert_eq!(o.downstream_tls, None, "passed through: {o:#?}");
    assert_eq!(o.cluster(), Some(inbound), "{o:#?}");
}

/// A Gateway's HTTPS servers on one port: a TLS call is taken by the chain of the server
/// whose host its SNI names, which terminates it with the server's `credentialName`
/// (`kubernetes://NAME`), SIMPLE without asking for a client certificate, MUTUAL requiring one
/// verified against `kubernetes://NAME-cacert`; the request inside is routed by the
/// server's route configuration. A plaintext call (no SNI) or an unknown name finds no
/// chain.
#[test]
fn gateway_https_servers_terminate_by_sni_with_their_credentials() {
    use base64::Engine;
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-https", &["v1", "v2"]);
    let ca = support::pki::ca("gateway-ca");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = |name: &str, host: &str| {
        let (cert, key) = support::pki::leaf(&ca, &[host], None);
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: istio-system}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
            b64(&cert),
            b64(&key),
            b64(&ca.pem)
        )
    };
    write_config(
        &mesh.config,
        "secrets.yaml",
        &[
            secret("reviews-cert", "reviews.example.com"),
            secret("mtls-cert", "mtls.example.com"),
        ]
        .join("---\n"),
    );
    write_config(
        &mesh.config,
        "https.yaml",
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: https-gateway, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [reviews.example.com]
    tls: {mode: SIMPLE, credentialName: reviews-cert}
  - port: {number: 8443, name: https-mtls, protocol: HTTPS}
    hosts: [mtls.example.com]
    tls: {mode: MUTUAL, credentialName: mtls-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: https-reviews, namespace: default}
spec:
  hosts: [reviews.example.com, mtls.example.com]
  gateways: [https-gateway]
  http:
  - match: [{authority: {exact: mtls.example.com}}]
    route: [{destination: {host: reviews, subset: v2, port: {number: 9080}}}]
  - route: [{destination: {host: reviews, subset: v1, port: {number: 9080}}}]
",
    );
    let https = |host: &str| Call::https(host, 8443, "/reviews/1", host).to_address("127.0.0.1");

    let o = mesh.send(&gateway, &https("reviews.example.com"));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://reviews-cert".into())]
    );
    assert!(
        !t.require_client_certificate && t.validation.is_none(),
        "{t:#?}"
    );
    assert_eq!(t.alpn, ["h2", "http/1.1"]);
    assert_eq!(
        o.route_config.as_deref(),
        Some("https.8443.https.https-gateway.default")
    );
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    let o = mesh.send(&gateway, &https("mtls.example.com"));
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://mtls-cert".into())]
    );
    assert!(t.require_client_certificate, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://mtls-cert-cacert".into()))
    );
    assert_ne!(o.filter_chain, None);
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    let plaintext = Call::get("reviews.example.com", 8443, "/").to_address("127.0.0.1");
    let o = mesh.send(&gateway, &plaintext);
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "no SNI, no chain: {o:#?}"
    );
    let o = mesh.send(&gateway, &https("other.example.com"));
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "{o:#?}"
    );
    mesh.assert_no_errors();
}

/// Faults as Istio's fault-injection task writes them, on the client sidecar: jason's
/// requests delayed 7 s (every one), everyone else's aborted with 500 — which Envoy answers
/// itself, so those requests reach no cluster; at 50 % the abort is reported with its share
/// and the request may still go through.
#[test]
fn faults_delay_or_abort_the_requests_of_their_route() {
    let (mut mesh, reviews, proxy) = sidecar_setup("faults", &["v1", "v2"]);
    let vs = |abort_percent: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [reviews]
  http:
  - match: [{{headers: {{end-user: {{exact: jason}}}}}}]
    fault:
      delay: {{percentage: {{value: 100.0}}, fixedDelay: 7s}}
    route: [{{destination: {{host: reviews, subset: v2}}}}]
  - fault:
      abort: {{percentage: {{value: {abort_percent}}}, httpStatus: 500}}
    route: [{{destination: {{host: reviews, subset: v1}}}}]
"
        )
    };
    reviews.write("reviews-virtualservice.yaml", &vs("100.0"));
    let jason = via_sidecar("reviews", "/").header(JASON.0, JASON.1);
    let o = mesh.send(&proxy, &jason);
    assert_eq!(o.fault_delay(), Some(std::time::Duration::from_secs(7)));
    assert_eq!(
        o.fault(),
        Some(&Fault {
            delay: Some((std::time::Duration::from_secs(7), ALL)),
            abort: None
        })
    );
    assert_eq!(o.effective_status(), None, "delayed, then forwarded");
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    assert_eq!(o.fault_status(), Some(500), "{o:#?}");
    assert_eq!(o.effective_status(), Some(500));
    assert_eq!(o.fault_delay(), None);
    assert_eq!(
        o.cluster(),
        Some(reviews.cluster("v1").as_str()),
        "routed, never sent"
    );

    reviews.write("reviews-virtualservice.yaml", &vs("50.0"));
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    assert_eq!(
        o.fault().and_then(|f| f.abort.clone()),
        Some((FaultAbort::Http(500), ALL / 2))
    );
    assert_eq!(o.fault_status(), None, "only half of them");
    assert_eq!(o.effective_status(), None);
    mesh.assert_no_errors();
}

/// `rewrite` (a matched prefix and the authority; a path by regex), `headers` (request
/// `set`/`add`/`remove`, response `set`/`remove`, and a destination's own), a mirror of a
/// share of the requests and a `corsPolicy`, as the client sidecar forwards a request.
#[test]
fn rewrites_header_edits_and_mirrors_shape_the_forwarded_request() {
    let (mut mesh, reviews, proxy) = sidecar_setup("rewrites", &["v1", "v2"]);
    reviews.write(
        "reviews-virtualservice.yaml",
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /old}}]
    rewrite: {uri: /new, authority: reviews-v2.internal}
    headers:
      request:
        set: {x-set: one}
        add: {x-add: two}
        remove: [x-remove]
      response:
        set: {x-served-by: reviews}
        remove: [server]
    mirror: {host: reviews, subset: v1}
    mirrorPercentage: {value: 25.0}
    route: [{destination: {host: reviews, subset: v2}}]
  - match: [{uri: {regex: "/v[0-9]+/.*"}}]
    rewrite:
      uriRegexRewrite: {match: "^/v([0-9]+)/", rewrite: "/version-\\1/"}
    corsPolicy:
      allowOrigins: [{exact: "https://example.com"}, {prefix: "https://app."}]
      allowMethods: [GET, POST]
      allowHeaders: [x-custom]
      maxAge: 24h
      allowCredentials: true
    route: [{destination: {host: reviews, subset: v1}}]
  - route:
    - destination: {host: reviews, subset: v1}
      headers: {request: {set: {x-destination: v1}}}
"#,
    );
    let o = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/old/page?q=1")
            .header("x-remove", "gone")
            .header("x-add", "first")
            .header("x-set", "replaced"),
    );
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(fx.prefix_rewrite.as_deref(), Some("/new"));
    assert_eq!(
        fx.host_rewrite,
        Some(HostRewrite::Literal("reviews-v2.internal".into()))
    );
    assert_eq!(fx.upstream_path, "/new/page?q=1");
    assert_eq!(fx.upstream_authority, "reviews-v2.internal");
    let mut forwarded = fx.upstream_headers.clone();
    forwarded.sort();
    assert_eq!(
        forwarded,
        [
            ("x-add".to_string(), "first".to_string()),
            ("x-add".into(), "two".into()),
            ("x-set".into(), "one".into()),
        ]
    );
    let ops = |edits: &[HeaderEdit]| -> Vec<(HeaderOp, String, String)> {
        edits
            .iter()
            .map(|e| (e.op, e.name.clone(), e.value.clone()))
            .collect()
    };
    assert_eq!(
        ops(&fx.response_headers),
        [
            (HeaderOp::Remove, "server".into(), String::new()),
            (HeaderOp::Set, "x-served-by".into(), "reviews".into()),
        ]
    );
    assert!(fx
        .request_headers
        .iter()
        .chain(&fx.response_headers)
        .all(|e| e.level == HeaderLevel::Route));
    assert_eq!(
        fx.mirrors,
        [Mirror {
            cluster: reviews.cluster("v1"),
            per_million: ALL / 4,
            cluster_found: true,
        }]
    );
    assert_eq!(fx.fault, None);

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/v2/reviews/1"));
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(
        fx.regex_rewrite,
        Some(("^/v([0-9]+)/".into(), "/version-\\1/".into()))
    );
    assert_eq!(fx.upstream_path, "/version-2/reviews/1");
    assert_eq!(fx.upstream_authority, "reviews", "no authority rewrite");
    assert!(fx.mirrors.is_empty());
    assert_eq!(
        fx.cors,
        Some(Cors {
            allow_origins: vec![
                "exact:https://example.com".into(),
                "prefix:https://app.".into()
            ],
            allow_methods: "GET,POST".into(),
            allow_headers: "x-custom".into(),
            expose_headers: String::new(),
            max_age: "86400".into(),
            allow_credentials: Some(true),
            enabled_per_million: ALL,
        })
    );

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/other"));
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(
        fx.upstream_headers,
        [("x-destination".to_string(), "v1".to_string())],
        "a lone destination's headers go on the route"
    );
    assert_eq!(fx.upstream_path, "/other");
    assert_eq!(fx.cors, None, "CORS is per route");
    mesh.assert_no_errors();
}

// ---------------------------------------------------------------------------------------------
// Fields that change where a request goes, each routed end to end (issue 13's audit: restricting
// TCP/TLS match conditions, gateway server hosts by namespace, VirtualService precedence, and
// match conditions, delegates, redirects and service kinds not simulated elsewhere)
// ---------------------------------------------------------------------------------------------

/// `tcp[]` match `sourceLabels`: of two client sidecars the same Sidecar scopes, only the one
/// carrying `role: canary` has its `mongo` connections sent to subset v2 by the route whose
/// match selects that label; the other's go where they go without a route that applies (the
/// service's own cluster, both pods, as Istio adds the default route after the matches). A
/// selector both carry moves both; one neither fully carries moves neither.
#[test]
fn tcp_match_source_labels_route_only_the_labelled_clients_connections() {
    let mut mesh = Mesh::new("tcp-source-labels");
    support::mongo::write_mesh(&mesh.config, 60, PORT, PORT + 1, PORT + 2);
    let client = |name: &str, host: u8, labels: &[(&str, &str)]| {
        ProxyNode::sidecar(name, "default", &support::mongo::ip(60, host), labels)
    };
    let canary = mesh.connect(&client(
        "client-canary",
        20,
        &[("app", "client"), ("role", "canary")],
    ));
    let plain = mesh.connect(&client("client-plain", 21, &[("app", "client")]));
    let vs = |selector: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: mongo, namespace: default}}
spec:
  hosts: [mongo]
  tcp:
  - match: [{{sourceLabels: {selector}}}]
    route: [{{destination: {{host: mongo, subset: v2}}}}]
"
        )
    };
    let conn = Call::connect(PORT).to_address("127.0.0.1");
    let both = [mongo_pod(1), mongo_pod(2)];

    write_config(&mesh.config, "mongo-vs.yaml", &vs("{role: canary}"));
    let o = mesh.send(&canary, &conn);
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    let o = mesh.send(&plain, &conn);
    assert_routes_to(&o, &mongo_cluster(""), &both);

    write_config(&mesh.config, "mongo-vs.yaml", &vs("{app: client}"));
    for proxy in [&canary, &plain] {
        let o = mesh.send(proxy, &conn);
        assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    }

    write_config(
        &mesh.config,
        "mongo-vs.yaml",
        &vs("{app: client, role: stable}"),
    );
    for proxy in [&canary, &plain] {
        let o = mesh.send(proxy, &conn);
        assert_routes_to(&o, &mongo_cluster(""), &both);
    }
}

/// `tls[]` match conditions on sidecars, for a TLS ServiceEntry routed by SNI: `sourceLabels`
/// sends only the labelled sidecar's connections to the route's destination,
/// `sourceNamespace` only those of the sidecar in that namespace, and `gateways` naming a
/// gateway never applies on a sidecar (only `mesh` does), though the VirtualService is bound
/// to both; a connection no route applies to goes to the entry's own cluster.
#[test]
fn tls_match_source_labels_namespace_and_gateways_apply_per_sidecar() {
    let mut mesh = Mesh::new("tls-match-conditions");
    write_config(
        &mesh.config,
        "entries.yaml",
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: egress, namespace: default}
spec:
  hosts: [egress.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: egress-gateway, namespace: default}
spec:
  selector: {istio: egressgateway}
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    hosts: [www.example.com]
    tls: {mode: PASSTHROUGH}
",
    );
    let sidecar = |name: &str, ns: &str, host: u8, labels: &[(&str, &str)]| {
        ProxyNode::sidecar(name, ns, &format!("127.0.62.{host}"), labels)
    };
    let canary = mesh.connect_captured(&sidecar(
        "client-canary",
        "default",
        20,
        &[("app", "client"), ("role", "canary")],
    ));
    let plain = mesh.connect_captured(&sidecar(
        "client-plain",
        "default",
        21,
        &[("app", "client")],
    ));
    let elsewhere =
        mesh.connect_captured(&sidecar("client-other", "other", 22, &[("app", "client")]));
    let vs = |condition: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: www, namespace: default}}
spec:
  hosts: [www.example.com]
  gateways: [mesh, egress-gateway]
  tls:
  - match: [{{sniHosts: [www.example.com], {condition}}}]
    route: [{{destination: {{host: egress.example.com, port: {{number: 443}}}}}}]
"
        )
    };
    let call = Call::tls(443, "www.example.com").to_address("203.0.113.80");
    let (www, egress) = (
        "outbound|443||www.example.com",
        "outbound|443||egress.example.com",
    );
    let expect = |mesh: &mut Mesh, condition: &str, expected: [&str; 3]| {
        write_config(&mesh.config, "route.yaml", &vs(condition));
        for (proxy, cluster) in [&canary, &plain, &elsewhere].into_iter().zip(expected) {
            let o = mesh.send(proxy, &call);
            assert_eq!(
                o.cluster(),
                Some(cluster),
                "{condition} from {proxy}: {o:#?}"
            );
        }
    };
    expect(
        &mut mesh,
        "sourceLabels: {role: canary}",
        [egress, www, www],
    );
    expect(
        &mut mesh,
        "sourceLabels: {app: client}",
        [egress, egress, egress],
    );
    expect(&mut mesh, "sourceNamespace: other", [www, www, egress]);
    expect(&mut mesh, "gateways: [egress-gateway]", [www, www, www]);
    expect(&mut mesh, "gateways: [mesh]", [egress, egress, egress]);
}

/// A Gateway of namespace `default` whose server's hosts are `NS/host` (Istio's
/// `namespace/dnsName`): only VirtualServices of that namespace get a virtual host for the
/// host on the gateway. With `other/…` the VirtualService in `default` gets none (404) and
/// the one in `other` routes; with `./…` (the Gateway's own namespace) the reverse.
#[test]
fn gateway_server_hosts_by_namespace_take_only_that_namespaces_virtual_services() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-host-namespace", &["v1", "v2"]);
    let gateway_yaml = |host: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: bookinfo-gateway, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {PORT}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ['{host}']
"
        )
    };
    let vs = |ns: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: from-{ns}, namespace: {ns}}}
spec:
  hosts: [{GATEWAY_HOST}]
  gateways: [default/bookinfo-gateway]
  http:
  - route: [{{destination: {{host: {FQDN}, subset: {subset}, port: {{number: 9080}}}}}}]
"
        )
    };
    let call = via_gateway(GATEWAY_HOST, "/reviews/1");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));

    write_config(
        &mesh.config,
        "gateway.yaml",
        &gateway_yaml(&format!("other/{GATEWAY_HOST}")),
    );
    write_config(&mesh.config, "vs-default.yaml", &vs("default", "v1"));
    let o = mesh.send(&gateway, &call);
    assert_status(&o, 404);
    assert!(
        o.upstreams().is_empty(),
        "default's VirtualService is not for other/: {o:#?}"
    );
    write_config(&mesh.config, "vs-other.yaml", &vs("other", "v2"));
    routes_to(&mut mesh, &gateway, &call, &v2, &pod2);

    write_config(
        &mesh.config,
        "gateway.yaml",
        &gateway_yaml(&format!("./{GATEWAY_HOST}")),
    );
    routes_to(&mut mesh, &gateway, &call, &v1, &pod1);
    std::fs::remove_file(mesh.config.join("vs-default.yaml")).expect("remove");
    let o = mesh.send(&gateway, &call);
    assert_status(&o, 404);
    assert!(
        o.upstreams().is_empty(),
        "other's VirtualService is not for ./: {o:#?}"
    );
}

/// Two VirtualServices bound to one gateway for the same host are merged into its one
/// virtual host, as Istio merges them: the routes of both apply, the first VirtualService's
/// (by namespace and name, meshflow's stand-in for Istio's creation time, README) ahead of
/// the second's, so a catch-all in the first shadows the second's narrower route.
#[test]
fn virtual_services_for_one_gateway_host_are_merged_in_order() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-merge", &["v1", "v2"]);
    let vs = |name: &str, prefix: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{GATEWAY_HOST}]
  gateways: [bookinfo-gateway]
  http:
  - match: [{{uri: {{prefix: {prefix}}}}}]
    route: [{{destination: {{host: reviews, subset: {subset}, port: {{number: 9080}}}}}}]
"
        )
    };
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    write_config(&mesh.config, "a.yaml", &vs("alpha", "/reviews/1", "v2"));
    write_config(&mesh.config, "b.yaml", &vs("beta", "/reviews", "v1"));
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/1"),
        &v2,
        &pod2,
    );
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/2"),
        &v1,
        &pod1,
    );
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/ratings/1"));
    assert_status(&o, 404);

    // The catch-all first: `alpha` now holds `/reviews`, and `beta`'s `/reviews/1` is never
    // reached.
    write_config(&mesh.config, "a.yaml", &vs("alpha", "/reviews", "v1"));
    write_config(&mesh.config, "b.yaml", &vs("beta", "/reviews/1", "v2"));
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/1"),
        &v1,
        &pod1,
    );
}

/// Two mesh VirtualServices for `reviews`, in `default` (v1) and in `other` (v2), both
/// exported everywhere: a sidecar takes the one of its own namespace (Istio's sidecar scope
/// lists its namespace's VirtualServices first, and the first for a host wins), and a
/// sidecar of a third namespace the first of the others (by namespace: `default`).
#[test]
fn a_sidecar_takes_its_own_namespaces_virtual_service_for_a_host() {
    let mut mesh = Mesh::new("mesh-vs-precedence");
    let reviews = reviews_mesh(&mesh, 9080, &["v1", "v2"]);
    let sidecar = |ns: &str, host: u8| {
        ProxyNode::sidecar("client-abc", ns, &reviews.ip(host), &[("app", "client")])
    };
    let in_default = mesh.connect_captured(&sidecar("default", 20));
    let in_other = mesh.connect_captured(&sidecar("other", 21));
    let in_third = mesh.connect_captured(&sidecar("third", 22));
    let vs = |ns: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: {ns}}}
spec:
  hosts: [{FQDN}]
  http:
  - route: [{{destination: {{host: {FQDN}, subset: {subset}}}}}]
"
        )
    };
    write_config(&mesh.config, "vs-default.yaml", &vs("default", "v1"));
    write_config(&mesh.config, "vs-other.yaml", &vs("other", "v2"));
    let call = Call::get(FQDN, 9080, "/").to_address("203.0.113.9");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    routes_to(&mut mesh, &in_default, &call, &v1, &pod1);
    routes_to(&mut mesh, &in_other, &call, &v2, &pod2);
    routes_to(&mut mesh, &in_third, &call, &v1, &pod1);
    // Without its own, `other`'s sidecar takes `default`'s.
    std::fs::remove_file(mesh.config.join("vs-other.yaml")).expect("remove");
    routes_to(&mut mesh, &in_other, &call, &v1, &pod1);
}

/// `scheme` match: a plaintext request's `:scheme` is `http`, so the route matching `https`
/// does not take it and the one matching `http` does; with only the `https` route, 404.
#[test]
fn match_scheme_takes_only_requests_of_that_scheme() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-scheme", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: scheme, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{scheme: {exact: https}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n  - match: [{scheme: {exact: http}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n";
    write_config(&mesh.config, "scheme.yaml", vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let https_only = vs
        .split("  - match: [{scheme: {exact: http}}]")
        .next()
        .expect("head");
    write_config(&mesh.config, "scheme.yaml", https_only);
    assert_status(
        &mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1")),
        404,
    );
}

/// Header `prefix` and `regex` matches of a translated VirtualService: a prefix takes any
/// value starting with it (not one containing it elsewhere); a regex must match the whole
/// value (RE2, as Envoy's `safe_regex`), not part of it.
#[test]
fn match_header_prefix_and_regex_select_routes() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-header-forms", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: headers, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{headers: {x-user: {prefix: test}}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{headers: {x-version: {regex: 'v[0-9]+'}}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n";
    write_config(&mesh.config, "headers.yaml", vs);
    let get = || via_sidecar("reviews", "/reviews/1");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-user", "tester"),
        &v2,
        &pod2,
    );
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-user", "test"),
        &v2,
        &pod2,
    );
    assert_status(&mesh.send(&proxy, &get().header("x-user", "a-tester")), 404);
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-version", "v12"),
        &v1,
        &pod1,
    );
    assert_status(
        &mesh.send(&proxy, &get().header("x-version", "v12-beta")),
        404,
    );
    assert_status(
        &mesh.send(&proxy, &get().header("x-version", "beta-v1")),
        404,
    );
    assert_status(&mesh.send(&proxy, &get()), 404);
    mesh.assert_no_errors();
}

/// A positive `port` match: a route whose match names the port the request arrives on
/// applies there (with its other conditions), ahead of the routes after it.
#[test]
fn match_port_applies_on_its_own_port() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-port-positive", &["v1", "v2"]);
    let vs = format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: by-port, namespace: default}}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{{port: 1}}]\n    route: [{{destination: {{host: reviews, subset: v1}}}}]\n  - match: [{{port: {PORT}, uri: {{prefix: /reviews}}}}]\n    route: [{{destination: {{host: reviews, subset: v2}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1}}}}]\n");
    write_config(&mesh.config, "by-port.yaml", &vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.route_config, Some(PORT.to_string()));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/ratings/1"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
}

const TRAFFIC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/traffic-management/config"
);

/// `delegate`, over `examples/traffic-management` as shipped: the root VirtualService of
/// `bookinfo.example` at the gateway delegates `/reviews` to the hostless
/// `reviews-routes`, whose routes apply under the root's match: jason reaches v2, anyone else
/// v1 with the delegate's 2 s timeout, on both hosts of the root; a path outside the root's
/// `/reviews` never reaches the delegate's catch-all (404), and the root's own routes keep
/// their order around it (`/` redirects first).
#[test]
fn delegate_routes_apply_under_the_root_routes_match() {
    let mut mesh = Mesh::over(TestDir::new("routing-simulation-delegate"), TRAFFIC.into());
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-6b8d7f9c4-k3m9p",
        "istio-system",
        "127.0.3.70",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    mesh.sync_clean();
    let reviews =
        |subset: &str| format!("outbound|9080|{subset}|reviews.default.svc.cluster.local");
    for host in ["bookinfo.example", "shop.bookinfo.example"] {
        let call = Call::get(host, 8080, "/reviews/1");
        let o = mesh.send(&gateway, &call.clone().header(JASON.0, JASON.1));
        assert_eq!(o.cluster(), Some(&*reviews("v2")), "{host}: {o:#?}");
        assert_eq!(o.status(), None, "{o:#?}");
        let o = mesh.send(&gateway, &call);
        assert_eq!(o.cluster(), Some(&*reviews("v1")), "{host}: {o:#?}");
        match &o.result {
            Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
                assert_eq!(*timeout, Some(std::time::Duration::from_secs(2)), "{o:#?}")
            }
            other => panic!("a route: {other:?}"),
        }
        let o = mesh.send(&gateway, &Call::get(host, 8080, "/ratings/1"));
        assert_status(&o, 404);
        let o = mesh.send(&gateway, &Call::get(host, 8080, "/"));
        assert_status(&o, 301);
    }
}

/// `tls.httpsRedirect` on a gateway's HTTP server: the virtual host a plaintext request lands
/// on requires TLS (`require_tls: ALL`), so Envoy answers it with a 301 to https before any
/// route — for the host a VirtualService serves as for one none does. (The simulation reports
/// the route the request would take; the redirect is Envoy's virtual-host check, asserted
/// here on the virtual host the simulation picked.) Without the flag, the route applies.
#[test]
fn https_redirect_servers_send_plaintext_requests_to_https() {
    use envoy_types::pb::envoy::config::route::v3::virtual_host::TlsRequirementType;
    let (mut mesh, reviews, gateway, binding) = gateway_setup("https-redirect", &["v1"]);
    reviews.write_plain_routing(&binding);
    let require_tls = |mesh: &mut Mesh, host: &str| -> Option<i32> {
        let o = mesh.send(&gateway, &via_gateway(host, "/reviews/1"));
        let config = mesh.proxy(&gateway);
        let rc = &config.routes[o.route_config.as_deref().expect("a route configuration")];
        let vh = o.virtual_host.as_deref()?;
        rc.virtual_hosts
            .iter()
            .find(|v| v.name == vh)
            .map(|v| v.require_tls)
    };
    assert_eq!(
        require_tls(&mut mesh, GATEWAY_HOST),
        Some(TlsRequirementType::None as i32)
    );
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);

    let gateway_yaml = std::fs::read_to_string(mesh.config.join("gateway.yaml")).expect("read");
    write_config(
        &mesh.config,
        "gateway.yaml",
        &format!("{gateway_yaml}    tls: {{httpsRedirect: true}}\n"),
    );
    assert_eq!(
        require_tls(&mut mesh, GATEWAY_HOST),
        Some(TlsRequirementType::All as i32)
    );
    assert_eq!(
        require_tls(&mut mesh, "other.example.com"),
        Some(TlsRequirementType::All as i32),
        "a host no VirtualService serves is redirected too"
    );
}

/// A TLS server with `mode: PASSTHROUGH` at the gateway routes each connection by its SNI to
/// the destination of the `tls[]` route naming it, without terminating it; a name no route
/// claims, or a connection without TLS, matches no filter chain.
#[test]
fn gateway_passthrough_routes_tls_connections_by_sni() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-passthrough", &["v1", "v2"]);
    write_config(
        &mesh.config,
        "passthrough.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: passthrough, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 8443, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ['*.example.com']
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: passthrough, namespace: default}}
spec:
  hosts: ['*.example.com']
  gateways: [passthrough]
  tls:
  - match: [{{sniHosts: [a.example.com]}}]
    route: [{{destination: {{host: {FQDN}, subset: v1, port: {{number: 9080}}}}}}]
  - match: [{{sniHosts: [b.example.com]}}]
    route: [{{destination: {{host: {FQDN}, subset: v2, port: {{number: 9080}}}}}}]
"
        ),
    );
    let at = |sni: &str| Call::tls(8443, sni).to_address("127.0.0.1");
    let o = mesh.send(&gateway, &at("a.example.com"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_8443"), "{o:#?}");
    assert_eq!(o.downstream_tls, None, "passed through, not terminated");
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&gateway, &at("b.example.com"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    for call in [
        at("c.example.com"),
        Call::connect(8443).to_address("127.0.0.1"),
    ] {
        let o = mesh.send(&gateway, &call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
    mesh.assert_no_errors();
}

/// A headless Service (`clusterIP: None`, a StatefulSet's): a sidecar's connection to one of
/// its pods goes to that pod — the address the client dialled — not to any endpoint of the
/// service, as Istio's sidecars send it (an `ORIGINAL_DST` cluster for a headless service,
/// unless `PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES`), on a TCP port as on an HTTP one.
#[test]
fn a_headless_service_is_reached_at_the_pod_the_client_dialled() {
    let mut mesh = Mesh::new("headless");
    write_config(
        &mesh.config,
        "db.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: tcp-db, port: 5432, targetPort: 5432}
  - {name: http-admin, port: 8080, targetPort: 8080}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: default, labels: {app: db}}
status: {phase: Running, podIP: 127.0.63.11}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: default, labels: {app: db}}
status: {phase: Running, podIP: 127.0.63.12}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abcde
  namespace: default
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports:
- {name: tcp-db, port: 5432, protocol: TCP}
- {name: http-admin, port: 8080, protocol: TCP}
endpoints:
- addresses: [127.0.63.11]
  conditions: {ready: true}
  hostname: db-0
- addresses: [127.0.63.12]
  conditions: {ready: true}
  hostname: db-1
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.63.20",
        &[("app", "client")],
    ));
    for pod in ["127.0.63.11", "127.0.63.12"] {
        let o = mesh.send(&sidecar, &Call::connect(5432).to_address(pod));
        assert_eq!(
            o.cluster(),
            Some("outbound|5432||db.default.svc.cluster.local"),
            "{o:#?}"
        );
        assert_eq!(o.upstreams()[0].discovery, Discovery::OriginalDst, "{o:#?}");
        assert_eq!(o.endpoints(), [format!("{pod}:5432")], "{o:#?}");
        let o = mesh.send(
            &sidecar,
            &Call::get("db.default.svc.cluster.local", 8080, "/").to_address(pod),
        );
        assert_eq!(
            o.cluster(),
            Some("outbound|8080||db.default.svc.cluster.local"),
            "{o:#?}"
        );
        assert_eq!(o.upstreams()[0].discovery, Discovery::OriginalDst, "{o:#?}");
        assert_eq!(o.endpoints(), [format!("{pod}:8080")], "{o:#?}");
    }
}

/// An ExternalName Service is an alias of the host it names (Istio since 1.21: wherever the
/// concrete service is matched, the ExternalName's names match too; the alias gets no
/// cluster of its own): a request for `billing` goes where one for
/// `billing.partner.example` goes, that host's ServiceEntry cluster and its VirtualService
/// routes.
#[test]
fn an_external_name_service_routes_as_the_host_it_names() {
    let mut mesh = Mesh::new("external-name");
    write_config(
        &mesh.config,
        "billing.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: billing, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing-partner, namespace: default}
spec:
  hosts: [billing.partner.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.64.20",
        &[("app", "client")],
    ));
    let target = "outbound|80||billing.partner.example";
    for host in [
        "billing.partner.example",
        "billing",
        "billing.default.svc.cluster.local",
    ] {
        let o = mesh.send(
            &sidecar,
            &Call::get(host, 80, "/invoices").to_address("203.0.113.9"),
        );
        assert_eq!(o.cluster(), Some(target), "{host}: {o:#?}");
        assert_eq!(o.endpoints(), ["billing.partner.example:80"], "{o:#?}");
    }
}

/// The edge cases of ExternalName aliases, as Istio's sidecars route them: a VirtualService
/// naming the alias's own host governs the alias's names on a port the alias declares (a
/// request for `billing` goes where that VirtualService sends it, while one for the named
/// host keeps its own route); a destination without a port naming an alias that does not
/// declare the port the request arrived on keeps the alias's host, which has no cluster —
/// Envoy answers 503 (Istio's `GetDestinationCluster` finds no service for it there) —, and
/// is reported (`MF0015` when the alias names no service).
#[test]
fn external_name_aliases_route_their_own_virtual_service_and_portless_destinations_as_istio() {
    let mut mesh = Mesh::new("external-name-edges");
    write_config(
        &mesh.config,
        "billing.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: billing, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing-partner, namespace: default}
spec:
  hosts: [billing.partner.example, billing-v2.partner.example, ledger.partner.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: billing, namespace: default}
spec:
  hosts: [billing]
  http:
  - route:
    - destination: {host: billing-v2.partner.example}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ledger, namespace: default}
spec:
  hosts: [ledger.partner.example]
  http:
  - route:
    - destination: {host: ledger}
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.64.21",
        &[("app", "client")],
    ));
    let get = |host: &str| Call::get(host, 80, "/invoices").to_address("203.0.113.9");
    for host in [
        "billing",
        "billing.default",
        "billing.default.svc.cluster.local",
    ] {
        let o = mesh.send(&sidecar, &get(host));
        assert_eq!(
            o.cluster(),
            Some("outbound|80||billing-v2.partner.example"),
            "{host}: {o:#?}"
        );
    }
    let o = mesh.send(&sidecar, &get("billing.partner.example"));
    assert_eq!(
        o.cluster(),
        Some("outbound|80||billing.partner.example"),
        "{o:#?}"
    );
    // `ledger` declares no port: on port 80 the destination keeps its host, a cluster no
    // proxy has.
    let o = mesh.send(&sidecar, &get("ledger.partner.example"));
    assert_eq!(
        o.cluster(),
        Some("outbound|80||ledger.default.svc.cluster.local"),
        "{o:#?}"
    );
    assert_status(&o, 503);
}

/// A ServiceEntry whose endpoints are the workloads its `workloadSelector` selects: two
/// WorkloadEntries (one at the port its `ports` names for the entry's port, with its
/// weight; one at the entry's `targetPort`) and a Pod of the namespace carrying the labels.
/// A request for the entry's host, captured at the entry's address, can reach those three
/// addresses and no other, as shipped in `examples/service-registry`; a WorkloadEntry whose
/// labels stop matching leaves.
#[test]
fn workload_entries_selected_by_a_service_entry_are_its_endpoints() {
    let dir = TestDir::new("routing-simulation-workload-entries");
    let config = dir.subdir("config");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/service-registry/config"
    );
    for entry in std::fs::read_dir(source).expect("examples/service-registry/config") {
        let path = entry.expect("a directory entry").path();
        std::fs::copy(&path, config.join(path.file_name().expect("a file name")))
            .expect("copy the example");
    }
    let mut mesh = Mesh::over(dir, config);
    let sleep = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-9b8c7",
        "default",
        "127.0.4.70",
        &[("app", "sleep")],
    ));
    let call = Call::get("inventory.shop.example", 8080, "/items").to_address("192.0.2.20");
    let o = mesh.send(&sleep, &call);
    assert_eq!(
        o.cluster(),
        Some("outbound|8080||inventory.shop.example"),
        "{o:#?}"
    );
    assert_eq!(
        o.endpoints(),
        ["127.0.4.51:18080", "127.0.4.52:8080", "127.0.4.53:8080"],
        "{o:#?}"
    );
    let weights: BTreeMap<String, Option<u32>> = o.upstreams()[0]
        .endpoints
        .iter()
        .map(|e| (e.address.clone(), e.weight))
        .collect();
    assert_eq!(weights["127.0.4.51:18080"], Some(2), "{weights:?}");

    let entries = mesh.config.join("service-entries.yaml");
    let text = std::fs::read_to_string(&entries).expect("read");
    let relabelled = text.replacen(
        "  address: 127.0.4.52\n  labels:\n    app: inventory",
        "  address: 127.0.4.52\n  labels:\n    app: retired",
        1,
    );
    assert_ne!(text, relabelled, "the fixture names vm-2's labels");
    write_config(&mesh.config, "service-entries.yaml", &relabelled);
    let o = mesh.send(&sleep, &call);
    assert_eq!(
        o.endpoints(),
        ["127.0.4.51:18080", "127.0.4.53:8080"],
        "{o:#?}"
    );
}
