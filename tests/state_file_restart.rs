//! The last valid version of an object survives `kill -9` of `meshflow serve` when it runs
//! with `--state-file`: after an invalid edit of a live file, the server is killed and started
//! again on the same directory, and a proxy is served the very route configuration it was
//! served before the edit (same content, so the same version). Without the state file the
//! restart starts without the object, and says so in the log.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::xds_client::{node, DeltaClient, RDS};
use support::{free_port, wait_until, write_config, Meshflow, TestDir, CONVERGE_TIMEOUT};

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  ports: [{name: http, port: 9080}]
";

fn virtual_service(route: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [reviews]
  http:
  - match:
    - uri: {{prefix: {route}}}
    route:
    - destination: {{host: reviews}}
      weight: 100
"
    )
}

/// The version of route configuration `9080` a fresh proxy is served.
async fn route_version(addr: SocketAddr) -> String {
    let id = "sidecar~10.9.1.1~sleep-1.default~default.svc.cluster.local";
    let mut c = DeltaClient::connect(addr, node(id, "default", &[])).await;
    c.sync().await;
    c.subscribe(RDS, &["9080".to_string()], HashMap::new())
        .await;
    c.drain(Duration::from_millis(500)).await;
    c.held
        .get(RDS)
        .and_then(|m| m.get("9080"))
        .cloned()
        .unwrap_or_else(|| panic!("route configuration 9080 served: {:?}", c.held))
}

fn config_errors(debug: SocketAddr) -> String {
    match support::http_get(debug, "127.0.0.1", "/debug/config_errors", &[]) {
        Ok((200, body)) => body,
        other => panic!("GET /debug/config_errors: {other:?}"),
    }
}

/// Proves D11 at the process level: an invalid edit, `kill -9`, a restart with the same
/// `--state-file` → the last valid VirtualService is still in effect (byte-identical routes)
/// and its file's error is still reported; a restart without the state file loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_valid_version_survives_kill_9_with_a_state_file() {
    let dir = TestDir::new("state-file-restart");
    let config = dir.subdir("config");
    let state = dir.path().join("meshflow-state.json");
    let state_s = state.to_string_lossy().into_owned();
    write_config(&config, "service.yaml", SERVICE);
    write_config(&config, "reviews-vs.yaml", &virtual_service("/reviews"));

    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_s = debug.to_string();
    let args = ["--state-file", &state_s, "--debug-addr", &debug_s];
    let first = Meshflow::start_with_args(&config, dir.path(), &args);
    let valid = route_version(first.xds_addr()).await;

    // The live file turns invalid: the error is reported and the last valid version stays.
    write_config(
        &config,
        "reviews-vs.yaml",
        &virtual_service("/reviews").replace("weight: 100", "weight: lots"),
    );
    assert!(
        wait_until(CONVERGE_TIMEOUT, || config_errors(debug)
            .contains("reviews-vs.yaml")),
        "the invalid edit is reported: {}",
        config_errors(debug)
    );
    assert_eq!(
        route_version(first.xds_addr()).await,
        valid,
        "last valid version in effect"
    );
    assert!(
        wait_until(CONVERGE_TIMEOUT, || std::fs::read_to_string(&state)
            .is_ok_and(|s| s.contains("reviews"))),
        "the state file holds the last valid version"
    );

    // kill -9 (dropping the process handle sends SIGKILL), then a restart on the same files.
    drop(first);
    let second = Meshflow::start_with_args(&config, dir.path(), &args);
    assert_eq!(
        route_version(second.xds_addr()).await,
        valid,
        "after kill -9 and a restart with the state file, the same routes"
    );
    assert!(
        wait_until(CONVERGE_TIMEOUT, || config_errors(debug)
            .contains("reviews-vs.yaml")),
        "and the file is still reported invalid: {}",
        config_errors(debug)
    );
    drop(second);

    // Without the state file the restart starts without the VirtualService, and says so.
    let debug2 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug2_s = debug2.to_string();
    let third = Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug2_s]);
    assert_ne!(
        route_version(third.xds_addr()).await,
        valid,
        "without the state file the invalid object is out"
    );
    assert!(config_errors(debug2).contains("reviews-vs.yaml"));
}
