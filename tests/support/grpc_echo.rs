//! A gRPC echo backend and its client, for the gRPC route tests: the server speaks a real
//! gRPC service over HTTP/2 (Envoy's `envoy.service.auth.v3.Authorization`, whose generated
//! code the tests already have; its meaning is not used) and answers every call with
//! response metadata telling which backend answered (`x-backend`) and which `x-` request
//! metadata arrived (`x-echo-<name>`, values joined by `,`; not the ones Envoy adds
//! itself). It counts the calls it answered. A second service, Envoy's
//! `envoy.service.ratelimit.v3.RateLimitService`, answers `ShouldRateLimit` the same way, so
//! that routes by gRPC method have two methods to tell apart.

use envoy_types::pb::envoy::service::auth::v3::{
    authorization_client::AuthorizationClient,
    authorization_server::{Authorization, AuthorizationServer},
    CheckRequest, CheckResponse,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_client::RateLimitServiceClient,
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
    RateLimitRequest, RateLimitResponse,
};
use envoy_types::pb::google::rpc::Status;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An echo server on one loopback address, serving until dropped.
pub struct GrpcEcho {
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

struct Echo {
    identity: String,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Authorization for Echo {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let echoed = echoed_metadata(request.metadata());
        let mut response = tonic::Response::new(CheckResponse {
            status: Some(Status::default()),
            ..Default::default()
        });
        self.answer(echoed, response.metadata_mut())?;
        Ok(response)
    }
}

#[tonic::async_trait]
impl RateLimitService for Echo {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let echoed = echoed_metadata(request.metadata());
        let mut response = tonic::Response::new(RateLimitResponse::default());
        self.answer(echoed, response.metadata_mut())?;
        Ok(response)
    }
}

/// The `x-` request metadata a call arrived with, by name (values in order), except what
/// proxies add on their own.
fn echoed_metadata(request: &tonic::metadata::MetadataMap) -> BTreeMap<String, Vec<String>> {
    let mut echoed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in request.iter() {
        if let tonic::metadata::KeyAndValueRef::Ascii(key, value) = entry {
            let name = key.as_str();
            if name.starts_with("x-") && !added_by_proxies(name) {
                let value = value.to_str().unwrap_or("<not visible ASCII>");
                echoed
                    .entry(name.to_owned())
                    .or_default()
                    .push(value.into());
            }
        }
    }
    echoed
}

impl Echo {
    /// Writes the answering backend and the echoed metadata into a response's metadata.
    fn answer(
        &self,
        echoed: BTreeMap<String, Vec<String>>,
        metadata: &mut tonic::metadata::MetadataMap,
    ) -> Result<(), tonic::Status> {
        let ascii = |s: &str| s.parse().map_err(|_| tonic::Status::internal(s.to_owned()));
        metadata.insert("x-backend", ascii(&self.identity)?);
        for (name, values) in echoed {
            let key: tonic::metadata::AsciiMetadataKey = format!("x-echo-{name}")
                .parse()
                .map_err(|_| tonic::Status::internal(name.clone()))?;
            metadata.insert(key, ascii(&values.join(","))?);
        }
        Ok(())
    }
}

/// The `x-` headers Envoy adds on its own (not what a route's filters did).
fn added_by_proxies(name: &str) -> bool {
    name.starts_with("x-envoy") || name.starts_with("x-forwarded-") || name == "x-request-id"
}

