//! The Debug API's gRPC service (`meshflow.debug.v1.Debug`): each method runs the
//! computation of its room ([`super::status`], [`super::diff`], [`super::explain`],
//! [`super::watch`]) and converts the answer to its message ([`super::pb`]) and its
//! [`DebugError`] to a status at the edge.

use super::error::DebugError;
use super::model::DiffQuery;
use super::pb::debug_server::{Debug, DebugServer};
use super::pb::*;
use super::{diff, explain, status, watch};
use crate::hub::Hub;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

pub struct DebugService {
    hub: Arc<Hub>,
}

impl DebugService {
    pub fn server(hub: Arc<Hub>) -> DebugServer<DebugService> {
        DebugServer::new(DebugService { hub })
    }
}

#[tonic::async_trait]
impl Debug for DebugService {
    type WatchStream = ReceiverStream<Result<WatchEvent, Status>>;

    async fn diff(&self, request: Request<DiffRequest>) -> Result<Response<DiffResponse>, Status> {
        let hub = self.hub.clone();
        let query = DiffQuery::from(request.into_inner());
        let answer = tokio::task::spawn_blocking(move || diff::compute(&hub, &query))
            .await
            .map_err(DebugError::from)??;
        Ok(Response::new(answer.into()))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        // Watch has always answered NOT_FOUND for a missing proxy too.
        let id = status::resolve_connected(&self.hub, &request.get_ref().proxy)
            .map_err(|e| DebugError::NotFound(e.to_string()))?;
        let out = watch::follow(&self.hub, id, |e| Ok(e.into()));
        Ok(Response::new(ReceiverStream::new(out)))
    }

    async fn list_proxies(
        &self,
        req: Request<ListProxiesRequest>,
    ) -> Result<Response<ListProxiesResponse>, Status> {
        let names = !req.get_ref().without_names;
        Ok(Response::new(
            self.hub.read(|st| status::list_proxies(st, names)).into(),
        ))
    }

    async fn list_config_errors(
        &self,
        _: Request<ListConfigErrorsRequest>,
    ) -> Result<Response<ListConfigErrorsResponse>, Status> {
        Ok(Response::new(self.hub.read(|st| st.error_lines()).into()))
    }

    async fn explain(
        &self,
        req: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        let req = req.into_inner();
        let answer = explain::explain(&self.hub, &req.proxy, &req.resource)?;
        Ok(Response::new(answer.into()))
    }
}
