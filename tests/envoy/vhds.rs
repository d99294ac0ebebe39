//! VHDS with real Envoy (`serve --vhds`): the route configuration of the sidecar's bound
//! listener arrives without virtual hosts and with `vhds` over ADS; Envoy subscribes to
//! `envoy.config.route.v3.VirtualHost` on its Delta ADS stream and routes through the
//! virtual hosts that arrive as resources of their own (`ROUTE/HOST`). A VirtualService
//! weight shift then reaches Envoy as a VHDS update with no RDS update, and a protocol
//! client on the same server sees it as exactly one VirtualHost resource.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::route::v3::VirtualHost;
use prost::Message;
use serde_json::Value;
use support::reviews::{count, Binding, Client};
use support::xds_client::{self, DeltaClient, RDS};
use support::{require_envoy, wait_until, SidecarScene, CONVERGE_TIMEOUT};

const VHOST: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";

/// The dynamic route configuration `name` of `/config_dump?resource=dynamic_route_configs`
/// (one `DynamicRouteConfig` per entry of `configs`).
fn dumped_route<'a>(dump: &'a Value, name: &str) -> Option<&'a Value> {
    dump["configs"]
        .as_array()?
        .iter()
        .map(|c| &c["route_config"])
        .find(|rc| rc["name"] == name)
}

fn vhost_names(rc: &Value) -> Vec<String> {
    rc["virtual_hosts"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|vh| vh["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn vhds_over_delta_ads_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-vhds", 76, &["--vhds"], |_| {});
    let envoy = &scene.envoy;
    let client = Client::new(envoy, scene.listener(), "reviews");
    let route = scene.port.to_string();
    let vhost = format!("{route}/reviews.default.svc.cluster.local:{route}");

    // Both versions serve first: a sample of v1 alone must come from the routing below,
    // not from v2's endpoint not being known yet.
    client.converge(
        "both versions answer",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v1") > 0 && count(c, "reviews-v2") > 0,
        10,
    );
    // Routing through a virtual host that only VHDS delivered.
    scene
        .reviews
        .write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    let counts = client.converge(
        "all of /reviews goes to v1",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v1") == 10,
        10,
    );
    assert_eq!(count(&counts, "reviews-v1"), 10, "{counts:?}");
    let dump = envoy.admin_get("/config_dump?resource=dynamic_route_configs");
    let dump: Value = serde_json::from_str(&dump).expect("config dump is JSON");
    let rc = dumped_route(&dump, &route)
        .unwrap_or_else(|| panic!("route configuration {route} in {dump:#}"));
    assert!(
        rc["vhds"]["config_source"]["ads"].is_object(),
        "the route configuration points at ADS for its virtual hosts: {rc:#}"
    );
    let names = vhost_names(rc);
    assert!(
        names.contains(&vhost),
        "Envoy holds {vhost} from VHDS: {names:?}"
    );
    assert!(
        names.iter().all(|n| n.starts_with(&format!("{route}/"))),
        "every virtual host came by VHDS (named ROUTE/HOST): {names:?}"
    );
    let vhds_stats = || envoy.stats(Some("vhds"));
    let reloads = |stats: &std::collections::BTreeMap<String, u64>| -> u64 {
        stats
            .iter()
            .filter(|(k, _)| k.ends_with(&format!("vhds.{route}.config_reload")))
            .map(|(_, v)| *v)
            .sum()
    };
    let vhds_before = reloads(&vhds_stats());
    assert!(vhds_before >= 1, "VHDS updates counted: {:?}", vhds_stats());
    let rds_before = envoy.rds_stat(&route, "update_success").unwrap_or(0);

    // A protocol client on the same server, with the same Sidecar: what goes on the wire.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut xds = rt.block_on(async {
        let node = xds_client::node(
            "sidecar~127.0.76.30~client-vhds.default~default.svc.cluster.local",
            "default",
            &[("app", "client")],
        );
        let mut c = DeltaClient::connect(scene.meshflow.xds_addr(), node).await;
        c.sync().await;
        c.subscribe(RDS, std::slice::from_ref(&route), HashMap::new())
            .await;
        let r = c.recv(Duration::from_secs(10)).await.expect("RDS response");
        assert_eq!(r.type_url, RDS);
        c.subscribe(VHOST, std::slice::from_ref(&route), HashMap::new())
            .await;
        c.drain(Duration::from_millis(500)).await;
        c
    });
    let vhosts = xds.names(VHOST);
    assert!(
        vhosts.contains(&vhost),
        "the client holds {vhost}: {vhosts:?}"
    );

    // The weight shift (100/0 → 0/100): one VirtualHost resource, no RouteConfiguration.
    let bytes_before = xds.bytes;
    scene
        .reviews
        .write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let counts = client.converge(
        "all of /reviews goes to v2",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    let responses = rt.block_on(xds.drain(Duration::from_millis(1500)));
    let kinds: Vec<(String, Vec<String>)> = responses
        .iter()
        .map(|r| {
            (
                r.type_url.clone(),
                r.resources.iter().map(|x| x.name.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![(VHOST.to_string(), vec![vhost.clone()])],
        "the weight shift is one VirtualHost resource"
    );
    let sent = &responses[0].resources[0];
    let vh = VirtualHost::decode(
        &sent
            .resource
            .as_ref()
            .expect("the virtual host's body")
            .value[..],
    )
    .expect("a VirtualHost");
    assert_eq!(vh.name, vhost, "the virtual host is named as its resource");
    assert!(xds.bytes > bytes_before);

    assert!(
        wait_until(CONVERGE_TIMEOUT, || reloads(&vhds_stats()) > vhds_before),
        "Envoy counted the VHDS update: {:?}",
        vhds_stats()
    );
    assert_eq!(
        envoy.rds_stat(&route, "update_success").unwrap_or(0),
        rds_before,
        "no RDS update for the weight shift"
    );
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "{:?}",
        envoy.rejected_update_stats()
    );
}
