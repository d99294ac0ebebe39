//! What streams report to the hub, as data: pushes, ACKs, NACKs, resumes and subscription
//! changes ([`StreamEvent`]). The hub's [`super::recorder::Recorder`] takes them; the sync
//! state ([`super::sync`]) keeps some of them.

use dataflows::materialize::Name;
use dataflows::model::ResourceType;

/// A NACK as the proxy reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    pub rtype: ResourceType,
    pub nonce: String,
    pub message: String,
}

/// What a proxy said about a response, or what it brought when it resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    Ack {
        rtype: ResourceType,
        nonce: String,
    },
    Nack(Nack),
    /// A Delta stream's first request of a type carried `initial_resource_versions`: the
    /// proxy already holds (and took) these versions.
    Resumed {
        rtype: ResourceType,
        versions: std::collections::HashMap<String, String>,
    },
}

/// One response a stream sent: what the debug history, metrics and sync state record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    pub rtype: ResourceType,
    pub nonce: String,
    /// Encoded bytes of the resources carried.
    pub bytes: usize,
    /// Name and version of every resource carried.
    pub resources: Vec<(Name, Name)>,
    /// Names the response removes (Delta `removed_resources`).
    pub removed: Vec<Name>,
    /// The response is the full set of the type (SotW CDS/LDS): whatever it does not
    /// carry, the proxy drops.
    pub full_set: bool,
}

/// A stream's subscription to one type, for the debug API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub rtype: Option<ResourceType>,
    pub wildcard: bool,
    /// The subscribed names as the stream holds them: shared copies, in no order. A
    /// stream reports them each time its subscriptions change (every proxy's, when a new
    /// service adds a cluster), so the copying, sorting and cutting for display
    /// ([`Subscription::shown_names`]) waits until the debug port asks.
    pub names: Vec<Name>,
}

impl Subscription {
    /// The names sorted, cut to [`SHOWN_NAMES`] with a last entry counting the rest.
    pub fn shown_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.names.iter().map(|n| n.to_string()).collect();
        names.sort();
        if names.len() > SHOWN_NAMES {
            let more = names.len() - SHOWN_NAMES;
            names.truncate(SHOWN_NAMES);
            names.push(format!("… and {more} more"));
        }
        names
    }
}

/// Names of one subscription the debug port is given: a stream subscribed to more shows
/// these and a last entry saying how many more (a 100,000-name subscription copied per
/// stream made `/debug/proxies` 70 MB).
pub const SHOWN_NAMES: usize = 1_000;

/// One thing a stream did or was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A response was sent (recorded before it is written, so its ACK never comes first).
    Push(Push),
    /// The proxy answered a response, or resumed with versions it holds.
    Feedback(Feedback),
    /// The stream's subscriptions changed: the complete list now.
    Subscriptions(Vec<Subscription>),
}

/// The stream an event comes from.
#[derive(Debug, Clone, Copy)]
pub struct StreamRef<'a> {
    pub proxy: &'a str,
    pub stream: u64,
    /// `delta` or `sotw`.
    pub protocol: &'static str,
}
