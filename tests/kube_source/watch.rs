//! The source following the API server: the initial list (paginated) before anything else
//! and readiness waiting for it, watch events as record changes, relists and resumed
//! watches, invalid objects, TLS to the API server, discovery of Istio's versions, the
//! namespaces and label selector watched, and churn that changes no config pushing nothing.

use crate::support;
use crate::support::fake_kube::FakeKube;
use crate::support::xds_client::{node, DeltaClient, CDS, EDS, RDS};
use crate::support::{
    free_port, http_get, wait_until, Meshflow, TestDir, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};
use crate::{
    await_clusters, endpoint_slice, has, outbound, pod, sample, service, start, virtual_service,
    with_untranslated,
};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

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
    // The watch request follows the initial list: awaited, not expected at once.
    assert!(
        wait_until(CONVERGE_TIMEOUT, || cluster.fake.requests().iter().any(
            |r| r.starts_with("GET /api/v1/services?")
                && r.contains("watch=true")
                && r.contains("allowWatchBookmarks=true")
        )),
        "{:#?}",
        cluster.fake.requests()
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
            "error: VirtualService default/details: spec.http[0].route[0].destination.host: \
             host details.default.svc.cluster.local"
        ) && lines[2].ends_with("[MF0004 ReferencedResourceNotFound]"),
        "{stdout}"
    );
    assert_eq!(lines[3], "2 error(s), 1 warning(s)");
    // Each problem once: not also as a log line.
    assert!(
        !stderr.contains("default/ratings") && !stderr.contains("http2Error"),
        "{stderr}"
    );

    // A security policy of the cluster is read as one of a file: a CUSTOM one naming a
    // provider the mesh config lacks is an error (MF0021).
    fake.delete("VirtualService", "default", "ratings");
    fake.delete("VirtualService", "default", "details");
    fake.apply(serde_json::json!({
        "apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
        "metadata": {"name": "deny", "namespace": "default"},
        "spec": {"action": "CUSTOM", "provider": {"name": "ext"}, "rules": [{}]},
    }));
    let (ok, stdout, stderr) = validate();
    assert!(!ok, "{stdout}{stderr}");
    assert!(
        stdout.lines().any(
            |l| l.starts_with("error: AuthorizationPolicy default/deny: ") && l.contains("MF0021")
        ),
        "{stdout}"
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

/// Istio kinds (networking.istio.io and security.istio.io) are watched at the most stable
/// version the cluster serves; on a cluster without Istio's CRDs each kind is reported by
/// name, the Kubernetes kinds still serve, and the kinds are watched once the CRDs are
/// installed.
#[test]
fn istio_versions_come_from_discovery_and_missing_kinds_are_named() {
    let older = start(
        "kube-versions",
        |fake| {
            fake.serve_istio_versions(&["v1beta1", "v1alpha3"]);
            fake.serve_security_versions(&["v1beta1"]);
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
    for plural in [
        "peerauthentications",
        "authorizationpolicies",
        "requestauthentications",
    ] {
        let path = format!("GET /apis/security.istio.io/v1beta1/{plural}?");
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
            fake.serve_security_versions(&[]);
            fake.apply(service("reviews", "default", 9080));
        },
        &[],
    );
    let errors = bare.await_errors("every Istio kind", |e| e.len() == 9);
    for kind in [
        "VirtualService",
        "DestinationRule",
        "Gateway",
        "ServiceEntry",
        "Sidecar",
        "WorkloadEntry",
        "PeerAuthentication",
        "AuthorizationPolicy",
        "RequestAuthentication",
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
    bare.await_errors("only the security kinds are missing", |e| {
        e.len() == 3 && e.iter().all(|e| e.contains("security.istio.io"))
    });
    bare.fake.serve_security_versions(&["v1"]);
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
