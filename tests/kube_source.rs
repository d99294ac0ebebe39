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

mod support;

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_kube::FakeKube;
use support::reviews::{Binding, Client, Reviews};
use support::xds_client::{node, DeltaClient, CDS, EDS, RDS};
use support::{
    dump_served_config, exactly, free_port, http_get, only, require_envoy,
    served_config_differences, wait_until, Envoy, Meshflow, ProxyNode, TestDir, CONVERGE_TIMEOUT,
    STARTUP_TIMEOUT,
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

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// The initial list is read in pages (`limit`, `continue`) before the server is ready and
/// serves; then watch events add, modify and delete exactly the objects they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_in_pages_then_follows_adds_modifies_and_deletes() {
    let cluster = start(
        "kube-list-watch",
        |fake| {
            fake.set_max_page(2);
            for i in 0..5 {
                fake.apply(service(&format!("svc-{i}"), "default", 80));
            }
        },
        &[],
    );
    // Started (xDS listening) means every watch completed its initial list; ready once
    // the dataflow has computed it.
    assert!(wait_until(CONVERGE_TIMEOUT, || {
        http_get(cluster.debug, "localhost", "/readyz", &[]).is_ok_and(|(s, _)| s == 200)
    }));
    let requests = cluster.fake.requests();
    let service_lists: Vec<&String> = requests
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/services?") && !r.contains("watch="))
        .collect();
    assert!(
        service_lists.len() >= 3 && service_lists.iter().all(|r| r.contains("limit=500")),
        "five Services in pages of two: {service_lists:#?}"
    );
    assert!(
        service_lists
            .iter()
            .filter(|r| r.contains("continue="))
            .count()
            >= 2,
        "{service_lists:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /api/v1/services?")
                && r.contains("watch=true")
                && r.contains("allowWatchBookmarks=true")),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /apis/networking.istio.io/v1/virtualservices?")),
        "Istio kinds are watched at v1: {requests:#?}"
    );
    cluster.await_input_changes("Service", "insert", 5.0);
    assert_eq!(cluster.input_changes("Service", "insert"), 5.0);

    let mut c = cluster.cds_client("probe").await;
    await_clusters(&mut c, "the initial list", |n| {
        (0..5).all(|i| has(n, &outbound(80, &format!("svc-{i}"), "default")))
    })
    .await;

    cluster.fake.apply(service("svc-5", "default", 80));
    await_clusters(&mut c, "an added Service", |n| {
        has(n, &outbound(80, "svc-5", "default"))
    })
    .await;
    cluster.fake.apply(service("svc-0", "default", 81));
    await_clusters(&mut c, "a modified Service", |n| {
        has(n, &outbound(81, "svc-0", "default")) && !has(n, &outbound(80, "svc-0", "default"))
    })
    .await;
    cluster.fake.delete("Service", "default", "svc-1");
    await_clusters(&mut c, "a deleted Service", |n| {
        !has(n, &outbound(80, "svc-1", "default"))
    })
    .await;
    cluster.await_input_changes("Service", "delete", 1.0);
    assert_eq!(cluster.input_changes("Service", "insert"), 6.0);
    assert_eq!(cluster.input_changes("Service", "update"), 1.0);
}

/// Readiness waits for the initial list: while a watch cannot list (the API server answers
/// nothing for a kind), `/healthz` answers and `/readyz` says what it waits for.
#[test]
fn readiness_waits_for_every_initial_list() {
    let dir = TestDir::new("kube-readiness");
    let fake = FakeKube::start();
    fake.apply(service("reviews", "default", 9080));
    // Pods cannot be listed (the API server answers 500) until healed.
    fake.fail_lists("pods");
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let xds = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["serve", "--kube", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--debug-addr",
            &debug.to_string(),
            "--xds-addr",
            &xds.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("meshflow.log")).expect("log file"))
        .spawn()
        .expect("spawn meshflow");
    let mut ready = (0, String::new());
    // Until the dataflow runs, /readyz says that instead: wait for the source to be named.
    let answered = wait_until(STARTUP_TIMEOUT, || {
        if let Ok(r) = http_get(debug, "localhost", "/readyz", &[]) {
            ready = r;
        }
        ready.1.contains("initial read")
    });
    let healthz = http_get(debug, "localhost", "/healthz", &[]);
    let xds_up = std::net::TcpStream::connect_timeout(&xds, Duration::from_millis(200)).is_ok();
    fake.heal_lists();
    let became_ready = wait_until(CONVERGE_TIMEOUT, || {
        http_get(debug, "localhost", "/readyz", &[]).is_ok_and(|(s, _)| s == 200)
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        answered,
        "the debug port answers while the initial list runs: {ready:?}"
    );
    assert_eq!(ready.0, 503, "{}", ready.1);
    assert!(ready.1.contains("kubernetes"), "{}", ready.1);
    assert_eq!(healthz.map(|h| h.0), Ok(200));
    assert!(!xds_up, "xDS is not served before the initial list");
    assert!(became_ready, "ready once the list completes");
}

/// The API server over HTTPS (as in a cluster): the client trusts the kubeconfig's CA,
/// lists and watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_from_an_api_server_over_tls() {
    let dir = TestDir::new("kube-tls");
    let fake = FakeKube::start_tls();
    fake.apply(service("reviews", "default", 9080));
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let meshflow = Meshflow::start_kube(&kubeconfig, dir.path(), &["--debug-addr", &debug]);
    let id = "sidecar~10.1.0.99~probe.default~default.svc.cluster.local";
    let mut c = DeltaClient::connect(meshflow.xds_addr(), node(id, "default", &[])).await;
    c.subscribe(CDS, &[], HashMap::new()).await;
    await_clusters(&mut c, "listed over TLS", |n| {
        has(n, &outbound(9080, "reviews", "default"))
    })
    .await;
    fake.apply(service("ratings", "default", 9080));
    await_clusters(&mut c, "watched over TLS", |n| {
        has(n, &outbound(9080, "ratings", "default"))
    })
    .await;
}

