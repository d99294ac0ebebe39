//! The xDS protocol, and only the protocol: the pure state machines of Delta
//! ([`delta`]) and State-of-the-World ([`sotw`]) ADS, which read a
//! [`crate::hub::view::ProxyView`] and report what they did as [`Events`]; node identity
//! ([`node`]); authentication ([`auth`], [`tls`]); gRPC framing ([`grpc`]); and the tonic
//! server ([`server`], the only place a `tonic::Status` is made).
//!
//! May import: `crate::hub` (what to serve, and the [`crate::hub::recorder::Recorder`] that
//! observes it), `crate::input`. Nothing imports `xds` but `serve` and the bench's
//! simulated proxies.

pub mod auth;
pub mod delta;
pub mod grpc;
pub mod identity;
pub mod node;
pub mod server;
mod socket;
pub mod sotw;
pub mod tls;
pub mod token_review;

pub use crate::hub::recorder::{Feedback, Nack, Push, StreamEvent, Subscription};
/// VHDS (`serve --vhds`): how route configurations are split into virtual hosts. The hub
/// keeps the splits streams share; what goes on the wire is the protocol's, so its users
/// (the bench's simulated proxies and oracle) read it here.
pub use crate::hub::vhds;
use dataflows::model::ResourceType;

/// A request the protocol cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    UnknownType(String),
    TooManyNames(usize),
    /// A Delta stream's subscriptions to one type would pass [`MAX_NAMES`].
    TooManySubscribed(usize),
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::UnknownType(t) => write!(f, "unknown or unsupported type URL {t:?}"),
            ProtocolError::TooManyNames(n) => {
                write!(f, "request names {n} resources, more than {MAX_NAMES}")
            }
            ProtocolError::TooManySubscribed(n) => write!(
                f,
                "the stream would subscribe to {n} resources of one type, more than {MAX_NAMES}"
            ),
        }
    }
}

/// Upper bound of resource names one request may carry, and one Delta stream may subscribe
/// to per type.
pub const MAX_NAMES: usize = 100_000;

pub use crate::hub::recorder::SHOWN_NAMES;

pub(crate) fn resource_type(url: &str) -> Result<ResourceType, ProtocolError> {
    ResourceType::from_type_url(url).ok_or_else(|| ProtocolError::UnknownType(url.to_string()))
}

/// CDS and LDS are wildcard by default; EDS and RDS are always named.
pub(crate) fn wildcard_by_default(t: ResourceType) -> bool {
    matches!(t, ResourceType::Cluster | ResourceType::Listener)
}

/// Most bytes of a NACK's message kept (and logged): Envoy's text fits easily, a client
/// cannot make the history, the debug port or the log carry megabytes per NACK.
pub const MAX_NACK_MESSAGE: usize = 4096;

/// `message` cut to [`MAX_NACK_MESSAGE`] bytes at a character boundary, saying so, with
/// control characters other than newlines and tabs escaped (it reaches terminals through
/// `proxy-status`, `watch` and the log).
pub(crate) fn nack_message(message: &str) -> String {
    let message: String = message
        .chars()
        .flat_map(|c| match c {
            '\n' | '\t' => vec![c],
            c if c.is_control() => c.escape_default().collect(),
            c => vec![c],
        })
        .collect();
    if message.len() <= MAX_NACK_MESSAGE {
        return message;
    }
    let mut end = MAX_NACK_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} more bytes not kept)",
        &message[..end],
        message.len() - end
    )
}

/// The nonces of one stream: a counter behind a per-stream random prefix, so a client
/// cannot acknowledge a response it never read by guessing its nonce.
#[derive(Debug)]
pub struct Nonces {
    salt: u64,
    n: u64,
}

impl Default for Nonces {
    fn default() -> Self {
        // The OS's randomness; should it fail, a randomly keyed SipHash of the time still
        // differs per stream and is not predictable from outside.
        let salt = getrandom::u64().unwrap_or_else(|_| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.finish()
        });
        Nonces { salt, n: 0 }
    }
}

impl Nonces {
    pub fn issue(&mut self) -> String {
        self.n += 1;
        format!("{:016x}-{}", self.salt, self.n)
    }
}

/// What a protocol state machine reports as it serves, in the order it happened; the
/// server hands each to the hub's [`Recorder`]. Subscriptions are reported only when they
/// changed, as the complete list.
#[derive(Debug)]
pub struct Events {
    queue: Vec<StreamEvent>,
    subscriptions_changed: bool,
}

impl Default for Events {
    /// A new stream reports its subscriptions once, whatever its first request asks.
    fn default() -> Self {
        Events {
            queue: Vec::new(),
            subscriptions_changed: true,
        }
    }
}

impl Events {
    pub fn feedback(&mut self, f: Feedback) {
        self.queue.push(StreamEvent::Feedback(f));
    }

    pub fn push(&mut self, p: Push) {
        self.queue.push(StreamEvent::Push(p));
    }

    pub fn subscriptions_changed(&mut self) {
        self.subscriptions_changed = true;
    }

    /// Whether [`Events::take`] will want the current subscriptions.
    pub fn wants_subscriptions(&self) -> bool {
        self.subscriptions_changed
    }

    /// Everything reported since the last call; `subscriptions` is the stream's current
    /// list when [`Events::wants_subscriptions`] said so.
    pub fn take(&mut self, subscriptions: Option<Vec<Subscription>>) -> Vec<StreamEvent> {
        if let Some(s) = subscriptions.filter(|_| self.subscriptions_changed) {
            self.queue.push(StreamEvent::Subscriptions(s));
            self.subscriptions_changed = false;
        }
        std::mem::take(&mut self.queue)
    }
}

#[cfg(test)]
mod protocol_tests;
