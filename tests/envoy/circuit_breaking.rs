//! Istio's circuit-breaking task in real Envoy: a DestinationRule's `connectionPool` limits
//! become the cluster's circuit breakers (Envoy's own `/clusters` reports them), and
//! `outlierDetection` ejects an endpoint that fails: with one pod down, after one failed
//! connection Envoy marks it `failed_outlier_check` and every request is answered by the
//! other pod.

use crate::support;

use support::reviews::count;
use support::{converge, only, require_envoy, SidecarScene, CONVERGE_TIMEOUT};

#[test]
fn connection_pool_limits_and_outlier_ejection_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-circuit-breaking", 50, &[], |_| {});
    let policy = "  trafficPolicy:\n    connectionPool:\n      tcp: {maxConnections: 7, connectTimeout: 1s}\n      http: {http1MaxPendingRequests: 3, maxRetries: 2, maxRequestsPerConnection: 10}\n    outlierDetection:\n      consecutiveGatewayErrors: 1\n      interval: 1s\n      baseEjectionTime: 5m\n      maxEjectionPercent: 100\n";
    scene
        .reviews
        .write_destination_rule_with_policy(&["v1", "v2"], policy);
    let cluster = scene.reviews.cluster("");
    let limits = [
        format!("{cluster}::default_priority::max_connections::7"),
        format!("{cluster}::default_priority::max_pending_requests::3"),
        format!("{cluster}::default_priority::max_retries::2"),
    ];
    converge(
        "Envoy holds the limits",
        CONVERGE_TIMEOUT,
        || scene.envoy.admin_get("/clusters"),
        |text| limits.iter().all(|l| text.contains(l.as_str())),
        || scene.envoy.summary(),
    );

    // Pod v2 goes away without leaving the endpoint list: its connections are refused.
    let SidecarScene {
        envoy, v2, reviews, ..
    } = scene;
    let v2_host = format!(
        "{cluster}::{}:{}",
        reviews.pod_ip("v2"),
        reviews.backend_port()
    );
    drop(v2);
    let client = support::reviews::Client::new(
        &envoy,
        std::net::SocketAddr::from(([127, 0, 0, 1], reviews.service_port())),
        "reviews",
    );
    converge(
        "v2 is ejected",
        CONVERGE_TIMEOUT,
        || {
            client.tally(4, "/reviews/1", &[]);
            envoy.admin_get("/clusters")
        },
        |text| {
            text.lines().any(|l| {
                l.starts_with(&format!("{v2_host}::health_flags::"))
                    && l.contains("failed_outlier_check")
            })
        },
        || envoy.summary(),
    );
    let counts = client.tally(20, "/reviews/1", &[]);
    assert!(only(&counts, "reviews-v1"), "{counts:?}");
    assert_eq!(count(&counts, "reviews-v1"), 20);
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "{:?}",
        envoy.rejected_update_stats()
    );
}
