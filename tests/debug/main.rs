//! The debug port: its API, Envoy-format dumps, history, tracing and the UI. One test
//! binary, one module per topic.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod envoy;
mod history;
mod tracing;
mod ui;
