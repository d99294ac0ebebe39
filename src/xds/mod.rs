//! The xDS side: the hub (state served), the pure protocol state machines for Delta and
//! State-of-the-World ADS, node identity, and the tonic server (the only place a
//! `tonic::Status` is made).

pub mod auth;
pub mod delta;
pub mod grpc;
pub mod hub;
pub mod node;
pub mod server;
pub mod sotw;
pub mod tls;

use dataflows::materialize::Name;
use dataflows::model::ResourceType;

/// A request the protocol cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    UnknownType(String),
    TooManyNames(usize),
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::UnknownType(t) => write!(f, "unknown or unsupported type URL {t:?}"),
            ProtocolError::TooManyNames(n) => {
                write!(f, "request names {n} resources, more than {MAX_NAMES}")
            }
        }
    }
}

/// Upper bound of resource names one request may carry.
pub const MAX_NAMES: usize = 100_000;

pub(crate) fn resource_type(url: &str) -> Result<ResourceType, ProtocolError> {
    ResourceType::from_type_url(url).ok_or_else(|| ProtocolError::UnknownType(url.to_string()))
}

/// CDS and LDS are wildcard by default; EDS and RDS are always named.
pub(crate) fn wildcard_by_default(t: ResourceType) -> bool {
    matches!(t, ResourceType::Cluster | ResourceType::Listener)
}

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
    pub names: Vec<String>,
}

#[cfg(test)]
mod protocol_tests;
