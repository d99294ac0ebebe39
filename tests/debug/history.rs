//! Per-proxy history against a running `meshflow serve` with Delta ADS clients: `diff`
//! (gRPC, `/debug/diff`, `meshflow diff`), `watch` (gRPC, `/debug/watch`, `meshflow
//! watch`), the event counters of `/metrics`, sync state with age (STALE while a push is
//! unanswered, SYNCED after a resume with nothing to send), CSDS reporting the ACKed
//! version, and per-stream subscriptions in `/debug/proxies`. The real-Envoy NACK shown by
//! `diff` is in `debug/envoy.rs`.

use crate::support;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshflow::debug::pb::debug_client::DebugClient;
use meshflow::debug::pb::{DiffRequest, WatchRequest};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::xds_client::{node, DeltaClient, CDS, EDS};
use support::{http_get, wait_until, write_config, Meshflow, TestDir};

const A_ID: &str = "sidecar~10.9.1.1~a-1.default~default.svc.cluster.local";
const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";

fn services(reviews_ips: &[&str]) -> String {
    let eps: String = reviews_ips
        .iter()
        .map(|ip| format!("- addresses: [\"{ip}\"]\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  ports: [{{name: http, port: 9080}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: reviews-abc\n  namespace: default\n  labels: {{kubernetes.io/service-name: reviews}}\naddressType: IPv4\nports:\n- {{name: http, port: 9080}}\nendpoints:\n{eps}"
    )
}

struct Setup {
    dir: TestDir,
    _meshflow: Meshflow,
    config: std::path::PathBuf,
    xds: SocketAddr,
    debug: SocketAddr,
    a: DeltaClient,
}

async fn setup(label: &str) -> Setup {
    let dir = TestDir::new(label);
    let config = dir.subdir("config");
    write_config(
        &config,
        "services.yaml",
        &services(&["10.0.1.1", "10.0.1.2"]),
    );
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let meshflow =
        Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug.to_string()]);
    let xds = meshflow.xds_addr();
    let mut a = DeltaClient::connect(xds, node(A_ID, "default", &[])).await;
    a.sync().await;
    assert!(a.names(EDS).contains(&REVIEWS.to_string()));
    Setup {
        dir,
        _meshflow: meshflow,
        config,
        xds,
        debug,
        a,
    }
}

fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = http_get(addr, "localhost", path, &[]).expect("HTTP GET");
    let v = serde_json::from_str(&body).unwrap_or(Value::Null);
    (status, v)
}

/// Runs the built binary; (success, stdout, stderr).
fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run meshflow");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// One sample of a Prometheus text exposition, by its full series text.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn metrics(addr: SocketAddr) -> String {
    http_get(addr, "localhost", "/metrics", &[])
        .expect("metrics")
        .1
}

