//! Per-proxy sync state as the debug port reports it: the proxy list ([`list_proxies`]),
//! shared by the Debug API, the JSON endpoints and the command line (and the same reading
//! of the hub that CSDS and `/metrics` use), so that every surface says the same thing
//! about a proxy; and which connected proxy a user means ([`resolve_connected`]).
//!
//! The states and what they approximate are defined with the sync state itself
//! ([`crate::hub::sync`]); this module reads them.

use super::error::DebugError;
use super::model::{self, resolve_proxy, unix_seconds};
use crate::hub::sync::ProxyEntry;
pub use crate::hub::sync::{sync_state, sync_state_at, SyncState};
use crate::hub::{Hub, HubState};
use dataflows::model::{ProxyKind, ResourceType};
use std::time::Instant;

/// Proxies with an open stream (an entry without one is waiting for its retraction).
pub fn connected(st: &HubState) -> impl Iterator<Item = &ProxyEntry> {
    st.connected()
}

/// The node id a user means (full id or `pod.namespace`), among connected proxies.
pub fn resolve_connected(hub: &Hub, wanted: &str) -> Result<String, DebugError> {
    if wanted.is_empty() {
        return Err(DebugError::BadRequest(
            "the proxy parameter is required (node id or pod.namespace)".into(),
        ));
    }
    hub.read(|st| resolve_proxy(connected(st).map(|e| e.proxy.id.as_str()), wanted))
}

pub fn kind_name(kind: ProxyKind) -> &'static str {
    match kind {
        ProxyKind::Sidecar => "sidecar",
        ProxyKind::Router => "router",
        ProxyKind::Proxyless => "proxyless",
    }
}

/// The streams of a proxy: protocol, subscriptions (with or without the subscribed names:
/// copying and sorting hundreds of names per proxy is most of the list's cost), in flight.
fn stream_details(e: &ProxyEntry, names: bool) -> Vec<model::StreamInfo> {
    e.stream_info
        .iter()
        .map(|(id, info)| model::StreamInfo {
            id: *id,
            protocol: info.protocol.into(),
            opened: unix_seconds(info.opened),
            types: info
                .subscriptions
                .iter()
                .filter_map(|sub| {
                    let t = sub.rtype?;
                    let in_flight = e.sync[t]
                        .in_flight
                        .as_ref()
                        .filter(|f| f.stream == *id && !f.nonce.is_empty())
                        .map(|f| model::InFlight {
                            nonce: f.nonce.clone(),
                            sent: unix_seconds(f.sent_wall),
                        });
                    Some(model::StreamSubscription {
                        rtype: t.short().into(),
                        wildcard: sub.wildcard,
                        names: if names { sub.shown_names() } else { Vec::new() },
                        in_flight,
                    })
                })
                .collect(),
        })
        .collect()
}

/// A proxy's state for each type, in [`ResourceType::ALL`] order.
fn type_syncs(st: &HubState, e: &ProxyEntry, now: Instant) -> Vec<model::TypeSync> {
    let time = |at: Option<std::time::SystemTime>| at.map(unix_seconds).filter(|t| *t > 0.0);
    ResourceType::ALL
        .iter()
        .map(|t| {
            let sync = &e.sync[*t];
            let (state, age) = sync_state_at(st, e, *t, now);
            model::TypeSync {
                rtype: t.short().into(),
                sync: state.as_str().into(),
                stale_seconds: (state == SyncState::Stale).then_some(age.as_secs_f64()),
                resources: st.held(&e.proxy.id).len(*t) as u32,
                acked_resources: sync.acked.len() as u32,
                acks: sync.acks,
                last_nack: sync.last_nack.clone().filter(|m| !m.is_empty()),
                last_sent: time(sync.last_sent),
                last_ack: time(sync.last_ack),
            }
        })
        .collect()
}

/// Every connected proxy with its state per type, sorted by id; without `names`, each
/// stream's subscriptions list no names.
pub fn list_proxies(st: &HubState, names: bool) -> model::ProxyList {
    let now = Instant::now();
    let mut proxies: Vec<model::ProxyInfo> = connected(st)
        .map(|e| model::ProxyInfo {
            id: e.proxy.id.clone(),
            namespace: e.proxy.namespace.clone(),
            kind: kind_name(e.proxy.kind).into(),
            streams: e.streams() as u32,
            ready: e.ready,
            types: type_syncs(st, e, now),
            stream_details: stream_details(e, names),
        })
        .collect();
    proxies.sort_by(|a, b| a.id.cmp(&b.id));
    model::ProxyList {
        epoch: st.epoch,
        proxies,
    }
}

/// Dataflow conflicts and rejected input objects, as `/debug/config_errors` answers.
pub fn config_errors(st: &HubState) -> model::ConfigErrors {
    model::ConfigErrors {
        errors: st
            .errors
            .keys()
            .map(|e| {
                let (code, name) = e.code.message_code();
                model::ConfigError {
                    object: e.object.to_string(),
                    code: format!("{code} {name}"),
                    level: if e.code.is_warning() {
                        "warning"
                    } else {
                        "error"
                    }
                    .into(),
                    message: e.message.clone(),
                }
            })
            .collect(),
        rejected_inputs: st.source_errors.values().flatten().cloned().collect(),
        analysis: st.source_analysis.values().flatten().cloned().collect(),
    }
}
