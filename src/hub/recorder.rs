//! What streams report to the hub: each push, each ACK, NACK or resume, and subscription
//! changes ([`StreamEvent`]), through one interface ([`Recorder`], as go-control-plane's
//! callbacks) that the hub implements. Protocol code ([`crate::xds`]) produces events; the
//! hub turns them into sync state, history, counters and watch events.

use super::events::{NameChange, WatchEvent, WatchKind};
pub use super::stream_events::{
    Feedback, Nack, Push, StreamEvent, StreamRef, Subscription, SHOWN_NAMES,
};
use super::sync::{InFlight, StreamInfo};
use super::Hub;
use crate::input::{Input, Rejection};
use dataflows::materialize::Name;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

/// Observes every stream: the one way protocol code tells the hub what happened.
pub trait Recorder {
    fn record(&self, from: StreamRef<'_>, event: StreamEvent);
}

impl Recorder for Hub {
    fn record(&self, from: StreamRef<'_>, event: StreamEvent) {
        match event {
            StreamEvent::Push(p) => self.record_push(from.proxy, from.stream, p),
            StreamEvent::Feedback(f) => self.record_feedback(from.proxy, from.stream, f),
            StreamEvent::Subscriptions(s) => {
                self.record_subscriptions(from.proxy, from.stream, from.protocol, s)
            }
        }
    }
}

impl Hub {
    /// Records an ACK, NACK or resume from one of the proxy's streams.
    fn record_feedback(&self, id: &str, stream: u64, fb: Feedback) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let epoch;
        let mut rejected = None;
        {
            let mut st = self.lock();
            epoch = st.epoch;
            if let Feedback::Nack(n) = &fb {
                rejected = rejected_resources(&st, id, stream, n);
            }
            let Some(e) = st.proxies.get_mut(id) else {
                return;
            };
            match &fb {
                // A later ACK means the proxy took a newer version: the NACK is over.
                Feedback::Ack { rtype, nonce } => {
                    let sync = &mut e.sync[*rtype];
                    sync.acks += 1;
                    sync.last_nack = None;
                    sync.last_ack = Some(wall);
                    if let Some(f) = sync
                        .in_flight
                        .take_if(|f| f.stream == stream && f.nonce == *nonce)
                    {
                        if f.push.full_set {
                            sync.acked.clear();
                        }
                        for n in &f.push.removed {
                            sync.acked.remove(n);
                        }
                        sync.acked.extend(f.push.resources);
                        sync.acked_epoch = f.epoch;
                    }
                }
                Feedback::Nack(n) => {
                    let sync = &mut e.sync[n.rtype];
                    sync.last_nack = Some(n.message.clone());
                    sync.last_nack_at = Some(now);
                    let _ = sync
                        .in_flight
                        .take_if(|f| f.stream == stream && f.nonce == n.nonce);
                    self.metrics.nack(n.rtype);
                }
                Feedback::Resumed { rtype, versions } => {
                    let sync = &mut e.sync[*rtype];
                    sync.resumed = true;
                    sync.acked = versions
                        .iter()
                        .map(|(k, v)| (Name::from(k.as_str()), Name::from(v.as_str())))
                        .collect();
                    return;
                }
            }
        }
        if let (Some(suspects), Feedback::Nack(n)) = (rejected, &fb) {
            self.report_rejection(id, n, suspects);
        }
        let (rtype, nonce, nack) = match &fb {
            Feedback::Ack { rtype, nonce } => (*rtype, nonce.as_str(), None),
            Feedback::Nack(n) => (n.rtype, n.nonce.as_str(), Some(n.message.as_str())),
            Feedback::Resumed { .. } => return,
        };
        let acked = self
            .history()
            .record_feedback(id, stream, rtype, nonce, nack, wall);
        if nack.is_none() {
            if let Some(r) = acked.oldest_received {
                self.metrics
                    .convergence
                    .observe(now.saturating_duration_since(r).as_secs_f64());
            }
        }
        if self.watch.watched() {
            let kind = match nack {
                None => WatchKind::Ack {
                    rtype,
                    nonce: nonce.to_string(),
                },
                Some(m) => WatchKind::Nack {
                    rtype,
                    nonce: nonce.to_string(),
                    message: m.to_string(),
                },
            };
            self.watch.publish(WatchEvent {
                proxy: id.to_string(),
                at: wall,
                epoch,
                kind,
            });
        }
    }

    /// Tells the runtime which input objects built the resources of a rejected push, so it
    /// can name them ([`crate::input::Rejection`]); it changes nothing that is served.
    fn report_rejection(
        &self,
        id: &str,
        n: &Nack,
        (resources, namespace, accepted_epoch, rejected_epoch): Suspects,
    ) {
        let mut inputs = BTreeSet::new();
        for name in &resources {
            if let Some(p) = self.provenance.lookup(id, n.rtype, name) {
                inputs.extend(p.inputs);
            }
        }
        if inputs.is_empty() {
            return;
        }
        let _ = self.inputs.send(Input::Rejected(Rejection {
            proxy: id.to_string(),
            namespace,
            rtype: n.rtype,
            resources,
            message: n.message.clone(),
            inputs,
            accepted_epoch,
            rejected_epoch,
        }));
    }