/// Adds an endpoint to reviews; the client receives (and ACKs) the EDS update.
async fn move_endpoints(s: &mut Setup, ips: &[&str]) {
    write_config(&s.config, "services.yaml", &services(ips));
    let resp =
        s.a.recv(Duration::from_secs(10))
            .await
            .expect("an EDS update");
    assert_eq!(resp.type_url, EDS);
    // Let the ACK reach the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The diff of a proxy's last change, over gRPC, HTTP and the CLI: the EDS resource
/// modified, the new endpoint as a changed field and a `+` line, the push ACKed, and the
/// EndpointSlice update (with its file) as the epoch's input. Then a NACK of the next push
/// shows with its message, and `since` covers both epochs. Bad parameters are refused with
/// errors naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_shows_fields_inputs_and_acks() {
    let mut s = setup("debug-history-diff").await;
    move_endpoints(&mut s, &["10.0.1.1", "10.0.1.2", "10.0.1.3"]).await;

    let mut client = DebugClient::connect(format!("http://{}", s.debug))
        .await
        .expect("debug gRPC");
    let d = client
        .diff(DiffRequest {
            proxy: "a-1.default".into(),
            ..Default::default()
        })
        .await
        .expect("Diff")
        .into_inner();
    assert_eq!(d.proxy, A_ID);
    assert_eq!(d.resources.len(), 1, "{d:?}");
    let r = &d.resources[0];
    assert_eq!((r.r#type.as_str(), r.name.as_str()), ("EDS", REVIEWS));
    assert_eq!(r.change, "modified");
    assert_ne!(r.old_version, r.new_version);
    assert!(
        r.fields
            .iter()
            .any(|f| f.path.starts_with("endpoints[0].lb_endpoints[2]")
                && f.old_json.is_empty()
                && f.new_json.contains("10.0.1.3")),
        "the new endpoint as a field: {:?}",
        r.fields
    );
    assert!(
        r.lines
            .iter()
            .any(|l| l.starts_with("+ ") && l.contains("10.0.1.3")),
        "{:?}",
        r.lines
    );
    assert_eq!(r.deliveries.len(), 1);
    assert_eq!(r.deliveries[0].state, "ACKED");
    assert!(r.deliveries[0].answered_unix_seconds >= r.deliveries[0].sent_unix_seconds);
    assert_eq!(d.epochs.len(), 1);
    let input = &d.epochs[0].inputs;
    assert!(
        input.iter().any(|i| i.kind == "EndpointSlice"
            && i.namespace == "default"
            && i.name == "reviews-abc"
            && i.op == "update"
            && i.source.ends_with("services.yaml")),
        "{input:?}"
    );
    let change_epoch = d.to_epoch;

    // The same over HTTP and from the command line.
    let (status, j) = get_json(s.debug, "/debug/diff?proxy=a-1.default");
    assert_eq!(status, 200, "{j}");
    assert_eq!(j["resources"][0]["name"], REVIEWS);
    assert_eq!(j["resources"][0]["deliveries"][0]["state"], "ACKED");
    let debug_s = s.debug.to_string();
    let (ok, text, err) = cli(&["diff", "a-1.default", "--debug-addr", &debug_s]);
    assert!(ok, "{err}");
    assert!(
        text.contains(&format!(
            "~ EDS {REVIEWS} {} -> {}",
            r.old_version, r.new_version
        )),
        "{text}"
    );
    assert!(
        text.contains("input  EndpointSlice default/reviews-abc update"),
        "{text}"
    );
    assert!(text.contains("EDS ACKED nonce"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("+ ") && l.contains("10.0.1.3")),
        "{text}"
    );
    let (ok, yaml, err) = cli(&[
        "diff",
        "a-1.default",
        "--debug-addr",
        &debug_s,
        "-o",
        "yaml",
    ]);
    assert!(ok && yaml.contains("change: modified"), "{yaml}{err}");

    // The next push is NACKed: the diff says so, with the proxy's message.
    write_config(&s.config, "services.yaml", &services(&["10.0.1.1"]));
    let push = tokio::time::timeout(Duration::from_secs(10), s.a.rx.message())
        .await
        .expect("a push in time")
        .expect("stream")
        .expect("a response");
    s.a.send(DeltaDiscoveryRequest {
        type_url: push.type_url.clone(),
        response_nonce: push.nonce.clone(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: "endpoints refused on purpose".into(),
            details: vec![],
        }),
        ..Default::default()
    })
    .await;
    let mut j = Value::Null;
    let nacked = wait_until(Duration::from_secs(10), || {
        j = get_json(s.debug, &format!("/debug/diff?proxy={A_ID}")).1;
        j["resources"][0]["deliveries"][0]["state"] == "NACKED"
    });
    assert!(nacked, "{j}");
    assert_eq!(
        j["resources"][0]["deliveries"][0]["nack"],
        "endpoints refused on purpose"
    );
    assert!(j["resources"][0]["lines"]
        .as_array()
        .is_some_and(|ls| ls.iter().any(|l| l
            .as_str()
            .is_some_and(|l| l.starts_with("- ") && l.contains("10.0.1.3")))));
    let (_, text, _) = cli(&["diff", "a-1.default", "--debug-addr", &debug_s]);
    assert!(
        text.contains("NACKED by the proxy") && text.contains("endpoints refused on purpose"),
        "{text}"
    );

    // A window of two epochs: from the first change's predecessor to now; the net change
    // of 10.0.1.1,2 → 1,2,3 → 1 is one resource with both pushes.
    let (status, j) = get_json(
        s.debug,
        &format!("/debug/diff?proxy={A_ID}&from={}", change_epoch - 1),
    );
    assert_eq!(status, 200, "{j}");
    assert_eq!(j["resources"].as_array().map(Vec::len), Some(1), "{j}");
    assert_eq!(
        j["resources"][0]["deliveries"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(j["epochs"].as_array().map(Vec::len), Some(2));
    // `since` reaches back to the proxy's connection: every resource it holds was added.
    let (status, j) = get_json(s.debug, &format!("/debug/diff?proxy={A_ID}&since=10m"));
    assert_eq!(status, 200, "{j}");
    assert!(j["resources"].as_array().is_some_and(|rs| rs
        .iter()
        .any(|r| r["type"] == "CDS" && r["change"] == "added")));
    assert!(j["epochs"][0]["inputs"].as_array().is_some_and(|i| i
        .iter()
        .any(|i| i["kind"] == "Proxy" && i["name"] == A_ID && i["op"] == "insert")));
    // `to` bounds the window.
    let (_, j) = get_json(
        s.debug,
        &format!(
            "/debug/diff?proxy={A_ID}&from={}&to={change_epoch}",
            change_epoch - 1
        ),
    );
    assert_eq!(j["epochs"].as_array().map(Vec::len), Some(1), "{j}");

    // Bad parameters: 400 naming the parameter; unknown proxies: 404.
    for (query, needle, code) in [
        ("/debug/diff", "proxy", 400),
        ("/debug/diff?proxy=a-1.default&from=abc", "from", 400),
        ("/debug/diff?proxy=a-1.default&to=-1", "to", 400),
        ("/debug/diff?proxy=a-1.default&since=5x", "since", 400),
        (
            "/debug/diff?proxy=a-1.default&from=1&since=5m",
            "since",
            400,
        ),
        ("/debug/diff?proxy=a-1.default&from=5&to=2", "from", 400),
        ("/debug/diff?proxy=a-1.default&frm=2", "frm", 400),
        ("/debug/diff?proxy=nobody.default", "nobody.default", 404),
        ("/debug/watch?proxy=nobody.default", "nobody.default", 404),
        ("/debug/watch", "proxy", 400),
    ] {
        let (status, j) = get_json(s.debug, query);
        assert_eq!(status, code, "{query}: {j}");
        assert!(
            j["error"].as_str().is_some_and(|e| e.contains(needle)),
            "{query}: {j}"
        );
    }
    let err = client
        .diff(DiffRequest {
            proxy: "a-1.default".into(),
            since: "soon".into(),
            ..Default::default()
        })
        .await
        .expect_err("a bad since");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("since"), "{}", err.message());
    let (ok, _, err) = cli(&["diff", "nobody.default", "--debug-addr", &debug_s]);
    assert!(!ok && err.contains("nobody.default"), "{err}");
    drop(s.dir);
}

/// Reads newline-delimited JSON from a raw HTTP/1.1 response until `want` matches one.
fn ndjson_until(
    stream: &mut TcpStream,
    deadline: Instant,
    want: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut seen = Vec::new();
    let mut line = String::new();
    while Instant::now() < deadline {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {
                // Chunked encoding: the size lines are not JSON, skip them.
                if let Ok(v) = serde_json::from_str::<Value>(line.trim()) {
                    let done = want(&v);
                    seen.push(v);
                    if done {
                        return seen;
                    }
                }
            }
            Err(_) => continue,
        }
    }
    panic!("no matching event; saw {seen:?}");
}

/// A watch started before a config change sees the push (epoch, EDS, `~` with both
/// versions) and then its ACK, over gRPC, over `/debug/watch`, and from `meshflow watch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_pushes_and_acks() {
    let mut s = setup("debug-history-watch").await;
    let mut client = DebugClient::connect(format!("http://{}", s.debug))
        .await
        .expect("debug gRPC");
    let mut grpc = client
        .watch(WatchRequest {
            proxy: "a-1.default".into(),
        })
        .await
        .expect("Watch")
        .into_inner();
    let mut http = TcpStream::connect(s.debug).expect("connect");
    http.set_read_timeout(Some(Duration::from_millis(200))).ok();
    write!(
        http,
        "GET /debug/watch?proxy=a-1.default HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .expect("request");
    let mut cli_watch = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["watch", "a-1.default", "--debug-addr", &s.debug.to_string()])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meshflow watch");
    // The watchers are registered once the CLI says so.
    let mut cli_err = cli_watch.stderr.take().expect("stderr");
    let mut first = [0u8; 8];
    cli_err.read_exact(&mut first).expect("watch started");
    tokio::time::sleep(Duration::from_millis(300)).await;

    move_endpoints(&mut s, &["10.0.1.1", "10.0.1.2", "10.0.1.4"]).await;

    let push = tokio::time::timeout(Duration::from_secs(10), grpc.message())
        .await
        .expect("an event in time")
        .expect("stream")
        .expect("event");
    assert_eq!((push.kind.as_str(), push.r#type.as_str()), ("push", "EDS"));
    assert!(push.epoch > 0);
    assert_eq!(push.changes.len(), 1, "{push:?}");
    let c = &push.changes[0];
    assert_eq!((c.op.as_str(), c.name.as_str()), ("~", REVIEWS));
    assert!(
        !c.old_version.is_empty() && !c.new_version.is_empty() && c.old_version != c.new_version
    );
    let ack = tokio::time::timeout(Duration::from_secs(10), grpc.message())
        .await
        .expect("an ACK in time")
        .expect("stream")
        .expect("event");
    assert_eq!(
        (ack.kind.as_str(), ack.nonce.as_str()),
        ("ack", push.nonce.as_str())
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = ndjson_until(&mut http, deadline, |v| v["kind"] == "ack");
    assert!(
        seen.iter().any(|v| v["kind"] == "push"
            && v["type"] == "EDS"
            && v["changes"][0]["op"] == "~"
            && v["changes"][0]["name"] == REVIEWS
            && v["changes"][0]["new_version"] == c.new_version.as_str()),
        "{seen:?}"
    );

    let mut out = BufReader::new(cli_watch.stdout.take().expect("stdout"));
    let mut printed = String::new();
    let mut line = String::new();
    while !printed.contains(" ACK nonce") {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        printed.push_str(&line);
    }
    let _ = cli_watch.kill();
    let _ = cli_watch.wait();
    assert!(
        printed.contains(&format!(
            "epoch {} EDS push nonce {}",
            push.epoch, push.nonce
        )),
        "{printed}"
    );
    assert!(
        printed.contains(&format!(
            "  ~ {REVIEWS} {} -> {}",
            c.old_version, c.new_version
        )),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("EDS ACK nonce {}", push.nonce)),
        "{printed}"
    );
}

/// The counters of `/metrics` move: pushes and bytes by type after a change, input changes
/// by kind, the convergence histogram after the ACK, the dataflow's steps, NACKs by type
/// after a NACK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_pushes_inputs_convergence_and_nacks() {
    let mut s = setup("debug-history-metrics").await;
    let before = metrics(s.debug);
    let eds_pushes = "meshflow_xds_pushes_total{type=\"EDS\"}";
    let eds_bytes = "meshflow_xds_bytes_total{type=\"EDS\"}";
    let slices = "meshflow_input_changes_total{kind=\"EndpointSlice\",op=\"update\"}";
    let converged = "meshflow_convergence_seconds_count";
    let nacks = "meshflow_xds_nacks_total{type=\"EDS\"}";
    assert!(sample(&before, eds_pushes) >= 1.0, "{before}");
    assert!(
        sample(&before, "meshflow_proxies_connected") >= 1.0,
        "{before}"
    );
    assert!(
        before.contains("meshflow_dataflow_epoch_lag_seconds_count"),
        "{before}"
    );
    assert_eq!(sample(&before, nacks), 0.0, "{before}");

    move_endpoints(&mut s, &["10.0.1.1", "10.0.1.2", "10.0.1.5"]).await;
    let after = metrics(s.debug);
    assert_eq!(
        sample(&after, eds_pushes),
        sample(&before, eds_pushes) + 1.0,
        "{after}"
    );
    assert!(
        sample(&after, eds_bytes) > sample(&before, eds_bytes),
        "{after}"
    );
    assert_eq!(
        sample(&after, slices),
        sample(&before, slices) + 1.0,
        "{after}"
    );
    assert!(
        sample(&after, converged) > sample(&before, converged),
        "{after}"
    );
    // The move was stepped, ahead of its window's close or at it.
    let steps = |text: &str| {
        sample(text, "meshflow_dataflow_steps_total{when=\"ahead\"}")
            + sample(text, "meshflow_dataflow_steps_total{when=\"close\"}")
    };
    assert!(
        before.contains("meshflow_dataflow_steps_total{when=\"ahead\"}"),
        "{before}"
    );
    assert!(steps(&after) > steps(&before), "{after}");
    assert_eq!(
        sample(&after, "meshflow_xds_pushes_total{type=\"CDS\"}"),
        sample(&before, "meshflow_xds_pushes_total{type=\"CDS\"}"),
        "an endpoint change pushes no clusters"
    );

    write_config(&s.config, "services.yaml", &services(&["10.0.1.1"]));
    let push = tokio::time::timeout(Duration::from_secs(10), s.a.rx.message())
        .await
        .expect("a push")
        .expect("stream")
        .expect("response");
    s.a.send(DeltaDiscoveryRequest {
        type_url: push.type_url.clone(),
        response_nonce: push.nonce.clone(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: "no".into(),
            details: vec![],
        }),
        ..Default::default()
    })
    .await;
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            text = metrics(s.debug);
            sample(&text, nacks) == 1.0
        }),
        "{text}"
    );
}