/// `meshflow validate --kube` reads the cluster once and names every object meshflow
/// would reject (exit 1), or says how many records it read (exit 0).
#[test]
fn validate_reads_a_cluster_and_names_what_it_would_reject() {
    let dir = TestDir::new("kube-validate");
    let fake = FakeKube::start();
    fake.apply(service("reviews", "default", 9080));
    fake.apply(virtual_service("reviews", "reviews", "1s"));
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let validate = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
            .args(["validate", "--kube", "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
            .expect("run meshflow validate");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = validate();
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("ok: ") && stdout.contains("no errors"),
        "{stdout}"
    );

    fake.apply(virtual_service("ratings", "ratings", "soon"));
    fake.apply(with_untranslated("details"));
    let (ok, stdout, stderr) = validate();
    assert!(!ok, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with("VirtualService default/ratings: spec.http[0].timeout: "),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with(
            "warning: VirtualService default/details: spec.http[1].fault.abort.http2Error: "
        ),
        "{stdout}"
    );
    // Across objects, as `serve` would find it: `details` routes to a host nothing defines.
    assert!(
        lines[2].starts_with(
            "error: VirtualService default/details: host details.default.svc.cluster.local"
        ) && lines[2].ends_with("[MF0004 ReferencedResourceNotFound]"),
        "{stdout}"
    );
    assert_eq!(lines[3], "2 error(s), 1 warning(s)");
    // Each problem once: not also as a log line.
    assert!(
        !stderr.contains("default/ratings") && !stderr.contains("http2Error"),
        "{stderr}"
    );
}

/// A label selector the API server refuses ends `serve` with the server's reason naming
/// the selector, instead of a server that never gets ready.
#[test]
fn a_label_selector_the_api_server_refuses_stops_serve_with_the_reason() {
    let dir = TestDir::new("kube-bad-selector");
    let fake = FakeKube::start();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["serve", "--kube", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--label-selector", "app=a=b", "--debug-addr", &debug])
        .args(["--xds-addr", &format!("127.0.0.1:{}", free_port())])
        .output()
        .expect("run meshflow");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("refuses to list") && stderr.contains("--label-selector \"app=a=b\""),
        "{stderr}"
    );
}

/// Changes missed while a watch was away are caught up by a relist after 410 Gone, as an
/// ERROR event and as an HTTP answer to the watch: what vanished is retracted, what was
/// added is inserted, and the unchanged objects produce no change at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_after_410_retract_what_vanished_and_nothing_else() {
    let cluster = start(
        "kube-relist",
        |fake| {
            for name in ["a", "b", "c"] {
                fake.apply(service(name, "default", 80));
            }
            fake.apply(virtual_service("a", "a", "1s"));
        },
        &[],
    );
    let mut c = cluster.cds_client("probe").await;
    await_clusters(&mut c, "the initial list", |n| {
        ["a", "b", "c"]
            .iter()
            .all(|s| has(n, &outbound(80, s, "default")))
    })
    .await;
    let lists = cluster.lists("/api/v1/services");

    // 1. Missed: `b` deleted, `d` created. The watch ends with an ERROR 410 event.
    cluster.fake.set_quiet(true);
    cluster.fake.delete("Service", "default", "b");
    cluster.fake.apply(service("d", "default", 80));
    cluster.fake.set_quiet(false);
    cluster.fake.expire_watches();
    await_clusters(&mut c, "the relist after an ERROR 410", |n| {
        has(n, &outbound(80, "d", "default")) && !has(n, &outbound(80, "b", "default"))
    })
    .await;
    cluster.await_input_changes("Service", "delete", 1.0);
    assert!(cluster.lists("/api/v1/services") > lists, "a relist");
    assert_eq!(cluster.input_changes("Service", "insert"), 4.0);
    assert_eq!(cluster.input_changes("Service", "update"), 0.0);

    // 2. Missed: `c` deleted. The connection drops; the watch from the old resourceVersion
    //    is answered HTTP 410, and the source starts over with a relist.
    cluster.fake.set_gone_as_http(true);
    cluster.fake.set_quiet(true);
    cluster.fake.delete("Service", "default", "c");
    cluster.fake.set_quiet(false);
    cluster.fake.compact();
    cluster.fake.drop_connections();
    await_clusters(&mut c, "the relist after an HTTP 410", |n| {
        !has(n, &outbound(80, "c", "default"))
    })
    .await;
    cluster.await_input_changes("Service", "delete", 2.0);
    assert_eq!(cluster.input_changes("Service", "insert"), 4.0);
    assert_eq!(cluster.input_changes("Service", "update"), 0.0);
    // Every kind was relisted; none changed.
    assert_eq!(cluster.input_changes("VirtualService", "insert"), 1.0);
    assert_eq!(cluster.input_changes("VirtualService", "update"), 0.0);
    assert_eq!(cluster.input_changes("VirtualService", "delete"), 0.0);
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
}

/// A connection dropped mid-watch resumes from the last resourceVersion: the change made
/// while it was down arrives, and nothing is relisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_resumes_without_relisting() {
    let cluster = start(
        "kube-dropped",
        |fake| {
            fake.apply(service("a", "default", 80));
        },
        &[],
    );
    let mut c = cluster.cds_client("probe").await;
    await_clusters(&mut c, "the initial list", |n| {
        has(n, &outbound(80, "a", "default"))
    })
    .await;
    let lists = cluster.lists("/api/v1/services");
    let watches = cluster
        .fake
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/services?") && r.contains("watch=true"))
        .count();
    cluster.fake.drop_connections();
    cluster.fake.apply(service("e", "default", 80));
    await_clusters(&mut c, "the change made while disconnected", |n| {
        has(n, &outbound(80, "e", "default"))
    })
    .await;
    let rewatched = cluster
        .fake
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/services?") && r.contains("watch=true"))
        .count();
    assert!(rewatched > watches, "the watch was started again");
    assert_eq!(cluster.lists("/api/v1/services"), lists, "no relist");
    assert_eq!(cluster.input_changes("Service", "insert"), 2.0);
    assert_eq!(cluster.input_changes("Service", "update"), 0.0);
}

/// Invalid objects get the file source's errors without file:line (kind namespace/name,
/// field), from the initial list and from events; an invalid update keeps the last valid
/// version in effect (no change at all) until it is fixed; deleting it clears its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_named_and_their_last_valid_version_stays() {
    let cluster = start(
        "kube-invalid",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(virtual_service("good", "reviews", "1s"));
            fake.apply(virtual_service("born-bad", "reviews", "soon"));
        },
        &[],
    );
    // The initial report is computed after xDS starts listening: poll.
    cluster.await_errors("the invalid object of the initial list", |e| {
        e.len() == 1 && e[0].starts_with("VirtualService default/born-bad: spec.http[0].timeout: ")
    });
    assert_eq!(cluster.input_changes("VirtualService", "insert"), 1.0);

    let mut broken = virtual_service("good", "reviews", "1s");
    broken["spec"]["http"][0]["route"][0]["weight"] = json!("heavy");
    cluster.fake.apply(broken);
    cluster.await_errors("the broken update is named", |e| {
        e.iter()
            .any(|e| e.starts_with("VirtualService default/good: spec.http[0].route[0].weight"))
    });
    assert_eq!(cluster.input_changes("VirtualService", "update"), 0.0);
    assert_eq!(cluster.input_changes("VirtualService", "delete"), 0.0);

    cluster.fake.apply(virtual_service("good", "reviews", "2s"));
    cluster.await_errors("the fix clears the error", |e| {
        !e.iter().any(|e| e.contains("default/good"))
    });
    cluster.await_input_changes("VirtualService", "update", 1.0);

    cluster.fake.delete("VirtualService", "default", "born-bad");
    cluster.await_errors("deleting the invalid object clears its error", |e| {
        e.is_empty()
    });
    assert_eq!(cluster.input_changes("VirtualService", "delete"), 0.0);

    // An accepted object with a field meshflow does not translate gets the file source's
    // analysis, without file:line; it goes with the object.
    cluster.fake.apply(with_untranslated("cors"));
    let warning = "warning: VirtualService default/cors: spec.http[1].fault.abort.http2Error: ";
    cluster.await_analysis("the untranslated field is named", |a| {
        a.iter().any(|l| l.starts_with(warning))
    });
    cluster.fake.delete("VirtualService", "default", "cors");
    cluster.await_analysis("deleted with its object", |a| a.is_empty());
}

