//! What authentication yields, shared by the ways a stream proves itself ([`super::auth`],
//! [`super::token_review`]): the workload identity proved, or why the stream is refused.

/// A workload identity a stream proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub namespace: String,
    pub service_account: String,
    /// How it was proved, and as what (`client certificate spiffe://…`), for messages.
    pub by: String,
}

/// Why a stream is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No or wrong credentials (maps to UNAUTHENTICATED).
    Unauthenticated(String),
    /// Valid credentials for something else (maps to PERMISSION_DENIED).
    PermissionDenied(String),
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denied::Unauthenticated(m) | Denied::PermissionDenied(m) => f.write_str(m),
        }
    }
}
