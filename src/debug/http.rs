//! The debug data as JSON over HTTP, on the same port as the gRPC debug services:
//!
//! - `GET /debug/proxies`: connected proxies, per type resources, ACKs, last NACK and sync
//!   state (the JSON of `meshflow proxy-status -o json`).
//! - `GET /debug/config_dump?proxy=ID`: one proxy's resources in Envoy's admin
//!   `/config_dump` form. `ID` is the node id or its `pod.namespace` part (`proxyID` is
//!   accepted too, as Istio spells it).
//! - `GET /debug/config_errors`: rejected input objects and dataflow conflicts.
//! - `GET /debug/mtls_transitions`: PeerAuthentication changes held part-way, each with its
//!   step and the acknowledgments it waits for.
//! - `GET /debug/explain?proxy=ID&resource=TYPE/NAME`: the input objects a resource of the
//!   proxy was built from ([`super::explain`]); a bare NAME unique among the proxy's
//!   resources will do (400 listing the candidates when it is not).
//! - `GET /debug/diff?proxy=ID[&from=EPOCH|&since=5m][&to=EPOCH]`: what changed for one
//!   proxy ([`super::diff`]), as JSON.
//! - `GET /debug/watch?proxy=ID`: one JSON object per line for every push to the proxy and
//!   every ACK/NACK from it, as they happen ([`super::watch`]); the response never ends.
//! - `GET /metrics`: Prometheus text ([`super::metrics`]).
//! - `GET /ui`: the debug UI ([`super::ui`]), drawn from the endpoints above.

use super::envoy_json::{config_dump, DumpEntry};
use super::error::DebugError;
use super::model::{resolve_proxy, to_json, DiffQuery};
use super::status::{config_errors, connected, list_proxies, resolve_connected};
use crate::hub::Hub;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use dataflows::model::ResourceType;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/debug/proxies", get(proxies))
        .route("/debug/config_dump", get(dump))
        .route("/debug/config_errors", get(errors))
        .route("/debug/mtls_transitions", get(mtls_transitions))
        .route("/debug/explain", get(explain))
        .route("/debug/authz_check", get(authz_check))
        .route("/debug/diff", get(diff))
        .route("/debug/watch", get(watch))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(super::ui::routes())
        .with_state(hub)
}

/// `200 ok` while the runtime and its dataflow run, else `503` with the reason.
async fn healthz(State(hub): State<Arc<Hub>>) -> Response {
    health_answer(hub.health.live())
}

/// `200 ok` once every source's initial read is computed, else `503` with what it waits for.
async fn readyz(State(hub): State<Arc<Hub>>) -> Response {
    health_answer(hub.health.ready())
}