/// Polls until the status of `kind default/name` satisfies `accept`; returns it.
fn await_status(
    fake: &FakeKube,
    kind: &str,
    name: &str,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(CONVERGE_TIMEOUT, || {
        last = fake.status_of(kind, "default", name);
        accept(&last)
    });
    assert!(
        ok,
        "{what}: the status of {kind} default/{name} is {last:#}"
    );
    last
}

fn reconciled(status: &Value) -> &str {
    status["conditions"][0]["status"].as_str().unwrap_or("")
}

fn descriptions(status: &Value) -> Vec<String> {
    status["validationMessages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["description"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn destination_rule(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"host": "reviews", "subsets": [{"name": "v1", "labels": labels}]},
    })
}

/// `--write-status`: an accepted object is Reconciled, with a WARNING validationMessage
/// naming a field meshflow does not translate, cleared when the field goes; an invalid one
/// is Reconciled False with the error naming its field, True again once fixed.
#[test]
fn status_says_what_is_in_effect_and_what_is_not_translated() {
    let cluster = start(
        "kube-status",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(service("cors", "default", 80));
            fake.apply(with_untranslated("cors"));
            fake.apply(destination_rule("bad-dr", json!(["not", "a", "map"])));
            // WorkloadEntry has no status of Istio's: none is written.
            fake.apply(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
                "metadata": {"name": "vm", "namespace": "default"},
                "spec": {"address": "10.0.0.9", "labels": {"app": "reviews"}},
            }));
        },
        &["--write-status"],
    );
    let fake = &cluster.fake;
    let status = await_status(
        fake,
        "VirtualService",
        "cors",
        "cors is reconciled with a warning",
        |s| reconciled(s) == "True" && !descriptions(s).is_empty(),
    );
    let message = &status["validationMessages"][0];
    assert_eq!(message["level"], "WARNING", "{status:#}");
    assert!(message["type"]["code"].is_string(), "{status:#}");
    assert!(message["type"]["name"].is_string(), "{status:#}");
    assert_eq!(descriptions(&status).len(), 1, "{status:#}");
    assert!(
        descriptions(&status)[0].starts_with("spec.http[1].fault.abort.http2Error: "),
        "{status:#}"
    );
    assert_eq!(status["conditions"][0]["type"], "Reconciled", "{status:#}");
    assert!(
        status["conditions"][0]["lastTransitionTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{status:#}"
    );

    let status = await_status(
        fake,
        "DestinationRule",
        "bad-dr",
        "the invalid rule is not reconciled",
        |s| reconciled(s) == "False",
    );
    let why = status["conditions"][0]["message"].as_str().unwrap_or("");
    assert!(
        why.contains("DestinationRule default/bad-dr: spec.subsets[0].labels"),
        "{status:#}"
    );

    // Fixed: the warning goes, the rule is reconciled.
    fake.apply(virtual_service("cors", "cors", "1s"));
    await_status(
        fake,
        "VirtualService",
        "cors",
        "the fix clears the message",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
    fake.apply(destination_rule("bad-dr", json!({"version": "v1"})));
    await_status(
        fake,
        "DestinationRule",
        "bad-dr",
        "the fixed rule is reconciled",
        |s| reconciled(s) == "True",
    );
    assert_eq!(fake.status_patches("WorkloadEntry", "default", "vm"), 0);
    assert_eq!(fake.status_of("Service", "default", "reviews"), Value::Null);

    // Across objects (the dataflow's analysis): a route to a subset no DestinationRule of
    // its host defines is an ERROR on the VirtualService, which is itself in effect.
    let mut to_v2 = virtual_service("to-v2", "reviews", "1s");
    to_v2["spec"]["http"][0]["route"][0]["destination"]["subset"] = json!("v2");
    fake.apply(to_v2);
    let status = await_status(
        fake,
        "VirtualService",
        "to-v2",
        "the missing subset is named",
        |s| !descriptions(s).is_empty(),
    );
    assert_eq!(reconciled(&status), "True", "{status:#}");
    let message = &status["validationMessages"][0];
    assert_eq!(message["type"]["code"], "MF0004", "{status:#}");
    assert_eq!(
        message["type"]["name"], "ReferencedResourceNotFound",
        "{status:#}"
    );
    assert_eq!(message["level"], "ERROR", "{status:#}");
    assert!(
        descriptions(&status)[0]
            .starts_with("subset \"v2\" of host reviews.default.svc.cluster.local is defined by no DestinationRule"),
        "{status:#}"
    );
    // Once the rule defines it, the message goes.
    let mut both = destination_rule("bad-dr", json!({"version": "v1"}));
    both["spec"]["subsets"] = json!([
        {"name": "v1", "labels": {"version": "v1"}},
        {"name": "v2", "labels": {"version": "v2"}},
    ]);
    fake.apply(both);
    await_status(
        fake,
        "VirtualService",
        "to-v2",
        "the subset defined clears the message",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
}

/// The holder of the status Lease `default/meshflow-status` (empty when none).
fn lease_holder(fake: &FakeKube) -> String {
    fake.object("Lease", "default", "meshflow-status")["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Two replicas with `--write-status`: one holds the status Lease (coordination.k8s.io,
/// created through the API) and writes; the other writes nothing, not even on a change.
/// When the holder stops, the other takes the Lease over within its duration, leaves alone
/// what the first wrote, and writes what changes.
#[test]
fn one_replica_at_a_time_writes_status_holding_a_lease() {
    let args = ["--write-status", "--lease-duration-s", "2"];
    let cluster = start(
        "kube-lease",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(virtual_service("reviews", "reviews", "1s"));
        },
        &args,
    );
    let Cluster {
        meshflow: first,
        fake,
        debug: _,
        dir,
    } = cluster;
    await_status(&fake, "VirtualService", "reviews", "written", |s| {
        reconciled(s) == "True"
    });
    let holder = || {
        let lease = fake.object("Lease", "default", "meshflow-status");
        (
            lease_holder(&fake),
            lease["spec"]["leaseTransitions"].clone(),
        )
    };
    let by = |m: &Meshflow| format!("_{}", m.pid());
    assert!(holder().0.ends_with(&by(&first)), "{:?}", holder());

    let debug_b = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let mut second_args = vec!["--debug-addr", debug_b.as_str()];
    second_args.extend_from_slice(&args);
    let second = Meshflow::start_kube(
        &dir.path().join("kubeconfig"),
        &dir.subdir("replica-b"),
        &second_args,
    );
    // The second replica has listed (its xDS port is open) and tried the Lease meanwhile.
    let before = fake.status_patches("VirtualService", "default", "reviews");
    fake.apply(with_untranslated("reviews"));
    await_status(
        &fake,
        "VirtualService",
        "reviews",
        "the change's status",
        |s| descriptions(s).len() == 1,
    );
    // Both replicas have seen the change; longer than the writer's interval and a lease round.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fake.status_patches("VirtualService", "default", "reviews") - before,
        1,
        "one status patch for one change: only the holder writes"
    );
    assert!(holder().0.ends_with(&by(&first)), "{:?}", holder());

    // The holder stops: the other takes over, leaves the status the first wrote alone (it
    // says what the second would write), and writes what changes.
    drop(first);
    let stopped = Instant::now();
    let took_over = wait_until(CONVERGE_TIMEOUT, || holder().0.ends_with(&by(&second)));
    let took = stopped.elapsed();
    assert!(took_over, "{:?}", holder());
    // The lease duration (2 s) and a round (0.4 s), with room for a slow machine.
    assert!(took < Duration::from_secs(5), "taken over after {took:?}");
    assert_eq!(holder().1, 1, "one transition");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fake.status_patches("VirtualService", "default", "reviews") - before,
        1,
        "the new holder rewrites nothing that says the same"
    );
    fake.apply(virtual_service("reviews", "reviews", "not-a-duration"));
    await_status(
        &fake,
        "VirtualService",
        "reviews",
        "the new holder writes",
        |s| reconciled(s) == "False",
    );
    drop(second);
    drop(fake);
    drop(dir);
}

/// Status writes are coalesced: 20 quick edits, each changing the status and each seen by
/// meshflow before the next (so each is a report of its own), are a handful of patches
/// (one per object per second at most; without coalescing there would be 20), and the last
/// one says what the last edit is.
#[test]
fn quick_edits_do_not_storm_the_api_server_with_status_writes() {
    let cluster = start(
        "kube-status-storm",
        |fake| {
            fake.apply(service("cors", "default", 9080));
            fake.apply(virtual_service("cors", "cors", "1s"));
        },
        &["--write-status"],
    );
    let fake = &cluster.fake;
    await_status(fake, "VirtualService", "cors", "the first status", |s| {
        reconciled(s) == "True"
    });
    let before = fake.status_patches("VirtualService", "default", "cors");
    assert_eq!(before, 1);
    for i in 0..20 {
        // Alternately with and without an untranslated field: every edit changes the status.
        let cors = i % 2 == 1;
        if cors {
            fake.apply(with_untranslated("cors"));
        } else {
            fake.apply(virtual_service("cors", "cors", "1s"));
        }
        cluster.await_analysis("the edit is seen", |a| a.is_empty() != cors);
    }
    // The last edit has the field: its warning is written in the end.
    await_status(
        fake,
        "VirtualService",
        "cors",
        "the last edit's status",
        |s| descriptions(s).len() == 1,
    );
    // Let a pending write, if any, happen (one more interval at most), then count.
    std::thread::sleep(Duration::from_millis(1500));
    let patches = fake.status_patches("VirtualService", "default", "cors") - before;
    assert!(
        (1..=8).contains(&patches),
        "20 edits in a burst made {patches} status patches"
    );
    assert_eq!(
        descriptions(&fake.status_of("VirtualService", "default", "cors")).len(),
        1
    );
}

/// Churn that changes no proxy's config pushes nothing: Pod annotations and status, a
/// Service's annotations, a bookmark, a Pod no Service selects, a Service and endpoints in
/// a namespace the proxy does not import. The first response the proxy gets afterwards is
/// the endpoint change made last, and nothing else follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrelated_churn_pushes_nothing() {
    let sidecar = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
        "metadata": {"name": "default", "namespace": "default"},
        "spec": {"egress": [{"hosts": ["./*"]}]},
    });
    let cluster = start(
        "kube-churn",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(pod("reviews-v1", "10.1.0.11", "reviews"));
            fake.apply(endpoint_slice("reviews", "default", &["10.1.0.11"]));
            fake.apply(sidecar.clone());
        },
        &[],
    );
    let id = "sidecar~10.1.0.99~probe.default~default.svc.cluster.local";
    let mut c = DeltaClient::connect(
        cluster.meshflow.xds_addr(),
        node(id, "default", &[("app", "probe")]),
    )
    .await;
    c.sync().await;
    let reviews = outbound(9080, "reviews", "default");
    assert!(has(&c.names(EDS), &reviews), "{:?}", c.names(EDS));
    let before = cluster.metrics();

    // Churn.
    let mut p = pod("reviews-v1", "10.1.0.11", "reviews");
    p["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    cluster.fake.apply(p.clone());
    p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    cluster.fake.apply(p);
    let mut s = service("reviews", "default", 9080);
    s["metadata"]["annotations"] = json!({"owner": "team-reviews"});
    cluster.fake.apply(s);
    cluster.fake.bookmark();
    // Markers, last in their watches: once their changes are counted, the churn before
    // them in the same watch has been read.
    cluster.fake.apply(pod("batch-job", "10.1.0.50", "batch"));
    cluster.fake.apply(service("elsewhere", "other", 80));
    cluster
        .fake
        .apply(endpoint_slice("elsewhere", "other", &["10.2.0.1"]));
    cluster.await_input_changes("Pod", "insert", 2.0);
    cluster.await_input_changes("Service", "insert", 2.0);
    cluster.await_input_changes("EndpointSlice", "insert", 2.0);

    // The sentinel: an endpoint of reviews.
    cluster.fake.apply(endpoint_slice(
        "reviews",
        "default",
        &["10.1.0.11", "10.1.0.12"],
    ));
    let first = c
        .recv(CONVERGE_TIMEOUT)
        .await
        .expect("the endpoint change is pushed");
    assert_eq!(first.type_url, EDS, "the first push after the churn");
    let names: Vec<&str> = first.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, vec![reviews.as_str()]);
    let more = c.drain(Duration::from_millis(500)).await;
    assert!(more.is_empty(), "nothing else is pushed: {more:?}");

    let after = cluster.metrics();
    for t in ["CDS", "LDS", "RDS"] {
        let name = format!("meshflow_xds_pushes_total{{type=\"{t}\"}}");
        assert_eq!(sample(&after, &name), sample(&before, &name), "{t} pushes");
    }
    let eds = "meshflow_xds_pushes_total{type=\"EDS\"}";
    assert_eq!(
        sample(&after, eds),
        sample(&before, eds) + 1.0,
        "one EDS push"
    );
    for kind in ["Pod", "Service"] {
        let name = format!("meshflow_input_changes_total{{kind=\"{kind}\",op=\"update\"}}");
        assert_eq!(sample(&after, &name), 0.0, "{kind} updates: {after}");
    }
}

