//! The tonic ADS server: one task per stream, reading requests and the hub's change
//! notifications, writing what the protocol state machine says to send. The only place a
//! `tonic::Status` is made.

use super::auth::{bind, AuthConfig, Denied};
use super::delta::{DeltaOut, DeltaStream};
use super::grpc;
use super::node::{metadata_warnings, proxy_from_node};
use super::sotw::SotwStream;
use super::{Feedback, ProtocolError, StreamEvent};
use crate::hub::recorder::{Recorder, StreamRef};
use crate::hub::view::ProxyView;
use crate::hub::Hub;
use dataflows::materialize::Name;
use dataflows::model::ResourceType;
use dataflows::translate::secret;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    aggregated_discovery_service_server, DeltaDiscoveryRequest, DeltaDiscoveryResponse,
    DiscoveryRequest, DiscoveryResponse,
};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tonic::codec::{Codec, Streaming};
use tonic::codegen::http;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// Responses buffered per stream before a slow reader holds its task back (and only its).
const STREAM_BUFFER: usize = 8;
/// How long a stream may hold its initial-push slot ([`Limits::initial_pushes`]) by default
/// client does not answer: after that it goes on without one.
pub const WARMUP_HOLD: std::time::Duration = std::time::Duration::from_secs(10);
/// A stream gives its slot back once everything it was sent is acknowledged and it asked
/// for nothing more for this long (Envoy asks for EDS and RDS right after it took CDS and
/// LDS: a slot is not given back in between).
const WARMUP_QUIET: std::time::Duration = std::time::Duration::from_millis(50);
/// A stream that holds an initial-push slot and makes no progress for this long (no
/// request, no ACK, nothing sent) gives the slot back and goes on without one: a client that
/// never reads or answers then holds a slot for a quarter of a second, not for the whole
/// hold, so a few hundred of them connecting first delay a healthy proxy's first config by
/// about a second (a hundred slots turn over four times a second), not by tens.
const WARMUP_STALL: std::time::Duration = std::time::Duration::from_millis(250);
/// The first pause before secrets of certificate files are offered again after a refusal,
/// and the longest (doubling in between).
const FILE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(2);
const FILE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// A stream logs at most one NACK per this interval (the count of the others with it).
const NACK_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Largest xDS request accepted.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The two ADS flavours behind one stream loop.
trait Protocol: Default + Send + 'static {
    type Req: prost::Message + Default + Send + 'static;
    type Resp: prost::Message + Send + 'static;
    const NAME: &'static str;
    fn node(req: &Self::Req) -> Option<&Node>;
    /// Whether [`Protocol::on_request`] may ask for shared names: a plain ACK names no
    /// resource, and then costs no look at the hub.
    fn names_resources(req: &Self::Req) -> bool;
    /// `name` gives the hub's shared copy of a resource name or version.
    fn on_request(
        &mut self,
        req: &Self::Req,
        name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError>;
    /// A response as the state machine produces it.
    type Out: Send + 'static;
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Out>;
    /// `out` as the chunks of its gRPC frame.
    fn frame(out: Self::Out) -> Result<grpc::Chunks, Status>;
    /// What happened since the last call, for the hub's [`Recorder`].
    fn events(&mut self) -> Vec<StreamEvent>;
    /// A response is waiting for its ACK or NACK.
    fn in_flight(&self) -> bool;
    /// Sends `name` of type `t` again at the next look, whatever the client holds (a
    /// renewed workload certificate: same resource version, new body).
    fn resend(&mut self, t: ResourceType, name: Name);
    /// Sends the secrets of files the proxy reads itself (`file-cert:`, `file-root:`) again
    /// at the next look: a file missing when the proxy refused one may be there now, which
    /// no config change would tell.
    fn retry_file_secrets(&mut self);
    /// `pending` may have something new to send (see [`DeltaStream::wants_look`]).
    fn wants_look(&self) -> bool {
        true
    }
}

