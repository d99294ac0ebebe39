//! NACK attribution as Kubernetes Events (`events.k8s.io/v1`, with `serve --kube
//! --write-status`): when proxies reject a resource that an object's change altered, a
//! `Warning` Event with reason `RejectedByProxies` regards the object
//! (`kubectl describe vs NAME` and `kubectl events --for vs/NAME` show it), its note
//! naming the proxies, the resources and Envoy's message ([`describe`]).
//!
//! One Event per object per rejection (a report is one: it ends when the object's next
//! version comes or it is deleted), sent from the status writer's task, so a storm of NACKs
//! is one Event and serving never waits on the API server. A failed create is logged, not
//! retried.
//!
//! Every replica reports the rejections of its own proxies, whether or not it holds the
//! status Lease: only it knows them (each replica's proxies and their rejections are its own), and
//! Events are separate objects that replicas cannot overwrite (`reportingInstance` says
//! which replica). Status, one field per object, stays the Lease holder's to write.
//!
//! Events are created directly rather than through `kube::runtime::events::Recorder`: the
//! Recorder counts an Event with the same reason on the same object as a repeat of the
//! first (a series, keeping the first note), so a second rejection with another message of
//! Envoy's would be reported with the first one's.

use super::status::{describe, key_name, RejectionReporter, Statuses};
use crate::input::ProxyRejections;
use dataflows::model::ConfigKey;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use std::collections::HashMap;
use std::time::SystemTime;

/// The reason of a rejection's Event.
pub const REASON: &str = "RejectedByProxies";

/// What Kubernetes allows in an Event's note.
const NOTE_MAX_BYTES: usize = 1024;

/// The Events of one replica (see the module documentation).
pub struct Events {
    client: Client,
    /// This replica (`reportingInstance`).
    identity: String,
    /// The rejections reported, by when each began.
    reported: HashMap<ConfigKey, SystemTime>,
}

impl Events {
    pub fn new(client: Client, identity: String) -> Self {
        Events {
            client,
            identity,
            reported: HashMap::new(),
        }
    }

    /// Reports each rejection of an object in `objects` not reported yet.
    pub async fn report(&mut self, objects: &Statuses, rejected: &ProxyRejections) {
        // A rejection that ended is forgotten: the object's next one is news again.
        self.reported
            .retain(|k, since| rejected.get(k).is_some_and(|r| r.since == *since));
        for (key, r) in rejected {
            // Objects without status (WorkloadEntries, objects from files) get no Event.
            let Some(object) = objects.get(key) else {
                continue;
            };
            if self.reported.contains_key(key) {
                continue;
            }
            self.reported.insert(key.clone(), r.since);
            let now = k8s_openapi::jiff::Timestamp::now();
            let event = Event {
                metadata: ObjectMeta {
                    // As kubectl and client-go name Events: the object's name and a time.
                    name: Some(format!("{}.{:x}", object.name, now.as_nanosecond())),
                    namespace: Some(object.namespace.clone()),
                    ..Default::default()
                },
                event_time: Some(MicroTime(now)),
                type_: Some("Warning".into()),
                reason: Some(REASON.into()),
                action: Some("Rejected".into()),
                note: Some(truncate(
                    format!(
                        "{}; those proxies keep the version they last accepted, every other proxy is served this one",
                        describe(r)
                    ),
                    NOTE_MAX_BYTES,
                )),
                regarding: Some(ObjectReference {
                    api_version: Some(object.resource.api_version.clone()),
                    kind: Some(object.resource.kind.clone()),
                    namespace: Some(object.namespace.clone()),
                    name: Some(object.name.clone()),
                    uid: object.uid.clone(),
                    ..Default::default()
                }),
                reporting_controller: Some("meshflow".into()),
                reporting_instance: Some(self.identity.clone()),
                ..Default::default()
            };
            let api: Api<Event> = Api::namespaced(self.client.clone(), &object.namespace);
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => {
                    tracing::debug!(object = %key_name(key), "RejectedByProxies event created")
                }
                Err(e) => {
                    tracing::warn!(object = %key_name(key), error = %e, "creating the RejectedByProxies event failed")
                }
            }
        }
    }
}

impl RejectionReporter for Events {
    async fn report(&mut self, objects: &Statuses, rejected: &ProxyRejections) {
        Events::report(self, objects, rejected).await
    }
}

/// `text` cut to at most `max` bytes at a character boundary, `…` marking the cut.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_at_a_character_within_the_limit() {
        let long = "é".repeat(600);
        let cut = truncate(long, NOTE_MAX_BYTES);
        assert!(cut.len() <= NOTE_MAX_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short".into(), NOTE_MAX_BYTES), "short");
    }
}