fn health_answer(r: Result<(), String>) -> Response {
    match r {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// A debug answer as a JSON response.
fn answer<T: Serialize>(value: &T) -> Response {
    Json(to_json(value)).into_response()
}

async fn proxies(State(hub): State<Arc<Hub>>) -> Response {
    answer(&hub.read(|st| list_proxies(st, true)))
}

#[derive(Deserialize)]
struct DumpQuery {
    #[serde(alias = "proxyID")]
    proxy: Option<String>,
}

async fn dump(
    State(hub): State<Arc<Hub>>,
    Query(q): Query<DumpQuery>,
) -> Result<Response, DebugError> {
    let Some(wanted) = q.proxy.filter(|p| !p.is_empty()) else {
        return Err(DebugError::BadRequest(
            "the proxy parameter is required: /debug/config_dump?proxy=ID".into(),
        ));
    };
    // Copy names, versions and shared bodies under the lock; render after releasing it.
    let per_type = hub.read(|st| {
        let id = resolve_proxy(connected(st).map(|e| e.proxy.id.as_str()), &wanted)?;
        st.proxy(&id)
            .ok_or_else(|| DebugError::NotFound(format!("no connected proxy {id:?}")))?;
        let held = st.held(&id);
        let per_type: Vec<(ResourceType, Vec<DumpEntry>)> = ResourceType::ALL
            .iter()
            .map(|t| {
                let entries = held
                    .versions(*t)
                    .iter()
                    .map(|(name, version)| DumpEntry {
                        name: name.to_string(),
                        version: version.to_string(),
                        body: st
                            .body(*t, name, version)
                            .cloned()
                            .map(|b| super::redact::body(*t, b)),
                    })
                    .collect();
                (*t, entries)
            })
            .collect();
        Ok::<_, DebugError>(per_type)
    })?;
    // Decoding every resource of a large proxy is CPU work: keep it off the async workers.
    let text = tokio::task::spawn_blocking(move || config_dump(&per_type)).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

#[derive(Deserialize)]
struct ExplainQuery {
    #[serde(alias = "proxyID")]
    proxy: Option<String>,
    resource: Option<String>,
}

async fn explain(
    State(hub): State<Arc<Hub>>,
    Query(q): Query<ExplainQuery>,
) -> Result<Response, DebugError> {
    let (Some(proxy), Some(resource)) = (q.proxy, q.resource) else {
        return Err(DebugError::BadRequest(
            "the proxy and resource parameters are required: \
             /debug/explain?proxy=ID&resource=TYPE/NAME (or a NAME unique for the proxy)"
                .into(),
        ));
    };
    Ok(answer(&super::explain::explain(&hub, &proxy, &resource)?))
}

#[derive(Deserialize)]
struct AuthzQuery {
    proxy: Option<String>,
    port: Option<u16>,
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    from: Option<String>,
    address: Option<String>,
    source_ip: Option<String>,
    /// `NAME=VALUE`, several joined by `&` once URL-decoded: `header=a%3D1%26b%3D2`.
    header: Option<String>,
    jwt_claims: Option<String>,
    #[serde(default)]
    jwt_invalid: bool,
    /// `allow` or `deny`: what a CUSTOM policy's external service answers.
    ext_authz: Option<String>,
}

/// `/debug/authz_check?proxy=ID&port=N[&method=&path=&host=&from=&address=&source_ip=
/// &header=NAME%3DVALUE&jwt_claims=JSON|&jwt_invalid=true&ext_authz=allow|deny]`: the verdict of
/// [`super::authz::check`] on what the proxy holds now.
async fn authz_check(
    State(hub): State<Arc<Hub>>,
    Query(q): Query<AuthzQuery>,
) -> Result<Response, DebugError> {
    let (Some(proxy), Some(port)) = (q.proxy.filter(|p| !p.is_empty()), q.port) else {
        return Err(DebugError::BadRequest(
            "the proxy and port parameters are required: /debug/authz_check?proxy=ID&port=N".into(),
        ));
    };
    let mut headers = Vec::new();
    for h in q
        .header
        .iter()
        .flat_map(|h| h.split('&'))
        .filter(|h| !h.is_empty())
    {
        let (k, v) = h
            .split_once('=')
            .ok_or_else(|| DebugError::BadRequest(format!("header {h:?}: NAME=VALUE")))?;
        headers.push((k.to_string(), v.to_string()));
    }
    let token = match (q.jwt_claims, q.jwt_invalid) {
        (Some(c), _) => {
            Some(Some(serde_json::from_str(&c).map_err(|e| {
                DebugError::BadRequest(format!("jwt_claims: not JSON: {e}"))
            })?))
        }
        (None, true) => Some(None),
        (None, false) => None,
    };
    let request = super::authz::Request {
        port,
        method: q.method.unwrap_or_else(|| "GET".into()),
        path: q.path.unwrap_or_else(|| "/".into()),
        host: q.host.unwrap_or_else(|| "localhost".into()),
        from: q.from,
        address: q.address,
        source_ip: q.source_ip,
        headers,
        token,
        external_authz: match q.ext_authz.as_deref() {
            None => None,
            Some("allow") => Some(true),
            Some("deny") => Some(false),
            Some(other) => {
                return Err(DebugError::BadRequest(format!(
                    "ext_authz: {other:?} is neither allow nor deny"
                )))
            }
        },
    };
    // Copy the bodies under the lock; simulate after releasing it.
    let (id, bodies) = hub.read(|st| {
        let id = resolve_proxy(connected(st).map(|e| e.proxy.id.as_str()), &proxy)?;
        st.proxy(&id)
            .ok_or_else(|| DebugError::NotFound(format!("no connected proxy {id:?}")))?;
        let held = st.held(&id);
        let mut bodies = Vec::new();
        for t in super::authz::TYPES {
            for (name, version) in held.versions(t).iter() {
                if let Some(b) = st.body(t, name, version) {
                    bodies.push((t, name.to_string(), b.clone()));
                }
            }
        }
        Ok::<_, DebugError>((id, bodies))
    })?;
    let config = dataflows::simulate::ProxyConfig::from_bodies(
        bodies.iter().map(|(t, n, b)| (*t, n.as_str(), &b.0[..])),
    );
    let verdict = super::authz::check(&config, id, &request).map_err(DebugError::BadRequest)?;
    Ok(answer(&verdict))
}

async fn errors(State(hub): State<Arc<Hub>>) -> Response {
    answer(&hub.read(config_errors))
}

/// The PeerAuthentication changes held part-way now ([`crate::runtime::mtls_transition`]).
async fn mtls_transitions(State(hub): State<Arc<Hub>>) -> Response {
    let now = hub.mtls_transitions.borrow().clone();
    answer(&now)
}

async fn metrics(State(hub): State<Arc<Hub>>) -> Result<Response, DebugError> {
    let text = hub
        .read(|st| super::metrics::render(st, &hub.metrics))
        .map_err(|e| DebugError::Internal(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response())
}

/// Rejects parameters the endpoint does not know, naming them.
fn only_known(q: &HashMap<String, String>, known: &[&str]) -> Result<(), DebugError> {
    let mut unknown: Vec<&str> = q
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    unknown.sort_unstable();
    match unknown.first() {
        None => Ok(()),
        Some(k) => Err(DebugError::BadRequest(format!(
            "unknown parameter {k:?}; this endpoint takes {}",
            known.join(", ")
        ))),
    }
}

fn epoch_param(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, DebugError> {
    match q.get(name).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| DebugError::BadRequest(format!("{name}: {v:?} is not an epoch number"))),
    }
}

/// The proxy parameter (`proxy`, or `proxyID` as Istio spells it); empty when absent.
fn proxy_param(q: &HashMap<String, String>) -> String {
    q.get("proxy")
        .or_else(|| q.get("proxyID"))
        .cloned()
        .unwrap_or_default()
}

async fn diff(
    State(hub): State<Arc<Hub>>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, DebugError> {
    only_known(&q, &["proxy", "proxyID", "from", "to", "since"])?;
    let query = DiffQuery {
        proxy: proxy_param(&q),
        from: epoch_param(&q, "from")?,
        to: epoch_param(&q, "to")?,
        since: q.get("since").filter(|s| !s.is_empty()).cloned(),
    };
    let d = tokio::task::spawn_blocking(move || super::diff::compute(&hub, &query)).await??;
    Ok(answer(&d))
}

async fn watch(
    State(hub): State<Arc<Hub>>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, DebugError> {
    only_known(&q, &["proxy", "proxyID"])?;
    let id = resolve_connected(&hub, &proxy_param(&q))?;
    let out = super::watch::follow(&hub, id, |e| {
        Ok::<_, std::convert::Infallible>(to_json(&e).to_string() + "\n")
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(out)),
    )
        .into_response())
}
