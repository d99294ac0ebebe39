//! Benchmarks at mesh scale: `meshflow mesh-gen` writes a synthetic mesh as Kubernetes/Istio
//! YAML ([`mesh_gen`]), `meshflow loadgen` runs simulated Envoy proxies as real ADS clients
//! ([`loadgen`]), and `meshflow bench` ([`harness`]) starts a server on a generated mesh,
//! connects the proxies, applies scenarios by editing files and measures convergence
//! latency, what was sent, server CPU and memory — and checks every proxy's config against a
//! full recompute. Results go to `bench-results/` as JSON, markdown and an SVG chart
//! ([`chart`]). A new scenario is one row of [`scenarios::SCENARIOS`].
//!
//! Dependency order (each module uses only those before it): procstat, min_bytes, mesh_gen,
//! loadgen, churn → scenarios → options → report → summary → chart, render → lock, ui, server →
//! expected → measure → harness → cli.
//!
//! May import of the crate: `engine`, `input`, `config`, `sources` (the file source, to
//! compute what every proxy must hold), `xds::node` (the simulated proxies' identity),
//! `xds::vhds` (how `--vhds` splits route configurations) and `async_runtime`; never the server's state (`tests/layers.rs`).

pub mod chart;
pub mod churn;
pub mod cli;
pub mod expected;
pub mod harness;
pub mod loadgen;
pub mod lock;
pub mod measure;
pub mod mesh_gen;
pub mod min_bytes;
pub mod options;
pub mod procstat;
pub mod render;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod summary;
pub mod ui;
