//! The tonic ADS server: one task per stream, reading requests and the hub's change
//! notifications, writing what the protocol state machine says to send. The only place a
//! `tonic::Status` is made.

use super::auth::{AuthConfig, Denied};
use super::delta::DeltaStream;
use super::hub::{Hub, ProxyView};
use super::node::proxy_from_node;
use super::sotw::SotwStream;
use super::{Feedback, ProtocolError, Push, Subscription};
use dataflows::materialize::Name;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Responses buffered per stream before a slow reader holds its task back (and only its).
const STREAM_BUFFER: usize = 8;
/// Largest xDS request accepted.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The two ADS flavours behind one stream loop.
trait Protocol: Default + Send + 'static {
    type Req: Send + 'static;
    type Resp: Send + 'static;
    const NAME: &'static str;
    fn node(req: &Self::Req) -> Option<&Node>;
    /// `name` gives the hub's shared copy of a resource name or version.
    fn on_request(
        &mut self,
        req: &Self::Req,
        name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError>;
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Resp>;
    fn feedback(&mut self) -> Vec<Feedback>;
    fn pushes(&mut self) -> Vec<Push>;
    /// Changes whenever a subscription does.
    fn subscription_generation(&self) -> u64;
    fn subscriptions(&self) -> Vec<Subscription>;
}

impl Protocol for DeltaStream {
    type Req = DeltaDiscoveryRequest;
    type Resp = DeltaDiscoveryResponse;
    const NAME: &'static str = "delta";
    fn node(req: &Self::Req) -> Option<&Node> {
        req.node.as_ref()
    }
    fn on_request(
        &mut self,
        req: &Self::Req,
        name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError> {
        DeltaStream::on_request(self, req, name).map(|_| ())
    }
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Resp> {
        DeltaStream::pending(self, view)
    }
    fn feedback(&mut self) -> Vec<Feedback> {
        std::mem::take(&mut self.feedback)
    }
    fn pushes(&mut self) -> Vec<Push> {
        std::mem::take(&mut self.pushes)
    }
    fn subscription_generation(&self) -> u64 {
        self.subscription_generation
    }
    fn subscriptions(&self) -> Vec<Subscription> {
        DeltaStream::subscriptions(self)
    }
}

impl Protocol for SotwStream {
    type Req = DiscoveryRequest;
    type Resp = DiscoveryResponse;
    const NAME: &'static str = "sotw";
    fn node(req: &Self::Req) -> Option<&Node> {
        req.node.as_ref()
    }
    fn on_request(
        &mut self,
        req: &Self::Req,
        _name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError> {
        SotwStream::on_request(self, req).map(|_| ())
    }
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Resp> {
        SotwStream::pending(self, view)
    }
    fn feedback(&mut self) -> Vec<Feedback> {
        std::mem::take(&mut self.feedback)
    }
    fn pushes(&mut self) -> Vec<Push> {
        std::mem::take(&mut self.pushes)
    }
    fn subscription_generation(&self) -> u64 {
        self.subscription_generation
    }
    fn subscriptions(&self) -> Vec<Subscription> {
        SotwStream::subscriptions(self)
    }
}

/// What the transport proved about the client of one stream.
struct Peer {
    /// DER of the client certificate's leaf, under mTLS.
    leaf: Option<Vec<u8>>,
}

fn denied(d: Denied) -> Status {
    match d {
        Denied::Unauthenticated(m) => Status::unauthenticated(m),
        Denied::PermissionDenied(m) => Status::permission_denied(m),
    }
}

async fn serve_stream<P: Protocol>(
    hub: Arc<Hub>,
    auth: Arc<AuthConfig>,
    peer: Peer,
    mut inbound: Streaming<P::Req>,
    tx: mpsc::Sender<Result<P::Resp, Status>>,
) {
    let first = match inbound.message().await {
        Ok(Some(m)) => m,
        _ => return,
    };
    let proxy = match proxy_from_node(P::node(&first)) {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Err(Status::invalid_argument(e.to_string()))).await;
            return;
        }
    };
    if let Err(d) = auth.check_identity(peer.leaf.as_deref(), &proxy.namespace) {
        tracing::warn!(proxy = %proxy.id, reason = %d, "stream refused");
        let _ = tx.send(Err(denied(d))).await;
        return;
    }
    let id = proxy.id.clone();
    let stream = hub.next_stream_id();
    tracing::info!(proxy = %id, stream, protocol = P::NAME, "stream opened");
    let notify = hub.connect(proxy);
    let mut state = P::default();
    let mut next = Some(first);
    // Subscriptions are copied to the hub for the debug API only when they change.
    let mut recorded_generation = None;
    loop {
        if let Some(req) = next.take() {
            if let Err(e) = hub.with_names(|name| state.on_request(&req, name)) {
                let _ = tx.send(Err(Status::invalid_argument(e.to_string()))).await;
                break;
            }
            for fb in state.feedback() {
                if let Feedback::Nack(nack) = &fb {
                    tracing::warn!(proxy = %id, rtype = nack.rtype.short(), nonce = %nack.nonce, error = %nack.message, "NACK");
                }
                hub.record_feedback(&id, stream, fb);
            }
            if recorded_generation != Some(state.subscription_generation()) {
                recorded_generation = Some(state.subscription_generation());
                hub.record_subscriptions(&id, stream, P::NAME, state.subscriptions());
            }
        }
        let responses = hub
            .with_view(&id, |view| state.pending(view))
            .unwrap_or_default();
        // Recorded before sending, so an ACK never arrives for a push not yet recorded.
        for push in state.pushes() {
            hub.record_push(&id, stream, push);
        }
        for r in responses {
            if tx.send(Ok(r)).await.is_err() {
                hub.disconnect(&id, stream);
                return;
            }
        }
        tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(req)) => next = Some(req),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(proxy = %id, error = %e, "stream ended");
                    break;
                }
            },
            _ = notify.notified() => {}
        }
    }
    tracing::info!(proxy = %id, stream, protocol = P::NAME, "stream closed");
    hub.disconnect(&id, stream);
}