/// Two replicas watching one cluster serve identical config: two proxies of one namespace,
/// each connected to its own replica, hold the same resources at the same versions (a
/// version is a content hash), before and after a change made through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_identical_config() {
    let mut split = virtual_service("reviews", "reviews", "1s");
    let cluster = start(
        "kube-replicas",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(service("ratings", "default", 9080));
            fake.apply(endpoint_slice(
                "reviews",
                "default",
                &["10.1.0.11", "10.1.0.12"],
            ));
            fake.apply(endpoint_slice("ratings", "default", &["10.1.0.21"]));
            fake.apply(split.clone());
        },
        &[],
    );
    let second_dir = cluster.dir.subdir("replica-b");
    let debug_b = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let second = Meshflow::start_kube(
        &cluster.dir.path().join("kubeconfig"),
        &second_dir,
        &["--debug-addr", &debug_b],
    );
    let client = |addr, pod: &str, ip: &str| {
        let id = format!("sidecar~{ip}~{pod}.default~default.svc.cluster.local");
        DeltaClient::connect(addr, node(&id, "default", &[("app", "sleep")]))
    };
    let mut a = client(cluster.meshflow.xds_addr(), "sleep-a", "10.1.0.98").await;
    let mut b = client(second.xds_addr(), "sleep-b", "10.1.0.99").await;
    for c in [&mut a, &mut b] {
        c.sync().await;
        // Routes too, as Envoy asks for what its listeners name.
        c.subscribe(RDS, &["9080".to_string()], HashMap::new())
            .await;
        c.drain(Duration::from_millis(300)).await;
    }
    assert!(has(&a.names(CDS), &outbound(9080, "reviews", "default")));
    assert_eq!(a.names(RDS), ["9080"]);
    assert_eq!(a.held, b.held, "the same resources at the same versions");

    // A change through the API reaches both replicas and leaves them identical.
    let routes_before = a.held.get(RDS).cloned();
    split["spec"]["http"][0]["timeout"] = json!("3s");
    cluster.fake.apply(split);
    for c in [&mut a, &mut b] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while c.held.get(RDS) == routes_before.as_ref() {
            assert!(
                Instant::now() < deadline,
                "the new route reaches every replica"
            );
            c.recv(Duration::from_millis(200)).await;
        }
        c.drain(Duration::from_millis(300)).await;
    }
    assert_eq!(a.held, b.held, "identical after the change");
}

