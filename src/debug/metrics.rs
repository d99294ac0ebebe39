//! `/metrics`: Prometheus (OpenMetrics) text, computed from the hub's state at scrape time.
//!
//! Every value is a gauge read from what the hub holds now, so none of them is a monotonic
//! counter: per-proxy figures (ACKs, NACKed types) leave with the proxy. Monotonic counters
//! (pushes, bytes and NACKs by type) and histograms (convergence time) need counting at the
//! point of the event, in the xDS hub; they are not here.

use super::status::{connected, sync_state, type_index, SyncState};
use crate::xds::hub::HubState;
use dataflows::model::ResourceType;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics text for the hub's current state.
pub fn render(st: &HubState) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("meshflow");

    let proxies = Gauge::<i64>::default();
    let streams = Gauge::<i64>::default();
    let epoch = Gauge::<i64>::default();
    let resources = Family::<Labels, Gauge>::default();
    let acks = Family::<Labels, Gauge>::default();
    let sync = Family::<Labels, Gauge>::default();
    let nacked = Family::<Labels, Gauge>::default();
    let errors = Family::<Labels, Gauge>::default();

    for t in ResourceType::ALL {
        for s in [
            SyncState::Synced,
            SyncState::Stale,
            SyncState::Nacked,
            SyncState::NotSent,
        ] {
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
                .inc_by(e.versions(t).len() as i64);
            let i = type_index(t);
            acks.get_or_create(&ty)
                .inc_by(e.acks.get(i).copied().unwrap_or(0) as i64);
            let state = sync_state(e, t);
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
        .set(st.errors.len() as i64);
    errors
        .get_or_create(&labels(&[("source", "input")]))
        .set(st.source_errors.len() as i64);

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
        "Configuration errors in effect: rejected input objects and dataflow conflicts",
        errors,
    );
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}
