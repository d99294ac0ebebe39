//! The xDS side: the hub (state served), the pure protocol state machines for Delta and
//! State-of-the-World ADS, node identity, and the tonic server (the only place a
//! `tonic::Status` is made).

pub mod auth;
pub mod delta;
pub mod hub;
pub mod node;
pub mod server;
pub mod sotw;
pub mod tls;

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

/// What a proxy said about a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    Ack(ResourceType),
    Nack(Nack),
}

#[cfg(test)]
mod protocol_tests;
