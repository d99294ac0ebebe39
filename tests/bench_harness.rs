//! `meshflow bench` end to end on a tiny mesh (a few seconds): every scenario converges and
//! every simulated proxy's config equals the full recompute, over Delta and SotW; and
//! `meshflow loadgen` syncs its proxies against a running server and prints its summary.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// What the istio-style baseline sends on the tiny mesh (12 sidecars, 2 gateways, each
// running the Istio Gateway on port 80 and the Gateway API Gateway on 8080), per type (CDS,
// EDS, LDS, RDS): messages, then resources.
// An endpoint move of a service without subsets: its assignment to the 5 proxies that see it.
const ISTIO_ENDPOINT_IP_MESSAGES: [u64; 4] = [0, 5, 0, 0];
const ISTIO_ENDPOINT_IP_RESOURCES: [u64; 4] = [0, 5, 0, 0];
// A weight shift seen by the 12 sidecars, plus the 2 gateways (not scoped): to each, the
// service's 3 clusters (and their assignments, which Envoy needs after a cluster update)
// and every listener and route configuration it holds, changed or not.
const ISTIO_VS_WEIGHT_MESSAGES: [u64; 4] = [14, 14, 14, 14];
const ISTIO_VS_WEIGHT_RESOURCES: [u64; 4] = [42, 42, 40, 16];
// 17 pod relabels push the service's 3 assignments to its 14 holders; 16 DestinationRules
// for no host push the 2 gateways' listeners and routes; 17 Services nobody sees, nothing.
const ISTIO_UNRELATED_MESSAGES: [u64; 4] = [0, 238, 32, 32];
const ISTIO_UNRELATED_RESOURCES: [u64; 4] = [0, 714, 64, 64];
// 20 HTTPRoute edits: each pushes the 2 gateways their 2 listeners and 2 route
// configurations; the sidecars get nothing.
const ISTIO_HTTPROUTE_MESSAGES: [u64; 4] = [0, 0, 40, 40];
const ISTIO_HTTPROUTE_RESOURCES: [u64; 4] = [0, 0, 80, 80];
// 10 endpoint replacements of a service with subsets, 14 holders: all 3 of its assignments
// each time.
const ISTIO_ROLLOUT_MESSAGES: [u64; 4] = [0, 140, 0, 0];
const ISTIO_ROLLOUT_RESOURCES: [u64; 4] = [0, 420, 0, 0];

// What meshflow sends over Delta on the same mesh, per scenario and type (CDS, EDS, LDS,
// RDS): the precision the bench tracks; a change here is a change of what is pushed.
const MESHFLOW_DELTA_MESSAGES: [(&str, [u64; 4]); 13] = [
    // Every proxy's first config: one response per type.
    ("connect", [14, 14, 14, 14]),
    ("idle", [0, 0, 0, 0]),
    // One assignment to each proxy that sees the service.
    ("endpoint-ip", [0, 5, 0, 0]),
    ("endpoint-shared", [0, 14, 0, 0]),
    ("scale-up", [0, 5, 0, 0]),
    // The one route configuration that changed, to each sidecar that sees it.
    ("vs-weight", [0, 0, 0, 12]),
    // The new subset's cluster and its assignment.
    ("dr-subset", [14, 14, 0, 0]),
    // The new clusters and assignments to every proxy; the sidecars' route configuration.
    ("new-service", [14, 14, 0, 12]),
    // The namespace's 3 proxies: the newly imported clusters, assignments and routes.
    ("sidecar", [3, 3, 0, 3]),
    ("mesh-wide", [0, 0, 0, 12]),
    // 20 HTTPRoute edits: the route configuration of the Gateway API Gateway's port to the 2
    // gateways, each time; no sidecar routes by it.
    ("httproute", [0, 0, 0, 40]),
    // Nothing changes any proxy's output: nothing is sent.
    ("unrelated", [0, 0, 0, 0]),
    // One assignment response per change and proxy holding the service: 10 × 14.
    ("rollout", [0, 140, 0, 0]),
];

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "meshflow-test-{label}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn bench(protocol: &str) -> Value {
    bench_with(protocol, "meshflow", None)
}

/// The bench on the tiny mesh with `engine`, all scenarios or those named.
fn bench_with(protocol: &str, engine: &str, scenarios: Option<&str>) -> Value {
    bench_args(protocol, engine, scenarios, &[])
}