/// Two replicas watching one cluster, each serving one real Envoy: both Envoys hold the same
/// clusters, listeners and route configurations (their config dumps less what is per
/// moment: version_info and last_updated), and route the same request the same way, before
/// and after a change made through the API. Both Envoys bind the Sidecar's listener
/// 127.0.0.1:PORT (Envoy sets SO_REUSEPORT on listeners by default, so the kernel spreads
/// connections over both); each Envoy's own upstream counters show that it sent requests
/// to the subset the VirtualService names, and only there.
#[test]
fn two_replicas_give_two_envoys_identical_config_and_routing() {
    let envoy_bin = require_envoy!();
    let files = ReviewsFiles::new("kube-replicas-envoy-fixtures", 63);
    let (reviews, port, fixtures) = (&files.reviews, files.port, &files.path);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let cluster = start("kube-replicas-envoy", |fake| apply_dir(fake, fixtures), &[]);
    let debug_b = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let second = Meshflow::start_kube(
        &cluster.dir.path().join("kubeconfig"),
        &cluster.dir.subdir("replica-b"),
        &["--debug-addr", &debug_b],
    );
    let sidecar = |name, host, xds| Sidecar {
        name,
        ip: reviews.ip(host),
        xds,
    };
    let a = cluster.envoy_of(
        &envoy_bin,
        sidecar("client-a", 20, cluster.meshflow.xds_addr()),
        port,
    );
    let b = cluster.envoy_of(&envoy_bin, sidecar("client-b", 21, second.xds_addr()), port);
    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    let client = Client::new(&a, listener, "reviews");

    let first = await_identical_config(&a, &b, |_| true);
    let v2_cluster = format!("cluster/outbound|{port}|v2|{}", support::reviews::FQDN);
    assert!(first.contains_key(&v2_cluster), "{:#?}", first.keys());
    assert!(
        first.contains_key(&format!("route/{port}")),
        "{:#?}",
        first.keys()
    );
    routes_only_to(&client, &[&a, &b], port, "v2");

    // A change through the API reaches both replicas; both Envoys route by it.
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    apply_dir(&cluster.fake, fixtures);
    await_identical_config(&a, &b, |c| *c != first);
    routes_only_to(&client, &[&a, &b], port, "v1");
}

/// Waits until both Envoys hold the same config and it satisfies `accept`; returns it, or
/// panics naming what differs.
fn await_identical_config(
    a: &Envoy,
    b: &Envoy,
    accept: impl Fn(&BTreeMap<String, Value>) -> bool,
) -> BTreeMap<String, Value> {
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let same = wait_until(CONVERGE_TIMEOUT, || {
        last = (
            dump_served_config(&a.config_dump()),
            dump_served_config(&b.config_dump()),
        );
        !last.0.is_empty() && last.0 == last.1 && accept(&last.0)
    });
    if !same {
        let (a, b) = &last;
        let differ = served_config_differences(a, b);
        let first = differ.first().map(|k| (a.get(k), b.get(k)));
        panic!("the Envoys' configs differ in {differ:#?}; the first: {first:#?}");
    }
    last.0
}

/// Sends 60 requests through the listener both Envoys bind: every one is answered by
/// reviews-`subset`, and each Envoy sent some of them, all to that subset's cluster.
fn routes_only_to(client: &Client, envoys: &[&Envoy], port: u16, subset: &str) {
    let fqdn = support::reviews::FQDN;
    let sent = |e: &Envoy, s: &str| {
        e.stat(&format!(
            "cluster.outbound|{port}|{s}|{fqdn}.upstream_rq_total"
        ))
        .unwrap_or(0)
    };
    let other = if subset == "v1" { "v2" } else { "v1" };
    let before: Vec<(u64, u64)> = envoys
        .iter()
        .map(|e| (sent(e, subset), sent(e, other)))
        .collect();
    let counts = client.tally(60, "/reviews/1", &[]);
    let answer = format!("reviews-{subset}");
    assert!(only(&counts, &answer), "{counts:?}");
    for (e, (to, not_to)) in envoys.iter().zip(before) {
        assert!(
            sent(e, subset) > to,
            "each Envoy routed some requests to {subset}\n{}",
            e.summary()
        );
        assert_eq!(sent(e, other), not_to, "none to {other}\n{}", e.summary());
    }
}

