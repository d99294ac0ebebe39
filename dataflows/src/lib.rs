//! The meshflow dataflow: from input collections (services, endpoints, workloads, Istio
//! configs, connected proxies) to the per-scope and per-proxy sets of Envoy resources, maintained
//! incrementally by differential dataflow. Pure computation: no I/O, no async runtime.
//!
//! Drive it with `update` → `advance_to` → `flush` → step until the probe passes the epoch
//! (see `meshflow::runtime`), or use [`naive`] for the same result computed from scratch.
//!
//! Layout: [`model`] (domain records), [`rules`] (Istio's matching and precedence rules as
//! plain functions), [`flow`] (the dataflow, one stage per file), [`translate`] (records →
//! Envoy protos), [`assemble`] (fixed resources), [`driver`] (timely workers, epochs),
//! [`materialize`] (a proxy's set from the scoped output), [`naive`] (full recompute, the
//! oracle and the full-push baseline), [`simulate`] (a request through a proxy's resources),
//! [`synth`] (generated meshes). Imports nothing of meshflow; meshflow imports it.

pub mod assemble;
pub mod client_tls;
pub mod delegation;
pub mod driver;
pub mod flow;
pub mod materialize;
pub mod model;
pub mod naive;
pub mod rules;
pub mod simulate;
pub mod synth;
pub mod translate;

pub use flow::{build, Inputs, Outputs};
