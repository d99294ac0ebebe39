//! Real-Envoy behaviour when one object builds a resource Envoy rejects: the object is set back
//! (a new one taken out) so that every other object sharing the resource keeps reaching the
//! proxy, and the rejection is reported on the object with Envoy's own message.
//!
//! `reviews` and `ratings` share port `<port>`, so both VirtualServices land in the one route
//! configuration `<port>`. meshflow is told the proxies accept RE2 programs of any size
//! (`--max-regex-program-size`), which this Envoy (default limit 100) does not: a `ratings`
//! route with the regex `/a{150}` passes meshflow's validation and Envoy NACKs it.

mod support;

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use support::reviews::{count, Binding, Client, Reviews};
use support::{
    free_port, only, require_envoy, wait_until, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// Proves, over Delta ADS, that a VirtualService Envoy rejects does not hold back a later edit
/// of another VirtualService on the same port: the rejected one is taken out and reported
/// (object, proxy, Envoy's message) on the debug port, the other's edit moves real traffic,
/// and fixing the rejected one applies it and clears the report.
#[test]
fn a_rejected_virtual_service_is_set_back_and_others_on_its_port_still_apply() {
    let envoy_bin = require_envoy!();
    rollback_scenario(&envoy_bin, XdsMode::Delta, 46);
}

/// The `ratings` Service on the same port as `reviews`, and its VirtualService with `uri`.
fn ratings_yaml(port: u16, regex: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata:
  name: ratings
  namespace: default
spec:
  ports:
  - name: http
    port: {port}
  selector:
    app: ratings
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
  namespace: default
spec:
  hosts:
  - ratings
  http:
  - match:
    - uri:
        regex: \"{regex}\"
    route:
    - destination:
        host: ratings
"
    )
}

fn http_json(addr: SocketAddr, path: &str) -> Value {
    match support::http_get(addr, "127.0.0.1", path, &[]) {
        Ok((200, body)) => serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}")),
        other => panic!("GET {path}: {other:?}"),
    }
}

fn errors(debug: SocketAddr) -> Vec<String> {
    let json: Value = http_json(debug, "/debug/config_errors");
    let mut out = Vec::new();
    collect_strings(&json, &mut out);
    out
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

fn rollback_scenario(envoy_binary: &Path, mode: XdsMode, net: u8) {
    let dir = TestDir::new("envoy-rollback");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let route_config = port.to_string();
    let reviews = Reviews::new(net, port, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    write_config(
        &config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_s = debug.to_string();
    let meshflow = Meshflow::start_with_args(
        &config_dir,
        dir.path(),
        &[
            "--debug-addr",
            &debug_s,
            "--max-regex-program-size",
            "100000",
        ],
    );
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start(envoy_binary, dir.path(), &node, meshflow.xds_addr(), mode);
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("127.0.0.1_{port}"));
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews");
    let counts = client.converge(
        "reviews → v1",
        "/reviews/1",
        &[],
        |c| only(c, "reviews-v1"),
        10,
    );
    assert_eq!(count(&counts, "reviews-v1"), 10, "{counts:?}");

    // 1. The bad ratings VirtualService: Envoy rejects the port's route configuration, and
    //    meshflow takes ratings out and says why, with Envoy's message.
    write_config(&config_dir, "ratings.yaml", &ratings_yaml(port, "/a{150}"));
    let reported = wait_until(CONVERGE_TIMEOUT, || {
        errors(debug)
            .iter()
            .any(|e| e.starts_with("VirtualService default/ratings: rejected by proxy"))
    });
    let all = errors(debug);
    assert!(
        reported,
        "the rejection reported on the object: {all:?}\n{}",
        envoy.summary()
    );
    let report = all
        .iter()
        .find(|e| e.starts_with("VirtualService default/ratings"))
        .cloned()
        .unwrap_or_default();
    assert!(
        report.contains(&node.id)
            && report.contains(&format!("RDS {route_config}"))
            && report.contains("program size"),
        "names the proxy, the resource and Envoy's reason: {report}"
    );
    assert!(
        envoy.rejected_updates() >= 1,
        "Envoy did reject: {}",
        envoy.summary()
    );
    // Envoy takes the route configuration without ratings again.
    let without_ratings = wait_until(CONVERGE_TIMEOUT, || {
        !envoy
            .admin_get("/config_dump?resource=dynamic_route_configs")
            .contains("/a{150}")
            && envoy.rds_stat(&route_config, "update_success").unwrap_or(0) >= 2
    });
    assert!(
        without_ratings,
        "route configuration re-sent without ratings:\n{}",
        envoy.summary()
    );

    // 2. An edit of reviews, while ratings' bad file is still there, reaches Envoy.
    let rejected_before = envoy.rejected_updates();
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let counts = client.converge(
        "reviews → v2",
        "/reviews/1",
        &[],
        |c| only(c, "reviews-v2"),
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    assert_eq!(
        envoy.rejected_updates(),
        rejected_before,
        "nothing rejected after the setback: {}",
        envoy.summary()
    );

    // 3. Fixing ratings applies it, and its report goes.
    write_config(
        &config_dir,
        "ratings.yaml",
        &ratings_yaml(port, "/ratings/[0-9]+"),
    );
    let applied = wait_until(CONVERGE_TIMEOUT, || {
        envoy
            .admin_get("/config_dump?resource=dynamic_route_configs")
            .contains("/ratings/[0-9]+")
    });
    assert!(
        applied,
        "the fixed ratings route reaches Envoy:\n{}",
        envoy.summary()
    );
    let cleared = wait_until(CONVERGE_TIMEOUT, || {
        !errors(debug).iter().any(|e| e.contains("default/ratings"))
    });
    assert!(cleared, "the report is gone: {:?}", errors(debug));
    assert_eq!(
        envoy.rejected_updates(),
        rejected_before,
        "{}",
        envoy.summary()
    );
    drop(meshflow);
}
