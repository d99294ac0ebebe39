//! meshflow: a service-mesh control plane whose core is a differential dataflow.
//!
//! The path of a change, one module per room:
//!
//! - [`config`]: the input schema (Kubernetes and Istio objects) and its validation into
//!   the dataflow's records;
//! - [`sources`]: what reads objects (a watched directory) and reports record changes
//!   and its own errors through the source contract;
//! - [`input`]: the vocabulary every side shares (`Input`, `EpochMeta`, described changes);
//! - [`runtime`]: batches inputs into epochs and steps the dataflow (crate `dataflows`);
//! - [`ca`]: the workload CA: the mesh's root, and the certificate of each workload
//!   identity, issued where streams send it (never in the dataflow);
//! - [`hub`]: the served state and everything recorded about it (sync state, history,
//!   provenance, counters, watch events, health);
//! - [`xds`]: the ADS protocol (Delta and State-of-the-World) and its gRPC server;
//! - [`debug`]: the debug port and CLI, which read the hub;
//! - [`bench`]: mesh generation, simulated proxies and the benchmark harness;
//! - [`serve`]: wires sources, runtime, hub, xDS and debug together;
//! - [`demo`]: bookinfo, meshflow, workloads and proxies on loopback, and one edit walked
//!   through (`meshflow demo`).
//!
//! Imports go one way: sources → input ← runtime → hub ← xds, hub ← debug, hub → ca;
//! `engine`, `input`, `ca` and `config` import nothing of this crate (`tests/layers.rs` checks it).

pub mod async_runtime;
pub mod bench;
pub mod ca;
pub mod config;
pub mod debug;
pub mod demo;
pub mod engine;
pub mod hub;
pub mod input;
pub mod runtime;
pub mod serve;
pub mod sources;
pub mod xds;