/// The ADS service over a hub.
pub struct Ads {
    hub: Arc<Hub>,
    limits: Limits,
    auth: Arc<AuthConfig>,
    open_streams: Arc<AtomicUsize>,
}

/// Server-wide limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Concurrent ADS streams; more are refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// HTTP/2 keepalive ping interval, and how long an unanswered ping is tolerated.
    pub keepalive_interval: std::time::Duration,
    pub keepalive_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_streams: 50_000,
            keepalive_interval: std::time::Duration::from_secs(30),
            keepalive_timeout: std::time::Duration::from_secs(20),
        }
    }
}

/// Holds one slot of the stream budget while a stream task runs.
struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ads {
    /// Admission of a new stream: the stream budget, then the bearer token.
    fn admit<T>(&self, request: &Request<T>) -> Result<(StreamSlot, Peer), Status> {
        let slot = self.take_slot()?;
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        self.auth.check_token(authorization).map_err(denied)?;
        let leaf = request
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        Ok((slot, Peer { leaf }))
    }

    fn take_slot(&self) -> Result<StreamSlot, Status> {
        let n = self.open_streams.fetch_add(1, Ordering::SeqCst);
        let slot = StreamSlot(self.open_streams.clone());
        if n >= self.limits.max_streams {
            return Err(Status::resource_exhausted(format!(
                "this meshflow serves at most {} xDS streams",
                self.limits.max_streams
            )));
        }
        Ok(slot)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let (slot, peer) = self.admit(&request)?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (hub, auth) = (self.hub.clone(), self.auth.clone());
        tokio::spawn(async move {
            serve_stream::<SotwStream>(hub, auth, peer, request.into_inner(), tx).await;
            drop(slot);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        if self.hub.is_full_push() {
            return Err(Status::failed_precondition(
                "this meshflow runs the full-push baseline, which serves State-of-the-World ADS only",
            ));
        }
        let (slot, peer) = self.admit(&request)?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (hub, auth) = (self.hub.clone(), self.auth.clone());
        tokio::spawn(async move {
            serve_stream::<DeltaStream>(hub, auth, peer, request.into_inner(), tx).await;
            drop(slot);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves ADS on `addr` until the process ends.
pub async fn serve(
    hub: Arc<Hub>,
    limits: Limits,
    auth: AuthConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
    listener: tokio::net::TcpListener,
) -> Result<(), tonic::transport::Error> {
    let open_streams = Arc::new(AtomicUsize::new(0));
    let svc = AggregatedDiscoveryServiceServer::new(Ads {
        hub,
        limits,
        auth: Arc::new(auth),
        open_streams,
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(usize::MAX);
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .add_service(svc);
    match tls {
        Some(acceptor) => {
            router
                .serve_with_incoming(super::tls::incoming(listener, acceptor))
                .await
        }
        None => {
            router
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
        }
    }
}