impl Protocol for DeltaStream {
    type Req = DeltaDiscoveryRequest;
    type Resp = DeltaDiscoveryResponse;
    type Out = DeltaOut;
    const NAME: &'static str = "delta";
    fn node(req: &Self::Req) -> Option<&Node> {
        req.node.as_ref()
    }
    fn names_resources(req: &Self::Req) -> bool {
        !req.resource_names_subscribe.is_empty()
            || !req.resource_names_unsubscribe.is_empty()
            || !req.initial_resource_versions.is_empty()
    }
    fn on_request(
        &mut self,
        req: &Self::Req,
        name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError> {
        DeltaStream::on_request(self, req, name)
    }
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Out> {
        DeltaStream::pending_out(self, view)
    }
    fn frame(out: Self::Out) -> Result<grpc::Chunks, Status> {
        grpc::delta_frame(out)
    }
    fn events(&mut self) -> Vec<StreamEvent> {
        let subscriptions = self
            .events
            .wants_subscriptions()
            .then(|| DeltaStream::subscriptions(self));
        self.events.take(subscriptions)
    }
    fn in_flight(&self) -> bool {
        DeltaStream::in_flight(self)
    }
    fn resend(&mut self, t: ResourceType, name: Name) {
        DeltaStream::resend(self, t, name)
    }
    fn retry_file_secrets(&mut self) {
        DeltaStream::retry_file_secrets(self)
    }
    fn wants_look(&self) -> bool {
        DeltaStream::wants_look(self)
    }
}

impl Protocol for SotwStream {
    type Req = DiscoveryRequest;
    type Resp = DiscoveryResponse;
    type Out = DiscoveryResponse;
    const NAME: &'static str = "sotw";
    fn node(req: &Self::Req) -> Option<&Node> {
        req.node.as_ref()
    }
    fn names_resources(_req: &Self::Req) -> bool {
        // SotW keeps its names as the client sent them.
        false
    }
    fn on_request(
        &mut self,
        req: &Self::Req,
        _name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError> {
        SotwStream::on_request(self, req)
    }
    fn pending(&mut self, view: &ProxyView<'_>) -> Vec<Self::Out> {
        SotwStream::pending(self, view)
    }
    fn frame(out: Self::Out) -> Result<grpc::Chunks, Status> {
        grpc::frame(&out).map(|b| vec![b])
    }
    fn events(&mut self) -> Vec<StreamEvent> {
        let subscriptions = self
            .events
            .wants_subscriptions()
            .then(|| SotwStream::subscriptions(self));
        self.events.take(subscriptions)
    }
    fn in_flight(&self) -> bool {
        SotwStream::in_flight(self)
    }
    fn resend(&mut self, t: ResourceType, name: Name) {
        SotwStream::resend(self, t, name)
    }
    fn retry_file_secrets(&mut self) {
        SotwStream::retry_file_secrets(self)
    }
}

/// What the transport proved about the client of one stream, and what it presented.
struct Peer {
    /// DER of the client certificate's leaf, under mTLS.
    leaf: Option<Vec<u8>>,
    /// The `authorization` header (a service-account token, with TokenReview).
    authorization: Option<String>,
}

fn denied(d: Denied) -> Status {
    match d {
        Denied::Unauthenticated(m) => Status::unauthenticated(m),
        Denied::PermissionDenied(m) => Status::permission_denied(m),
    }
}

async fn serve_stream<P: Protocol>(
    limits: Limits,
    hub: Arc<Hub>,
    auth: Arc<AuthConfig>,
    warmup: Arc<Semaphore>,
    peer: Peer,
    mut inbound: Streaming<P::Req>,
    tx: mpsc::Sender<Result<grpc::Chunks, Status>>,
) {
    let (first_request_timeout, warmup_hold) =
        (limits.first_request_timeout, limits.initial_push_hold);
    let first = match tokio::time::timeout(first_request_timeout, inbound.message()).await {
        Ok(Ok(Some(m))) => m,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            refuse_unreadable(&tx, "-", e).await;
            return;
        }
        Err(_) => {
            let _ = tx
                .send(Err(Status::deadline_exceeded(format!(
                    "no request within {} ms of opening the stream",
                    first_request_timeout.as_millis()
                ))))
                .await;
            return;
        }
    };
    let mut proxy = match proxy_from_node(P::node(&first)) {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Err(Status::invalid_argument(e.to_string()))).await;
            return;
        }
    };
    // The identity the stream proved binds what the node claims (namespace, service
    // account, and the node id: no pod or address of another account).
    let proven = auth
        .authenticate(peer.leaf.as_deref(), peer.authorization.as_deref())
        .await
        .and_then(|identity| {
            bind(identity.as_ref(), &mut proxy)?;
            if let Some(i) = &identity {
                if let Some(why) = hub.identity_conflict(&proxy, &i.namespace, &i.service_account) {
                    return Err(Denied::PermissionDenied(why));
                }
            }
            Ok(identity)
        });
    let trust = match proven {
        Ok(identity) => auth.trust(identity),
        Err(d) => {
            tracing::warn!(proxy = %proxy.id, reason = %d, "stream refused");
            let _ = tx.send(Err(denied(d))).await;
            return;
        }
    };
    let id = proxy.id.clone();
    let watched = match hub.connect(proxy) {
        Ok(n) => n,
        Err(why) => {
            tracing::warn!(proxy = %id, reason = %why, "stream refused");
            let _ = tx.send(Err(Status::already_exists(why))).await;
            return;
        }
    };
    let stream = hub.next_stream_id();
    tracing::info!(
        proxy = %id,
        stream,
        protocol = P::NAME,
        identity = %trust.identity.as_ref().map_or("none".to_string(), |i| format!("{}/{} ({})", i.namespace, i.service_account, i.by)),
        keys = trust.keys,
        "stream opened"
    );
    // What the proxy asks for and meshflow cannot use is said, not dropped.
    for w in metadata_warnings(P::node(&first)) {
        tracing::warn!(
            proxy = %id,
            field = w.field,
            value = %w.value,
            "node metadata {} {}",
            w.field,
            w.what
        );
    }
    let mut state = P::default();
    let mut next = Some(first);
    let (mut nack_logged, mut nacks_not_logged) = (None::<tokio::time::Instant>, 0u64);
    let from = StreamRef {
        proxy: &id,
        stream,
        protocol: P::NAME,
    };
    // A new stream's first full config is built only while it holds one of a bounded number
    // of slots, kept until it has been acknowledged (or WARMUP_HOLD passed): ten thousand
    // proxies connecting at once then never have ten thousand whole configs encoded and
    // queued at the same time. Later (small) pushes do not wait for a slot.
    let mut slot: Option<(OwnedSemaphorePermit, tokio::time::Instant)> = None;
    let mut quiet_since: Option<tokio::time::Instant> = None;
    // The last time the stream moved: a request came, or responses went out.
    let mut progress = tokio::time::Instant::now();
    let mut warmed = false;
    let mut woken = true;
    let mut rotations_seen = watched.rotations();
    // After the proxy refuses secrets (a certificate file not on it, yet), the file secrets
    // are offered again, less often each time it refuses again.
    let mut file_retry: Option<tokio::time::Instant> = None;
    let mut file_retry_pause = FILE_RETRY_FIRST;
    loop {
        if file_retry.is_some_and(|at| tokio::time::Instant::now() >= at) {
            file_retry = None;
            state.retry_file_secrets();
            woken = true;
        }
        let rotations = watched.rotations();
        if rotations != rotations_seen {
            rotations_seen = rotations;
            if trust.keys {
                state.resend(ResourceType::Secret, Name::from(secret::WORKLOAD_CERT));
            }
        }
        if let Some(req) = next.take() {
            progress = tokio::time::Instant::now();
            let taken = if P::names_resources(&req) {
                hub.with_names(|name| state.on_request(&req, name))
            } else {
                state.on_request(&req, &|n| Name::from(n))
            };
            if let Err(e) = taken {
                let _ = tx.send(Err(Status::invalid_argument(e.to_string()))).await;
                break;
            }
            for event in state.events() {
                match &event {
                    StreamEvent::Feedback(Feedback::Nack(n)) if n.rtype == ResourceType::Secret => {
                        file_retry = Some(tokio::time::Instant::now() + file_retry_pause);
                        file_retry_pause = (file_retry_pause * 2).min(FILE_RETRY_MAX);
                    }
                    StreamEvent::Feedback(Feedback::Ack { rtype, .. })
                        if *rtype == ResourceType::Secret && file_retry.is_none() =>
                    {
                        file_retry_pause = FILE_RETRY_FIRST;
                    }
                    _ => {}
                }
                if let StreamEvent::Feedback(Feedback::Nack(nack)) = &event {
                    // One line per stream per NACK_LOG_EVERY at most; every NACK is still
                    // recorded (metrics, history, debug port).
                    let now = tokio::time::Instant::now();
                    if nack_logged.is_none_or(|at| now >= at + NACK_LOG_EVERY) {
                        tracing::warn!(proxy = %id, rtype = nack.rtype.short(), nonce = %nack.nonce, error = %nack.message, not_logged = nacks_not_logged, "NACK");
                        nack_logged = Some(now);
                        nacks_not_logged = 0;
                    } else {
                        nacks_not_logged += 1;
                    }
                }
                hub.record(from, event);
            }
        }
        if !warmed && slot.is_none() {
            match warmup.clone().acquire_owned().await {
                Ok(permit) => {
                    progress = tokio::time::Instant::now();
                    slot = Some((permit, progress + warmup_hold));
                }
                Err(_) => warmed = true,
            }
        }
        // A wake-up by the hub always looks; a request only when it may have changed
        // what is due.
        let look = woken || state.wants_look() || slot.is_some();
        let responses = if look {
            hub.with_view_keys(&id, trust.keys, |view| state.pending(view))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        woken = false;
        let mut wake_at = file_retry;
        if let Some((_, hold)) = &slot {
            let now = tokio::time::Instant::now();
            let deadline = &(*hold).min(progress + WARMUP_STALL);
            let acknowledged = responses.is_empty() && !state.in_flight();
            // Not computed yet (its first epoch): nothing was sent, keep waiting.
            let computed = hub.read(|st| st.proxy(&id).is_some_and(|e| e.ready));
            quiet_since = match (acknowledged && computed, quiet_since) {
                (true, Some(q)) => Some(q),
                (true, None) => Some(now),
                (false, _) => None,
            };
            let quiet_end = quiet_since.map(|q| q + WARMUP_QUIET);
            if now >= *deadline || quiet_end.is_some_and(|q| now >= q) {
                slot = None;
                warmed = true;
            } else {
                let at = quiet_end.map_or(*deadline, |q| q.min(*deadline));
                wake_at = Some(wake_at.map_or(at, |w: tokio::time::Instant| w.min(at)));
            }
        }
        // Recorded before sending, so an ACK never arrives for a push not yet recorded.
        for event in state.events() {
            hub.record(from, event);
        }
        let sent_any = !responses.is_empty();
        if sent_any {
            // With timestamps, where a change's time goes between the hub and the wire.
            tracing::debug!(proxy = %id, responses = responses.len(), "responses due");
        }
        for r in responses {
            // A client that does not read fills the channel and holds this task here: the
            // slot's deadline is kept while waiting, so no client can hold a slot longer.
            let room = match &slot {
                Some((_, hold)) => {
                    let deadline = (*hold).min(progress + WARMUP_STALL);
                    tokio::select! {
                        room = tx.reserve() => room,
                        _ = tokio::time::sleep_until(deadline) => {
                            slot = None;
                            warmed = true;
                            tx.reserve().await
                        }
                    }
                }
                None => tx.reserve().await,
            };
            let Ok(room) = room else {
                hub.disconnect(&id, stream);
                return;
            };
            // Encoded here, one allocation per response, freed once HTTP/2 wrote it.
            room.send(P::frame(r));
        }
        if sent_any {
            progress = tokio::time::Instant::now();
            if slot.is_some() {
                // Woken to give the slot back if no answer comes.
                let stall = progress + WARMUP_STALL;
                wake_at = Some(wake_at.map_or(stall, |w: tokio::time::Instant| w.min(stall)));
            }
        }
        tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(req)) => next = Some(req),
                Ok(None) => break,
                Err(e) => {
                    refuse_unreadable(&tx, &id, e).await;
                    break;
                }
            },
            _ = watched.notify.notified() => woken = true,
            _ = tokio::time::sleep_until(wake_at.unwrap_or_else(tokio::time::Instant::now)), if wake_at.is_some() => {}
        }
    }
    tracing::info!(proxy = %id, stream, protocol = P::NAME, "stream closed");
    hub.disconnect(&id, stream);
}

