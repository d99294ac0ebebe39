//! The real-Envoy tests: Envoy 1.40 (from `scripts/install-test-deps.sh`) connected to a
//! meshflow server, and traffic sent through it. One test binary for all of them (linking
//! one binary instead of one per topic saves minutes and gigabytes per build); one module per
//! topic, each on its own loopback /24. Without Envoy they skip loudly, and fail under
//! `CI=true`.

#[path = "../support/mod.rs"]
mod support;

mod authorization;
mod auto_mtls;
mod circuit_breaking;
mod connection_pool_protocols;
mod delegate;
mod destination_rule_hosts;
mod examples;
mod ext_authz;
mod fail_closed;
mod faults;
mod gateway;
mod gateway_api;
mod gateway_api_backend_filters;
mod gateway_api_backend_tls;
mod gateway_api_frontend_tls;
mod gateway_api_grpc;
mod gateway_api_l4;
mod gateway_api_listener_set;
mod gateway_api_matching;
mod gateway_api_mesh;
mod gateway_api_mesh_scope;
mod gateway_api_resilience;
mod gateway_auto_passthrough;
mod gateway_tls;
mod gateway_tls_tcp;
mod idle_timeout;
mod inbound_pool;
mod istio_mutual;
mod load_balancing;
mod locality;
mod mtls_transition;
mod nack;
mod path_normalization;
mod protocol_detection;
mod request_authentication;
mod route_actions;
mod security;
mod service_entry;
mod sidecar;
mod sidecar_ingress_tls;
mod source_labels;
mod tasks;
mod tasks_edge;
mod tcp;
mod tls_origination;
mod tls_ports;
mod tls_sni;
mod vhds;
mod wildcard_vs;
