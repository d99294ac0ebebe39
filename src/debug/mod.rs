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

pub mod client;
pub mod csds;
pub mod diff;
pub mod envoy_json;
pub mod error;
pub mod explain;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod model;
pub mod pb;
pub mod status;
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
/// (JSON, metrics) on the same connections' listener.
pub async fn serve(
    hub: Arc<Hub>,
    listener: tokio::net::TcpListener,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .accept_http1(true)
        .add_routes(tonic::service::Routes::from(router(hub)))
        .serve_with_incoming(incoming)
        .await
}