/// Ends a stream whose request could not be read with a status that says why: a request
/// that is not a valid protobuf is INVALID_ARGUMENT, one over [`MAX_MESSAGE_BYTES`] is
/// RESOURCE_EXHAUSTED (both logged, once per stream since the stream ends). Anything else
/// is the client going away, which needs no answer.
async fn refuse_unreadable(
    tx: &mpsc::Sender<Result<grpc::Chunks, Status>>,
    proxy: &str,
    e: Status,
) {
    let status = match e.code() {
        // tonic reports a protobuf that does not decode as INTERNAL, a frame over the
        // limit as OUT_OF_RANGE: both are the client's doing.
        tonic::Code::Internal => {
            Status::invalid_argument(format!("unreadable request: {}", e.message()))
        }
        tonic::Code::OutOfRange => Status::resource_exhausted(format!(
            "request over {MAX_MESSAGE_BYTES} bytes: {}",
            e.message()
        )),
        _ => {
            tracing::debug!(proxy, error = %e, "stream ended");
            return;
        }
    };
    tracing::warn!(proxy, code = ?status.code(), reason = status.message(), "stream refused");
    let _ = tx.send(Err(status)).await;
}

/// The ADS service over a hub.
pub struct Ads {
    hub: Arc<Hub>,
    limits: Limits,
    auth: Arc<AuthConfig>,
    open_streams: Arc<AtomicUsize>,
    /// Slots for streams building their first full config.
    warmup: Arc<Semaphore>,
}

