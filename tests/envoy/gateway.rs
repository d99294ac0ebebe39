//! Real-Envoy behaviour of an ingress gateway fed by meshflow over ADS.
//!
//! A router proxy (`istio: ingressgateway`) selected by Gateway `bookinfo-gateway` serves
//! `reviews.example.com` on a loopback listener; the scenario drives Gateway, VirtualService,
//! DestinationRule, Pod and EndpointSlice changes through meshflow's config directory and checks,
//! by sending HTTP through Envoy to backends that name themselves, that traffic follows each
//! change. It runs once over Delta xDS and once over State-of-the-World.
//!
//! As in Istio, a Gateway routes nothing until a VirtualService is bound to it (404), so the
//! "default route" of this variant is a VirtualService with a single subset-less destination.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;

use support::reviews::{count, http_gateway_yaml, Binding, Client, Reviews};
use support::{
    assert_contains_all, dump_cluster_names, dump_eds_cluster_names, dump_listener_names,
    dump_route_config_names, exactly, free_port, only, require_envoy, write_config, Envoy,
    Meshflow, ProxyNode, TestDir, XdsMode, STARTUP_TIMEOUT,
};

const SERVICE_PORT: u16 = 9080;
const GATEWAY: &str = "bookinfo-gateway";
const HOST: &str = "reviews.example.com";
const JASON: &[(&str, &str)] = &[("end-user", "jason")];

/// Proves that a gateway on Delta ADS follows Gateway/VirtualService/DestinationRule/EndpointSlice
/// edits end to end: 404 without a VirtualService, load balancing over all endpoints, header and
/// prefix matches to subsets, weight shifts, a new subset and its endpoint coming and going,
/// endpoint removal, and VirtualService deletion — with no update rejected by Envoy.
#[test]
fn gateway_follows_config_changes_over_delta_ads() {
    let envoy_bin = require_envoy!();
    gateway_scenario(&envoy_bin, XdsMode::Delta, 41);
}

/// Proves the same gateway behaviour as the Delta test when Envoy speaks State-of-the-World ADS.
#[test]
fn gateway_follows_config_changes_over_sotw_ads() {
    let envoy_bin = require_envoy!();
    gateway_scenario(&envoy_bin, XdsMode::Sotw, 42);
}

/// The whole scenario; `net` selects this run's loopback /24 (`127.0.<net>.0`).
fn gateway_scenario(envoy_binary: &Path, mode: XdsMode, net: u8) {
    let dir = TestDir::new(&format!("envoy-gateway-{}", mode.label()));
    let config_dir = dir.subdir("config");
    let port = free_port();
    let listener = format!("127.0.0.1_{port}");
    let route_config = format!("http.{port}.127.0.0.1");

    let reviews = Reviews::new(net, SERVICE_PORT, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    write_config(
        &config_dir,
        "gateway.yaml",
        &http_gateway_yaml(GATEWAY, port),
    );

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let envoy = Envoy::start(envoy_binary, dir.path(), &node, meshflow.xds_addr(), mode);
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&listener);

    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), HOST);
    let binding = Binding::Gateway {
        gateway: GATEWAY.to_owned(),
        host: HOST.to_owned(),
    };
    let (v1, v2, v3) = ("reviews-v1", "reviews-v2", "reviews-v3");

    // 1. No VirtualService is bound to the Gateway: it routes nothing.
    let counts = client.converge(
        "gateway without VirtualService answers 404",
        "/reviews/1",
        &[],
        |c| only(c, "status 404"),
        20,
    );
    assert_eq!(count(&counts, "status 404"), 20, "{counts:?}");

    // 2. Default route (subset-less): the service's endpoints share the traffic.
    envoy.await_rds_update(&route_config, || reviews.write_plain_routing(&binding));
    let counts = client.converge(
        "plain route reaches v1 and v2",
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

    // 3. Header match first, then a prefix match with a 100/0 split.
    envoy.await_rds_update(&route_config, || {
        reviews.write_subset_routing(&binding, &[("v1", 100), ("v2", 0)])
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
    let other_host = Client::new(
        &envoy,
        SocketAddr::from(([127, 0, 0, 1], port)),
        "other.example.com",
    );
    let counts = other_host.tally(10, "/reviews/1", &[]);
    assert_eq!(count(&counts, "status 404"), 10, "unknown host: {counts:?}");

    // 4. Shift the split to 0/100; time the file edit until Envoy accepts the new routes.
    let latency = envoy.await_rds_update(&route_config, || {
        reviews.write_subset_routing(&binding, &[("v1", 0), ("v2", 100)])
    });
    eprintln!(
        "CONVERGENCE file-edit->envoy-ack: {} ms (gateway, {})",
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

    // 5. A third version: pod, endpoint, subset, then all /reviews traffic to it.
    let v3_backend = reviews.start_backend("v3");
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    reviews.write_subset_routing(&binding, &[("v3", 100)]);
    let counts = client.converge("/reviews → v3", "/reviews/1", &[], |c| only(c, v3), 40);
    assert_eq!(
        count(&counts, v3),
        40,
        "/reviews must reach only v3: {counts:?}"
    );
    let counts = client.tally(10, "/reviews/1", JASON);
    assert_eq!(count(&counts, v2), 10, "jason still reaches v2: {counts:?}");

    // 6. v3's endpoint leaves the slice: its subset has no endpoint left.
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

    // 7. Without a VirtualService the gateway routes nothing again…
    envoy.await_rds_update(&route_config, || reviews.delete_virtual_service());
    let counts = client.converge(
        "VirtualService deleted: 404",
        "/reviews/1",
        &[],
        |c| only(c, "status 404"),
        20,
    );
    assert_eq!(count(&counts, "status 404"), 20, "{counts:?}");

    // 8. …and the default route reaches the remaining endpoints, v1 and v2.
    envoy.await_rds_update(&route_config, || reviews.write_plain_routing(&binding));
    let counts = client.converge(
        "plain route restored",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(
        exactly(&counts, &[v1, v2]),
        "want v1 and v2 only: {counts:?}"
    );

    // 9. v1's endpoint leaves the slice: only v2 is left behind the default route.
    reviews.write_endpoints(&["v2"]);
    let v2_endpoint = format!("{}:{}", reviews.pod_ip("v2"), reviews.backend_port());
    envoy.await_endpoints(&reviews.cluster(""), &[v2_endpoint]);
    let counts = client.converge("only v2 is left", "/reviews/1", &[], |c| only(c, v2), 40);
    assert_eq!(count(&counts, v2), 40, "{counts:?}");

    // 10. Nothing was NACKed, and Envoy holds Istio-named resources.
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