impl GrpcEcho {
    /// Serves on `ip:port` as `identity`; panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> GrpcEcho {
        GrpcEcho::serve(ip, port, identity, None)
    }

    /// Serves on `ip:port` as `identity` over TLS only (certificate `cert_pem`, key
    /// `key_pem`; ALPN `h2`); panics if the address cannot be bound.
    pub fn start_tls(
        ip: &str,
        port: u16,
        identity: &str,
        (cert_pem, key_pem): (&str, &str),
    ) -> GrpcEcho {
        let tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(cert_pem, key_pem));
        GrpcEcho::serve(ip, port, identity, Some(tls))
    }

    fn serve(
        ip: &str,
        port: u16,
        identity: &str,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> GrpcEcho {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the gRPC echo");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(format!("{ip}:{port}")))
            .unwrap_or_else(|e| panic!("bind the gRPC echo on {ip}:{port}: {e}"));
        let addr = listener.local_addr().expect("its address");
        let calls = Arc::new(AtomicUsize::new(0));
        let echo = Arc::new(Echo {
            identity: identity.to_owned(),
            calls: calls.clone(),
        });
        rt.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let mut server = tonic::transport::Server::builder();
            if let Some(tls) = tls {
                server = server
                    .tls_config(tls)
                    .expect("the echo's TLS configuration");
            }
            let _ = server
                .add_service(AuthorizationServer::from_arc(echo.clone()))
                .add_service(RateLimitServiceServer::from_arc(echo))
                .serve_with_incoming(incoming)
                .await;
        });
        GrpcEcho {
            addr,
            calls,
            _rt: rt,
        }
    }

    /// How many calls it has answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// What a call came back with: its gRPC status code (0 for OK), the answering backend's
/// identity, and the echoed `x-` metadata (by request name, without the `x-echo-` prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Echoed {
    pub code: i32,
    pub backend: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

/// A client on one HTTP/2 connection to `addr`, sending `:authority` `authority` (the
/// service's host, as a mesh client addresses it).
pub struct GrpcEchoClient {
    rt: tokio::runtime::Runtime,
    client: AuthorizationClient<tonic::transport::Channel>,
    limits: RateLimitServiceClient<tonic::transport::Channel>,
}

/// The echo's two methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `envoy.service.auth.v3.Authorization/Check`.
    Check,
    /// `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
    ShouldRateLimit,
}

impl GrpcEchoClient {
    pub fn connect(addr: SocketAddr, authority: &str) -> Result<GrpcEchoClient, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let origin: tonic::codegen::http::Uri = format!("http://{authority}")
            .parse()
            .map_err(|e| format!("authority {authority}: {e}"))?;
        let channel = rt.block_on(async {
            tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| e.to_string())?
                .origin(origin)
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(5))
                .connect()
                .await
                .map_err(|e| format!("connect {addr}: {e}"))
        })?;
        Ok(GrpcEchoClient {
            rt,
            client: AuthorizationClient::new(channel.clone()),
            limits: RateLimitServiceClient::new(channel),
        })
    }

    /// One `Check` call carrying `metadata` (a name may repeat).
    pub fn call(&mut self, metadata: &[(&str, &str)]) -> Result<Echoed, String> {
        self.call_method(Method::Check, metadata)
    }

    /// One call of `method` carrying `metadata` (a name may repeat).
    pub fn call_method(
        &mut self,
        method: Method,
        metadata: &[(&str, &str)],
    ) -> Result<Echoed, String> {
        let mut sent = tonic::metadata::MetadataMap::new();
        for (name, value) in metadata {
            let key: tonic::metadata::AsciiMetadataKey =
                name.parse().map_err(|_| format!("metadata name {name}"))?;
            let value = value
                .parse()
                .map_err(|_| format!("metadata value {value}"))?;
            sent.append(key, value);
        }
        let (client, limits) = (&mut self.client, &mut self.limits);
        let extensions = tonic::Extensions::default();
        let (code, headers) = self.rt.block_on(async {
            let answered = match method {
                Method::Check => client
                    .check(tonic::Request::from_parts(
                        sent,
                        extensions,
                        CheckRequest::default(),
                    ))
                    .await
                    .map(|r| r.metadata().clone()),
                Method::ShouldRateLimit => limits
                    .should_rate_limit(tonic::Request::from_parts(
                        sent,
                        extensions,
                        RateLimitRequest::default(),
                    ))
                    .await
                    .map(|r| r.metadata().clone()),
            };
            match answered {
                Ok(headers) => (0, headers),
                Err(status) => (status.code() as i32, status.metadata().clone()),
            }
        });
        let text = |v: &tonic::metadata::MetadataValue<tonic::metadata::Ascii>| {
            v.to_str().unwrap_or_default().to_owned()
        };
        let metadata = headers
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => key
                    .as_str()
                    .strip_prefix("x-echo-")
                    .map(|name| (name.to_owned(), text(value))),
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        Ok(Echoed {
            code,
            backend: headers.get("x-backend").map(text),
            metadata,
        })
    }
}
