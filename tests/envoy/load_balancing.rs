//! DestinationRule load balancing in real Envoy: `consistentHash` by a header keeps every
//! request of one user on one pod (the route hashes the header, the cluster is a ring), users
//! spread over both pods, and a VirtualService route to a subset hashes as well; replacing the hash by `ROUND_ROBIN` with a `warmup` drops the hash from the route and
//! gives the cluster Envoy's slow start.

use crate::support;

use std::collections::BTreeSet;

use support::reviews::{count, Binding, Client};
use support::{converge, require_envoy, SidecarScene, CONVERGE_TIMEOUT};

/// Which pods answered each of `users`, over `n` requests each.
fn pods_per_user(client: &Client, users: &[String], n: usize) -> Vec<BTreeSet<String>> {
    users
        .iter()
        .map(|u| {
            client
                .tally(n, "/reviews/1", &[("x-user", u)])
                .into_keys()
                .collect()
        })
        .collect()
}

#[test]
fn consistent_hash_and_warmup_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-load-balancing", 54, &[], |_| {});
    let client = Client::new(&scene.envoy, scene.listener(), "reviews");
    scene.reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    loadBalancer:\n      consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 2048}}\n",
    );
    let cluster = scene.reviews.cluster("");
    converge(
        "the route hashes x-user and the cluster is a ring",
        CONVERGE_TIMEOUT,
        || scene.envoy.admin_get("/config_dump"),
        |dump| {
            dump.contains("\"header_name\": \"x-user\"")
                && dump.contains("\"lb_policy\": \"RING_HASH\"")
                && dump.contains("\"minimum_ring_size\": \"2048\"")
        },
        || scene.envoy.summary(),
    );
    let users: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    let seen = pods_per_user(&client, &users, 6);
    for (u, pods) in users.iter().zip(&seen) {
        assert_eq!(pods.len(), 1, "{u} stays on one pod: {pods:?}");
        assert!(pods.iter().all(|p| p.starts_with("reviews-")), "{pods:?}");
    }
    let all: BTreeSet<&String> = seen.iter().flatten().collect();
    assert_eq!(all.len(), 2, "16 users spread over both pods: {all:?}");

    // A VirtualService route to subset v2: the subset's cluster hashes by the rule's key.
    scene
        .reviews
        .write_subset_routing(&Binding::Mesh, &[("v2", 100)]);
    let counts = client.converge(
        "the route to v2 is in place",
        "/reviews/1",
        &[("x-user", "a")],
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    converge(
        "the subset's route hashes too",
        CONVERGE_TIMEOUT,
        || {
            scene
                .envoy
                .admin_get("/config_dump?resource=dynamic_route_configs")
        },
        |dump| dump.contains("\"header_name\": \"x-user\"") && dump.contains("|v2|"),
        || scene.envoy.summary(),
    );

    // Round robin with a warmup: no hash on the routes, slow start on the clusters.
    scene.reviews.delete_virtual_service();
    scene.reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    loadBalancer:\n      simple: ROUND_ROBIN\n      warmup: {duration: 45s, minimumPercent: 20}\n",
    );
    converge(
        "slow start replaces the ring",
        CONVERGE_TIMEOUT,
        || scene.envoy.admin_get("/config_dump"),
        |dump| {
            dump.contains("\"slow_start_window\": \"45s\"")
                && dump.contains("\"min_weight_percent\"")
                && !dump.contains("\"header_name\": \"x-user\"")
                && !dump.contains("RING_HASH")
        },
        || scene.envoy.summary(),
    );
    let counts = client.tally(20, "/reviews/1", &[("x-user", "a")]);
    assert!(
        count(&counts, "reviews-v1") > 0 && count(&counts, "reviews-v2") > 0,
        "one user reaches both pods again: {counts:?} ({cluster})"
    );
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{:?}",
        scene.envoy.rejected_update_stats()
    );
}
