//! Shared harness of the integration tests that drive meshflow, a real Envoy and protocol-level
//! clients. One file per concept; this module declares them and re-exports their public items,
//! so tests keep using flat paths (`use support::{Envoy, Meshflow, ...}`, `support::wait_until`).
//!
//! Test files include it with `mod support;`. Each test binary compiles it anew and uses only
//! part of it, hence `dead_code` is allowed for the whole harness rather than item by item.

#![allow(dead_code)]

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
pub mod authz_matrix;
pub mod chromium;
pub mod envoy_validate;
pub mod ext_authz;
pub mod fake_kube;
pub mod grpc_echo;
pub mod jwt;
pub mod kube_yaml;
pub mod mongo;
pub mod pausable_link;
pub mod pki;
pub mod reviews;
pub mod scene;
pub mod tasks;
pub mod tcp_echo;
pub mod tls_backend;
pub mod tls_client;
pub mod upgrades;
pub mod xds_client;

// The harness's surface. In a test binary `support` is a private module, so rustc reports each
// re-export that binary does not use as an unused import; the allow is kept to these lines so a
// stray `use` inside the files above still warns.
#[allow(unused_imports)]
pub use self::{
    backend::Backend,
    config_dump::{
        assert_contains_all, dump_cluster_names, dump_eds_cluster_names, dump_endpoints,
        dump_listener_names, dump_route_config, dump_route_config_names, dump_served_config,
        served_config_differences,
    },
    envoy::Envoy,
    envoy_admin::{parse_stats, unix_millis},
    envoy_binary::{envoy_binary, envoy_missing},
    envoy_bootstrap::{envoy_bootstrap, ProxyNode, XdsMode},
    http_client::{http_get, http_request, HttpResponse, IO_TIMEOUT},
    meshflow::{debug_json, meshflow_cli, Meshflow, PROVEN_KEYS_ONLY},
    outcomes::{exactly, only, outcome_key, share_near, tally},
    polling::{converge, converge_then, wait_until, CONVERGE_TIMEOUT, STARTUP_TIMEOUT},
    process::log_tail,
    scene::{client_envoy, SidecarScene},
    scratch::{free_port, remove_config, write_config, TestDir},
};
#[allow(unused_imports)]
pub(crate) use envoy_binary::require_envoy;
