//! The Kubernetes source end to end: `meshflow serve --kube --kubeconfig F` as a process,
//! its real `kube` client talking to a fake API server (`support::fake_kube`, which says
//! what it covers) driven by a script of events. What each test holds to: the initial list
//! (paginated) is served before anything else and readiness waits for it; watch events
//! become exactly their record changes; a relist (410 Gone as an ERROR event or as an HTTP
//! answer) retracts what vanished and nothing else; a dropped connection resumes from its
//! resourceVersion without a relist; invalid objects are named with their field and their
//! last valid version stays; churn that changes no proxy's config pushes nothing; with
//! `--write-status`, each object's status says whether it is in effect, what is not
//! translated and what the analysis across objects finds, without a write per edit, from one
//! replica at a time (the holder of a Lease, taken over when it stops); a real Envoy routes
//! by a VirtualService created through the API, and its rejection of one is written on the
//! object's status and as an Event; two replicas give two real Envoys identical config.
//!
//! This file holds the harness (`Cluster`: meshflow against a fake API server) and the
//! objects tests create; the modules the tests, by what they hold to.

#[path = "../support/mod.rs"]
mod support;

mod envoy;
mod gateway_api;
mod security;
mod status;
mod watch;

use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_kube::FakeKube;
use support::reviews::Reviews;
use support::xds_client::{node, DeltaClient, CDS};
use support::{
    free_port, http_get, wait_until, Envoy, Meshflow, ProxyNode, TestDir, CONVERGE_TIMEOUT,
};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// meshflow serving from a fake cluster. Fields drop in order: meshflow first (its log is
/// shown if the test failed), then the fake API server, then the scratch directory.
struct Cluster {
    meshflow: Meshflow,
    fake: FakeKube,
    debug: SocketAddr,
    dir: TestDir,
}

/// Starts a fake API server, lets `seed` fill it, and starts meshflow against it.
fn start(label: &str, seed: impl FnOnce(&FakeKube), extra_args: &[&str]) -> Cluster {
    let dir = TestDir::new(label);
    let fake = FakeKube::start();
    seed(&fake);
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let mut args = vec!["--debug-addr", debug_arg.as_str()];
    args.extend_from_slice(extra_args);
    let meshflow = Meshflow::start_kube(&kubeconfig, dir.path(), &args);
    Cluster {
        meshflow,
        fake,
        debug,
        dir,
    }
}

impl Cluster {
    fn metrics(&self) -> String {
        get(self.debug, "/metrics")
    }

    /// `meshflow_input_changes_total` of one kind and op (`insert`, `update`, `delete`).
    fn input_changes(&self, kind: &str, op: &str) -> f64 {
        sample(
            &self.metrics(),
            &format!("meshflow_input_changes_total{{kind=\"{kind}\",op=\"{op}\"}}"),
        )
    }

    /// Polls until `kind`'s input changes of `op` reach `n`; panics with the metrics after
    /// the convergence timeout.
    fn await_input_changes(&self, kind: &str, op: &str, n: f64) {
        let mut last = 0.0;
        let reached = wait_until(CONVERGE_TIMEOUT, || {
            last = self.input_changes(kind, op);
            last >= n
        });
        assert!(reached, "{kind} {op} changes stayed at {last}, want {n}");
    }

    /// The rejected inputs `/debug/config_errors` lists.
    fn errors(&self) -> Vec<String> {
        let text = get(self.debug, "/debug/config_errors");
        let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        strings(&json["rejected_inputs"])
    }

    /// Polls until the analysis `/debug/config_errors` lists satisfies `accept`.
    fn await_analysis(&self, what: &str, accept: impl Fn(&[String]) -> bool) {
        let mut last = Vec::new();
        let ok = wait_until(CONVERGE_TIMEOUT, || {
            let text = get(self.debug, "/debug/config_errors");
            let json: Value = serde_json::from_str(&text).unwrap_or_default();
            last = strings(&json["analysis"]);
            accept(&last)
        });
        assert!(ok, "{what}: analysis is {last:#?}");
    }

