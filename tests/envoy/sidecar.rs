//! Real-Envoy behaviour of a sidecar fed by meshflow over ADS.
//!
//! A sidecar proxy of pod `client-abc` (`app: client`) is scoped by Sidecar `client`, whose only
//! egress listener binds `127.0.0.1:<port>` (captureMode NONE) and imports `./*`. The `reviews`
//! Service uses that same port, so its routes land in route configuration `<port>`. The scenario
//! drives VirtualService, DestinationRule, Pod and EndpointSlice changes through meshflow's config
//! directory and checks, by sending HTTP through Envoy to backends that name themselves, that
//! traffic follows each change. It runs once over Delta xDS and once over State-of-the-World.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;

use support::reviews::{count, Binding, Client, Reviews, FQDN};
use support::{
    assert_contains_all, dump_cluster_names, dump_eds_cluster_names, dump_listener_names,
    dump_route_config_names, exactly, free_port, only, require_envoy, write_config, Envoy,
    Meshflow, ProxyNode, TestDir, XdsMode, STARTUP_TIMEOUT,
};

const JASON: &[(&str, &str)] = &[("end-user", "jason")];

/// Proves that a sidecar on Delta ADS follows VirtualService/DestinationRule/EndpointSlice edits
/// end to end: the default route balances over all endpoints under every host alias, header and
/// prefix matches pick subsets, weights shift, a new subset and its endpoint come and go,
/// endpoints leave, and deleting the VirtualService restores the default route — with no update
/// rejected by Envoy.
#[test]
fn sidecar_follows_config_changes_over_delta_ads() {
    let envoy_bin = require_envoy!();
    sidecar_scenario(&envoy_bin, XdsMode::Delta, 43);
}

/// Proves the same sidecar behaviour as the Delta test when Envoy speaks State-of-the-World ADS.
#[test]
fn sidecar_follows_config_changes_over_sotw_ads() {
    let envoy_bin = require_envoy!();
    sidecar_scenario(&envoy_bin, XdsMode::Sotw, 44);
}

