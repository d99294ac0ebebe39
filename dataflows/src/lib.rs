//! The meshflow dataflow: from input collections (services, endpoints, workloads, Istio
//! configs, connected proxies) to the per-scope and per-proxy sets of Envoy resources, maintained
//! incrementally by differential dataflow. Pure computation: no I/O, no async runtime.
//!
//! Drive it with `update` → `advance_to` → `flush` → step until the probe passes the epoch
//! (see `meshflow::runtime`), or use [`naive`] for the same result computed from scratch.

pub mod assemble;
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
