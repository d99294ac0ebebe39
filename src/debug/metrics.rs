//! `/metrics`: Prometheus (OpenMetrics) text.
//!
//! Two kinds of series:
//!
//! - gauges read from what the hub holds at scrape time (connected proxies, resources, sync
//!   states): per-proxy figures leave with the proxy;
//! - monotonic counters and histograms counted where the event happens ([`Counters`], owned
//!   by the hub): pushes and bytes by type (`meshflow_xds_pushes_total{type}`,
//!   `meshflow_xds_bytes_total{type}`), NACKs by type (`meshflow_xds_nacks_total{type}`),
//!   input changes by kind and op (`meshflow_input_changes_total{kind,op}`), convergence
//!   time from an epoch's first input to the ACK of a push that carried it
//!   (`meshflow_convergence_seconds`), and the dataflow's epoch lag, from an epoch's first
//!   input to its output reaching the hub (`meshflow_dataflow_epoch_lag_seconds`), and the
//!   dataflow's steps by when they ran (`meshflow_dataflow_steps_total{when}`: `ahead`
//!   inside an idle engine's window, or at the `close`).
//!
//! The counters are `prometheus-client` atomics: counting takes no lock.

use super::status::{connected, sync_state, SyncState};
use crate::hub::counters::{labels, Counters, Labels};
use crate::hub::HubState;
use dataflows::model::ResourceType;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use prometheus_client::registry::Registry;

/// Content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics text for the hub's current state and its counters.
pub fn render(st: &HubState, counters: &Counters) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("meshflow");
    registry.register(
        "xds_pushes",
        "xDS responses sent, by type",
        counters.pushes.clone(),
    );
    registry.register(
        "xds_bytes",
        "Encoded resource bytes sent in xDS responses, by type",
        counters.bytes.clone(),
    );
    registry.register(
        "xds_nacks",
        "NACKs received from proxies, by type",
        counters.nacks.clone(),
    );
    registry.register(
        "input_changes",
        "Input objects changed (insert, update, delete), by kind",
        counters.input_changes.clone(),
    );
    registry.register(
        "convergence_seconds",
        "From the first input of an epoch to a proxy's ACK of the push carrying it",
        counters.convergence.clone(),
    );
    registry.register(
        "dataflow_epoch_lag_seconds",
        "From the first input of an epoch to its output applied to the xDS hub",
        counters.epoch_lag.clone(),
    );
    registry.register(
        "dataflow_steps",
        "Dataflow steps, by when they ran: ahead (inside an idle engine's window) or at the close",
        counters.steps.clone(),
    );

    let proxies = Gauge::<i64>::default();
    let streams = Gauge::<i64>::default();
    let epoch = Gauge::<i64>::default();
    let resources = Family::<Labels, Gauge>::default();
    let acks = Family::<Labels, Gauge>::default();
    let sync = Family::<Labels, Gauge>::default();
    let nacked = Family::<Labels, Gauge>::default();
    let errors = Family::<Labels, Gauge>::default();

    for t in ResourceType::ALL {
        for s in SyncState::ALL {
            // Every series exists, at zero when nothing is in that state.
            sync.get_or_create(&labels(&[("type", t.short()), ("state", s.as_str())]))
                .set(0);
        }
        let ty = labels(&[("type", t.short())]);
        resources.get_or_create(&ty).set(0);
        acks.get_or_create(&ty).set(0);
        nacked.get_or_create(&ty).set(0);
    }
    for e in connected(st) {
        proxies.inc();
        streams.inc_by(e.streams() as i64);
        for t in ResourceType::ALL {
            let ty = labels(&[("type", t.short())]);
            resources
                .get_or_create(&ty)
                .inc_by(st.held(&e.proxy.id).len(t) as i64);
            acks.get_or_create(&ty).inc_by(e.sync[t].acks as i64);
            let state = sync_state(st, e, t);
            if state == SyncState::Nacked {
                nacked.get_or_create(&ty).inc();
            }
            sync.get_or_create(&labels(&[("type", t.short()), ("state", state.as_str())]))
                .inc();
        }
    }
    epoch.set(st.epoch as i64);
    errors
        .get_or_create(&labels(&[("source", "dataflow")]))
        .set(st.errors.keys().filter(|e| !e.code.is_warning()).count() as i64);
    errors
        .get_or_create(&labels(&[("source", "input")]))
        .set(st.source_errors.values().map(Vec::len).sum::<usize>() as i64);
    // Analysis errors: parts of accepted objects not generated (a route, a server, a
    // cluster failing closed). Warnings (fields without effect) are not counted here.
    errors
        .get_or_create(&labels(&[("source", "analysis")]))
        .set(
            st.source_analysis
                .values()
                .flatten()
                .filter(|l| l.contains(": error: ") || l.starts_with("error: "))
                .count() as i64,
        );

    registry.register(
        "proxies_connected",
        "Proxies with at least one open xDS stream",
        proxies,
    );
    registry.register("xds_streams", "Open xDS streams", streams);
    registry.register("epoch", "Last input epoch applied to the xDS hub", epoch);
    registry.register(
        "proxy_resources",
        "Resources connected proxies should hold, summed over proxies, by xDS type",
        resources,
    );
    registry.register(
        "proxy_acks",
        "ACKs received from the connected proxies, by xDS type",
        acks,
    );
    registry.register(
        "proxy_sync",
        "Connected proxies by xDS type and sync state (as in proxy-status)",
        sync,
    );
    registry.register(
        "proxies_nacked",
        "Connected proxies whose last NACK of the type is recorded, by xDS type",
        nacked,
    );
    registry.register(
        "config_errors",
        "Configuration errors in effect: rejected input objects, dataflow conflicts, and parts of accepted objects not generated (analysis)",
        errors,
    );
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}