    /// Records a response one of the proxy's streams sent.
    fn record_push(&self, id: &str, stream: u64, push: Push) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let watched = self.watch.watched();
        let (rtype, bytes, nonce) = (push.rtype, push.bytes, push.nonce.clone());
        let (resources, removed) = (push.resources.len(), push.removed.len());
        // The push itself goes into the sync state; a watcher needs a copy of it.
        let shown = watched.then(|| push.clone());
        let epoch = {
            let mut st = self.lock();
            let epoch = st.epoch;
            if let Some(e) = st.proxies.get_mut(id) {
                let sync = &mut e.sync[rtype];
                sync.last_sent = Some(wall);
                sync.in_flight = Some(InFlight {
                    stream,
                    nonce: nonce.clone(),
                    sent_at: now,
                    sent_wall: wall,
                    epoch,
                    push,
                });
            }
            epoch
        };
        // Under a span named like the runtime's, so `RUST_LOG=meshflow=debug` shows the push
        // next to the epoch's dataflow step and hub apply.
        let _span = tracing::debug_span!("epoch", epoch).entered();
        self.metrics.push(rtype, bytes);
        let covered = self
            .history()
            .record_push(id, stream, rtype, &nonce, wall, watched);
        // Logged under the hub's target, next to "hub applied epoch".
        tracing::debug!(
            target: "meshflow::hub",
            epoch,
            proxy = id,
            rtype = rtype.short(),
            nonce = %nonce,
            resources,
            removed,
            bytes,
            epochs_covered = covered.len(),
            "push"
        );
        let Some(push) = shown else {
            return;
        };
        let mut changes: Vec<NameChange> = if covered.is_empty() {
            // Nothing recorded for it (a resend, a first full answer): what it carries.
            push.resources
                .iter()
                .map(|(n, v)| NameChange::new(n, None, Some(v)))
                .chain(push.removed.iter().map(|n| NameChange::new(n, None, None)))
                .collect()
        } else {
            let mut net: BTreeMap<&str, (Option<&str>, Option<&str>)> = BTreeMap::new();
            for (_, changes) in &covered {
                for c in changes {
                    let e = net.entry(&*c.name).or_insert((c.old.as_deref(), None));
                    e.1 = c.new.as_deref();
                }
            }
            net.into_iter()
                .filter(|(_, (o, n))| o != n)
                .map(|(name, (o, n))| NameChange::new(name, o, n))
                .collect()
        };
        let more_changes = changes.len().saturating_sub(super::events::MAX_CHANGES);
        changes.truncate(super::events::MAX_CHANGES);
        self.watch.publish(WatchEvent {
            proxy: id.to_string(),
            at: wall,
            epoch: covered.last().map_or(epoch, |c| c.0),
            kind: WatchKind::Push {
                rtype: push.rtype,
                nonce: push.nonce,
                bytes: push.bytes as u64,
                changes,
                more_changes,
            },
        });
    }

    /// Records a stream's subscriptions (when they changed).
    fn record_subscriptions(
        &self,
        id: &str,
        stream: u64,
        protocol: &'static str,
        subscriptions: Vec<Subscription>,
    ) {
        let mut st = self.lock();
        if let Some(e) = st.proxies.get_mut(id) {
            let info = e.stream_info.entry(stream).or_insert_with(|| StreamInfo {
                protocol,
                opened: SystemTime::now(),
                subscriptions: Vec::new(),
            });
            info.subscriptions = subscriptions;
        }
    }
}

/// What a NACK's attribution starts from: the suspect resources, the proxy's namespace, and
/// the epochs of its last accepted push of the type and of the rejected one.
type Suspects = (Vec<String>, String, u64, u64);

/// The resources of the push a NACK answers that could be at fault: those in a version this
/// proxy had not acknowledged, narrowed to those Envoy's message names when it names any.
/// Only the rejecting proxy's own record is read: what other proxies acknowledged does not
/// sway what is said about this one. `None` when the NACK answers no push in flight, or
/// nothing qualifies.
fn rejected_resources(st: &super::HubState, id: &str, stream: u64, n: &Nack) -> Option<Suspects> {
    let entry = st.proxies.get(id)?;
    let sync = &entry.sync[n.rtype];
    let f = sync
        .in_flight
        .as_ref()
        .filter(|f| f.stream == stream && f.nonce == n.nonce)?;
    let taken = |name: &Name, version: &Name| sync.acked.get(name) == Some(version);
    let suspects: Vec<&Name> = f
        .push
        .resources
        .iter()
        .filter(|(name, version)| !taken(name, version))
        .map(|(name, _)| name)
        .collect();
    let named: Vec<&Name> = suspects
        .iter()
        .copied()
        .filter(|name| n.message.contains(&**name as &str))
        .collect();
    let chosen = if named.is_empty() { suspects } else { named };
    if chosen.is_empty() {
        return None;
    }
    Some((
        chosen.iter().map(|n| n.to_string()).collect(),
        entry.proxy.namespace.clone(),
        sync.acked_epoch,
        f.epoch,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::HubOptions;
    use dataflows::model::ResourceType;

    /// A push of many resources is one bounded watch event: the first `MAX_CHANGES` listed,
    /// the rest counted.
    #[test]
    fn a_watch_event_lists_at_most_max_changes() {
        let (tx, _rx) = std::sync::mpsc::channel();
        let hub = Hub::new(tx, HubOptions::default());
        let mut events = hub.watch();
        let n = super::super::events::MAX_CHANGES + 500;
        let resources = (0..n)
            .map(|i| (Name::from(format!("c{i}").as_str()), Name::from("v1")))
            .collect();
        let from = StreamRef {
            proxy: "p",
            stream: 1,
            protocol: "delta",
        };
        hub.record(
            from,
            StreamEvent::Push(Push {
                rtype: ResourceType::Cluster,
                nonce: "1".into(),
                bytes: 10,
                resources,
                removed: vec![],
                full_set: false,
            }),
        );
        let e = events.try_recv().expect("a push event");
        match &e.kind {
            WatchKind::Push {
                changes,
                more_changes,
                ..
            } => {
                assert_eq!(changes.len(), super::super::events::MAX_CHANGES);
                assert_eq!(*more_changes, 500);
            }
            other => panic!("{other:?}"),
        }
    }
}
