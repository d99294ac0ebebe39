//! External authorization services for the CUSTOM policy tests, on loopback: one speaking
//! Envoy's HTTP ext_authz protocol (a check request per asked request: 200 allows, any
//! other status refuses with it) and one the gRPC `envoy.service.auth.v3.Authorization`
//! service. Both allow exactly the requests whose `x-ext-authz` header is `allow`, and
//! count what they are asked, so a test can tell a request that was never asked from one
//! that was refused.

use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode};
use envoy_types::pb::envoy::service::auth::v3::{
    authorization_server::{Authorization, AuthorizationServer},
    check_response::HttpResponse,
    CheckRequest, CheckResponse, DeniedHttpResponse,
};
use envoy_types::pb::google::rpc::Status;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The header both services decide by.
pub const HEADER: &str = "x-ext-authz";

/// Both services, serving until dropped.
pub struct ExtAuthz {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    http_asked: Arc<AtomicUsize>,
    grpc_asked: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

struct Grpc {
    asked: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Authorization for Grpc {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let http = request
            .into_inner()
            .attributes
            .and_then(|a| a.request)
            .and_then(|r| r.http);
        let allowed = http
            .as_ref()
            .and_then(|h| h.headers.get(HEADER))
            .is_some_and(|v| v == "allow");
        let response = if allowed {
            CheckResponse {
                status: Some(Status::default()),
                ..Default::default()
            }
        } else {
            CheckResponse {
                // PERMISSION_DENIED.
                status: Some(Status {
                    code: 7,
                    ..Default::default()
                }),
                http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                    status: Some(HttpStatus {
                        code: StatusCode::Forbidden as i32,
                    }),
                    body: "denied by grpc-authz".into(),
                    ..Default::default()
                })),
                ..Default::default()
            }
        };
        Ok(tonic::Response::new(response))
    }
}

impl ExtAuthz {
    /// Both services on `ip` (a loopback address), each at a free port.
    pub fn start(ip: &str) -> ExtAuthz {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the ext_authz services");
        let (http_asked, grpc_asked) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let bind = |rt: &tokio::runtime::Runtime| {
            rt.block_on(tokio::net::TcpListener::bind(format!("{ip}:0")))
                .expect("bind an ext_authz service")
        };
        let http_listener = bind(&rt);
        let grpc_listener = bind(&rt);
        let http = http_listener.local_addr().expect("its address");
        let grpc = grpc_listener.local_addr().expect("its address");
        let asked = http_asked.clone();
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = http_listener.accept().await else {
                    continue;
                };
                let asked = asked.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let asked = asked.clone();
                        async move {
                            let _: &hyper::body::Incoming = req.body();
                            asked.fetch_add(1, Ordering::SeqCst);
                            let allowed = req
                                .headers()
                                .get(HEADER)
                                .is_some_and(|v| v.as_bytes() == b"allow");
                            let (status, body) = if allowed {
                                (200, String::new())
                            } else {
                                (403, "denied by http-authz".to_string())
                            };
                            hyper::Response::builder()
                                .status(status)
                                .body(body)
                                .map_err(|e| e.to_string())
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        let asked = grpc_asked.clone();
        rt.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_listener);
            let _ = tonic::transport::Server::builder()
                .add_service(AuthorizationServer::new(Grpc { asked }))
                .serve_with_incoming(incoming)
                .await;
        });
        ExtAuthz {
            http,
            grpc,
            http_asked,
            grpc_asked,
            _rt: rt,
        }
    }

    /// How many checks each has answered: `(http, grpc)`.
    pub fn asked(&self) -> (usize, usize) {
        (
            self.http_asked.load(Ordering::SeqCst),
            self.grpc_asked.load(Ordering::SeqCst),
        )
    }
}
