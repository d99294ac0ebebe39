//! Per-proxy sync state, shared by the Debug API, CSDS, the JSON endpoints, `/metrics` and
//! the command line, so that every surface says the same thing about a proxy.
//!
//! The states and what they approximate are defined with the sync state itself
//! ([`crate::hub::sync`]); this module renders them.

use super::pb::{ListProxiesResponse, ProxyStatus, TypeStatus};
use super::pb::{StreamStatus, StreamTypeStatus};
use super::watch::unix_seconds;
pub use crate::hub::sync::{sync_state, sync_state_at, SyncState};
use crate::hub::sync::ProxyEntry;
use crate::hub::HubState;
use dataflows::model::{ProxyKind, ResourceType};
use envoy_types::pb::envoy::service::status::v3::ConfigStatus;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// CSDS's per-resource status (`ERROR` is what CSDS calls a NACK).
pub fn config_status(s: SyncState) -> ConfigStatus {
    match s {
        SyncState::Synced => ConfigStatus::Synced,
        SyncState::Stale => ConfigStatus::Stale,
        SyncState::Nacked => ConfigStatus::Error,
        SyncState::NotSent => ConfigStatus::NotSent,
    }
}

/// `3s`, `2m5s`, `1h2m`: an age for people.
pub fn short_age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m", s / 3600, s / 60 % 60)
    }
}

/// The streams of a proxy for the debug API: protocol, subscriptions, in flight.
pub fn stream_details(e: &ProxyEntry) -> Vec<StreamStatus> {
    e.stream_info
        .iter()
        .map(|(id, info)| StreamStatus {
            id: *id,
            protocol: info.protocol.into(),
            opened_unix_seconds: unix_seconds(info.opened),
            types: info
                .subscriptions
                .iter()
                .filter_map(|sub| {
                    let t = sub.rtype?;
                    let f = e.sync[t]
                        .in_flight
                        .as_ref()
                        .filter(|f| f.stream == *id);
                    Some(StreamTypeStatus {
                        r#type: t.short().into(),
                        wildcard: sub.wildcard,
                        names: sub.names.clone(),
                        in_flight_nonce: f.map(|f| f.nonce.clone()).unwrap_or_default(),
                        in_flight_sent_unix_seconds: f.map_or(0.0, |f| unix_seconds(f.sent_wall)),
                    })
                })
                .collect(),
        })
        .collect()
}

/// Proxies with an open stream (an entry without one is waiting for its retraction).
pub fn connected(st: &HubState) -> impl Iterator<Item = &ProxyEntry> {
    st.connected()
}

pub fn kind_name(kind: ProxyKind) -> &'static str {
    match kind {
        ProxyKind::Sidecar => "sidecar",
        ProxyKind::Router => "router",
        ProxyKind::Proxyless => "proxyless",
    }
}

/// Every connected proxy with its state per type, sorted by id.
pub fn list_proxies(st: &HubState) -> ListProxiesResponse {
    let now = Instant::now();
    let unix = |at: Option<std::time::SystemTime>| at.map_or(0.0, unix_seconds);
    let mut proxies: Vec<ProxyStatus> = connected(st)
        .map(|e| ProxyStatus {
            stream_details: stream_details(e),
            id: e.proxy.id.clone(),
            namespace: e.proxy.namespace.clone(),
            kind: kind_name(e.proxy.kind).into(),
            streams: e.streams() as u32,
            ready: e.ready,
            types: ResourceType::ALL
                .iter()
                .map(|t| {
                    let sync = &e.sync[*t];
                    let (state, age) = sync_state_at(st, e, *t, now);
                    TypeStatus {
                        r#type: t.short().into(),
                        resources: st.held(&e.proxy.id).len(*t) as u32,
                        acks: sync.acks,
                        last_nack: sync.last_nack.clone().unwrap_or_default(),
                        sync: state.as_str().into(),
                        stale_seconds: if state == SyncState::Stale {
                            age.as_secs_f64()
                        } else {
                            0.0
                        },
                        last_sent_unix_seconds: unix(sync.last_sent),
                        last_ack_unix_seconds: unix(sync.last_ack),
                        acked_resources: sync.acked.len() as u32,
                    }
                })
                .collect(),
        })
        .collect();
    proxies.sort_by(|a, b| a.id.cmp(&b.id));
    ListProxiesResponse {
        epoch: st.epoch,
        proxies,
    }
}

