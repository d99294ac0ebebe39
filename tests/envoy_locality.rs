//! Istio's locality failover in real Envoy: a client sidecar in region `r1`, zone `z1`
//! (its node's locality), `reviews` with a pod in `r1/z1` and one in `r2/z2`, and a
//! DestinationRule with `outlierDetection`. Envoy holds the local pod at priority 0 and the
//! remote one at priority 1, so every request goes to the local pod; once the local pod
//! stops answering, outlier detection ejects it and every request fails over to the remote
//! one.

mod support;

use serde_json::json;
use support::reviews::{client_sidecar_yaml, count, Client, Reviews};
use support::{
    converge, free_port, only, require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

#[test]
fn locality_failover_prefers_the_local_pod_then_fails_over_in_envoy() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-locality");
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(83, port, &config);
    let local = reviews.start_backend("v1");
    let _remote = reviews.start_backend("v2");
    reviews.write_service();
    reviews.write_pods_placed(&[("v1", "r1.z1"), ("v2", "r2.z2")]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    outlierDetection:\n      consecutiveGatewayErrors: 1\n      \
         interval: 1s\n      baseEjectionTime: 5m\n      maxEjectionPercent: 100\n",
    );
    write_config(&config, "sidecar.yaml", &client_sidecar_yaml(port));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
        |b| b["node"]["locality"] = json!({"region": "r1", "zone": "z1"}),
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("127.0.0.1_{port}"));

    // The local pod at priority 0, the remote one at priority 1, as Envoy reports them.
    let cluster = reviews.cluster("");
    let host = |v: &str| {
        format!(
            "{cluster}::{}:{}",
            reviews.pod_ip(v),
            reviews.backend_port()
        )
    };
    let (local_host, remote_host) = (host("v1"), host("v2"));
    converge(
        "Envoy holds the endpoints by priority",
        CONVERGE_TIMEOUT,
        || envoy.admin_get("/clusters"),
        |text| {
            text.contains(&format!("{local_host}::priority::0"))
                && text.contains(&format!("{remote_host}::priority::1"))
        },
        || envoy.summary(),
    );
    let client = Client::new(
        &envoy,
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "reviews",
    );
    // Without locality load balancing, requests would go to both pods.
    let counts = client.tally(20, "/reviews/1", &[]);
    assert!(only(&counts, "reviews-v1"), "{counts:?}");
    assert_eq!(count(&counts, "reviews-v1"), 20);

    // The local pod stops answering: ejected, and the remote region takes every request.
    drop(local);
    let counts = client.converge(
        "requests fail over to r2/z2",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v2") == 10,
        20,
    );
    assert!(only(&counts, "reviews-v2"), "{counts:?}");
    assert_eq!(count(&counts, "reviews-v2"), 20);
    let clusters = envoy.admin_get("/clusters");
    assert!(
        clusters
            .lines()
            .any(|l| l.starts_with(&format!("{local_host}::health_flags::"))
                && l.contains("failed_outlier_check")),
        "the local pod is ejected by outlier detection"
    );
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "{:?}",
        envoy.rejected_update_stats()
    );
}