/// Istio kinds are watched at the most stable version the cluster serves; on a cluster
/// without Istio's CRDs each kind is reported by name, the Kubernetes kinds still serve, and
/// the kinds are watched once the CRDs are installed.
#[test]
fn istio_versions_come_from_discovery_and_missing_kinds_are_named() {
    let older = start(
        "kube-versions",
        |fake| {
            fake.serve_istio_versions(&["v1beta1", "v1alpha3"]);
            fake.apply(service("reviews", "default", 9080));
        },
        &[],
    );
    let requests = older.fake.requests();
    for plural in [
        "virtualservices",
        "destinationrules",
        "gateways",
        "serviceentries",
        "sidecars",
        "workloadentries",
    ] {
        let path = format!("GET /apis/networking.istio.io/v1beta1/{plural}?");
        assert!(
            requests.iter().any(|r| r.starts_with(&path)),
            "{path}: {requests:#?}"
        );
    }
    older.await_input_changes("Service", "insert", 1.0);
    assert!(older.errors().is_empty(), "{:?}", older.errors());
    drop(older);

    let bare = start(
        "kube-no-istio",
        |fake| {
            fake.serve_istio_versions(&[]);
            fake.apply(service("reviews", "default", 9080));
        },
        &[],
    );
    let errors = bare.await_errors("every Istio kind", |e| e.len() == 6);
    for kind in [
        "VirtualService",
        "DestinationRule",
        "Gateway",
        "ServiceEntry",
        "Sidecar",
        "WorkloadEntry",
    ] {
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("{kind}: not watched"))
                    && e.contains("Istio's CRDs")),
            "{kind}: {errors:#?}"
        );
    }
    assert_eq!(bare.input_changes("Service", "insert"), 1.0);

    // Istio's CRDs installed later: the kinds are found again and watched.
    bare.fake.apply(virtual_service("reviews", "reviews", "1s"));
    bare.fake.serve_istio_versions(&["v1"]);
    bare.await_input_changes("VirtualService", "insert", 1.0);
    bare.await_errors("no kind is missing any more", |e| e.is_empty());
}

/// `--namespaces` and `--label-selector` limit what is watched (and what the API server is
/// asked for); the files of `--config-dir` are served alongside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_and_label_selector_limit_the_watch_and_files_serve_alongside() {
    let dir = TestDir::new("kube-files");
    let config = dir.subdir("config");
    support::write_config(
        &config,
        "from-files.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: from-files, namespace: default}\nspec:\n  ports: [{name: http, port: 7000}]\n",
    );
    let config_arg = config.display().to_string();
    let cluster = start(
        "kube-scoped",
        |fake| {
            fake.apply(service("in-scope", "default", 80));
            fake.apply(service("other-ns", "other", 80));
            let mut unlabelled = service("unlabelled", "default", 80);
            unlabelled["metadata"]["labels"] = json!({});
            fake.apply(unlabelled);
        },
        &[
            "--namespaces",
            "default,istio-system",
            "--label-selector",
            "app",
            "--config-dir",
            &config_arg,
        ],
    );
    let mut c = cluster.cds_client("probe").await;
    await_clusters(&mut c, "in scope, and from files", |n| {
        has(n, &outbound(80, "in-scope", "default"))
            && has(n, &outbound(7000, "from-files", "default"))
    })
    .await;
    let names = c.names(CDS);
    assert!(
        !has(&names, &outbound(80, "other-ns", "other")),
        "{names:#?}"
    );
    assert!(
        !has(&names, &outbound(80, "unlabelled", "default")),
        "{names:#?}"
    );
    let requests = cluster.fake.requests();
    assert!(
        requests.iter().any(
            |r| r.starts_with("GET /api/v1/namespaces/istio-system/services?")
                && r.contains("labelSelector=app")
        ),
        "{requests:#?}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.starts_with("GET /api/v1/services?")),
        "no cluster-wide watch: {requests:#?}"
    );
    drop(dir);
}

/// A real Envoy sidecar, configured by meshflow from the fake cluster, routes by a
/// VirtualService created through the API, and returns to the default route when it is
/// deleted.
#[test]
fn envoy_routes_by_a_virtual_service_created_through_the_api() {
    let envoy_bin = require_envoy!();
    let files = ReviewsFiles::new("kube-envoy-fixtures", 61);
    let (reviews, port, fixtures) = (&files.reviews, files.port, &files.path);
    let cluster = start("kube-envoy", |fake| apply_dir(fake, fixtures), &[]);

    let envoy = cluster.client_envoy(&envoy_bin, "client-abc", reviews, port);
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews");
    let (v1, v2) = ("reviews-v1", "reviews-v2");
    client.converge(
        "the default route reaches v1 and v2",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        20,
    );

    // Created through the API: everything under /reviews to v2. Sampled only once Envoy has
    // the new route configuration: the default route can send a short run to v2 by chance.
    envoy.await_rds_update(&port.to_string(), || {
        reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
        apply_dir(&cluster.fake, fixtures);
    });
    let counts = client.converge(
        "the VirtualService sends /reviews to v2",
        "/reviews/1",
        &[],
        |c| only(c, v2),
        20,
    );
    assert!(only(&counts, v2), "{counts:?}");

    cluster.fake.delete("VirtualService", "default", "reviews");
    let counts = client.converge(
        "the default route again",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
}

/// NACK attribution with a real Envoy: meshflow is told proxies accept RE2 programs of any
/// size (`--max-regex-program-size`), which Envoy (default limit 100) does not, so a
/// VirtualService with the regex `/a{150}` passes meshflow and Envoy rejects its route
/// configuration. The VirtualService, rejected, is not Reconciled, and a RejectedByProxies
/// message names the proxy, Envoy's message and since when; fixing it clears both.
#[test]
fn a_virtual_service_envoy_rejects_says_so_on_its_status() {
    let envoy_bin = require_envoy!();
    let fixtures_dir = TestDir::new("kube-nack-fixtures");
    let fixtures = fixtures_dir.subdir("fixtures");
    let port = free_port();
    let reviews = Reviews::new(62, port, &fixtures);
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    reviews.write("sidecar.yaml", &support::reviews::client_sidecar_yaml(port));
    let cluster = start(
        "kube-nack",
        |fake| apply_dir(fake, &fixtures),
        &["--write-status", "--max-regex-program-size", "100000"],
    );
    let _envoy = cluster.client_envoy(&envoy_bin, "client-nack", &reviews, port);

    let ratings = |regex: &str| {
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "ratings", "namespace": "default"},
            "spec": {"hosts": ["reviews"], "http": [{
                "match": [{"uri": {"regex": regex}}],
                "route": [{"destination": {"host": "reviews"}}],
            }]},
        })
    };
    cluster.fake.apply(ratings("/a{150}"));
    let status = await_status(
        &cluster.fake,
        "VirtualService",
        "ratings",
        "the rejection is written",
        |s| {
            s["validationMessages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["type"]["name"] == "RejectedByProxies"))
        },
    );
    assert_eq!(reconciled(&status), "False", "{status:#}");
    let message = status["validationMessages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["type"]["name"] == "RejectedByProxies"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(message["level"], "ERROR", "{status:#}");
    let description = message["description"].as_str().unwrap_or("");
    assert!(
        description.starts_with("rejected by 1 proxy ("),
        "{description}"
    );
    assert!(description.contains("client-nack"), "{description}");
    assert!(description.contains(" since 20"), "{description}");
    assert!(description.contains("RDS"), "{description}");
    // Envoy's own message about the regex.
    assert!(
        description.to_lowercase().contains("regex"),
        "{description}"
    );

    // And once as a Warning Event regarding the object, from the replica whose proxy
    // rejected it.
    let events = rejection_events(&cluster.fake);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["action"], "Rejected", "{event:#}");
    assert_eq!(event["reportingController"], "meshflow", "{event:#}");
    assert!(
        event["reportingInstance"]
            .as_str()
            .is_some_and(|i| i.ends_with(&format!("_{}", cluster.meshflow.pid()))),
        "{event:#}"
    );
    assert!(event["eventTime"].is_string(), "{event:#}");
    let object = cluster.fake.object("VirtualService", "default", "ratings");
    assert_eq!(
        event["regarding"],
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "namespace": "default", "name": "ratings", "uid": object["metadata"]["uid"],
        }),
        "{event:#}"
    );
    let note = event["note"].as_str().unwrap_or("");
    assert!(note.starts_with(description), "{note}");

    // Fixed: the new version is judged again, accepted, and the status says so.
    cluster.fake.apply(ratings("/a"));
    await_status(
        &cluster.fake,
        "VirtualService",
        "ratings",
        "the fix clears the rejection",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
    assert_eq!(
        rejection_events(&cluster.fake).len(),
        1,
        "no Event for an accepted version"
    );
}

