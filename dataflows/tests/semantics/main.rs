//! Istio's traffic-management semantics, observed through the incremental engine
//! (`dataflows::driver::Engine`): small inputs, then assertions on which resources (by type
//! and name) each connected proxy holds, and on exactly which per-proxy diffs an input change
//! produces. Expected behaviour follows Istio's documentation (Sidecar egress hosts, exportTo,
//! Sidecar and DestinationRule precedence, Gateway selection, EDS naming).
//!
//! One module per Istio kind or concept; the `Mesh` harness and the record builders are
//! `support`'s (tests/support/), shared with the crate's other test files.

#[path = "../support/mod.rs"]
mod support;

mod authorization;
mod destination_rule;
mod endpoints;
mod external_name;
mod gateway;
mod gateway_api;
mod gateway_tls;
mod inbound;
mod locality;
mod peer_authentication;
mod proxy;
mod security;
mod service_entry;
mod sidecar;
mod tls;
mod virtual_service;