/// Server-wide limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Concurrent ADS streams; more are refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// HTTP/2 keepalive ping interval, and how long an unanswered ping is tolerated.
    pub keepalive_interval: std::time::Duration,
    pub keepalive_timeout: std::time::Duration,
    /// Streams that may be sending their first full config at once (Istio bounds
    /// concurrent pushes the same way, 100 by default).
    pub initial_pushes: usize,
    /// How long a new stream may take to send its first request: streams that never send
    /// one would otherwise hold `max_streams` slots for ever.
    pub first_request_timeout: std::time::Duration,
    /// How long a stream may hold an initial-push slot at most, from when it got it: a
    /// deadline no client behaviour extends (not answering, not reading).
    pub initial_push_hold: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_streams: 50_000,
            keepalive_interval: std::time::Duration::from_secs(30),
            keepalive_timeout: std::time::Duration::from_secs(20),
            initial_pushes: 100,
            first_request_timeout: std::time::Duration::from_secs(10),
            initial_push_hold: WARMUP_HOLD,
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
        // The shared token file and the per-workload token review both read the header;
        // serve refuses to have both.
        if self.auth.token_review.is_none() {
            self.auth.check_token(authorization).map_err(denied)?;
        }
        let leaf = request
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        Ok((
            slot,
            Peer {
                leaf,
                authorization: authorization.map(String::from),
            },
        ))
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

    /// Opens one ADS stream of protocol `P`: admission, then a task that serves it; the
    /// response's body carries what the task sends.
    fn open<P: Protocol>(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<tonic::body::Body>, Status> {
        grpc::check_request(&request)?;
        let (parts, body) = request.into_parts();
        let decoder = Codec::decoder(&mut tonic_prost::ProstCodec::<P::Resp, P::Req>::default());
        let inbound = Streaming::new_request(decoder, body, None, Some(MAX_MESSAGE_BYTES));
        let request = Request::from_parts(
            MetadataMap::from_headers(parts.headers),
            parts.extensions,
            inbound,
        );
        let (slot, peer) = self.admit(&request)?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (hub, auth, warmup) = (self.hub.clone(), self.auth.clone(), self.warmup.clone());
        let limits = self.limits;
        tokio::spawn(async move {
            serve_stream::<P>(limits, hub, auth, warmup, peer, request.into_inner(), tx).await;
            drop(slot);
        });
        Ok(grpc::streaming_response(rx))
    }
}

