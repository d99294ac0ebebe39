//! The debug port against a real Envoy: what `meshflow proxy-status`, `meshflow proxy-config`
//! and `/debug/config_dump` say a sidecar holds must be what Envoy's own admin `/config_dump`
//! says it holds, and a NACK Envoy sends for a route it cannot compile must show up in
//! `proxy-status` with Envoy's message. Runs over Delta and over State-of-the-World ADS.
//!
//! The mesh is the `reviews` fixture (Service, Pods v1/v2, EndpointSlice, DestinationRule,
//! VirtualService) and a Sidecar `client` with one egress listener on `127.0.0.1:<port>`.

use crate::support;

use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;

use support::reviews::{Binding, Reviews};
use support::{
    dump_cluster_names, dump_endpoints, dump_listener_names, dump_route_config_names, free_port,
    meshflow_cli, require_envoy, wait_until, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// Proves that, with Envoy on Delta ADS, proxy-status shows it SYNCED for every type,
/// proxy-config and the config dump list exactly what Envoy holds (cluster fields and
/// versions equal), and Envoy's NACK of a bad route shows up with its message.
#[test]
fn debug_views_match_envoy_over_delta_ads() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Delta, 48);
}

/// The same over State-of-the-World ADS.
#[test]
fn debug_views_match_envoy_over_sotw_ads() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Sotw, 49);
}

/// Table rows (after the header) split on runs of two or more spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

fn http_json(addr: SocketAddr, path: &str) -> Value {
    match support::http_get(addr, "127.0.0.1", path, &[]) {
        Ok((200, body)) => serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}")),
        other => panic!("GET {path}: {other:?}"),
    }
}