/// The JSON form of a proxy list: what `GET /debug/proxies` answers and
/// `meshflow proxy-status -o json` prints.
pub fn proxies_json(resp: &ListProxiesResponse) -> Value {
    let proxies: Vec<Value> = resp
        .proxies
        .iter()
        .map(|p| {
            let types: serde_json::Map<String, Value> = p
                .types
                .iter()
                .map(|t| {
                    let nack = if t.last_nack.is_empty() {
                        Value::Null
                    } else {
                        Value::String(t.last_nack.clone())
                    };
                    let secs = |v: f64| if v <= 0.0 { Value::Null } else { json!(v) };
                    (
                        t.r#type.clone(),
                        json!({
                            "sync": t.sync,
                            "stale_seconds": if t.sync == "STALE" { json!(t.stale_seconds) } else { Value::Null },
                            "resources": t.resources,
                            "acked_resources": t.acked_resources,
                            "acks": t.acks,
                            "last_nack": nack,
                            "last_sent": secs(t.last_sent_unix_seconds),
                            "last_ack": secs(t.last_ack_unix_seconds),
                        }),
                    )
                })
                .collect();
            json!({
                "id": p.id,
                "namespace": p.namespace,
                "kind": p.kind,
                "streams": p.streams,
                "ready": p.ready,
                "types": types,
                "stream_details": p.stream_details.iter().map(stream_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "epoch": resp.epoch, "proxies": proxies })
}

fn stream_json(s: &StreamStatus) -> Value {
    let types: serde_json::Map<String, Value> = s
        .types
        .iter()
        .map(|t| {
            let in_flight = if t.in_flight_nonce.is_empty() {
                Value::Null
            } else {
                json!({ "nonce": t.in_flight_nonce, "sent": t.in_flight_sent_unix_seconds })
            };
            (
                t.r#type.clone(),
                json!({ "wildcard": t.wildcard, "names": t.names, "in_flight": in_flight }),
            )
        })
        .collect();
    json!({
        "id": s.id,
        "protocol": s.protocol,
        "opened": s.opened_unix_seconds,
        "types": types,
    })
}

/// Finds the proxy a user means: its full node id, or the `pod.namespace` part of an Istio
/// id (`sidecar~10.0.0.1~reviews-v1-abc.default~default.svc.cluster.local`), as `istioctl`
/// accepts it.
pub fn resolve_proxy<'a>(
    ids: impl IntoIterator<Item = &'a str>,
    wanted: &str,
) -> Result<String, String> {
    let ids: Vec<&str> = ids.into_iter().collect();
    if ids.contains(&wanted) {
        return Ok(wanted.to_string());
    }
    let matches: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| id.split('~').nth(2) == Some(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("no connected proxy {wanted:?}")),
        many => Err(format!(
            "{wanted:?} is ambiguous; it matches {}",
            many.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_full_ids_and_pod_namespace() {
        let ids = [
            "sidecar~10.0.0.1~a-1.default~default.svc.cluster.local",
            "sidecar~10.0.0.2~b-1.default~default.svc.cluster.local",
            "router~10.0.0.3~gw-1.istio-system~istio-system.svc.cluster.local",
        ];
        assert_eq!(
            resolve_proxy(ids, "b-1.default").as_deref(),
            Ok("sidecar~10.0.0.2~b-1.default~default.svc.cluster.local")
        );
        assert_eq!(resolve_proxy(ids, ids[2]).as_deref(), Ok(ids[2]));
        assert!(resolve_proxy(ids, "c-1.default").is_err());
        let twice = [
            ids[0],
            "router~10.0.0.9~a-1.default~default.svc.cluster.local",
        ];
        assert!(resolve_proxy(twice, "a-1.default")
            .unwrap_err()
            .contains("ambiguous"));
    }
}
