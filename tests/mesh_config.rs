//! The mesh config as a live input, with real Envoy: `serve --mesh-config FILE` is watched,
//! and a change reaches a connected Envoy without a restart, as only the resources it
//! changes. `outboundTrafficPolicy.mode` flips a captured sidecar's catch-alls between
//! `PassthroughCluster` and `BlackHoleCluster` (and its last virtual host between Istio's
//! `allow_any` passthrough and `block_all`, a 502); the
//! `connectTimeout` and `defaultHttpRetryPolicy` appear in the clusters and routes Envoy
//! holds, and change live; an invalid file is reported naming its field while the last
//! valid config stays in effect. From a cluster, `--mesh-configmap` watches the `istio`
//! ConfigMap through the fake API server (`support::fake_kube`) the same way.
//!
//! What a request does under each mode is checked by `tests/routing_simulation/`, which
//! sends it through the same generated config: a real Envoy only sees captured traffic
//! through iptables, which the tests cannot set up, so here Envoy's own config dump and its
//! xDS update counters are the evidence.

mod support;

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use support::reviews::Reviews;
use support::{
    converge, dump_route_config, free_port, require_envoy, write_config, Envoy, Meshflow,
    ProxyNode, SidecarScene, TestDir, XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// The cluster `virtualOutbound`'s catch-all chain sends unknown destinations to.
fn virtual_outbound_target(dump: &Value) -> Option<String> {
    let listeners = dump["configs"].as_array()?.iter().find(|c| {
        c["@type"]
            .as_str()
            .is_some_and(|t| t.ends_with("ListenersConfigDump"))
    })?;
    let listener = listeners["dynamic_listeners"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == "virtualOutbound")?;
    let chain = &listener["active_state"]["listener"]["filter_chains"][0];
    chain["filters"][0]["typed_config"]["cluster"]
        .as_str()
        .map(str::to_string)
}

/// The names of the virtual hosts of route configuration `name`.
fn vhost_names(dump: &Value, name: &str) -> Vec<String> {
    dump_route_config(dump, name)
        .and_then(|rc| rc["virtual_hosts"].as_array())
        .map(|v| {
            v.iter()
                .filter_map(|h| h["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A cluster's `connect_timeout` as Envoy holds it (`"2.500s"`).
fn connect_timeout(dump: &Value, cluster: &str) -> Option<String> {
    let clusters = dump["configs"].as_array()?.iter().find(|c| {
        c["@type"]
            .as_str()
            .is_some_and(|t| t.ends_with("ClustersConfigDump"))
    })?;
    clusters["dynamic_active_clusters"]
        .as_array()?
        .iter()
        .map(|c| &c["cluster"])
        .find(|c| c["name"] == cluster)
        .and_then(|c| c["connect_timeout"].as_str().map(str::to_string))
}

/// The retry policy of the first route of virtual host `vhost` in route configuration `rc`.
fn retry_policy(dump: &Value, rc: &str, vhost: &str) -> Value {
    dump_route_config(dump, rc)
        .and_then(|rc| rc["virtual_hosts"].as_array())
        .and_then(|v| v.iter().find(|h| h["name"] == vhost))
        .map(|h| h["routes"][0]["route"]["retry_policy"].clone())
        .unwrap_or(Value::Null)
}

/// xDS updates Envoy applied so far: (CDS, LDS, RDS of `route`).
fn updates(envoy: &Envoy, route: &str) -> (u64, u64, u64) {
    (
        envoy
            .stat("cluster_manager.cds.update_success")
            .unwrap_or(0),
        envoy
            .stat("listener_manager.lds.update_success")
            .unwrap_or(0),
        envoy.rds_stat(route, "update_success").unwrap_or(0),
    )
}

fn mesh_yaml(mode: &str) -> String {
    format!("outboundTrafficPolicy:\n  mode: {mode}\nenableAutoMtls: false\n")
}

fn config_errors(debug: SocketAddr) -> Value {
    support::debug_json(debug, "/debug/config_errors")
}

/// A captured sidecar (no Sidecar resource: the mesh's mode applies) follows the mesh
/// config's `outboundTrafficPolicy.mode` both ways, each flip one LDS and one RDS update and
/// no CDS update, without meshflow or Envoy restarting.
#[test]
fn outbound_traffic_policy_flips_a_connected_envoy_without_a_restart() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("mesh-config-mode");
    let config = dir.subdir("config");
    let mesh_dir = dir.subdir("mesh");
    let port = free_port();
    let reviews = Reviews::new(61, port, &config);
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    write_config(&mesh_dir, "mesh", &mesh_yaml("ALLOW_ANY"));
    let mesh_file = mesh_dir.join("mesh");
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--mesh-config", mesh_file.to_str().unwrap()],
    );
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    // Captured: meshflow sends `virtualOutbound` and the catch-all listeners.
    let envoy = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
        |b| b["node"]["metadata"]["INTERCEPTION_MODE"] = "REDIRECT".into(),
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener("virtualOutbound");
    let route = port.to_string();
    let state = |want_target: &'static str, want_catch_all: &'static str| {
        converge(
            &format!("virtualOutbound → {want_target}, last virtual host {want_catch_all}"),
            CONVERGE_TIMEOUT,
            || {
                let dump = envoy.config_dump();
                (
                    virtual_outbound_target(&dump),
                    vhost_names(&dump, &route).last().cloned(),
                )
            },
            |(target, catch_all)| {
                target.as_deref() == Some(want_target)
                    && catch_all.as_deref() == Some(want_catch_all)
            },
            || envoy.summary(),
        )
    };
    state("PassthroughCluster", "allow_any");
    let before = updates(&envoy, &route);

    write_config(&mesh_dir, "mesh", &mesh_yaml("REGISTRY_ONLY"));
    state("BlackHoleCluster", "block_all");
    let after = converge(
        "one LDS and one RDS update",
        CONVERGE_TIMEOUT,
        || updates(&envoy, &route),
        |u| u.1 > before.1 && u.2 > before.2,
        || envoy.summary(),
    );
    assert_eq!(
        after.0, before.0,
        "no CDS update for a mode flip: {after:?} {before:?}"
    );
    assert_eq!(
        (after.1, after.2),
        (before.1 + 1, before.2 + 1),
        "exactly one LDS and one RDS update"
    );

    write_config(&mesh_dir, "mesh", &mesh_yaml("ALLOW_ANY"));
    state("PassthroughCluster", "allow_any");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
    drop(meshflow);
}

/// `connectTimeout` and `defaultHttpRetryPolicy` are in the clusters and routes a real Envoy
/// holds and change live; an invalid file is an error naming its field on the debug port
/// while Envoy keeps the last valid values; fixing it clears the error.
#[test]
fn connect_timeout_and_default_retries_change_live_and_invalid_files_keep_the_last_valid() {
    let envoy_bin = require_envoy!();
    let mesh_dir = TestDir::new("mesh-config-timeouts");
    let mesh_file = mesh_dir.path().join("mesh.yaml");
    write_config(
        mesh_dir.path(),
        "mesh.yaml",
        "connectTimeout: 2.5s\ndefaultHttpRetryPolicy: {attempts: 5, retryOn: 5xx}\n",
    );
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let scene = SidecarScene::start(
        &envoy_bin,
        "mesh-config-timeouts-scene",
        62,
        &[
            "--mesh-config",
            mesh_file.to_str().unwrap(),
            "--debug-addr",
            &debug_arg,
        ],
        |_| {},
    );
    let envoy = &scene.envoy;
    let cluster = format!("outbound|{}||reviews.default.svc.cluster.local", scene.port);
    let route = scene.port.to_string();
    let vhost = format!("reviews.default.svc.cluster.local:{}", scene.port);
    let sample = || {
        let dump = envoy.config_dump();
        (
            connect_timeout(&dump, &cluster),
            retry_policy(&dump, &route, &vhost)["num_retries"].as_u64(),
            retry_policy(&dump, &route, &vhost)["retry_on"]
                .as_str()
                .map(str::to_string),
        )
    };
    let wait_for = |timeout: &'static str, retries: Option<u64>| {
        converge(
            &format!("connect_timeout {timeout}, num_retries {retries:?}"),
            CONVERGE_TIMEOUT,
            sample,
            |(t, r, _)| t.as_deref() == Some(timeout) && *r == retries,
            || envoy.summary(),
        )
    };
    let (_, _, retry_on) = wait_for("2.500s", Some(5));
    assert_eq!(retry_on.as_deref(), Some("5xx"));

    write_config(
        mesh_dir.path(),
        "mesh.yaml",
        "connectTimeout: 4s\ndefaultHttpRetryPolicy: {attempts: 0}\n",
    );
    // Zero attempts: no retry policy at all.
    wait_for("4s", None);
    assert!(retry_policy(&envoy.config_dump(), &route, &vhost).is_null());

    // An invalid file: reported by field, the last valid config stays.
    write_config(mesh_dir.path(), "mesh.yaml", "connectTimeout: soon\n");
    let errors = converge(
        "the invalid mesh config reported",
        CONVERGE_TIMEOUT,
        || config_errors(debug).to_string(),
        |e| e.contains("mesh.connectTimeout"),
        || envoy.summary(),
    );
    assert!(errors.contains("last valid mesh config stays"), "{errors}");
    assert_eq!(sample().0.as_deref(), Some("4s"));

    // Back to Istio's defaults (an empty config): 10 s and two attempts.
    write_config(mesh_dir.path(), "mesh.yaml", "");
    wait_for("10s", Some(2));
    let errors = config_errors(debug).to_string();
    assert!(!errors.contains("mesh.connectTimeout:"), "{errors}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// `validate --mesh-config` checks a mesh config file: fields named, exit status by errors.
#[test]
fn validate_checks_a_mesh_config_file() {
    let dir = TestDir::new("mesh-config-validate");
    let good = dir.path().join("good.yaml");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&good, "connectTimeout: 1s\nenableTracing: true\n").unwrap();
    std::fs::write(&bad, "outboundTrafficPolicy: {mode: SOMETIMES}\n").unwrap();
    let run = |file: &Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
            .args(["validate", "--mesh-config"])
            .arg(file)
            .output()
            .expect("run meshflow validate");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, out) = run(&good);
    assert!(ok, "{out}");
    assert!(out.contains("mesh.enableTracing"), "{out}");
    // Auto mTLS is translated: nothing to say about it.
    assert!(!out.contains("mesh.enableAutoMtls"), "{out}");
    let (ok, out) = run(&bad);
    assert!(!ok, "{out}");
    assert!(out.contains("mesh.outboundTrafficPolicy.mode"), "{out}");
    assert!(out.contains("SOMETIMES"), "{out}");
}

/// Receives (and ACKs) until the client's clusters satisfy `accept`.
async fn await_clusters(
    c: &mut support::xds_client::DeltaClient,
    what: &str,
    accept: impl Fn(&[String]) -> bool,
) {
    let deadline = std::time::Instant::now() + CONVERGE_TIMEOUT;
    while !accept(&c.names(support::xds_client::CDS)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: clusters are {:#?}",
            c.names(support::xds_client::CDS)
        );
        c.recv(std::time::Duration::from_millis(200)).await;
    }
}

/// The mesh config from the cluster: `serve --kube --mesh-configmap istio-system/istio`
/// watches that ConfigMap through the real `kube` client, against the fake API server
/// (`support::fake_kube`, which says what it covers). Its `mesh` key takes effect at start
/// and on every change (here `defaultServiceExportTo: ['~']` hides every service that sets
/// no exportTo of its own); an invalid change is named on the debug port while the last
/// valid config stays; deleting the ConfigMap gives Istio's defaults back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mesh_configmap_is_watched_and_applied_live() {
    use serde_json::json;
    use support::fake_kube::FakeKube;
    use support::xds_client::{node, DeltaClient, CDS};
    let configmap = |mesh: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "istio", "namespace": "istio-system"},
               "data": {"mesh": mesh}})
    };
    let dir = TestDir::new("mesh-configmap");
    let fake = FakeKube::start();
    fake.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ratings", "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 9080}]}}));
    // Another ConfigMap of the namespace is not the mesh config.
    fake.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other", "namespace": "istio-system"},
        "data": {"mesh": "connectTimeout: nonsense\n"}}));
    fake.apply(configmap("defaultServiceExportTo: ['~']\n"));
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let meshflow = Meshflow::start_kube(
        &kubeconfig,
        dir.path(),
        &[
            "--debug-addr",
            &debug_arg,
            "--mesh-configmap",
            "istio-system/istio",
        ],
    );
    let ratings = "outbound|9080||ratings.default.svc.cluster.local";
    let id = "sidecar~10.1.0.99~probe.default~default.svc.cluster.local";
    let mut c = DeltaClient::connect(meshflow.xds_addr(), node(id, "default", &[])).await;
    c.subscribe(CDS, &[], Default::default()).await;
    await_clusters(&mut c, "the initial mesh config", |n| {
        n.iter().any(|c| c == "PassthroughCluster") && !n.iter().any(|c| c == ratings)
    })
    .await;
    assert!(
        fake.requests().iter().any(
            |r| r.contains("/api/v1/namespaces/istio-system/configmaps?")
                && r.contains("fieldSelector=metadata.name%3Distio")
        ),
        "one watch, by name: {:#?}",
        fake.requests()
    );

    fake.apply(configmap("defaultServiceExportTo: ['*']\n"));
    await_clusters(&mut c, "the changed mesh config", |n| {
        n.iter().any(|c| c == ratings)
    })
    .await;

    fake.apply(configmap("defaultServiceExportTo: ['Not A Namespace']\n"));
    let errors = converge(
        "the invalid ConfigMap reported",
        CONVERGE_TIMEOUT,
        || config_errors(debug).to_string(),
        |e| {
            e.contains("ConfigMap istio-system/istio")
                && e.contains("mesh.defaultServiceExportTo[0]")
        },
        || meshflow.log(),
    );
    assert!(errors.contains("last valid mesh config stays"), "{errors}");
    assert!(c.names(CDS).iter().any(|n| n == ratings));

    fake.apply(configmap("defaultServiceExportTo: ['~']\n"));
    await_clusters(&mut c, "the fixed mesh config", |n| {
        !n.iter().any(|c| c == ratings)
    })
    .await;
    assert!(!config_errors(debug)
        .to_string()
        .contains("mesh.defaultServiceExportTo"));

    fake.delete("ConfigMap", "istio-system", "istio");
    await_clusters(
        &mut c,
        "Istio's defaults after the ConfigMap is deleted",
        |n| n.iter().any(|c| c == ratings),
    )
    .await;
}