/// `dynamic_active_clusters` of a config dump (Envoy's or meshflow's), by cluster name.
fn dump_clusters(dump: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["@type"]
                .as_str()
                .is_some_and(|t| t.ends_with("ClustersConfigDump"))
        })
        .flat_map(|s| {
            s["dynamic_active_clusters"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .map(|c| {
            (
                c["cluster"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c.clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn scenario(envoy_binary: &Path, mode: XdsMode, net: u8) {
    let dir = TestDir::new(&format!("debug-envoy-{}", mode.label()));
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(net, port, &config_dir);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 90), ("v2", 10)]);
    write_config(
        &config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );

    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_s = debug.to_string();
    // Meshflow is told the proxies allow RE2 programs of any size (they do not: Envoy's
    // default limit is 100), so a regex over the limit reaches Envoy and is NACKed; and it
    // keeps the rejected version in effect, so the NACK stays to be seen.
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
    let route_config = port.to_string();
    let v1 = reviews.cluster("v1");
    envoy.await_endpoints(
        &v1,
        &[format!(
            "{}:{}",
            reviews.pod_ip("v1"),
            reviews.backend_port()
        )],
    );
    let status_args = ["proxy-status", "--debug-addr", &debug_s];

    // proxy-status: SYNCED for every type once Envoy has ACKed everything, SDS included:
    // auto mTLS clusters name the workload certificate and root, which Envoy subscribes to.
    let mut status = String::new();
    let synced = wait_until(CONVERGE_TIMEOUT, || {
        status = meshflow_cli(&status_args);
        rows(&status)
            .iter()
            .find(|r| r.first() == Some(&node.id))
            .is_some_and(|r| {
                r.len() == 7
                    && r[2..6].iter().all(|c| c.starts_with("SYNCED"))
                    && r[6] == "SYNCED (2)"
            })
    });
    assert!(synced, "proxy-status never showed all SYNCED:\n{status}");
    let json: Value =
        serde_json::from_str(&meshflow_cli(&[&status_args[..], &["-o", "json"]].concat()))
            .expect("JSON");
    let me = &json["proxies"][0];
    assert_eq!(me["id"], node.id.as_str());
    for t in ["CDS", "EDS", "LDS", "RDS"] {
        assert_eq!(me["types"][t]["sync"], "SYNCED", "{t}: {json}");
        assert!(me["types"][t]["last_nack"].is_null(), "{t}: {json}");
    }

    let dump = envoy.config_dump();
    let pod = "client-abc.default";
    let config = |kind: &str| meshflow_cli(&["proxy-config", kind, pod, "--debug-addr", &debug_s]);

    // proxy-config cluster lists exactly the clusters in Envoy's config dump.
    let clusters = config("cluster");
    let mut names: Vec<String> = rows(&clusters).into_iter().map(|r| r[0].clone()).collect();
    names.sort();
    assert_eq!(names, dump_cluster_names(&dump), "{clusters}");
    let v1_row = rows(&clusters)
        .into_iter()
        .find(|r| r[0] == v1)
        .expect("v1 row");
    assert_eq!(v1_row[1], "EDS");

    // Listeners, route configurations, endpoints: the same as Envoy's.
    let listeners = config("listener");
    let mut names: Vec<String> = rows(&listeners).into_iter().map(|r| r[0].clone()).collect();
    names.sort();
    assert_eq!(names, dump_listener_names(&dump), "{listeners}");
    assert!(
        listeners.contains(&format!("Route: {route_config}")),
        "{listeners}"
    );
    let routes = config("route");
    let mut names: Vec<String> = rows(&routes).into_iter().map(|r| r[0].clone()).collect();
    names.dedup();
    assert_eq!(names, dump_route_config_names(&dump), "{routes}");
    let endpoints = config("endpoint");
    let mut v1_eps: Vec<String> = rows(&endpoints)
        .into_iter()
        .filter(|r| r.last() == Some(&v1))
        .map(|r| r[0].clone())
        .collect();
    v1_eps.sort();
    assert_eq!(v1_eps, dump_endpoints(&dump, &v1), "{endpoints}");

    // /debug/config_dump: every cluster equals Envoy's on name, type and eds_cluster_config
    // (Envoy adds nothing there); over Delta the versions are the same too.
    let ours = http_json(debug, &format!("/debug/config_dump?proxy={pod}"));
    let (ours, theirs) = (dump_clusters(&ours), dump_clusters(&dump));
    assert_eq!(
        ours.iter().map(|c| &c.0).collect::<Vec<_>>(),
        theirs.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    for ((name, mine), (_, envoys)) in ours.iter().zip(&theirs) {
        for field in ["@type", "name", "type", "eds_cluster_config"] {
            assert_eq!(
                mine["cluster"][field], envoys["cluster"][field],
                "{name}: {field} differs\nmeshflow: {mine}\nenvoy: {envoys}"
            );
        }
        assert_eq!(
            mine["cluster"]["connect_timeout"],
            envoys["cluster"]["connect_timeout"]
        );
        if mode == XdsMode::Delta {
            assert_eq!(mine["version_info"], envoys["version_info"], "{name}");
        }
    }
    assert!(
        ours.iter()
            .any(|(_, c)| c["cluster"]["eds_cluster_config"].is_object()),
        "EDS clusters compared"
    );

    // A route Envoy cannot compile (RE2 program larger than Envoy's limit of 100): Envoy
    // NACKs RDS and proxy-status shows it, with Envoy's message.
    reviews.write(
        "reviews-virtualservice.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: default
spec:
  hosts:
  - reviews
  http:
  - match:
    - uri:
        regex: \"/a{150}\"
    route:
    - destination:
        host: reviews
        subset: v2
  - route:
    - destination:
        host: reviews
        subset: v1
",
    );
    let nacked = wait_until(CONVERGE_TIMEOUT, || {
        status = meshflow_cli(&status_args);
        rows(&status)
            .iter()
            .find(|r| r.first() == Some(&node.id))
            .is_some_and(|r| r.get(5).is_some_and(|c| c.starts_with("NACKED")))
    });
    assert!(
        nacked,
        "proxy-status never showed RDS NACKED:\n{status}\n{}",
        envoy.summary()
    );
    assert!(envoy.rejected_updates() >= 1, "Envoy rejected the update");
    let nack_line = status
        .lines()
        .find(|l| l.starts_with(&format!("NACK {} RDS: ", node.id)))
        .unwrap_or_else(|| panic!("a NACK line:\n{status}"));
    assert!(
        nack_line.contains("/a{150}") && nack_line.contains("program size"),
        "Envoy's own message: {nack_line}"
    );
    let row = rows(&status)
        .into_iter()
        .find(|r| r.first() == Some(&node.id))
        .expect("row");
    for cell in &row[2..5] {
        assert!(cell.starts_with("SYNCED"), "only RDS is NACKED:\n{status}");
    }
    let json: Value =
        serde_json::from_str(&meshflow_cli(&[&status_args[..], &["-o", "json"]].concat()))
            .expect("JSON");
    let message = json["proxies"][0]["types"]["RDS"]["last_nack"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(nack_line.ends_with(&message), "{message}");

    // `meshflow diff` of the proxy's last change: the route configuration that Envoy
    // refused, field by field, marked NACKED with Envoy's message; the VirtualService edit
    // is the epoch's input change.
    let diff = meshflow_cli(&["diff", &node.id, "--debug-addr", &debug_s]);
    assert!(
        diff.contains("NACKED by the proxy") && diff.contains("program size"),
        "diff shows the NACK with Envoy's message:\n{diff}"
    );
    assert!(
        diff.lines().any(|l| l.starts_with("~ RDS ")),
        "a modified route configuration:\n{diff}"
    );
    assert!(
        diff.lines()
            .any(|l| l.trim_start().starts_with("+ ") && l.contains("/a{150}")),
        "the new regex as a + line:\n{diff}"
    );
    assert!(
        diff.contains("VirtualService default/reviews update")
            && diff.contains("reviews-virtualservice.yaml"),
        "the input change behind the epoch:\n{diff}"
    );
    let json: Value = serde_json::from_str(&meshflow_cli(&[
        "diff",
        &node.id,
        "--debug-addr",
        &debug_s,
        "-o",
        "json",
    ]))
    .expect("diff JSON");
    let rds = json["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["type"] == "RDS"))
        .unwrap_or_else(|| panic!("an RDS resource in {json}"));
    assert!(
        rds["fields"]
            .as_array()
            .is_some_and(|fs| fs.iter().any(|f| f["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("virtual_hosts[name="))
                && f["new"].to_string().contains("/a{150}"))),
        "the route with the regex among the changed paths: {rds}"
    );
    assert!(
        rds["deliveries"].as_array().is_some_and(|ds| ds
            .iter()
            .any(|d| d["state"] == "NACKED" && d["nack"].as_str() == Some(message.as_str()))),
        "the NACK recorded with Envoy's message: {rds}"
    );
}
