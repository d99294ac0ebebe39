//! Istio's locality failover in real Envoy (and `failoverPriority`, and a DNS ServiceEntry's
//! hosts, and a Service's `trafficDistribution: PreferClose`, below): a client sidecar in region `r1`, zone `z1` (its node's locality), `reviews` with a pod in `r1/z1` and one in `r2/z2`, and a
//! DestinationRule with `outlierDetection`. Envoy holds the local pod at priority 0 and the
//! remote one at priority 1, so every request goes to the local pod; once the local pod
//! stops answering, outlier detection ejects it and every request fails over to the remote
//! one.

use crate::support;

use serde_json::json;
use support::reviews::{client_sidecar_yaml, count, Client, Reviews};
use support::{
    converge, free_port, only, require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

#[test]
fn locality_failover_prefers_the_local_pod_then_fails_over_in_envoy() {
    fails_over_in_envoy(
        "envoy-locality",
        &[("v1", "r1.z1"), ("v2", "r2.z2")],
        "",
        &[("app", "client")],
        ("v1", "v2"),
        Registry::Pods,
    );
}

/// The same failover for a DNS ServiceEntry's own hosts (a STRICT_DNS cluster carrying
/// them inline): the host in the client's locality at priority 0, the other region's at
/// 1, and failover once the local one stops answering.
#[test]
fn locality_failover_of_a_dns_entrys_hosts_in_envoy() {
    fails_over_in_envoy(
        "envoy-locality-dns",
        &[("v1", "r1.z1"), ("v2", "r2.z2")],
        "",
        &[("app", "client")],
        ("v1", "v2"),
        Registry::DnsEntry,
    );
}

/// `failoverPriority: [version]`: both pods in the client's own zone, the client labelled
/// `version: v2`. Envoy holds the v2 pod (it shares the label) at priority 0 and the v1 pod
/// at priority 1, whatever their localities say; once v2 stops answering, requests fail
/// over to v1.
#[test]
fn failover_priority_prefers_the_pod_sharing_the_clients_label_in_envoy() {
    fails_over_in_envoy(
        "envoy-failover-priority",
        &[("v1", "r1.z1"), ("v2", "r1.z1")],
        "    loadBalancer:\n      localityLbSetting:\n        failoverPriority: [version]\n",
        &[("app", "client"), ("version", "v2")],
        ("v2", "v1"),
        Registry::Pods,
    );
}

/// A Service with `trafficDistribution: PreferClose` and no DestinationRule at all (so no
/// outlier detection): Envoy still holds the pod in the client's zone at priority 0 and the
/// other region's at 1, as Istio's `GetLocalityLbSetting` ranks them, and every request
/// stays in the client's zone.
#[test]
fn prefer_close_keeps_requests_in_the_clients_zone_in_envoy() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-prefer-close");
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(97, port, &config);
    let _backends: Vec<_> = ["v1", "v2"]
        .iter()
        .map(|v| reviews.start_backend(v))
        .collect();
    reviews.write_service_with("  trafficDistribution: PreferClose\n");
    reviews.write_pods_placed(&[("v1", "r2.z2"), ("v2", "r1.z1")]);
    reviews.write_endpoints(&["v1", "v2"]);
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
    let cluster = reviews.cluster("");
    let host = |v: &str| {
        format!(
            "{cluster}::{}:{}",
            reviews.pod_ip(v),
            reviews.backend_port()
        )
    };
    converge(
        "Envoy holds the endpoints by closeness",
        CONVERGE_TIMEOUT,
        || envoy.admin_get("/clusters"),
        |text| {
            text.contains(&format!("{}::priority::0", host("v2")))
                && text.contains(&format!("{}::priority::1", host("v1")))
        },
        || envoy.summary(),
    );
    let client = Client::new(
        &envoy,
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "reviews",
    );
    let counts = client.tally(20, "/reviews/1", &[]);
    assert!(only(&counts, "reviews-v2"), "{counts:?}");
    assert_eq!(count(&counts, "reviews-v2"), 20);
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "{:?}",
        envoy.rejected_update_stats()
    );
}

/// Where `reviews`' backends come from.
enum Registry {
    /// A Service, its pods (placed by their `istio-locality` label) and EndpointSlices.
    Pods,
    /// A ServiceEntry of resolution DNS for the same host, whose endpoints are the pods'
    /// addresses with their localities.
    DnsEntry,
}

