//! Sync state per proxy and type: what went over the wire and when (the response in flight,
//! the last send, the last ACK, the versions the proxy acknowledged, the last NACK), each
//! stream's subscriptions, and the one reading of it that every debug surface reports
//! ([`sync_state`]).
//!
//! # What the states mean
//!
//! - `NOT SENT`: the proxy's first epoch is not computed yet, or it should hold nothing of
//!   this type and never acknowledged anything of it.
//! - `NACKED`: the last answer of this type was a NACK (a later ACK clears it).
//! - `STALE (age)`: a response of this type was sent and is not answered yet (age since
//!   the send), or resources exist and nothing was sent yet (age since the proxy's config
//!   was ready). As in `istioctl proxy-status`, a push that is merely in flight shows
//!   STALE for the milliseconds until its ACK.
//! - `SYNCED`: nothing in flight, and the proxy acknowledged a response of this type or
//!   resumed a Delta stream with `initial_resource_versions` (it already holds what it
//!   needs: nothing was sent, nothing needs acknowledging).
//!
//! What is still approximated: the state is per type, not per resource; with several
//! streams for one node id, the last push of any of them is the one in flight.

use super::per_type::PerType;
use super::stream_events::{Push, Subscription};
use super::HubState;
use dataflows::materialize::Name;
use dataflows::model::{Proxy, ResourceType};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;

/// Resource name → version, for one type.
pub type Versions = BTreeMap<Name, Name>;

/// A response sent and not answered yet.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub stream: u64,
    pub nonce: String,
    pub sent_at: Instant,
    pub sent_wall: SystemTime,
    /// The hub's epoch when it was sent.
    pub epoch: u64,
    pub(super) push: Push,
}

/// Per proxy and type: what went over the wire, and when.
#[derive(Clone, Debug, Default)]
pub struct TypeSync {
    /// ACKs received.
    pub acks: u64,
    /// Envoy's message for the last NACK, until a later ACK.
    pub last_nack: Option<String>,
    pub last_sent: Option<SystemTime>,
    pub last_ack: Option<SystemTime>,
    pub last_nack_at: Option<Instant>,
    pub in_flight: Option<InFlight>,
    /// Name → version the proxy acknowledged (or brought when it resumed).
    pub acked: Versions,
    /// The hub's epoch when the last response the proxy acknowledged was sent (0: none).
    pub acked_epoch: u64,
    /// A Delta stream resumed with `initial_resource_versions`.
    pub resumed: bool,
}

/// One open stream of a proxy, for the debug API.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub protocol: &'static str,
    pub opened: SystemTime,
    pub subscriptions: Vec<Subscription>,
}

/// One connected proxy: its definition, its streams and its sync state.
pub struct ProxyEntry {
    pub proxy: Proxy,
    /// Open streams for this node id; the proxy is an input while any is open.
    pub(super) streams: usize,
    /// Its first epoch has been computed; until then there is nothing to send.
    pub ready: bool,
    pub(super) notify: Arc<Notify>,
    /// Sends, ACKs and NACKs per type.
    pub sync: PerType<TypeSync>,
    /// When the first epoch with this proxy was applied.
    pub ready_at: Option<Instant>,
    /// Open streams by stream id.
    pub stream_info: BTreeMap<u64, StreamInfo>,
    /// Resources the engine's latest pushes resend unchanged: (epoch, type, name).
    pub(super) forced: Vec<(u64, ResourceType, Name)>,
    /// Bumped each time its workload certificate is renewed: its streams resend `default`.
    /// Shared with the streams ([`super::StreamWatch`]), which read it at every wake-up
    /// without taking the hub's lock.
    pub(super) rotations: Arc<std::sync::atomic::AtomicU64>,
}

impl ProxyEntry {
    pub(super) fn new(proxy: Proxy) -> ProxyEntry {
        ProxyEntry {
            proxy,
            streams: 0,
            ready: false,
            notify: Arc::new(Notify::new()),
            sync: PerType::default(),
            ready_at: None,
            stream_info: BTreeMap::new(),
            forced: Vec::new(),
            rotations: Default::default(),
        }
    }

    pub fn streams(&self) -> usize {
        self.streams
    }

    /// Has an open stream (an entry without one is waiting for its retraction).
    pub fn connected(&self) -> bool {
        self.streams > 0
    }
}

/// A proxy's sync state for one xDS type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    Synced,
    Stale,
    Nacked,
    NotSent,
}

impl SyncState {
    pub const ALL: [SyncState; 4] = [
        SyncState::Synced,
        SyncState::Stale,
        SyncState::Nacked,
        SyncState::NotSent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Synced => "SYNCED",
            SyncState::Stale => "STALE",
            SyncState::Nacked => "NACKED",
            SyncState::NotSent => "NOT SENT",
        }
    }
}

/// The sync state of one type of one proxy, by the rules in the module documentation.
pub fn sync_state(st: &HubState, entry: &ProxyEntry, t: ResourceType) -> SyncState {
    sync_state_at(st, entry, t, Instant::now()).0
}

/// Whether a stream of the proxy subscribes to type `t` (as its streams last reported);
/// before any stream reported, it is taken to.
pub(super) fn asked(entry: &ProxyEntry, t: ResourceType) -> bool {
    let reported: Vec<_> = entry
        .stream_info
        .values()
        .filter(|s| !s.subscriptions.is_empty())
        .collect();
    reported.is_empty()
        || reported
            .iter()
            .any(|s| s.subscriptions.iter().any(|sub| sub.rtype == Some(t)))
}

/// The sync state and, for STALE, how long it has been stale.
pub fn sync_state_at(
    st: &HubState,
    entry: &ProxyEntry,
    t: ResourceType,
    now: Instant,
) -> (SyncState, Duration) {
    let sync = &entry.sync[t];
    let resources = st.held(&entry.proxy.id).len(t);
    let since =
        |at: Option<Instant>| at.map_or(Duration::ZERO, |a| now.saturating_duration_since(a));
    if !entry.ready {
        (SyncState::NotSent, Duration::ZERO)
    } else if sync.last_nack.is_some() {
        (SyncState::Nacked, Duration::ZERO)
    } else if let Some(f) = &sync.in_flight {
        (SyncState::Stale, since(Some(f.sent_at)))
    } else if sync.acks > 0 || sync.resumed {
        (SyncState::Synced, Duration::ZERO)
    } else if resources == 0 || !asked(entry, t) {
        // Nothing to send, or nothing asked: a client that never subscribes to a type (a
        // simulated proxy's SDS, say) is not late in answering it.
        (SyncState::NotSent, Duration::ZERO)
    } else {
        (SyncState::Stale, since(entry.ready_at))
    }
}