/// The Events the fake holds with reason RejectedByProxies.
fn rejection_events(fake: &FakeKube) -> Vec<Value> {
    fake.objects("Event")
        .into_iter()
        .filter(|e| e["reason"] == "RejectedByProxies")
        .collect()
}

/// The reviews scene as files to apply to the fake: Service, Pods, EndpointSlice and
/// DestinationRule (subsets v1, v2) of `reviews`, Sidecar `client` binding 127.0.0.1:PORT;
/// the backends of v1 and v2 running.
struct ReviewsFiles {
    reviews: Reviews,
    port: u16,
    path: std::path::PathBuf,
    _backends: [support::Backend; 2],
    _dir: TestDir,
}

impl ReviewsFiles {
    fn new(label: &str, net: u8) -> ReviewsFiles {
        let dir = TestDir::new(label);
        let path = dir.subdir("fixtures");
        let port = free_port();
        let reviews = Reviews::new(net, port, &path);
        let backends = [reviews.start_backend("v1"), reviews.start_backend("v2")];
        reviews.write_service();
        reviews.write_pods(&["v1", "v2"]);
        reviews.write_endpoints(&["v1", "v2"]);
        reviews.write_destination_rule(&["v1", "v2"]);
        reviews.write("sidecar.yaml", &support::reviews::client_sidecar_yaml(port));
        ReviewsFiles {
            reviews,
            port,
            path,
            _backends: backends,
            _dir: dir,
        }
    }
}

/// Applies every YAML file of `dir` to the fake API server (unchanged ones change nothing).
fn apply_dir(fake: &FakeKube, dir: &Path) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        fake.apply_yaml(&text);
    }
}

/// A writer that starts over (a restart, as after every rollout) starts from the statuses
/// the API server holds: those that already say what it would write are not written again,
/// and a Reconciled condition that keeps its state keeps its transition time.
#[test]
fn a_restarted_writer_leaves_statuses_that_say_the_same_alone() {
    let args = ["--write-status", "--lease-duration-s", "1"];
    let cluster = start(
        "kube-status-restart",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(with_untranslated("reviews"));
            fake.apply(destination_rule("bad-dr", json!(["not", "a", "map"])));
        },
        &args,
    );
    let Cluster {
        meshflow,
        fake,
        debug: _,
        dir,
    } = cluster;
    let vs = await_status(&fake, "VirtualService", "reviews", "written", |s| {
        descriptions(s).len() == 1
    });
    let dr = await_status(&fake, "DestinationRule", "bad-dr", "written", |s| {
        reconciled(s) == "False"
    });
    let patches = |kind, name| fake.status_patches(kind, "default", name);
    assert_eq!(
        (
            patches("VirtualService", "reviews"),
            patches("DestinationRule", "bad-dr")
        ),
        (1, 1)
    );
    drop(meshflow);

    let restarted = Meshflow::start_kube(
        &dir.path().join("kubeconfig"),
        &dir.subdir("restarted"),
        &args,
    );
    // It holds the Lease once the old holder's has run out.
    let by = format!("_{}", restarted.pid());
    let holds = wait_until(CONVERGE_TIMEOUT, || lease_holder(&fake).ends_with(&by));
    assert!(holds, "the restarted replica holds the Lease");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        (
            patches("VirtualService", "reviews"),
            patches("DestinationRule", "bad-dr")
        ),
        (1, 1),
        "statuses that say the same are not written again"
    );
    assert_eq!(fake.status_of("VirtualService", "default", "reviews"), vs);
    assert_eq!(fake.status_of("DestinationRule", "default", "bad-dr"), dr);

    // A change: written, and still Reconciled, so since the same time.
    fake.apply(virtual_service("reviews", "reviews", "1s"));
    let changed = await_status(&fake, "VirtualService", "reviews", "the change", |s| {
        descriptions(s).is_empty()
    });
    assert_eq!(patches("VirtualService", "reviews"), 2);
    assert_eq!(
        changed["conditions"][0]["lastTransitionTime"],
        vs["conditions"][0]["lastTransitionTime"]
    );
    drop(restarted);
    drop(fake);
    drop(dir);
}

/// A status Lease meshflow may not hold (RBAC) is a config error naming the Lease and the
/// grant it needs, and no status is written meanwhile; once allowed, the Lease is taken, the
/// error goes and status is written.
#[test]
fn a_lease_it_may_not_hold_is_reported_and_nothing_is_written() {
    let cluster = start(
        "kube-lease-forbidden",
        |fake| {
            fake.forbid("leases");
            fake.apply(service("reviews", "default", 9080));
            fake.apply(virtual_service("reviews", "reviews", "1s"));
        },
        &["--write-status", "--lease-duration-s", "1"],
    );
    let errors = cluster.await_errors("the Lease is reported", |e| !e.is_empty());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].starts_with("status Lease default/meshflow-status: ")
            && errors[0].contains("forbidden")
            && errors[0].contains("get, create and update on leases.coordination.k8s.io"),
        "{errors:#?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        cluster
            .fake
            .status_patches("VirtualService", "default", "reviews"),
        0
    );
    cluster.fake.permit_all();
    await_status(
        &cluster.fake,
        "VirtualService",
        "reviews",
        "written once allowed",
        |s| reconciled(s) == "True",
    );
    cluster.await_errors("the error goes", |e| e.is_empty());
}

