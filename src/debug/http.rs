//! The debug data as JSON over HTTP, on the same port as the gRPC debug services:
//!
//! - `GET /debug/proxies`: connected proxies, per type resources, ACKs, last NACK and sync
//!   state (the JSON of `meshflow proxy-status -o json`).
//! - `GET /debug/config_dump?proxy=ID`: one proxy's resources in Envoy's admin
//!   `/config_dump` form. `ID` is the node id or its `pod.namespace` part (`proxyID` is
//!   accepted too, as Istio spells it).
//! - `GET /debug/config_errors`: rejected input objects and dataflow conflicts.
//! - `GET /debug/explain?proxy=ID&resource=TYPE/NAME`: the input objects a resource of the
//!   proxy was built from ([`super::explain`]).
//! - `GET /metrics`: Prometheus text ([`super::metrics`]).

use super::envoy_json::{config_dump, DumpEntry};
use super::status::{connected, list_proxies, proxies_json, resolve_proxy};
use crate::xds::hub::Hub;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use dataflows::model::ResourceType;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/debug/proxies", get(proxies))
        .route("/debug/config_dump", get(dump))
        .route("/debug/config_errors", get(errors))
        .route("/debug/explain", get(explain))
        .route("/metrics", get(metrics))
        .with_state(hub)
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

async fn proxies(State(hub): State<Arc<Hub>>) -> Json<Value> {
    Json(proxies_json(&hub.read(list_proxies)))
}

#[derive(Deserialize)]
struct DumpQuery {
    #[serde(alias = "proxyID")]
    proxy: Option<String>,
}

async fn dump(State(hub): State<Arc<Hub>>, Query(q): Query<DumpQuery>) -> Response {
    let Some(wanted) = q.proxy.filter(|p| !p.is_empty()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the proxy parameter is required: /debug/config_dump?proxy=ID".into(),
        );
    };
    // Copy names, versions and shared bodies under the lock; render after releasing it.
    let found = hub.read(|st| {
        let id = resolve_proxy(connected(st).map(|e| e.proxy.id.as_str()), &wanted)?;
        let entry = st
            .proxy(&id)
            .ok_or_else(|| format!("no connected proxy {id:?}"))?;
        let per_type: Vec<(ResourceType, Vec<DumpEntry>)> = ResourceType::ALL
            .iter()
            .map(|t| {
                let entries = entry
                    .versions(*t)
                    .iter()
                    .map(|(name, version)| DumpEntry {
                        name: name.clone(),
                        version: version.clone(),
                        body: st.body(*t, name, version).cloned(),
                    })
                    .collect();
                (*t, entries)
            })
            .collect();
        Ok::<_, String>(per_type)
    });
    let per_type = match found {
        Ok(p) => p,
        Err(e) => return error(StatusCode::NOT_FOUND, e),
    };
    // Decoding every resource of a large proxy is CPU work: keep it off the async workers.
    match tokio::task::spawn_blocking(move || config_dump(&per_type)).await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Deserialize)]
struct ExplainQuery {
    #[serde(alias = "proxyID")]
    proxy: Option<String>,
    resource: Option<String>,
}

async fn explain(State(hub): State<Arc<Hub>>, Query(q): Query<ExplainQuery>) -> Response {
    use super::explain::{explain, ExplainError};
    let (Some(proxy), Some(resource)) = (q.proxy, q.resource) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the proxy and resource parameters are required: \
             /debug/explain?proxy=ID&resource=TYPE/NAME"
                .into(),
        );
    };
    match explain(&hub, &proxy, &resource) {
        Ok(e) => Json(json!(e)).into_response(),
        Err(ExplainError::Invalid(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(ExplainError::NotFound(m)) => error(StatusCode::NOT_FOUND, m),
    }
}

async fn errors(State(hub): State<Arc<Hub>>) -> Json<Value> {
    Json(hub.read(|st| {
        let dataflow: Vec<Value> = st
            .errors
            .keys()
            .map(|e| json!({ "object": e.object.to_string(), "message": e.message }))
            .collect();
        json!({ "errors": dataflow, "rejected_inputs": st.source_errors })
    }))
}

async fn metrics(State(hub): State<Arc<Hub>>) -> Response {
    match hub.read(super::metrics::render) {
        Ok(text) => ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