/// The whole scenario; `net` selects this run's loopback /24 (`127.0.<net>.0`).
fn sidecar_scenario(envoy_binary: &Path, mode: XdsMode, net: u8) {
    let dir = TestDir::new(&format!("envoy-sidecar-{}", mode.label()));
    let config_dir = dir.subdir("config");
    let port = free_port();
    let listener = format!("127.0.0.1_{port}");
    let route_config = port.to_string();

    // The Service port equals the egress listener port, so `reviews` is routed by that listener.
    let reviews = Reviews::new(net, port, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    write_config(
        &config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start(envoy_binary, dir.path(), &node, meshflow.xds_addr(), mode);
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&listener);

    let listener_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let client = Client::new(&envoy, listener_addr, "reviews");
    let (v1, v2, v3) = ("reviews-v1", "reviews-v2", "reviews-v3");

    // 1. No VirtualService: the default route balances over every endpoint of the service.
    let counts = client.converge(
        "default route reaches v1 and v2",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(
        exactly(&counts, &[v1, v2]),
        "want both v1 and v2: {counts:?}"
    );
    assert_eq!(count(&counts, v1) + count(&counts, v2), 40, "{counts:?}");
    for alias in [
        "reviews.default".to_owned(),
        FQDN.to_owned(),
        format!("reviews:{port}"),
        format!("{FQDN}:{port}"),
    ] {
        let counts = Client::new(&envoy, listener_addr, &alias).tally(8, "/", &[]);
        assert_eq!(
            count(&counts, v1) + count(&counts, v2),
            8,
            "Host {alias} must reach reviews: {counts:?}"
        );
    }
    let dump = envoy.config_dump();
    assert_contains_all(
        "EDS assignments",
        &dump_eds_cluster_names(&dump),
        &[
            reviews.cluster(""),
            reviews.cluster("v1"),
            reviews.cluster("v2"),
        ],
    );

    // 2. Header match first, then a prefix match with a 100/0 split.
    envoy.await_rds_update(&route_config, || {
        reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)])
    });
    let counts = client.converge("jason → v2", "/reviews/1", JASON, |c| only(c, v2), 20);
    assert_eq!(
        count(&counts, v2),
        20,
        "jason must always reach v2: {counts:?}"
    );
    let counts = client.converge("/reviews → v1", "/reviews/1", &[], |c| only(c, v1), 40);
    assert_eq!(
        count(&counts, v1),
        40,
        "/reviews must always reach v1: {counts:?}"
    );
    let counts = client.tally(10, "/ratings/1", &[]);
    assert_eq!(
        count(&counts, "status 404"),
        10,
        "unmatched path: {counts:?}"
    );

    // 3. Shift the split to 0/100; time the file edit until Envoy accepts the new routes.
    let latency = envoy.await_rds_update(&route_config, || {
        reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)])
    });
    eprintln!(
        "CONVERGENCE file-edit->envoy-ack: {} ms (sidecar, {})",
        latency.as_millis(),
        mode.label()
    );
    let counts = client.converge(
        "/reviews moves to v2",
        "/reviews/1",
        &[],
        |c| only(c, v2),
        40,
    );
    assert_eq!(
        count(&counts, v2),
        40,
        "/reviews must now reach only v2: {counts:?}"
    );

    // 4. A third version: pod, endpoint, subset, then all /reviews traffic to it.
    let v3_backend = reviews.start_backend("v3");
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let counts = client.converge("/reviews → v3", "/reviews/1", &[], |c| only(c, v3), 40);
    assert_eq!(
        count(&counts, v3),
        40,
        "/reviews must reach only v3: {counts:?}"
    );
    let counts = client.tally(10, "/reviews/1", JASON);
    assert_eq!(count(&counts, v2), 10, "jason still reaches v2: {counts:?}");

    // 5. v3's endpoint leaves the slice: its subset has no endpoint left.
    reviews.write_endpoints(&["v1", "v2"]);
    let counts = client.converge(
        "v3 without endpoints answers 503",
        "/reviews/1",
        &[],
        |c| only(c, "status 503"),
        20,
    );
    assert_eq!(count(&counts, "status 503"), 20, "{counts:?}");
    let served_by_v3 = v3_backend.requests_served();
    let counts = client.tally(10, "/reviews/1", &[]);
    assert_eq!(count(&counts, v3), 0, "{counts:?}");
    assert_eq!(
        v3_backend.requests_served(),
        served_by_v3,
        "v3 still gets traffic after its endpoint was removed"
    );

    // 6. Deleting the VirtualService restores the default route over the remaining endpoints.
    envoy.await_rds_update(&route_config, || reviews.delete_virtual_service());
    let counts = client.converge(
        "default route restored",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(
        exactly(&counts, &[v1, v2]),
        "want v1 and v2 only: {counts:?}"
    );

    // 7. v1's endpoint leaves the slice: the default route only reaches v2.
    reviews.write_endpoints(&["v2"]);
    let v2_endpoint = format!("{}:{}", reviews.pod_ip("v2"), reviews.backend_port());
    envoy.await_endpoints(&reviews.cluster(""), &[v2_endpoint]);
    let counts = client.converge("only v2 is left", "/reviews/1", &[], |c| only(c, v2), 40);
    assert_eq!(count(&counts, v2), 40, "{counts:?}");

    // 8. Nothing was NACKed, and Envoy holds Istio-named resources.
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy rejected updates: {:?}",
        envoy.rejected_update_stats()
    );
    let dump = envoy.config_dump();
    assert_contains_all(
        "clusters",
        &dump_cluster_names(&dump),
        &["", "v1", "v2", "v3"].map(|subset| reviews.cluster(subset)),
    );
    assert_contains_all("listeners", &dump_listener_names(&dump), &[listener]);
    assert_contains_all(
        "route configurations",
        &dump_route_config_names(&dump),
        &[route_config],
    );
}
