//! Inbound connection pools in real Envoy: the server sidecar of pod `reviews-v1` (no traffic
//! capture: a Sidecar `ingress` listener bound to the pod's address) holds, on its inbound
//! cluster, the limits of the `reviews` DestinationRule's `connectionPool` — and not its
//! outlier detection — as Istio applies a service's rule to its own workloads. Envoy keeps to
//! them: the application never answers, so with one connection allowed and one request
//! allowed to wait, a third request is refused at once (503, `x-envoy-overloaded`). The
//! Sidecar's own `ingress[].connectionPool` then replaces the rule's. Loopback only.

use crate::support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};

use support::reviews::Reviews;
use support::{
    converge, free_port, http_request, require_envoy, write_config, Envoy, Meshflow, ProxyNode,
    TestDir, CONVERGE_TIMEOUT,
};

const NET: u8 = 84;

/// An application that accepts connections and never answers: requests stay in flight.
fn stuck_app() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the application");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

#[test]
fn inbound_cluster_takes_the_services_connection_pool() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-inbound-pool");
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(NET, port, &config);
    let app_port = stuck_app();
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    connectionPool:\n      tcp: {maxConnections: 1}\n      http: {http1MaxPendingRequests: 1, maxRequestsPerConnection: 3}\n    outlierDetection: {consecutive5xxErrors: 1}\n",
    );
    let pod_ip = reviews.pod_ip("v1");
    let target = reviews.backend_port();
    let server_sidecar = |pool: &str| reviews.server_sidecar_yaml(app_port, pool);
    write_config(&config, "server-sidecar.yaml", &server_sidecar(""));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &pod_ip,
        &[("app", "reviews"), ("version", "v1")],
    );
    let server = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    server.await_listener(&format!("inbound_{pod_ip}_{target}"));

    let cluster = format!("inbound|{target}||");
    let limit = |name: &str, value: u32| format!("{cluster}::default_priority::{name}::{value}");
    let held = [
        limit("max_connections", 1),
        limit("max_pending_requests", 1),
        limit("max_requests", u32::MAX),
    ];
    converge(
        "the inbound cluster holds the rule's limits",
        CONVERGE_TIMEOUT,
        || server.admin_get("/clusters"),
        |text| held.iter().all(|l| text.contains(l.as_str())),
        || server.summary(),
    );
    let dump = server.config_dump().to_string();
    let inbound = dump
        .split("\"cluster\":{")
        .find(|c| c.contains(&format!("\"name\":\"{cluster}\"")))
        .expect("the inbound cluster in the config dump");
    assert!(
        inbound.contains("\"max_requests_per_connection\":3"),
        "{inbound}"
    );
    assert!(
        !inbound.contains("outlier_detection"),
        "no outlier detection inbound: {inbound}"
    );

    // Two requests: one on the one connection, one waiting for it.
    let addr: SocketAddr = format!("{pod_ip}:{target}").parse().expect("address");
    let request = b"GET /reviews/1 HTTP/1.1\r\nhost: reviews\r\n\r\n";
    let stat = |name: &str| {
        server
            .stat(&format!("cluster.{cluster}.{name}"))
            .unwrap_or(0)
    };
    let send = || {
        let mut s = TcpStream::connect(addr).expect("connect to the inbound listener");
        s.write_all(request).expect("send a request");
        s
    };
    // The second is sent once the first is on the connection: while that connection is
    // still being set up, the first request itself is the one pending, and a second would
    // overflow the pending queue at once.
    let mut waiting = vec![send()];
    converge(
        "the first request on the one connection",
        CONVERGE_TIMEOUT,
        || stat("upstream_rq_active"),
        |active| *active == 1,
        || server.summary(),
    );
    waiting.push(send());
    converge(
        "one request in flight, one waiting",
        CONVERGE_TIMEOUT,
        || {
            (
                stat("upstream_cx_active"),
                stat("upstream_rq_pending_active"),
            )
        },
        |(cx, pending)| *cx == 1 && *pending == 1,
        || server.summary(),
    );
    let third = http_request(addr, "GET", "reviews", "/reviews/1", &[]).expect("an answer");
    assert_eq!(third.status, 503, "{}", third.text());
    assert_eq!(third.header("x-envoy-overloaded"), Some("true"));
    assert!(stat("upstream_rq_pending_overflow") >= 1);
    drop(waiting);

    // The Sidecar's own pool for the port replaces the rule's whole.
    write_config(
        &config,
        "server-sidecar.yaml",
        &server_sidecar("    connectionPool: {http: {http1MaxPendingRequests: 5}}\n"),
    );
    let replaced = [
        limit("max_pending_requests", 5),
        limit("max_connections", u32::MAX),
    ];
    converge(
        "the Sidecar's pool replaces the rule's",
        CONVERGE_TIMEOUT,
        || server.admin_get("/clusters"),
        |text| replaced.iter().all(|l| text.contains(l.as_str())),
        || server.summary(),
    );
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}
