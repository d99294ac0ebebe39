//! A DestinationRule's `connectionPool` protocol settings in real Envoy, as Istio translates
//! them: `http.h2UpgradePolicy: UPGRADE` makes Envoy speak HTTP/2 (cleartext, prior
//! knowledge) to a backend of an `http` port, with `maxConcurrentStreams` as the HTTP/2
//! stream limit and `tcp.idleTimeout` as the idle timeout of those connections (seen in
//! Envoy's config dump); `DO_NOT_UPGRADE` and `useClientProtocol` keep the HTTP/1.1 of the
//! client. The backend answers with the HTTP version it was spoken to in, so the upgrade is
//! seen on the wire.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use support::{converge, http_request, require_envoy, SidecarScene, CONVERGE_TIMEOUT};

/// A loopback server speaking HTTP/1.1 and cleartext HTTP/2 (h2c by prior knowledge) on one
/// port, answering each request with the version it came in (`HTTP/1.1`, `HTTP/2.0`). It
/// runs until the test process ends.
fn start_h2c_backend(addr: SocketAddr) {
    let listener = std::net::TcpListener::bind(addr)
        .unwrap_or_else(|e| panic!("h2c backend bind {addr}: {e}"));
    listener
        .set_nonblocking(true)
        .expect("nonblocking h2c listener");
    std::thread::Builder::new()
        .name("h2c-backend".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the h2c backend");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("tokio h2c listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        let service =
                            hyper::service::service_fn(|req: Request<Incoming>| async move {
                                Ok::<_, Infallible>(Response::new(format!("{:?}", req.version())))
                            });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        })
        .expect("spawn the h2c backend");
}

/// The `HttpProtocolOptions` of cluster `name` in Envoy's config dump (`Null` without).
fn protocol_options(dump: &Value, name: &str) -> Value {
    dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| {
            s["dynamic_active_clusters"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .find(|c| c["cluster"]["name"] == name)
        .map(|c| {
            c["cluster"]["typed_extension_protocol_options"]
                ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
                .clone()
        })
        .unwrap_or(Value::Null)
}

#[test]
fn h2_upgrade_and_client_protocol_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(
        &envoy_bin,
        "envoy-connection-pool-protocols",
        91,
        &[],
        |_| {},
    );
    let listener = scene.listener();
    let SidecarScene {
        envoy, v1, reviews, ..
    } = scene;
    // Pod v1 serves both HTTP versions (in place of its HTTP/1.1 backend); it alone is an
    // endpoint of the service.
    let addr: SocketAddr = format!("{}:{}", reviews.pod_ip("v1"), reviews.backend_port())
        .parse()
        .expect("v1's address");
    drop(v1);
    start_h2c_backend(addr);
    reviews.write_endpoints(&["v1"]);
    let cluster = reviews.cluster("");
    let version = || {
        http_request(listener, "GET", "reviews", "/", &[])
            .map(|r| (r.status, r.text()))
            .unwrap_or_else(|e| (0, e))
    };

    // UPGRADE: Envoy speaks HTTP/2 to the backend of this `http` port, the stream limit
    // and the idle timeout on the cluster.
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    connectionPool:\n      tcp: {idleTimeout: 45s}\n      http: {h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 5}\n",
    );
    converge(
        "requests reach v1 over HTTP/2",
        CONVERGE_TIMEOUT,
        version,
        |r| *r == (200, "HTTP/2.0".to_string()),
        || envoy.summary(),
    );
    let options = protocol_options(&envoy.config_dump(), &cluster);
    assert_eq!(
        options["explicit_http_config"]["http2_protocol_options"]["max_concurrent_streams"], 5,
        "{options:#}"
    );
    assert_eq!(
        options["common_http_protocol_options"]["idle_timeout"], "45s",
        "{options:#}"
    );

    // DO_NOT_UPGRADE: back to the client's HTTP/1.1, the idle timeout kept.
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    connectionPool:\n      tcp: {idleTimeout: 45s}\n      http: {h2UpgradePolicy: DO_NOT_UPGRADE, maxConcurrentStreams: 5}\n",
    );
    converge(
        "requests reach v1 over HTTP/1.1",
        CONVERGE_TIMEOUT,
        version,
        |r| *r == (200, "HTTP/1.1".to_string()),
        || envoy.summary(),
    );
    let options = protocol_options(&envoy.config_dump(), &cluster);
    assert!(
        options["explicit_http_config"]["http2_protocol_options"].is_null(),
        "{options:#}"
    );
    assert_eq!(
        options["common_http_protocol_options"]["idle_timeout"], "45s",
        "{options:#}"
    );

    // useClientProtocol: the request's own protocol (HTTP/1.1 from this client).
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    connectionPool:\n      http: {useClientProtocol: true}\n",
    );
    converge(
        "the cluster takes the client's protocol",
        CONVERGE_TIMEOUT,
        || protocol_options(&envoy.config_dump(), &cluster),
        |o| !o["use_downstream_protocol_config"].is_null(),
        || envoy.summary(),
    );
    assert_eq!(version(), (200, "HTTP/1.1".to_string()));

    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
}
