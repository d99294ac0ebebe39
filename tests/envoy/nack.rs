//! Real-Envoy behaviour when one object would build a resource Envoy rejects.
//!
//! `reviews` and `ratings` share port `<port>`, so both VirtualServices land in the one route
//! configuration `<port>`. A `ratings` route with the regex `/a{150}` is over Envoy's RE2
//! program size limit (100 by default):
//!
//! - as meshflow runs by default, its validation refuses that version of `ratings` before
//!   any proxy sees it (an error naming the object and the field, the last valid version in
//!   effect), so Envoy rejects nothing and an edit of `reviews` on the same port goes
//!   through;
//! - told that proxies accept any program size (`--max-regex-program-size`), meshflow serves
//!   it and Envoy rejects (NACKs) the route configuration: the rejection is named on
//!   `ratings` (not on `reviews`, not on the Sidecar), the proxy keeps what it last accepted,
//!   and nothing is set back or taken out for anyone.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use support::reviews::{count, Binding, Client, Reviews};
use support::{
    free_port, only, require_envoy, wait_until, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// Over Delta ADS: a VirtualService Envoy would reject is refused by validation, so a later
/// edit of another VirtualService on the same port moves real traffic, and Envoy never
/// rejects anything; fixing the refused one applies it and clears its error.
#[test]
fn a_bad_virtual_service_is_refused_before_any_proxy_and_its_siblings_apply() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Delta, 46, false);
}

/// Over Delta ADS with validation told to let the regex through: Envoy rejects the route
/// configuration, the rejection is named on `ratings` alone, nothing is taken out (the log
/// never says so, the debug port still serves `ratings`), Envoy keeps routing by what it
/// last accepted, and the fix is accepted and clears the report.
#[test]
fn an_honest_rejection_is_named_and_nothing_is_taken_out() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Delta, 47, true);
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

fn scenario(envoy_binary: &Path, mode: XdsMode, net: u8, let_through: bool) {
    let dir = TestDir::new("envoy-nack");
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
    let mut args = vec!["--debug-addr", &debug_s];
    if let_through {
        args.extend(["--max-regex-program-size", "100000"]);
    }
    let meshflow = Meshflow::start_with_args(&config_dir, dir.path(), &args);
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

    write_config(&config_dir, "ratings.yaml", &ratings_yaml(port, "/a{150}"));
    if let_through {
        rejected_and_named(&envoy, &node, debug, &route_config);
    } else {
        refused_by_validation(&envoy, debug);
    }

    // 2. An edit of reviews, while ratings' bad file is still there.
    let rejected_before = envoy.rejected_updates();
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    if let_through {
        // The port's route configuration carries the bad ratings route too: Envoy rejects
        // it again and keeps routing by what it last accepted (reviews → v1). Nothing
        // meshflow could do for this proxy without serving it a config the operator did
        // not write; what it must not do is take ratings away from every other proxy.
        let rejected_again = wait_until(CONVERGE_TIMEOUT, || {
            envoy.rejected_updates() > rejected_before
        });
        assert!(rejected_again, "{}", envoy.summary());
        let counts = client.converge(
            "reviews still → v1",
            "/reviews/1",
            &[],
            |c| only(c, "reviews-v1"),
            10,
        );
        assert_eq!(count(&counts, "reviews-v1"), 10, "{counts:?}");
    } else {
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
            0,
            "nothing reached Envoy to reject: {}",
            envoy.summary()
        );
    }

    // 3. Fixing ratings applies it (with the reviews edit), and its report goes.
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
    let counts = client.converge(
        "reviews → v2",
        "/reviews/1",
        &[],
        |c| only(c, "reviews-v2"),
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    let cleared = wait_until(CONVERGE_TIMEOUT, || {
        !errors(debug).iter().any(|e| e.contains("default/ratings"))
    });
    assert!(cleared, "the report is gone: {:?}", errors(debug));
    let log = meshflow.log();
    assert!(
        !log.contains("rolled back") && !log.contains("taken out"),
        "nothing set back"
    );
    drop(meshflow);
}

/// meshflow's validation refused the bad version: an error names the object and the field,
/// and Envoy saw nothing to reject.
fn refused_by_validation(envoy: &Envoy, debug: SocketAddr) {
    let reported = wait_until(CONVERGE_TIMEOUT, || {
        errors(debug)
            .iter()
            .any(|e| e.contains("default/ratings") && e.contains("regex"))
    });
    assert!(
        reported,
        "the regex is refused by name: {:?}",
        errors(debug)
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Envoy rejected the route configuration; the rejection is named on ratings alone, with
/// the proxy, the resource and Envoy's reason, and ratings is still served.
fn rejected_and_named(envoy: &Envoy, node: &ProxyNode, debug: SocketAddr, route_config: &str) {
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
        !all.iter()
            .any(|e| e.contains("default/reviews") || e.contains("Sidecar")),
        "only the object whose change was rejected is named: {all:?}"
    );
    assert!(
        envoy.rejected_updates() >= 1,
        "Envoy did reject: {}",
        envoy.summary()
    );
    // Still served as written: the proxy's route configuration on the debug port has it.
    let served = http_json(debug, &format!("/debug/config_dump?proxy={}", node.id)).to_string();
    assert!(served.contains("a{150}"), "ratings is not taken out");
}
