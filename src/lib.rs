//! meshflow: a service-mesh control plane whose core is a differential dataflow. Sources
//! (files) feed validated records into epochs; the dataflow (crate `dataflows`) keeps every
//! connected proxy's Envoy resources up to date incrementally; the xDS hub and server
//! stream exactly what changed over Delta or State-of-the-World ADS.

pub mod async_runtime;
pub mod bench;
pub mod config;
pub mod debug;
pub mod engine;
pub mod hub;
pub mod input;
pub mod runtime;
pub mod serve;
pub mod sources;
pub mod xds;
