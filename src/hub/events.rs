//! Watch events: every push (epoch, type, nonce, bytes, and per resource the old and new
//! version) and every ACK and NACK as it happens, published on a broadcast channel only
//! while someone watches. The debug port renders them ([`crate::debug::watch`]).

use dataflows::model::ResourceType;
use std::time::SystemTime;

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
        changes: Vec<NameChange>,
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
