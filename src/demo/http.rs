//! One HTTP/1.1 request on a fresh connection (hyper's client): how the demo's traffic
//! reaches a proxy's listener, or, without Envoy, the endpoint the simulation chose. A fresh
//! connection per request, so every request is routed on its own (an Envoy picks among
//! weighted clusters per request either way; the demo's rate is a few hundred a second).

use super::workloads::BACKEND_HEADER;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// How long one request may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Where a request landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Landed {
    /// A workload answered: its pod name.
    Pod(String),
    /// Something else answered (the proxy itself: 404 no route, 503 no endpoint, …).
    Status(u16),
    /// No answer: the connection or the request failed.
    Failed(String),
}

/// `GET path` with `Host: authority` to `addr`.
pub async fn get(addr: SocketAddr, authority: &str, path: &str) -> Landed {
    match tokio::time::timeout(TIMEOUT, request(addr, authority, path)).await {
        Ok(Ok(landed)) => landed,
        Ok(Err(e)) => Landed::Failed(e),
        Err(_) => Landed::Failed(format!("no answer from {addr} within {TIMEOUT:?}")),
    }
}

async fn request(addr: SocketAddr, authority: &str, path: &str) -> Result<Landed, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    // Drives the connection; it ends with the response (the request asks to close).
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONNECTION, "close")
        .body(String::new())
        .map_err(|e| format!("request {path}: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let pod = response
        .headers()
        .get(BACKEND_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(match pod {
        Some(pod) if response.status().is_success() => Landed::Pod(pod),
        _ => Landed::Status(response.status().as_u16()),
    })
}
