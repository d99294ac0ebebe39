//! Shared harness of the integration tests that drive meshflow, a real Envoy and protocol-level
//! clients. One file per concept; this module declares them and re-exports their public items,
//! so tests keep using flat paths (`use support::{Envoy, Meshflow, ...}`, `support::wait_until`).
//!
//! Test files include it with `mod support;`. Each test binary compiles it anew and uses only
//! part of it, hence the `allow`s below rather than per-item ones.

#![allow(dead_code)]
// The re-exports are the harness's surface; any one test binary uses few of them.
#![allow(unused_imports)]

// The meshflow side.
mod meshflow;
// The Envoy side: finding the binary, bootstrapping and running it, asking its admin API, and
// reading its config dump.
mod config_dump;
mod envoy;
mod envoy_admin;
mod envoy_binary;
mod envoy_bootstrap;
// Talking HTTP/1.1: the client, the backends playing workloads, and counting outcomes.
mod backend;
mod http_client;
mod http_wire;
mod outcomes;
// Running and waiting: child processes, per-test scratch space, polling.
mod polling;
mod process;
mod scratch;

// Fixtures and clients that tests name by module (`support::reviews::Reviews`).
pub mod reviews;
pub mod xds_client;

pub use backend::Backend;
pub use config_dump::{
    assert_contains_all, dump_cluster_names, dump_eds_cluster_names, dump_endpoints,
    dump_listener_names, dump_route_config, dump_route_config_names,
};
pub use envoy::Envoy;
pub use envoy_admin::{parse_stats, unix_millis};
pub(crate) use envoy_binary::require_envoy;
pub use envoy_binary::{envoy_binary, envoy_missing};
pub use envoy_bootstrap::{envoy_bootstrap, ProxyNode, XdsMode};
pub use http_client::{http_get, http_request, HttpResponse, IO_TIMEOUT};
pub use meshflow::{meshflow_cli, Meshflow};
pub use outcomes::{exactly, only, outcome_key, tally};
pub use polling::{converge, wait_until, CONVERGE_TIMEOUT, STARTUP_TIMEOUT};
pub use process::log_tail;
pub use scratch::{free_port, remove_config, write_config, TestDir};
