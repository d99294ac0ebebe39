//! Faults with real Envoys: meshflow restarting under a steady request loop, an Envoy moving
//! to another meshflow replica, and a config source that briefly holds invalid config.
//!
//! The proxy is the `reviews` sidecar of `envoy/sidecar.rs` (bound egress listener, no
//! capture); each test owns its loopback /24 (127.0.45–47.x).

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use support::reviews::{count, Binding, Client, Reviews};
use support::{
    free_port, require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir, XdsMode,
    STARTUP_TIMEOUT,
};

/// The reviews mesh with v1 and v2, routed 100% to v1.
fn reviews_mesh(net: u8, port: u16, config_dir: &std::path::Path) -> Reviews {
    let reviews = Reviews::new(net, port, config_dir);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    write_config(
        config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );
    reviews
}

/// Sum of the `update_success` counters of one xDS type in Envoy's stats.
fn successes(envoy: &Envoy, what: &str) -> u64 {
    let stats = envoy.stats(Some("update_success"));
    match what {
        "cds" => stats
            .get("cluster_manager.cds.update_success")
            .copied()
            .unwrap_or(0),
        "lds" => stats
            .get("listener_manager.lds.update_success")
            .copied()
            .unwrap_or(0),
        "eds" => stats
            .iter()
            .filter(|(k, _)| k.starts_with("cluster.outbound|") && k.ends_with(".update_success"))
            .map(|(_, v)| *v)
            .sum(),
        "rds" => stats
            .iter()
            .filter(|(k, _)| k.contains(".rds."))
            .map(|(_, v)| *v)
            .sum(),
        other => panic!("unknown type {other}"),
    }
}

