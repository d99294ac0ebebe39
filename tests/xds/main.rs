//! The xDS server over real gRPC: the protocol (Delta and State-of-the-World), framing,
//! identity and TLS, and what isolates one stream from another (NACKs, stalled readers).
//! One test binary, one module per topic.

#[path = "../support/mod.rs"]
mod support;

mod grpc_framing;
mod identity;
mod isolation;
mod nack_isolation;
mod protocol;
mod tls;