/// The ADS gRPC service (`envoy.service.discovery.v3.AggregatedDiscoveryService`), served
/// at the HTTP/2 level for the framing of [`grpc`].
#[derive(Clone)]
pub struct AdsService(Arc<Ads>);

impl tonic::server::NamedService for AdsService {
    const NAME: &'static str = aggregated_discovery_service_server::SERVICE_NAME;
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for AdsService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let opened = match request.uri().path() {
            grpc::SOTW_PATH => self.0.open::<SotwStream>(request),
            grpc::DELTA_PATH if self.0.hub.engine().pushes_everything() => Err(Status::failed_precondition(
                "this meshflow runs the full-push baseline, which serves State-of-the-World ADS only",
            )),
            grpc::DELTA_PATH => self.0.open::<DeltaStream>(request),
            path => Err(Status::unimplemented(format!("no method {path}"))),
        };
        std::future::ready(Ok(opened.unwrap_or_else(|s| s.into_http())))
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
    let svc = AdsService(Arc::new(Ads {
        hub,
        limits,
        auth: Arc::new(auth),
        open_streams,
        warmup: Arc::new(Semaphore::new(limits.initial_pushes.max(1))),
    }));
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
            use tokio_stream::StreamExt as _;
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener)
                .map(|tcp| tcp.map(super::socket::no_delay));
            router.serve_with_incoming(incoming).await
        }
    }
}