/// Sync state with age and what the proxy ACKed: an unanswered push shows `STALE (Ns)`
/// with its age in seconds in JSON, and CSDS keeps reporting the ACKed version; a Delta
/// proxy that resumes holding everything is SYNCED though nothing is sent. `/debug/proxies`
/// details each stream's subscriptions and the response in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_state_ages_acked_versions_and_streams() {
    let mut s = setup("debug-history-sync").await;
    let (_, j) = get_json(s.debug, "/debug/proxies");
    let p = &j["proxies"][0];
    assert_eq!(p["types"]["EDS"]["sync"], "SYNCED", "{j}");
    let streams = p["stream_details"].as_array().expect("stream_details");
    assert_eq!(streams.len(), 1, "{j}");
    assert_eq!(streams[0]["protocol"], "delta");
    assert_eq!(streams[0]["types"]["CDS"]["wildcard"], true);
    assert_eq!(streams[0]["types"]["EDS"]["wildcard"], false);
    assert_eq!(streams[0]["types"]["EDS"]["names"][0], REVIEWS);
    assert_eq!(streams[0]["types"]["EDS"]["in_flight"], Value::Null);
    let acked_before =
        s.a.held
            .get(EDS)
            .and_then(|m| m.get(REVIEWS))
            .cloned()
            .expect("held");

    // A push the client does not answer.
    write_config(&s.config, "services.yaml", &services(&["10.0.1.9"]));
    let push = tokio::time::timeout(Duration::from_secs(10), s.a.rx.message())
        .await
        .expect("a push")
        .expect("stream")
        .expect("response");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, j) = get_json(s.debug, "/debug/proxies");
    let eds = &j["proxies"][0]["types"]["EDS"];
    assert_eq!(eds["sync"], "STALE", "{j}");
    assert!(
        eds["stale_seconds"].as_f64().is_some_and(|s| s >= 1.0),
        "{j}"
    );
    let in_flight = &j["proxies"][0]["stream_details"][0]["types"]["EDS"]["in_flight"];
    assert_eq!(in_flight["nonce"], push.nonce.as_str(), "{j}");
    let (ok, table, err) = cli(&["proxy-status", "--debug-addr", &s.debug.to_string()]);
    assert!(ok, "{err}");
    assert!(
        table.contains("STALE (1s)") || table.contains("STALE (2s)"),
        "{table}"
    );
    // CSDS: the version the proxy ACKed, not the one on its way.
    let mut csds = ClientStatusDiscoveryServiceClient::connect(format!("http://{}", s.debug))
        .await
        .expect("CSDS");
    let version = |resp: &envoy_types::pb::envoy::service::status::v3::ClientStatusResponse| {
        resp.config[0]
            .generic_xds_configs
            .iter()
            .find(|g| g.type_url == EDS && g.name == REVIEWS)
            .map(|g| g.version_info.clone())
            .expect("reviews in CSDS")
    };
    let resp = csds
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("CSDS")
        .into_inner();
    assert_eq!(version(&resp), acked_before);
    // The ACK: SYNCED, and CSDS moves to the new version.
    s.a.send(DeltaDiscoveryRequest {
        type_url: EDS.into(),
        response_nonce: push.nonce.clone(),
        ..Default::default()
    })
    .await;
    let new_version = push.resources[0].version.clone();
    let mut j = Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            j = get_json(s.debug, "/debug/proxies").1;
            j["proxies"][0]["types"]["EDS"]["sync"] == "SYNCED"
        }),
        "{j}"
    );
    let resp = csds
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("CSDS")
        .into_inner();
    assert_eq!(version(&resp), new_version);

    // Resume: a new Delta stream bringing every version it holds gets nothing, and is
    // SYNCED for CDS (it would be STALE if a resume counted for nothing).
    let mut held = s.a.held.clone();
    held.get_mut(EDS)
        .expect("EDS")
        .insert(REVIEWS.into(), new_version);
    drop(s.a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut b = DeltaClient::connect(s.xds, node(A_ID, "default", &[])).await;
    let cds: HashMap<String, String> = held[CDS].clone().into_iter().collect();
    b.subscribe(CDS, &[], cds).await;
    assert!(
        b.recv(Duration::from_millis(1500)).await.is_none(),
        "nothing to send on resume"
    );
    let mut j = Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            j = get_json(s.debug, "/debug/proxies").1;
            j["proxies"][0]["types"]["CDS"]["sync"] == "SYNCED"
        }),
        "a resumed proxy is SYNCED: {j}"
    );
    assert_eq!(j["proxies"][0]["types"]["CDS"]["acks"], 0, "{j}");
    assert_eq!(
        j["proxies"][0]["types"]["CDS"]["acked_resources"].as_u64(),
        Some(held[CDS].len() as u64)
    );
}

