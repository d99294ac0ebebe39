//! Benchmarks at mesh scale: `meshflow mesh-gen` writes a synthetic mesh as Kubernetes/Istio
//! YAML ([`mesh_gen`]), `meshflow loadgen` runs simulated Envoy proxies as real ADS clients
//! ([`loadgen`]), and `meshflow bench` ([`harness`]) starts a server on a generated mesh,
//! connects the proxies, applies scenarios by editing files and measures convergence
//! latency, what was sent, server CPU and memory — and checks every proxy's config against a
//! full recompute. Results go to `bench-results/` as JSON, markdown and an SVG chart
//! ([`chart`]).

pub mod chart;
pub mod churn;
pub mod cli;
pub mod harness;
pub mod loadgen;
pub mod mesh_gen;
pub mod procstat;
pub mod summary;