/// The status Lease among electors racing for it, in process through the real `kube`
/// client: the fake answers the API server's way (a second create is 409 AlreadyExists, an
/// update from a stale resourceVersion 409 Conflict), so of three electors starting at once
/// exactly one holds the Lease, the others stand by; when the holder goes, exactly one of
/// the others takes over within the lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_electors_race_and_exactly_one_holds() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, PostParams};
    use meshflow::sources::kube::lease::{self, LeaseOptions};

    let dir = TestDir::new("kube-lease-race");
    let fake = FakeKube::start();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let config = kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("a client config");
    let client = kube::Client::try_from(config).expect("a client");

    // The wire semantics the electors rely on, as the kube client sees them.
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let mut probe = Lease::default();
    probe.metadata.name = Some("probe".into());
    let created = api
        .create(&PostParams::default(), &probe)
        .await
        .expect("created");
    let again = api.create(&PostParams::default(), &probe).await;
    assert!(
        matches!(&again, Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists"),
        "{again:?}"
    );
    let updated = api
        .replace("probe", &PostParams::default(), &created)
        .await
        .expect("an update from the current resourceVersion");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let stale = api.replace("probe", &PostParams::default(), &created).await;
    assert!(
        matches!(&stale, Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict"),
        "{stale:?}"
    );

    let options = LeaseOptions {
        namespace: Some("default".into()),
        name: "race".into(),
        duration: Duration::from_secs(2),
    };
    let mut electors: Vec<(String, tokio::sync::watch::Receiver<bool>)> = (0..3)
        .map(|i| {
            let identity = format!("elector-{i}");
            let elected = lease::spawn(client.clone(), options.clone(), identity.clone());
            (identity, elected.holding)
        })
        .collect();
    let holders = |electors: &[(String, tokio::sync::watch::Receiver<bool>)]| -> Vec<String> {
        electors
            .iter()
            .filter(|(_, h)| *h.borrow())
            .map(|(i, _)| i.clone())
            .collect()
    };
    let holder_in_lease = || {
        fake.object("Lease", "default", "race")["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while holders(&electors).len() != 1 {
        assert!(Instant::now() < deadline, "no single holder");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several rounds later, still one holder, the one the Lease names.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let first = holders(&electors);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0], holder_in_lease());

    // The holder goes (its elector ends with its last listener): one other takes over.
    electors.retain(|(i, _)| *i != first[0]);
    let gone = Instant::now();
    let deadline = gone + CONVERGE_TIMEOUT;
    while holders(&electors).len() != 1 {
        assert!(Instant::now() < deadline, "nobody took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = gone.elapsed();
    // The lease duration (2 s) and a round (0.4 s), with room for a slow machine.
    assert!(took < Duration::from_secs(5), "taken over after {took:?}");
    let second = holders(&electors);
    assert_ne!(second, first);
    assert_eq!(second[0], holder_in_lease());
    let lease = fake.object("Lease", "default", "race");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease:#}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2, "{lease:#}");
}

/// A gateway's TLS Secret through the API: watched like the other kinds (get/list/watch on
/// `secrets`), a Gateway naming a Secret that does not exist is an error naming both, and
/// creating it (base64 `data`, as the API server serves it) heals the server: the gateway
/// proxy's listener appears and the certificate is served over SDS as `kubernetes://NAME`;
/// the debug port never shows the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_secret_from_the_api_is_served_over_sds() {
    use base64::Engine;
    const SDS: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
    const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    let cluster = start(
        "kube-secret",
        |fake| {
            fake.apply(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "ingress-1", "namespace": "istio-system",
                             "labels": {"istio": "ingressgateway"}},
                "spec": {"containers": [{"name": "istio-proxy", "image": "example/proxy:1"}]},
                "status": {"phase": "Running", "podIP": "10.1.0.9", "podIPs": [{"ip": "10.1.0.9"}]},
            }));
            fake.apply(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
                "metadata": {"name": "secure", "namespace": "istio-system"},
                "spec": {"selector": {"istio": "ingressgateway"}, "servers": [{
                    "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                    "hosts": ["web.example.com"],
                    "tls": {"mode": "SIMPLE", "credentialName": "web-cred"},
                }]},
            }));
        },
        &[],
    );
    assert!(
        cluster
            .fake
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/secrets?") && r.contains("watch=true")),
        "Secrets are watched"
    );
    cluster.await_config_errors("the missing Secret is named", |e| {
        e.iter().any(|l| {
            l.contains("Gateway/istio-system/secure")
                && l.contains("spec.servers[0].tls.credentialName")
                && l.contains("Secret istio-system/web-cred does not exist")
        })
    });

    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["web.example.com".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    cluster.fake.apply(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "web-cred", "namespace": "istio-system"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(&cert.pem()), "tls.key": b64(&key.serialize_pem())},
    }));
    cluster.await_config_errors("the Secret heals the server", |e| {
        !e.iter().any(|l| l.contains("web-cred"))
    });
    cluster.await_input_changes("Secret", "insert", 1.0);

    let id = "router~10.1.0.9~ingress-1.istio-system~istio-system.svc.cluster.local";
    let mut c = DeltaClient::connect(
        cluster.meshflow.xds_addr(),
        node(id, "istio-system", &[("istio", "ingressgateway")]),
    )
    .await;
    c.subscribe(LDS, &[], HashMap::new()).await;
    c.subscribe(SDS, &["kubernetes://web-cred".to_string()], HashMap::new())
        .await;
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while !(c.names(LDS).contains(&"0.0.0.0_443".to_string())
        && c.names(SDS).contains(&"kubernetes://web-cred".to_string()))
    {
        assert!(
            Instant::now() < deadline,
            "LDS {:?}, SDS {:?}",
            c.names(LDS),
            c.names(SDS)
        );
        c.recv(Duration::from_millis(200)).await;
    }
    let errors = get(cluster.debug, "/debug/config_errors");
    assert!(!errors.contains("PRIVATE KEY"), "{errors}");
    assert!(!cluster.meshflow.log().contains("PRIVATE KEY"));
}

/// One object nested past JSON decoding's limit (a VirtualService whose `status` nests 200
/// levels, as a namespace editor may write it) is an error of that object alone: its kind
/// still lists, meshflow turns ready and serves the others, and an edit of another
/// VirtualService still arrives — at the initial list and through the watch.
#[test]
fn an_object_nested_too_deep_is_its_own_error_and_its_kind_still_lists() {
    let deep = |name: &str| {
        let mut status = json!(1);
        for _ in 0..200 {
            status = json!([status]);
        }
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"hosts": ["reviews"]},
            "status": {"deep": status},
        })
    };
    let vs = |name: &str, host: &str| {
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"hosts": [host], "http": [{"route": [{"destination": {"host": host}}]}]},
        })
    };
    let cluster = start(
        "kube-deep",
        |fake| {
            fake.apply(deep("deep-a"));
            fake.apply(vs("ok", "ratings"));
        },
        &[],
    );
    // Started means listed: the kind's list did not fail with it.
    cluster.await_input_changes("VirtualService", "insert", 1.0);
    cluster.await_errors("the deep object is named", |e| {
        e.iter()
            .any(|l| l.contains("default/deep-a") && l.contains("recursion limit"))
    });
    cluster.fake.apply(deep("deep-b"));
    cluster.fake.apply(vs("ok-2", "details"));
    cluster.await_input_changes("VirtualService", "insert", 2.0);
    cluster.await_errors("a deep object by the watch too", |e| {
        e.iter().any(|l| l.contains("default/deep-b"))
    });
}
