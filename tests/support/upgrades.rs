//! Backends and clients for what a proxy carries besides HTTP/1.1 requests: a WebSocket echo
//! server and client (tungstenite: the RFC 6455 handshake through the proxy's upgrade, then
//! frames), and an h2c server and client (HTTP/2 with prior knowledge, hyper). Each backend
//! says who it is (`x-backend`), so a test can tell which workload answered.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A WebSocket server on one loopback address: it accepts the upgrade (answering with
/// `x-backend: identity`) and sends every text or binary message back as it came. Stops on
/// drop.
pub struct WsEcho {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl WsEcho {
    /// Listens on `ip:port`; panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> WsEcho {
        let listener = TcpListener::bind(format!("{ip}:{port}"))
            .unwrap_or_else(|e| panic!("WebSocket backend bind {ip}:{port}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking WebSocket listener");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let identity = identity.to_string();
        let acceptor = thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let identity = identity.clone();
                        thread::spawn(move || echo(stream, &identity));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        WsEcho {
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for WsEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// One WebSocket connection: the handshake, then each data message echoed until it closes.
fn echo(stream: TcpStream, identity: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let answer = |_: &tungstenite::handshake::server::Request,
                  mut response: tungstenite::handshake::server::Response| {
        if let Ok(v) = identity.parse() {
            response.headers_mut().insert("x-backend", v);
        }
        Ok(response)
    };
    let Ok(mut ws) = tungstenite::accept_hdr(stream, answer) else {
        return;
    };
    while let Ok(message) = ws.read() {
        if (message.is_text() || message.is_binary()) && ws.send(message).is_err() {
            return;
        }
    }
}

/// What a WebSocket exchange through a proxy gave: the backend that accepted the upgrade,
/// and each message echoed back.
#[derive(Debug)]
pub struct WsExchange {
    pub backend: String,
    pub echoed: Vec<tungstenite::Message>,
}

/// Opens a WebSocket to `ws://host{path}` over a connection to `addr` (a proxy), sends
/// `messages` and reads as many back; why it failed otherwise.
pub fn ws_exchange(
    addr: SocketAddr,
    host: &str,
    path: &str,
    messages: &[tungstenite::Message],
) -> Result<WsExchange, String> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let (mut ws, response) = tungstenite::client(format!("ws://{host}{path}"), stream)
        .map_err(|e| format!("handshake: {e}"))?;
    let backend = response
        .headers()
        .get("x-backend")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut echoed = Vec::new();
    for m in messages {
        ws.send(m.clone()).map_err(|e| format!("send: {e}"))?;
        let back = loop {
            match ws.read().map_err(|e| format!("read: {e}"))? {
                tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) => continue,
                other => break other,
            }
        };
        echoed.push(back);
    }
    let _ = ws.close(None);
    Ok(WsExchange { backend, echoed })
}

/// An HTTP/2-only server with prior knowledge (h2c) on one loopback address: every request
/// gets `200`, body `identity`, header `x-backend: identity`; an HTTP/1.1 request is not
/// understood. Stops on drop (its runtime with it).
pub struct H2cBackend {
    _rt: tokio::runtime::Runtime,
}

impl H2cBackend {
    /// Listens on `ip:port`; panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> H2cBackend {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the h2c backend");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(format!("{ip}:{port}")))
            .unwrap_or_else(|e| panic!("h2c backend bind {ip}:{port}: {e}"));
        let identity = identity.to_string();
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let identity = identity.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let identity = identity.clone();
                        async move {
                            let _: &hyper::body::Incoming = req.body();
                            hyper::Response::builder()
                                .status(200)
                                .header("x-backend", identity.as_str())
                                .header("x-request-version", format!("{:?}", req.version()))
                                .body(identity)
                                .map_err(|e| e.to_string())
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                });
            }
        });
        H2cBackend { _rt: rt }
    }
}

/// An h2c response: status, its `x-backend` and `x-request-version` headers (how the
/// backend was asked), body.
#[derive(Debug, PartialEq, Eq)]
pub struct H2cResponse {
    pub status: u16,
    pub backend: String,
    pub version: String,
    pub body: String,
}

/// `GET http://host{path}` over HTTP/2 with prior knowledge, on a connection to `addr`.
pub fn h2c_get(addr: SocketAddr, host: &str, path: &str) -> Result<H2cResponse, String> {
    use http_body_util::BodyExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let stream =
            tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
                .await
                .map_err(|_| format!("connect {addr}: timed out"))?
                .map_err(|e| format!("connect {addr}: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .map_err(|e| format!("h2c handshake: {e}"))?;
        tokio::spawn(conn);
        let req = hyper::Request::builder()
            .uri(format!("http://{host}{path}"))
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .map_err(|_| "no answer in 10 s".to_string())?
            .map_err(|e| format!("request: {e}"))?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let (status, backend, version) = (
            response.status().as_u16(),
            header("x-backend"),
            header("x-request-version"),
        );
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(H2cResponse {
            status,
            backend,
            version,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    })
}