/// `--history-age` bounds what `diff` can see: an epoch older than the bound is evicted
/// when the next one is recorded, and the diff says the history is truncated. Bad bound
/// values are refused naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_bounds_evict_and_diff_says_so() {
    let dir = TestDir::new("debug-history-bounds");
    let config = dir.subdir("config");
    write_config(&config, "services.yaml", &services(&["10.0.1.1"]));
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--debug-addr", &debug.to_string(), "--history-age", "1s"],
    );
    let mut a = DeltaClient::connect(meshflow.xds_addr(), node(A_ID, "default", &[])).await;
    a.sync().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    write_config(&config, "services.yaml", &services(&["10.0.1.2"]));
    a.recv(Duration::from_secs(10)).await.expect("an EDS push");
    let (status, j) = get_json(debug, &format!("/debug/diff?proxy={A_ID}&from=0"));
    assert_eq!(status, 200, "{j}");
    assert_eq!(j["truncated"], true, "{j}");
    assert_eq!(j["epochs"].as_array().map(Vec::len), Some(1), "{j}");
    assert!(j["oldest_kept_epoch"].as_u64() > Some(1), "{j}");
    assert_eq!(j["resources"].as_array().map(Vec::len), Some(1), "{j}");
    assert_eq!(j["resources"][0]["change"], "modified", "{j}");
    // The proxy's connection (all its resources added) is gone from the history.
    assert!(!j["epochs"][0]["inputs"]
        .as_array()
        .is_some_and(|i| i.iter().any(|i| i["kind"] == "Proxy")));

    for (flag, value) in [("--history-bytes", "lots"), ("--history-age", "soon")] {
        let (ok, _, err) = cli(&["serve", "--config-dir", ".", flag, value]);
        assert!(!ok && err.contains(flag) && err.contains(value), "{err}");
    }
}