/// [`bench_with`] with more arguments; `engine` may name several (the chart is checked for
/// the first).
fn bench_args(protocol: &str, engine: &str, scenarios: Option<&str>, extra: &[&str]) -> Value {
    let out_dir = temp_dir(&format!("bench-{protocol}-{}", engine.replace(',', "-")));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_meshflow"));
    cmd.arg("bench");
    if let Some(names) = scenarios {
        cmd.args(["--scenarios", names]);
    }
    cmd.args(extra);
    let out = cmd
        .args([
            "--shape",
            "small",
            "--services",
            "24",
            "--endpoints-per-service",
            "3",
            "--namespaces",
            "4",
            "--proxies",
            "12",
            "--settle-ms",
            "150",
            "--timeout",
            "30",
            "--protocol",
            protocol,
            "--engine",
            engine,
            "--churn-rate",
            "20",
            "--churn-seconds",
            "1",
            "--gateways",
            "2",
            "--gateway-vs-every",
            "5",
            "--http-routes",
            "8",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let json = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a JSON result");
    for ext in ["md", "svg"] {
        assert!(
            json.with_extension(ext).is_file(),
            "no .{ext} next to {}",
            json.display()
        );
    }
    // The chart of a real run: a bar per engine that ran, on log axes of whole decades
    // (its layout is tested in src/bench/chart.rs).
    let svg = std::fs::read_to_string(json.with_extension("svg")).unwrap();
    let first = engine.split(',').next().unwrap_or(engine);
    assert!(
        svg.contains(&format!(
            r#"class="bar" data-panel="latency" data-engine="{first}""#
        )),
        "{svg}"
    );
    assert!(
        svg.contains(r#"class="y-tick" data-panel="bytes""#),
        "{svg}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out_dir);
    v
}

/// The rows of an engine's run, in order.
fn scenario_names(scenarios: &[Value]) -> Vec<&str> {
    scenarios
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect()
}

fn check(v: &Value, protocol: &str) {
    assert_eq!(v["ok"], true, "{v:#}");
    let engine = &v["engines"][0];
    assert_eq!(engine["protocol"], protocol);
    let scenarios = engine["scenarios"].as_array().unwrap();
    let names = scenario_names(scenarios);
    assert_eq!(
        names,
        [
            "connect",
            "idle",
            "proxy-status",
            "endpoint-ip",
            "endpoint-shared",
            "scale-up",
            "vs-weight",
            "dr-subset",
            "new-service",
            "sidecar",
            "mesh-wide",
            "authz-policy",
            "peer-auth",
            "httproute",
            "unrelated",
            "rollout",
            "churn"
        ]
    );
    for s in scenarios {
        assert_eq!(s["verified"], true, "{s:#}");
        if s["scenario"] == "idle" || s["scenario"] == "unrelated" {
            // Nothing changes any proxy's output: nothing is sent, over either protocol.
            assert_eq!(s["affected_proxies"], 0, "{s:#}");
            assert_eq!(s["received"]["messages"]["total"], 0, "{s:#}");
            assert_eq!(s["received"]["bytes"]["total"], 0, "{s:#}");
            continue;
        }
        if s["scenario"] == "proxy-status" {
            // Five calls of the debug port's proxy list, each listing every proxy and none
            // of them stale; asking sends the proxies nothing.
            assert_eq!(s["affected_proxies"], 5, "{s:#}");
            assert_eq!(s["converged_proxies"], 5, "{s:#}");
            assert_eq!(s["received"]["messages"]["total"], 0, "{s:#}");
            assert!(s["latency_ms"]["p99"].as_f64().unwrap() > 0.0, "{s:#}");
            continue;
        }
        assert_eq!(s["affected_proxies"], s["converged_proxies"], "{s:#}");
        // What the server spent per message it sent, dataflow and kernel included.
        let per_message = s["server_cpu_us_per_message"].as_f64();
        let cpu = s["server_cpu_s"].as_f64().unwrap();
        let messages = s["received"]["messages"]["total"].as_f64().unwrap();
        let want = cpu * 1e6 / messages;
        assert!(
            per_message.is_some_and(|p| (p - want).abs() <= want * 1e-9),
            "{s:#}"
        );
        assert!(s["affected_proxies"].as_u64().unwrap() > 0, "{s:#}");
        assert!(
            s["received"]["bytes"]["total"].as_u64().unwrap() > 0,
            "{s:#}"
        );
        assert!(s["latency_ms"]["p99"].as_f64().is_some(), "{s:#}");
    }
    let by_name = |n: &str| scenarios.iter().find(|s| s["scenario"] == n).unwrap();
    // A security policy edit reaches exactly the proxies it changes, one message each: the
    // policy's one proxy; the STRICT namespace's proxies.
    let authz = by_name("authz-policy");
    assert_eq!(authz["affected_proxies"], 1, "{authz:#}");
    assert_eq!(authz["received"]["messages"]["total"], 1, "{authz:#}");
    let peer = by_name("peer-auth");
    assert_eq!(
        peer["received"]["messages"]["total"], peer["affected_proxies"],
        "{peer:#}"
    );
    // Every sidecar is affected by the change to svc-0 (in the shared namespace ns-0); the
    // gateways route by their own VirtualServices only.
    assert_eq!(by_name("mesh-wide")["affected_proxies"], 12);
    // An endpoint of a service in ns-0 reaches every proxy: the sidecars import ns-0, and
    // the gateways hold every cluster.
    assert_eq!(by_name("endpoint-shared")["affected_proxies"], 14);
    let connect = by_name("connect");
    assert_eq!(connect["affected_proxies"], 14, "{connect:#}");
    // 20 changes in one second, each reaching the proxies that hold the service.
    let churn = by_name("churn");
    assert_eq!(churn["changes"], 20, "{churn:#}");
    assert!(churn["server_cpu_cores"].as_f64().is_some(), "{churn:#}");
    let summary = &v["summary"]["medians"];
    assert!(summary.as_array().is_some_and(|m| !m.is_empty()), "{v:#}");
    if protocol == "delta" {
        // An endpoint move reaches only the proxies that see the service, as one
        // ClusterLoadAssignment each.
        let ep = by_name("endpoint-ip");
        assert_eq!(ep["unaffected_proxies_messaged"], 0, "{ep:#}");
        assert_eq!(ep["received"]["resources"]["total"], ep["affected_proxies"]);
        assert_eq!(ep["received"]["resources"]["EDS"], ep["affected_proxies"]);
        let shared = by_name("endpoint-shared");
        assert_eq!(shared["unaffected_proxies_messaged"], 0, "{shared:#}");
        // svc-4 has subsets: its assignment and its endpoint's subset assignment, in one
        // response per proxy, and nothing else.
        assert_eq!(shared["received"]["messages"]["total"], 14, "{shared:#}");
        assert_eq!(shared["received"]["resources"]["EDS"], 28, "{shared:#}");
        assert_eq!(shared["received"]["resources"]["total"], 28, "{shared:#}");
        for (name, expected) in MESHFLOW_DELTA_MESSAGES {
            let s = by_name(name);
            let m = &s["received"]["messages"];
            let got = ["CDS", "EDS", "LDS", "RDS"].map(|t| m[t].as_u64().unwrap());
            assert_eq!(got, expected, "{name}: {s:#}");
        }
        // Churn batches what one debounce window collects: at most one response per
        // (change, proxy holding the service).
        let churn = by_name("churn");
        let m = churn["received"]["messages"]["total"].as_u64().unwrap();
        assert!(
            m > 0 && m <= churn["affected_proxies"].as_u64().unwrap(),
            "{churn:#}"
        );
        assert!(
            churn["messages_per_affected_proxy"].as_f64().unwrap() <= 1.0,
            "{churn:#}"
        );
    }
}

/// Two replicas on one directory: the proxies' connections alternate between them (three
/// streams each here), each replica's figures are reported, and the run ends with
/// `failover` — the second replica killed while an endpoint every proxy sees moves. Every
/// proxy that was on it resumes on the first and is sent exactly what the proxies that
/// stayed are sent for the change (one assignment response, nothing it held again), a
/// fraction of its whole config; every proxy verifies against the recompute.
#[test]
fn bench_failover_resumes_on_the_replica_left() {
    let v = bench_args(
        "delta",
        "meshflow",
        Some("endpoint-shared"),
        &["--replicas", "2", "--streams-per-connection", "3"],
    );
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["replicas"], 2, "{v:#}");
    let scenarios = v["engines"][0]["scenarios"].as_array().unwrap();
    let names = scenario_names(scenarios);
    assert_eq!(
        names,
        [
            "connect",
            "idle",
            "proxy-status",
            "endpoint-shared",
            "failover"
        ]
    );
    let by_name = |n: &str| scenarios.iter().find(|s| s["scenario"] == n).unwrap();
    // 14 proxies, 3 per connection, connections alternating: 8 on the first, 6 on the
    // second; both served them.
    let connect = by_name("connect");
    let replicas = connect["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 2, "{connect:#}");
    for (r, proxies) in replicas.iter().zip([8, 6]) {
        assert_eq!(r["proxies"], proxies, "{connect:#}");
        assert!(r["cpu_s"].as_f64().unwrap() > 0.0, "{connect:#}");
        assert!(r["peak_rss_kib"].as_u64().unwrap() > 0, "{connect:#}");
    }
    let f = by_name("failover");
    assert_eq!(f["verified"], true, "{f:#}");
    // Every proxy holds the change in the end, the moved ones on a new stream.
    assert_eq!(f["affected_proxies"], 14, "{f:#}");
    assert_eq!(f["converged_proxies"], 14, "{f:#}");
    assert_eq!(f["received"]["messages"]["total"], 14, "{f:#}");
    assert_eq!(f["unaffected_proxies_messaged"], 0, "{f:#}");
    let fo = &f["failover"];
    assert_eq!(fo["killed_replica"], 2, "{f:#}");
    assert_eq!(fo["moved_proxies"], 6, "{f:#}");
    assert_eq!(fo["resumed_proxies"], 6, "{f:#}");
    assert!(fo["resync_ms"]["p99"].as_f64().unwrap() > 0.0, "{f:#}");
    // At the end every proxy is on the replica left.
    let after = f["replicas"].as_array().unwrap();
    assert_eq!(after[0]["proxies"], 14, "{f:#}");
    assert!(after[1]["cpu_s"].is_null(), "{f:#}");
    // Resuming re-sends nothing held: the moved proxies get what the others get for the
    // change, one response with the service's two assignments each.
    let moved = &fo["moved_received"];
    let stayed = &fo["stayed_received"];
    for t in ["CDS", "LDS", "RDS"] {
        assert_eq!(moved["messages"][t], 0, "{t}: {f:#}");
    }
    assert_eq!(moved["messages"]["EDS"], 6, "{f:#}");
    assert_eq!(moved["resources"]["EDS"], 12, "{f:#}");
    assert_eq!(stayed["messages"]["total"], 8, "{f:#}");
    assert_eq!(stayed["resources"]["EDS"], 16, "{f:#}");
    let per_min = fo["moved_bytes_per_min"].as_f64().unwrap();
    assert!((0.8..1.2).contains(&per_min), "{f:#}");
    assert!(fo["moved_bytes_per_full"].as_f64().unwrap() < 0.2, "{f:#}");
}

#[test]
fn bench_delta_converges_and_verifies() {
    check(&bench("delta"), "delta");
}

/// Above `--full-push-max-proxies` the full-push baseline is not started: the run still
/// succeeds, the report says why, and the engine that ran reports the load generator's CPU
/// next to the server's.
#[test]
fn bench_skips_full_push_above_its_limit() {
    let v = bench_args(
        "delta",
        "meshflow,full-push",
        Some("endpoint-ip"),
        &["--full-push-max-proxies", "10"],
    );
    assert_eq!(v["ok"], true, "{v:#}");
    let engines = v["engines"].as_array().unwrap();
    assert_eq!(engines.len(), 2, "{v:#}");
    assert!(engines[0]["skipped"].is_null(), "{v:#}");
    let why = engines[1]["skipped"].as_str().unwrap_or_default();
    assert!(
        why.contains("full-push not run at 14 proxies (over --full-push-max-proxies 10)"),
        "{v:#}"
    );
    assert!(
        engines[1]["scenarios"].as_array().unwrap().is_empty(),
        "{v:#}"
    );
    let connect = &engines[0]["scenarios"][0];
    assert_eq!(connect["scenario"], "connect", "{v:#}");
    assert!(connect["loadgen_cpu_s"].as_f64().is_some(), "{connect:#}");
    assert!(
        connect["loadgen_peak_rss_kib"].as_u64().unwrap_or(0) > 0,
        "{connect:#}"
    );
}

/// The istio-style baseline pushes what Istio's rules push (`src/runtime/istio_style.rs`),
/// and still converges to the full recompute: an endpoint move sends only assignments, to
/// the proxies holding them; a VirtualService change resends every listener and route
/// configuration of the proxies that see the service, changed or not, and pushes the
/// gateways (not scoped); an HTTPRoute edit resends the gateways' listeners and route
/// configurations (meshflow: the one route configuration); of the unrelated changes, the Services nobody sees push nothing,
/// while the pod label pushes the relabelled service's assignments to every proxy holding
/// them and the DestinationRules push the gateways.
#[test]
fn bench_istio_style_pushes_as_istio() {
    let v = bench_with(
        "delta",
        "istio-style",
        Some("endpoint-ip,vs-weight,httproute,unrelated,rollout"),
    );
    assert_eq!(v["ok"], true, "{v:#}");
    let engine = &v["engines"][0];
    assert_eq!(engine["engine"], "istio-style");
    assert_eq!(engine["protocol"], "delta");
    let scenarios = engine["scenarios"].as_array().unwrap();
    let by_name = |n: &str| scenarios.iter().find(|s| s["scenario"] == n).unwrap();
    for s in scenarios {
        assert_eq!(s["verified"], true, "{s:#}");
        assert_eq!(s["affected_proxies"], s["converged_proxies"], "{s:#}");
    }
    let counts = |n: &str| {
        let r = &by_name(n)["received"];
        let get = |what: &str, t: &str| r[what][t].as_u64().unwrap();
        (
            [
                get("messages", "CDS"),
                get("messages", "EDS"),
                get("messages", "LDS"),
                get("messages", "RDS"),
            ],
            [
                get("resources", "CDS"),
                get("resources", "EDS"),
                get("resources", "LDS"),
                get("resources", "RDS"),
            ],
        )
    };
    // An endpoint move: assignments only, one response to each proxy holding them.
    let ep = by_name("endpoint-ip");
    let (m, r) = counts("endpoint-ip");
    assert_eq!(ep["unaffected_proxies_messaged"], 0, "{ep:#}");
    assert_eq!(m, ISTIO_ENDPOINT_IP_MESSAGES, "{ep:#}");
    assert_eq!(r, ISTIO_ENDPOINT_IP_RESOURCES, "{ep:#}");
    // A weight shift: the whole listener and route sets of the proxies that see it, resent.
    let (m, r) = counts("vs-weight");
    assert_eq!(m, ISTIO_VS_WEIGHT_MESSAGES, "{:#}", by_name("vs-weight"));
    assert_eq!(r, ISTIO_VS_WEIGHT_RESOURCES, "{:#}", by_name("vs-weight"));
    let (m, r) = counts("httproute");
    assert_eq!(m, ISTIO_HTTPROUTE_MESSAGES, "{:#}", by_name("httproute"));
    assert_eq!(r, ISTIO_HTTPROUTE_RESOURCES, "{:#}", by_name("httproute"));
    let (m, r) = counts("unrelated");
    assert_eq!(m, ISTIO_UNRELATED_MESSAGES, "{:#}", by_name("unrelated"));
    assert_eq!(r, ISTIO_UNRELATED_RESOURCES, "{:#}", by_name("unrelated"));
    // A rollout: one assignment response per change and proxy holding the service.
    let (m, r) = counts("rollout");
    assert_eq!(m, ISTIO_ROLLOUT_MESSAGES, "{:#}", by_name("rollout"));
    assert_eq!(r, ISTIO_ROLLOUT_RESOURCES, "{:#}", by_name("rollout"));
}

#[test]
fn bench_sotw_converges_and_verifies() {
    check(&bench("sotw"), "sotw");
}

#[test]
fn loadgen_command_syncs_against_a_server() {
    let dir = temp_dir("loadgen");
    let config = dir.join("config");
    let ok = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["mesh-gen", "--out"])
        .arg(&config)
        .args([
            "--services",
            "12",
            "--endpoints-per-service",
            "2",
            "--namespaces",
            "3",
            "--sidecar-scoping",
        ])
        .status()
        .unwrap();
    assert!(ok.success());
    // Port 0 and the address from the log: no other test can take the port in between.
    let log = dir.join("server.log");
    let mut server = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["serve", "--config-dir"])
        .arg(&config)
        .args(["--xds-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"])
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let listening = text
            .split_once("xDS server listening on ")
            .and_then(|(_, rest)| rest.split_once('\n'))
            .map(|(addr, _)| addr.trim().to_string());
        if let Some(addr) = listening {
            break addr;
        }
        if let Ok(Some(status)) = server.try_wait() {
            panic!("the server exited ({status}):\n{text}");
        }
        assert!(Instant::now() < deadline, "server did not start:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    for flag in ["--delta", "--sotw"] {
        let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
            .args([
                "loadgen",
                "--xds-addr",
                &addr,
                "--proxies",
                "7",
                "--namespaces",
                "3",
            ])
            .args([flag, "--duration", "0.3", "--sync-timeout", "20"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["synced"], 7, "{v:#}");
        assert_eq!(v["version_mismatches"], 0);
        assert!(v["received"]["messages"]["CDS"].as_u64().unwrap() >= 7);
        assert!(v["received"]["resources"]["RDS"].as_u64().unwrap() >= 7);
    }
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