/// meshflow is killed and restarted while Envoy serves a steady request loop: not one request
/// fails, Envoy reconnects by itself, and over Delta it receives only what changed while
/// meshflow was down (one route configuration; no cluster, endpoint or listener update).
#[test]
fn restart_under_load_fails_no_request_and_delta_resumes_with_only_changes() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-faults-restart");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = reviews_mesh(45, port, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");

    let xds_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let meshflow = Meshflow::start_at(&config_dir, dir.path(), xds_addr, "meshflow.log", &[]);
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, xds_addr);
    let listener_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let client = Client::new(&envoy, listener_addr, "reviews");
    client.converge(
        "/reviews → v1",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v1") == 10,
        10,
    );

    // A steady request loop for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let looper = {
        let (stop, ok, failed, failures) =
            (stop.clone(), ok.clone(), failed.clone(), failures.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match support::http_get(listener_addr, "reviews", "/reviews/1", &[]) {
                    Ok((200, body)) if body.starts_with("reviews-v") => {
                        ok.fetch_add(1, Ordering::Relaxed)
                    }
                    other => {
                        failures.lock().unwrap().push(format!("{other:?}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    thread::sleep(Duration::from_millis(300));
    let before: Vec<u64> = ["cds", "eds", "lds", "rds"]
        .iter()
        .map(|t| successes(&envoy, t))
        .collect();

    drop(meshflow);
    thread::sleep(Duration::from_millis(500));
    // Changed while meshflow is down: only the routes.
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let served_while_down = ok.load(Ordering::Relaxed);
    let _meshflow = Meshflow::start_at(
        &config_dir,
        dir.path(),
        xds_addr,
        "meshflow-restarted.log",
        &[],
    );
    client.converge(
        "/reviews → v2 after the restart",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    looper.join().unwrap();

    let after: Vec<u64> = ["cds", "eds", "lds", "rds"]
        .iter()
        .map(|t| successes(&envoy, t))
        .collect();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("RESTART: {ok} requests served, {failed} failed; xDS updates cds/eds/lds/rds before {before:?} after {after:?}");
    assert_eq!(
        failed,
        0,
        "requests failed during the restart: {:?}",
        failures.lock().unwrap()
    );
    assert!(
        ok > 100 && served_while_down > 0,
        "the loop ran throughout ({ok} ok)"
    );
    assert_eq!(after[0], before[0], "no CDS update on reconnect");
    assert_eq!(after[1], before[1], "no EDS update on reconnect");
    assert_eq!(after[2], before[2], "no LDS update on reconnect");
    assert_eq!(
        after[3],
        before[3] + 1,
        "exactly the changed route configuration"
    );
    assert_eq!(envoy.rejected_updates(), 0);
}

/// What Envoy holds: every dynamic resource by name, as Envoy renders it (versions and
/// timestamps left out, so Delta's content hashes and SotW's counters compare alike).
fn held(envoy: &Envoy) -> BTreeMap<String, String> {
    fn walk(v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(m) => {
                {
                    for (key, inner) in m {
                        let name = inner
                            .get("name")
                            .or(inner.get("cluster_name"))
                            .and_then(|n| n.as_str());
                        if let (true, Some(name)) = (
                            matches!(
                                key.as_str(),
                                "cluster" | "listener" | "route_config" | "endpoint_config"
                            ),
                            name,
                        ) {
                            out.insert(format!("{key} {name}"), inner.to_string());
                        }
                    }
                }
                m.values().for_each(|x| walk(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    walk(&envoy.config_dump(), &mut out);
    // The bootstrap's own xDS cluster names the replica's address; everything else must match.
    out.retain(|k, _| !k.ends_with(" xds-grpc"));
    out
}

/// Two meshflow replicas on the same config: an Envoy restarted against the other replica
/// converges to exactly the same resources and versions (content hashes agree across
/// processes), for Delta and SotW alike.
#[test]
fn envoy_moving_to_another_replica_converges_to_identical_config() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-faults-replicas");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = reviews_mesh(46, port, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let a = Meshflow::start_with_args(&config_dir, dir.path(), &[]);
    let b = Meshflow::start_at(
        &config_dir,
        dir.path(),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        "meshflow-b.log",
        &["--workers", "2"],
    );
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let listener = format!("127.0.0.1_{port}");

    let first = {
        let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, a.xds_addr());
        envoy.await_listener(&listener);
        Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews").converge(
            "via replica A",
            "/reviews/1",
            &[],
            |c| count(c, "reviews-v1") == 10,
            10,
        );
        held(&envoy)
    };
    for mode in [XdsMode::Delta, XdsMode::Sotw] {
        let envoy = Envoy::start(&envoy_bin, dir.path(), &node, b.xds_addr(), mode);
        envoy.wait_live(STARTUP_TIMEOUT);
        envoy.await_listener(&listener);
        Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews").converge(
            "via replica B",
            "/reviews/1",
            &[],
            |c| count(c, "reviews-v1") == 10,
            10,
        );
        let second = held(&envoy);
        assert!(first.len() >= 10, "resources seen: {:?}", first.keys());
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            second.keys().collect::<Vec<_>>(),
            "same names ({})",
            mode.label()
        );
        assert_eq!(
            first,
            second,
            "replica B ({}) serves what replica A served",
            mode.label()
        );
        assert_eq!(envoy.rejected_updates(), 0);
    }
}

/// A config file that turns invalid keeps its last valid version in effect (traffic does not
/// move, nothing is retracted), a directory replaced atomically the way Kubernetes swaps
/// ConfigMap volumes (`..data` symlink) is picked up, and fixing the file applies it.
#[test]
fn invalid_edits_and_atomic_directory_swaps_never_retract_valid_config() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-faults-hiccups");
    let root = dir.subdir("config");
    // ConfigMap layout: root/<file> -> ..data/<file>, ..data -> ..v1
    let v1 = root.join("..v1");
    std::fs::create_dir_all(&v1).unwrap();
    let port = free_port();
    let reviews = reviews_mesh(47, port, &v1);
    let _b1 = reviews.start_backend("v1");
    let _b2 = reviews.start_backend("v2");
    std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
    for entry in std::fs::read_dir(&v1).unwrap() {
        let name = entry.unwrap().file_name();
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(
                std::path::Path::new("..data").join(&name),
                root.join(&name),
            )
            .unwrap();
        }
    }
    let meshflow = Meshflow::start(&root, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews");
    client.converge(
        "/reviews → v1",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v1") == 10,
        10,
    );

    // 1. An invalid VirtualService (weights add up to 150): v1 keeps all traffic.
    let v2dir = root.join("..v2");
    std::fs::create_dir_all(&v2dir).unwrap();
    for entry in std::fs::read_dir(&v1).unwrap() {
        let e = entry.unwrap();
        std::fs::copy(e.path(), v2dir.join(e.file_name())).unwrap();
    }
    let vs = std::fs::read_to_string(v2dir.join("reviews-virtualservice.yaml")).unwrap();
    let broken = vs.replace("weight: 0", "weight: 50");
    assert_ne!(broken, vs);
    std::fs::write(v2dir.join("reviews-virtualservice.yaml"), &broken).unwrap();
    // Swap the whole directory atomically.
    std::os::unix::fs::symlink("..v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(10), || meshflow
            .log()
            .contains("weights add up to 150")),
        "the error is reported"
    );
    let counts = client.tally(30, "/reviews/1", &[]);
    assert_eq!(
        count(&counts, "reviews-v1"),
        30,
        "the last valid routes stay: {counts:?}"
    );

    // 2. Fixed in a third version of the directory, swapped in: traffic moves to v2.
    let v3dir = root.join("..v3");
    std::fs::create_dir_all(&v3dir).unwrap();
    for entry in std::fs::read_dir(&v2dir).unwrap() {
        let e = entry.unwrap();
        std::fs::copy(e.path(), v3dir.join(e.file_name())).unwrap();
    }
    let fixed = swap_split(&vs);
    std::fs::write(v3dir.join("reviews-virtualservice.yaml"), fixed).unwrap();
    std::os::unix::fs::symlink("..v3", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    client.converge(
        "/reviews → v2 after the fix",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    assert_eq!(envoy.rejected_updates(), 0);
}

/// v1 100 / v2 0 → v1 0 / v2 100 in the fixture's VirtualService text.
fn swap_split(vs: &str) -> String {
    let mut out = String::new();
    let mut subset = "";
    for line in vs.lines() {
        if line.trim_start().starts_with("subset: ") {
            subset = if line.contains("v1") { "v1" } else { "v2" };
        }
        if line.trim_start().starts_with("weight: ") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!(
                "{indent}weight: {}\n",
                if subset == "v1" { 0 } else { 100 }
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
