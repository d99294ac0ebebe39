//! The debug port (loopback by default, `--debug-addr`, default `127.0.0.1:15014`): one
//! listener that serves
//!
//! - gRPC: meshflow's own Debug API (`proto/meshflow/debug/v1/debug.proto`, [`grpc`]) and
//!   Envoy's Client Status Discovery Service ([`csds`]);
//! - HTTP/1.1 JSON ([`http`]): `/debug/proxies`, `/debug/config_dump?proxy=ID`,
//!   `/debug/config_errors`, `/debug/diff?proxy=ID&from=E&to=E|&since=5m` ([`diff`]),
//!   `/debug/watch?proxy=ID` (newline-delimited JSON, [`watch`]),
//!   `/debug/explain?proxy=ID&resource=TYPE/NAME` ([`explain`]), `/metrics` ([`metrics`]),
//!   `/healthz` and `/readyz`;
//!
//! and the command line's client of it ([`client`]: `proxy-status`, `proxy-config`,
//! `diff`, `watch`, `explain`).
//!
//! gRPC and HTTP share the port through tonic's `Routes`, which is an axum router: requests
//! to `/<grpc.Service>/<Method>` reach the gRPC services, the paths above reach the JSON
//! handlers, anything else is a 404.
//!
//! # What it owns
//!
//! Nothing of the served state: everything is read from the hub ([`crate::hub::Hub::read`],
//! its history, provenance, counters, watch events and health), and the hub never calls
//! into this module. The port owns the *answers*: their domain types ([`model`], serialized
//! with serde for HTTP and the CLI), their protobuf form ([`pb`], every conversion in one
//! place), why there is no answer ([`error::DebugError`], mapped once to a gRPC status and
//! once to an HTTP answer), and one room per question: [`status`] (proxy list, sync
//! state), [`diff`], [`explain`], [`watch`], [`csds`], [`metrics`], Envoy's JSON form of
//! resources and config dumps ([`envoy_json`]), human units ([`units`]).
//!
//! # What it may import
//!
//! `crate::hub` (read-only), `crate::input`, and its own submodules; never `crate::xds`,
//! `crate::runtime` or `crate::sources`. The server side never imports [`client`]; the
//! client imports only [`model`], [`pb`] and [`envoy_json`] (to print Envoy's JSON).

pub mod authz;
pub mod client;
pub mod csds;
pub mod diff;
pub mod envoy_json;
pub mod error;
pub mod explain;
pub mod grpc;
pub mod host;
pub mod http;
pub mod metrics;
pub mod model;
pub mod pb;
pub mod redact;
pub mod status;
pub mod ui;
pub mod units;
pub mod watch;

pub use error::DebugError;
pub use grpc::DebugService;

use crate::hub::Hub;
use std::sync::Arc;

/// Everything the debug port answers, gRPC and HTTP, as one axum router.
pub fn router(hub: Arc<Hub>) -> axum::Router {
    let grpc = tonic::service::Routes::new(DebugService::server(hub.clone()))
        .add_service(csds::Csds::server(hub.clone()))
        .into_axum_router();
    grpc.merge(http::router(hub)).fallback(not_found)
}

async fn not_found() -> (axum::http::StatusCode, &'static str) {
    (
        axum::http::StatusCode::NOT_FOUND,
        "not found; try /debug/proxies, /debug/config_dump?proxy=ID, /debug/diff?proxy=ID, /debug/watch?proxy=ID, /debug/config_errors, /metrics, /healthz, /readyz\n",
    )
}

/// Serves the debug port on `listener` until the process ends: HTTP/2 (gRPC) and HTTP/1.1
/// (JSON, metrics) on the same listener. A connection must deliver its first request within
/// `read_timeout`, and every later HTTP/1 request's headers within it too: half-sent requests
/// (a slow-loris client) are closed, not kept open for ever.
pub async fn serve(
    hub: Arc<Hub>,
    listener: tokio::net::TcpListener,
    read_timeout: std::time::Duration,
    hosts: Arc<Vec<String>>,
) -> std::io::Result<()> {
    let app = router(hub).layer(axum::middleware::from_fn_with_state(hosts, host::check));
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin, and go on.
                tracing::warn!(error = %e, "debug port: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Nagle off: a watch stream's event is one short write that must not wait for the
        // ACK of the one before (up to the client's 40 ms delayed ACK).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "debug port: TCP_NODELAY not set");
        }
        tokio::spawn(connection(tcp, app.clone(), read_timeout));
    }
}

/// One connection of the debug port (see [`serve`]).
async fn connection(
    tcp: tokio::net::TcpStream,
    app: axum::Router,
    read_timeout: std::time::Duration,
) {
    use hyper::service::Service as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    let asked = Arc::new(AtomicBool::new(false));
    let seen = asked.clone();
    let app = hyper_util::service::TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        seen.store(true, Ordering::Relaxed);
        app.call(req)
    });
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(read_timeout);
    let conn = builder.serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tcp), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep(read_timeout) => {}
    }
    if !asked.load(Ordering::Relaxed) {
        return; // no whole request in time: dropping the connection closes it
    }
    let _ = conn.await;
}
