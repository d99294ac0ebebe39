//! Watch events: every push (epoch, type, nonce, bytes, and per resource the old and new
//! version) and every ACK and NACK as it happens, published on a broadcast channel only
//! while someone watches. The debug port renders them ([`crate::debug::watch`]).

use dataflows::model::ResourceType;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use tokio::sync::broadcast;

/// Events buffered for watchers that have not taken them yet. Watchers drain it at once into
/// their own bounded queues (`crate::debug::watch::follow`), so it rarely fills; one that
/// falls this far behind is told it lagged.
const WATCH_BUFFER: usize = 256;

/// A watch event lists at most this many resources of a push (a full push can carry
/// hundreds of thousands); the rest is counted.
pub const MAX_CHANGES: usize = 1_000;

/// The watch channel: published to only while someone watches, and emptied when the last
/// watcher leaves (a broadcast channel keeps its last values otherwise: large pushes,
/// held for nobody).
pub struct Watchers(Mutex<broadcast::Sender<Arc<WatchEvent>>>);

impl Default for Watchers {
    fn default() -> Self {
        Watchers(Mutex::new(broadcast::channel(WATCH_BUFFER).0))
    }
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, broadcast::Sender<Arc<WatchEvent>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.lock().subscribe()
    }

    /// Someone watches: worth building an event.
    pub fn watched(&self) -> bool {
        self.lock().receiver_count() > 0
    }

    pub fn publish(&self, event: WatchEvent) {
        let sender = self.lock();
        if sender.receiver_count() > 0 {
            let _ = sender.send(Arc::new(event));
        }
    }

    /// A watcher left: if it was the last, the buffered events go with it.
    pub fn release(&self) {
        let mut sender = self.lock();
        if sender.receiver_count() == 0 && !sender.is_empty() {
            *sender = broadcast::channel(WATCH_BUFFER).0;
        }
    }

    /// Events buffered now.
    pub fn buffered(&self) -> usize {
        self.lock().len()
    }
}

/// One resource in a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameChange {
    pub name: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl NameChange {
    pub fn new(name: &str, old: Option<&str>, new: Option<&str>) -> NameChange {
        NameChange {
            name: name.to_string(),
            old: old.map(str::to_string),
            new: new.map(str::to_string),
        }
    }

    /// `+` added, `-` removed, `~` changed.
    pub fn op(&self) -> &'static str {
        match (&self.old, &self.new) {
            (None, Some(_)) => "+",
            (_, None) => "-",
            _ => "~",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchKind {
    Push {
        rtype: ResourceType,
        nonce: String,
        bytes: u64,
        /// At most [`MAX_CHANGES`] of the push's resources.
        changes: Vec<NameChange>,
        /// How many more the push carried.
        more_changes: usize,
    },
    Ack {
        rtype: ResourceType,
        nonce: String,
    },
    Nack {
        rtype: ResourceType,
        nonce: String,
        message: String,
    },
}

/// Something that happened on a proxy's streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub proxy: String,
    pub at: SystemTime,
    /// The epoch the push carries (the newest one when it coalesces several); for ACKs and
    /// NACKs, the hub's epoch when it arrived.
    pub epoch: u64,
    pub kind: WatchKind,
}