/// A client sidecar in `r1/z1` with `labels`, `reviews` pods `placed` (from `registry`), and a
/// DestinationRule with outlier detection and `policy`: every request goes to the
/// `preferred` pod (priority 0, `other` at 1) until it stops answering, then every one to
/// `other`.
fn fails_over_in_envoy(
    name: &str,
    placed: &[(&str, &str)],
    policy: &str,
    labels: &[(&str, &str)],
    (preferred, other): (&str, &str),
    registry: Registry,
) {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new(name);
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(83, port, &config);
    let mut backends: Vec<_> = ["v1", "v2"]
        .iter()
        .map(|v| (*v, Some(reviews.start_backend(v))))
        .collect();
    match registry {
        Registry::Pods => {
            reviews.write_service();
            reviews.write_pods_placed(placed);
            reviews.write_endpoints(&["v1", "v2"]);
        }
        Registry::DnsEntry => {
            let endpoints: String = placed
                .iter()
                .map(|(v, at)| {
                    format!(
                        "  - {{address: {}, locality: {}, labels: {{version: {v}}}}}\n",
                        reviews.pod_ip(v),
                        at.replace('.', "/")
                    )
                })
                .collect();
            reviews.write(
                "reviews-entry.yaml",
                &format!(
                    "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: \
                     {{name: reviews, namespace: default}}\nspec:\n  hosts: \
                     [reviews.default.svc.cluster.local]\n  location: MESH_INTERNAL\n  \
                     ports: [{{number: {}, name: http, protocol: HTTP, targetPort: {}}}]\n  \
                     resolution: DNS\n  endpoints:\n{endpoints}",
                    reviews.service_port(),
                    reviews.backend_port()
                ),
            );
        }
    }
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        &format!(
            "  trafficPolicy:\n    outlierDetection:\n      consecutiveGatewayErrors: 1\n      \
             interval: 1s\n      baseEjectionTime: 5m\n      maxEjectionPercent: 100\n{policy}"
        ),
    );
    write_config(&config, "sidecar.yaml", &client_sidecar_yaml(port));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar("client-abc", "default", &reviews.ip(20), labels);
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

    // The preferred pod at priority 0, the other at priority 1, as Envoy reports them.
    let cluster = reviews.cluster("");
    let host = |v: &str| {
        format!(
            "{cluster}::{}:{}",
            reviews.pod_ip(v),
            reviews.backend_port()
        )
    };
    let (first_host, second_host) = (host(preferred), host(other));
    converge(
        "Envoy holds the endpoints by priority",
        CONVERGE_TIMEOUT,
        || envoy.admin_get("/clusters"),
        |text| {
            text.contains(&format!("{first_host}::priority::0"))
                && text.contains(&format!("{second_host}::priority::1"))
        },
        || envoy.summary(),
    );
    if matches!(registry, Registry::DnsEntry) {
        let dump = envoy.admin_get("/config_dump?resource=dynamic_active_clusters");
        assert!(
            dump.contains("\"STRICT_DNS\""),
            "the entry's hosts are a STRICT_DNS cluster: {dump}"
        );
    }
    let client = Client::new(
        &envoy,
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "reviews",
    );
    let (first, second) = (format!("reviews-{preferred}"), format!("reviews-{other}"));
    // Without priorities, requests would go to both pods.
    let counts = client.tally(20, "/reviews/1", &[]);
    assert!(only(&counts, &first), "{counts:?}");
    assert_eq!(count(&counts, &first), 20);

    // The preferred pod stops answering: ejected, and the other takes every request.
    for (v, backend) in backends.iter_mut() {
        if *v == preferred {
            backend.take();
        }
    }
    let counts = client.converge(
        "requests fail over",
        "/reviews/1",
        &[],
        |c| count(c, &second) == 10,
        20,
    );
    assert!(only(&counts, &second), "{counts:?}");
    assert_eq!(count(&counts, &second), 20);
    let clusters = envoy.admin_get("/clusters");
    assert!(
        clusters
            .lines()
            .any(|l| l.starts_with(&format!("{first_host}::health_flags::"))
                && l.contains("failed_outlier_check")),
        "the preferred pod is ejected by outlier detection"
    );
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "{:?}",
        envoy.rejected_update_stats()
    );
}