    /// Polls until the dataflow's config errors (`object: message`) satisfy `accept`.
    fn await_config_errors(&self, what: &str, accept: impl Fn(&[String]) -> bool) {
        let mut last = Vec::new();
        let ok = wait_until(CONVERGE_TIMEOUT, || {
            let text = get(self.debug, "/debug/config_errors");
            let json: Value = serde_json::from_str(&text).unwrap_or_default();
            last = json["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| format!("{}: {}", e["object"], e["message"]))
                .collect();
            accept(&last)
        });
        assert!(ok, "{what}: config errors are {last:#?}");
    }

    /// Polls until the rejected inputs satisfy `accept`; returns them.
    fn await_errors(&self, what: &str, accept: impl Fn(&[String]) -> bool) -> Vec<String> {
        let mut last = Vec::new();
        let ok = wait_until(CONVERGE_TIMEOUT, || {
            last = self.errors();
            accept(&last)
        });
        assert!(ok, "{what}: rejected inputs are {last:#?}");
        last
    }

    /// The list (not watch) requests the fake received for `path_prefix`.
    fn lists(&self, path_prefix: &str) -> usize {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.starts_with(&format!("GET {path_prefix}?")) && !r.contains("watch="))
            .count()
    }

    /// A real Envoy as the client sidecar `name` in `default` (Delta ADS), once it has the
    /// listener of `port`.
    fn client_envoy(&self, bin: &Path, name: &str, reviews: &Reviews, port: u16) -> Envoy {
        let at = Sidecar {
            name,
            ip: reviews.ip(20),
            xds: self.meshflow.xds_addr(),
        };
        self.envoy_of(bin, at, port)
    }

    /// A real Envoy as the client sidecar `at` describes, once it has the listener of `port`.
    fn envoy_of(&self, bin: &Path, at: Sidecar, port: u16) -> Envoy {
        let node = ProxyNode::sidecar(at.name, "default", &at.ip, &[("app", "client")]);
        let envoy = Envoy::start_live(bin, self.dir.path(), &node, at.xds);
        envoy.await_listener(&format!("127.0.0.1_{port}"));
        envoy
    }

    /// A Delta client as a sidecar in `default`, subscribed to every cluster.
    async fn cds_client(&self, pod: &str) -> DeltaClient {
        let id = format!("sidecar~10.1.0.99~{pod}.default~default.svc.cluster.local");
        let mut c = DeltaClient::connect(self.meshflow.xds_addr(), node(&id, "default", &[])).await;
        c.subscribe(CDS, &[], HashMap::new()).await;
        c
    }
}

/// A client sidecar: its pod name, address and the meshflow replica it connects to.
struct Sidecar<'a> {
    name: &'a str,
    ip: String,
    xds: SocketAddr,
}

fn get(addr: SocketAddr, path: &str) -> String {
    let (status, body) =
        http_get(addr, "localhost", path, &[]).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// The strings of a JSON array (none when it is not one).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of one sample of the metrics text (0 when absent).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Receives (and ACKs) until the client's clusters satisfy `accept`.
async fn await_clusters(c: &mut DeltaClient, what: &str, accept: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while !accept(&c.names(CDS)) {
        assert!(
            Instant::now() < deadline,
            "{what}: clusters are {:#?}",
            c.names(CDS)
        );
        c.recv(Duration::from_millis(200)).await;
    }
}

fn outbound(port: u16, service: &str, namespace: &str) -> String {
    format!("outbound|{port}||{service}.{namespace}.svc.cluster.local")
}

fn has(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == name)
}

// ---------------------------------------------------------------------------------------------
// Objects, as a client would create them
// ---------------------------------------------------------------------------------------------

fn service(name: &str, namespace: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": port, "targetPort": 8080}]},
    })
}

fn pod(name: &str, ip: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app, "version": "v1"}},
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn endpoint_slice(service: &str, namespace: &str, ips: &[&str]) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-abcde"), "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

/// A VirtualService with a field meshflow does not translate (analysis: a warning).
fn with_untranslated(name: &str) -> Value {
    let mut vs = virtual_service(name, name, "1s");
    // The first route matches a prefix, so the added one is reached (no MF0023).
    vs["spec"]["http"][0]["match"] = json!([{"uri": {"prefix": "/api"}}]);
    let moved =
        json!({"redirect": {"uri": "/moved"}, "fault": {"abort": {"http2Error": "CANCEL"}}});
    vs["spec"]["http"]
        .as_array_mut()
        .expect("http routes")
        .push(moved);
    vs
}

fn virtual_service(name: &str, host: &str, timeout: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"hosts": [host], "http": [{"timeout": timeout, "route": [{"destination": {"host": host}}]}]},
    })
}
