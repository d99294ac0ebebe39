//! Per-proxy sync state, shared by the Debug API, CSDS, the JSON endpoints, `/metrics` and
//! the command line, so that every surface says the same thing about a proxy.
//!
//! # What the states mean, and what is approximated
//!
//! The hub records, per proxy and type, the resources the proxy should hold, how many ACKs
//! arrived and the message of the last NACK. It does not (yet) record which version or nonce
//! was sent last, which one was acknowledged, or when. So, per type:
//!
//! - `NOT SENT`: the proxy's first epoch is not computed yet, or it should hold nothing of
//!   this type and never acknowledged anything of it.
//! - `NACKED`: the proxy NACKed a response of this type at some point on a stream that is
//!   still registered. The hub keeps the last NACK message and does not clear it on a later
//!   ACK, so NACKED stays until the proxy reconnects, even if a fixed version was accepted.
//! - `SYNCED`: at least one ACK of this type and no NACK. A push that is in flight right now
//!   (sent, not yet acknowledged) is not seen: the proxy still shows SYNCED meanwhile.
//! - `STALE`: resources exist for the proxy but nothing of this type was acknowledged yet.
//!
//! The states follow `istioctl proxy-status`; Istio's STALE additionally carries the age of
//! the unacknowledged push, which needs a send timestamp the hub does not keep.

use super::pb::{ListProxiesResponse, ProxyStatus, TypeStatus};
use crate::xds::hub::{HubState, ProxyEntry};
use dataflows::model::{ProxyKind, ResourceType};
use envoy_types::pb::envoy::service::status::v3::ConfigStatus;
use serde_json::{json, Value};

/// A proxy's sync state for one xDS type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    Synced,
    Stale,
    Nacked,
    NotSent,
}

impl SyncState {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Synced => "SYNCED",
            SyncState::Stale => "STALE",
            SyncState::Nacked => "NACKED",
            SyncState::NotSent => "NOT SENT",
        }
    }

    /// CSDS's per-resource status (`ERROR` is what CSDS calls a NACK).
    pub fn config_status(self) -> ConfigStatus {
        match self {
            SyncState::Synced => ConfigStatus::Synced,
            SyncState::Stale => ConfigStatus::Stale,
            SyncState::Nacked => ConfigStatus::Error,
            SyncState::NotSent => ConfigStatus::NotSent,
        }
    }
}

/// Index of `t` in the hub's per-type arrays (`acks`, `last_nack`): the order of
/// [`ResourceType::ALL`].
pub fn type_index(t: ResourceType) -> usize {
    ResourceType::ALL
        .iter()
        .position(|x| *x == t)
        .unwrap_or_default()
}

/// The sync state of one type of one proxy, by the rules in the module documentation.
pub fn sync_state(entry: &ProxyEntry, t: ResourceType) -> SyncState {
    let i = type_index(t);
    let acks = entry.acks.get(i).copied().unwrap_or(0);
    let nacked = entry.last_nack.get(i).is_some_and(|n| n.is_some());
    let resources = entry.versions(t).len();
    if !entry.ready {
        SyncState::NotSent
    } else if nacked {
        SyncState::Nacked
    } else if acks > 0 {
        SyncState::Synced
    } else if resources == 0 {
        SyncState::NotSent
    } else {
        SyncState::Stale
    }
}

/// Proxies with an open stream (an entry without one is waiting for its retraction).
pub fn connected(st: &HubState) -> impl Iterator<Item = &ProxyEntry> {
    st.proxies().filter(|e| e.streams() > 0)
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
    let mut proxies: Vec<ProxyStatus> = connected(st)
        .map(|e| ProxyStatus {
            id: e.proxy.id.clone(),
            namespace: e.proxy.namespace.clone(),
            kind: kind_name(e.proxy.kind).into(),
            streams: e.streams() as u32,
            ready: e.ready,
            types: ResourceType::ALL
                .iter()
                .map(|t| {
                    let i = type_index(*t);
                    TypeStatus {
                        r#type: t.short().into(),
                        resources: e.versions(*t).len() as u32,
                        acks: e.acks.get(i).copied().unwrap_or(0),
                        last_nack: e.last_nack.get(i).cloned().flatten().unwrap_or_default(),
                        sync: sync_state(e, *t).as_str().into(),
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
                    (
                        t.r#type.clone(),
                        json!({
                            "sync": t.sync,
                            "resources": t.resources,
                            "acks": t.acks,
                            "last_nack": nack,
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
            })
        })
        .collect();
    json!({ "epoch": resp.epoch, "proxies": proxies })
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
