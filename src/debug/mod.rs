//! The debug port (loopback by default, `--debug-addr`, default `127.0.0.1:15014`): one
//! listener that serves
//!
//! - gRPC: meshflow's own Debug API (`proto/meshflow/debug/v1/debug.proto`) and Envoy's
//!   Client Status Discovery Service ([`csds`]);
//! - HTTP/1.1 JSON: `/debug/proxies`, `/debug/config_dump?proxy=ID`,
//!   `/debug/config_errors`, `/debug/diff?proxy=ID&from=E&to=E|&since=5m` ([`diff`]),
//!   `/debug/watch?proxy=ID` (newline-delimited JSON, [`watch`]),
//!   `/debug/explain?proxy=ID&resource=TYPE/NAME` ([`explain`]) ([`http`]), and
//!   `/metrics` ([`metrics`]).
//!
//! Per-proxy history (what each proxy was sent per epoch, its ACK/NACK, the input changes
//! behind it) is kept by the hub ([`crate::hub::history`]); the debug port only reads.
//!
//! gRPC and HTTP share the port through tonic's `Routes`, which is an axum router: requests
//! to `/<grpc.Service>/<Method>` reach the gRPC services, the paths above reach the JSON
//! handlers, anything else is a 404.
//!
//! Everything is read from the xDS hub's state ([`crate::hub::Hub::read`]); the sync
//! states every surface reports, and what they approximate, are in [`status`].

pub mod cli;
pub mod csds;
pub mod diff;
pub mod envoy_json;
pub mod explain;
pub mod http;
pub mod metrics;
pub mod status;
pub mod units;
pub mod watch;

use crate::hub::Hub;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

#[allow(clippy::all)]
pub mod pb {
    tonic::include_proto!("meshflow.debug.v1");
}

use pb::debug_server::{Debug, DebugServer};
use pb::*;

pub struct DebugService {
    hub: Arc<Hub>,
}

impl DebugService {
    pub fn server(hub: Arc<Hub>) -> DebugServer<DebugService> {
        DebugServer::new(DebugService { hub })
    }
}

fn diff_status(e: diff::DiffError) -> Status {
    match e {
        diff::DiffError::BadRequest(m) => Status::invalid_argument(m),
        diff::DiffError::NotFound(m) => Status::not_found(m),
    }
}

/// The node id a user means (full id or `pod.namespace`), among connected proxies.
pub fn resolve_connected(hub: &Hub, wanted: &str) -> Result<String, String> {
    if wanted.is_empty() {
        return Err("the proxy parameter is required (node id or pod.namespace)".into());
    }
    hub.read(|st| status::resolve_proxy(status::connected(st).map(|e| e.proxy.id.as_str()), wanted))
}

#[tonic::async_trait]
impl Debug for DebugService {
    type WatchStream = ReceiverStream<Result<WatchEvent, Status>>;

    async fn diff(&self, request: Request<DiffRequest>) -> Result<Response<DiffResponse>, Status> {
        let hub = self.hub.clone();
        let req = request.into_inner();
        tokio::task::spawn_blocking(move || diff::compute(&hub, &req))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map(Response::new)
            .map_err(diff_status)
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let id =
            resolve_connected(&self.hub, &request.get_ref().proxy).map_err(Status::not_found)?;
        let mut rx = self.hub.watch();
        let (tx, out) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tx.closed() => break,
                    e = watch::next_for(&mut rx, &id) => match e {
                        Some(e) => {
                            if tx.send(Ok(e)).await.is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(out)))
    }

    async fn list_proxies(
        &self,
        _: Request<ListProxiesRequest>,
    ) -> Result<Response<ListProxiesResponse>, Status> {
        Ok(Response::new(self.hub.read(status::list_proxies)))
    }

    async fn list_config_errors(
        &self,
        _: Request<ListConfigErrorsRequest>,
    ) -> Result<Response<ListConfigErrorsResponse>, Status> {
        let errors = self.hub.read(|st| st.error_lines());
        Ok(Response::new(ListConfigErrorsResponse { errors }))
    }

    async fn explain(
        &self,
        req: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        let req = req.into_inner();
        match explain::explain(&self.hub, &req.proxy, &req.resource) {
            Ok(e) => Ok(Response::new(e.into())),
            Err(explain::ExplainError::Invalid(m)) => Err(Status::invalid_argument(m)),
            Err(explain::ExplainError::NotFound(m)) => Err(Status::not_found(m)),
        }
    }
}

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
