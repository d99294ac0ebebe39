//! Rollback on rejection: when a proxy rejects (NACKs) a resource, the traffic objects that
//! changed it since the proxy last accepted it are set back to their previous version, so one
//! bad object does not hold every other object that shares its resource hostage. Without
//! this, Envoy keeps the last version it accepted of the whole resource (a route
//! configuration of every VirtualService on a port), and each later valid edit of any of
//! them is rejected along with the bad one, for as long as the bad one is there.
//!
//! The runtime passes every record change through here. For objects of the traffic kinds an
//! operator writes (VirtualService, DestinationRule, Gateway, Sidecar, ServiceEntry,
//! WorkloadEntry) it keeps three views: what the source says now, what the dataflow has
//! (`effective`), and what the dataflow had before the object's latest change (`prior`).
//! A [`Rejection`] names the objects a rejected resource was built from and the epochs of
//! the last accepted and the rejected push; each of those objects whose latest change falls
//! between the two is set back to `prior` (or taken out, if it had none) and reported as an
//! error of the source [`SOURCE`], naming the proxy, the resource and Envoy's message. The
//! object's next change from its source ends the rollback: the new version is applied and
//! judged again.
//!
//! Kubernetes-made objects (Services, endpoints, Pods) are not rolled back: their records are
//! validated strictly on input, and a rollback would hide the cluster's real state.

use crate::input::{record_key, ChangeOp, InputChange, ProxyRejection, ProxyRejections, Rejection};
use dataflows::model::{ConfigKey, Kind, Record};
use std::collections::{BTreeMap, HashMap};

/// The source name the rollback reports its errors under.
pub const SOURCE: &str = "rejected-by-proxies";

/// Envoy's message is cut to this many characters in the error (NACK messages can be long).
const MESSAGE_CHARS: usize = 300;

/// Objects whose records are tracked for rollback.
fn tracked(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::VirtualService
            | Kind::DestinationRule
            | Kind::Gateway
            | Kind::Sidecar
            | Kind::ServiceEntry
            | Kind::WorkloadEntry
    )
}

#[derive(Default)]
struct Object {
    /// The records the source holds for the object now.
    source: Vec<Record>,
    /// The records in the dataflow now (differs from `source` while rolled back).
    effective: Vec<Record>,
    /// The records in the dataflow before the object's latest change.
    prior: Vec<Record>,
    /// The epoch of the object's latest change.
    changed: u64,
    /// Why it is rolled back, while it is.
    rolled_back: Option<String>,
    /// The rejections that set it back, while it is.
    rejected: Option<ProxyRejection>,
}

/// The tracked objects, and which of them are rolled back.
#[derive(Default)]
pub struct Rollback {
    objects: HashMap<ConfigKey, Object>,
}

impl Rollback {
    /// Passes one epoch's record changes from sources through. Changes of untracked records
    /// pass unchanged; for a rolled-back object, its source's new version replaces what is in
    /// effect (and ends the rollback). Returns the changes to apply and whether the list of
    /// errors changed.
    pub fn admit(
        &mut self,
        epoch: u64,
        changes: Vec<(Record, isize)>,
    ) -> (Vec<(Record, isize)>, bool) {
        let mut out = Vec::with_capacity(changes.len());
        let mut by_key: BTreeMap<ConfigKey, Vec<(Record, isize)>> = BTreeMap::new();
        for (r, d) in changes {
            match record_key(&r).filter(|k| tracked(k.kind)).cloned() {
                Some(k) => by_key.entry(k).or_default().push((r, d)),
                None => out.push((r, d)),
            }
        }
        let mut errors_changed = false;
        for (key, diffs) in by_key {
            let obj = self.objects.entry(key.clone()).or_default();
            let next = apply(&obj.source, &diffs);
            obj.rejected = None;
            if obj.rolled_back.take().is_some() {
                // The source's new version replaces the rolled-back one in effect.
                out.extend(difference(&obj.effective, &next));
                errors_changed = true;
            } else {
                out.extend(diffs);
            }
            obj.prior = std::mem::replace(&mut obj.effective, next.clone());
            obj.source = next;
            obj.changed = epoch;
            if obj.source.is_empty() && obj.effective.is_empty() {
                self.objects.remove(&key);
            }
        }
        (out, errors_changed)
    }

    /// Sets back the objects of `r` that changed after the proxy last accepted the resource
    /// and no later than the rejected push. Returns the changes to apply and the objects set
    /// back (empty when none of the objects qualifies: nothing is touched then). A further
    /// proxy rejecting an object already set back is only counted ([`Rollback::rejections`]).
    pub fn reject(&mut self, r: &Rejection) -> (Vec<(Record, isize)>, Vec<InputChange>) {
        let mut out = Vec::new();
        let mut described = Vec::new();
        let why = format!(
            "rejected by proxy {} ({} {}): {}; {}",
            r.proxy,
            r.rtype.short(),
            r.resources.join(", "),
            cut(&r.message),
            "the previous version stays in effect until the object changes again",
        );
        for key in &r.inputs {
            let Some(obj) = self.objects.get_mut(key) else {
                continue;
            };
            if let Some(rejected) = &mut obj.rejected {
                rejected.proxies.insert(r.proxy.to_string());
                continue;
            }
            let in_window = obj.changed > r.accepted_epoch && obj.changed <= r.rejected_epoch;
            if obj.rolled_back.is_some() || !in_window || obj.effective == obj.prior {
                continue;
            }
            out.extend(difference(&obj.effective, &obj.prior));
            let op = if obj.prior.is_empty() {
                ChangeOp::Delete
            } else {
                ChangeOp::Update
            };
            described.push(InputChange::object(key, op, SOURCE.to_string()));
            obj.effective = obj.prior.clone();
            obj.rolled_back = Some(why.clone());
            obj.rejected = Some(ProxyRejection {
                proxies: [r.proxy.to_string()].into(),
                resources: format!("{} {}", r.rtype.short(), r.resources.join(", ")),
                message: cut(&r.message),
                since: std::time::SystemTime::now(),
            });
            tracing::warn!(
                object = %format!("{:?} {}/{}", key.kind, key.namespace, key.name),
                proxy = %r.proxy,
                "rolled back: {why}"
            );
        }
        (out, described)
    }

    /// The objects set back now, with the proxies that rejected them.
    pub fn rejections(&self) -> ProxyRejections {
        self.objects
            .iter()
            .filter_map(|(k, o)| Some((k.clone(), o.rejected.clone()?)))
            .collect()
    }

    /// One error per rolled-back object, sorted.
    pub fn errors(&self) -> Vec<String> {
        let mut errors: Vec<String> = self
            .objects
            .iter()
            .filter_map(|(k, o)| {
                let why = o.rolled_back.as_ref()?;
                Some(format!("{:?} {}/{}: {why}", k.kind, k.namespace, k.name))
            })
            .collect();
        errors.sort();
        errors
    }
}

/// `records` with `diffs` applied (a multiset; records whose count drops to zero go).
fn apply(records: &[Record], diffs: &[(Record, isize)]) -> Vec<Record> {
    let mut counts: BTreeMap<&Record, isize> = BTreeMap::new();
    for r in records {
        *counts.entry(r).or_insert(0) += 1;
    }
    for (r, d) in diffs {
        *counts.entry(r).or_insert(0) += d;
    }
    counts
        .into_iter()
        .flat_map(|(r, n)| std::iter::repeat_n(r.clone(), n.max(0) as usize))
        .collect()
}

/// The changes that turn `from` into `to`.
fn difference(from: &[Record], to: &[Record]) -> Vec<(Record, isize)> {
    let mut counts: BTreeMap<&Record, isize> = BTreeMap::new();
    for r in from {
        *counts.entry(r).or_insert(0) -= 1;
    }
    for r in to {
        *counts.entry(r).or_insert(0) += 1;
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(r, n)| (r.clone(), n))
        .collect()
}

fn cut(message: &str) -> String {
    let one_line: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match one_line.char_indices().nth(MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::{Proxy, ProxyKind, ResourceType, VirtualService};

    fn key(name: &str) -> ConfigKey {
        ConfigKey::new(Kind::VirtualService, "default", name)
    }

    /// A VirtualService record of `name` whose content is told apart by `gateways`.
    fn vs(name: &str, version: &str) -> Record {
        Record::VirtualService(VirtualService {
            key: key(name),
            hosts: vec![format!("{name}.default.svc.cluster.local")],
            gateways: vec![version.to_string()],
            export_to: vec![],
            tcp: vec![],
            tls: vec![],
            http: vec![],
        })
    }

    fn rejection(names: &[&str], accepted: u64, rejected: u64) -> Rejection {
        Rejection {
            proxy: "sleep.default".into(),
            rtype: ResourceType::Route,
            resources: vec!["9080".into()],
            message: "Invalid regex: program size 153 > 100\nmore".into(),
            inputs: names.iter().map(|n| key(n)).collect(),
            accepted_epoch: accepted,
            rejected_epoch: rejected,
        }
    }

    #[test]
    fn a_rejected_change_is_set_back_until_its_source_changes_it_again() {
        let mut rb = Rollback::default();
        let (out, _) = rb.admit(1, vec![(vs("reviews", "a"), 1), (vs("ratings", "a"), 1)]);
        assert_eq!(out.len(), 2, "first versions pass through");
        // Epoch 2 changes ratings; the proxy last accepted epoch 1's push and rejects epoch 2's.
        let (out, changed) = rb.admit(2, vec![(vs("ratings", "a"), -1), (vs("ratings", "bad"), 1)]);
        assert_eq!(out.len(), 2);
        assert!(!changed);
        let (setback, described) = rb.reject(&rejection(&["reviews", "ratings"], 1, 2));
        assert_eq!(
            setback,
            vec![(vs("ratings", "a"), 1), (vs("ratings", "bad"), -1)],
            "only ratings (changed after epoch 1) goes back, to its previous version"
        );
        assert_eq!(described.len(), 1);
        assert_eq!(described[0].op, ChangeOp::Update);
        let errors = rb.errors();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("VirtualService default/ratings: rejected by proxy sleep.default (RDS 9080): Invalid regex: program size 153 > 100 more;"),
            "{errors:?}"
        );
        // A second NACK of the same push sets back nothing more; another proxy's is counted.
        assert!(rb
            .reject(&rejection(&["reviews", "ratings"], 1, 2))
            .0
            .is_empty());
        let mut other = rejection(&["reviews", "ratings"], 1, 2);
        other.proxy = "other.default".into();
        assert!(rb.reject(&other).0.is_empty());
        let rejections = rb.rejections();
        assert_eq!(rejections.keys().collect::<Vec<_>>(), [&key("ratings")]);
        let r = &rejections[&key("ratings")];
        assert_eq!(
            r.proxies.iter().map(String::as_str).collect::<Vec<_>>(),
            ["other.default", "sleep.default"]
        );
        assert_eq!(r.resources, "RDS 9080");
        assert!(r.message.starts_with("Invalid regex"), "{}", r.message);
        // The source fixes ratings: its new version replaces the one in effect (the old `a`,
        // not the rejected `bad` the source still held), and the error goes.
        let (out, changed) = rb.admit(
            3,
            vec![(vs("ratings", "bad"), -1), (vs("ratings", "fixed"), 1)],
        );
        assert!(changed);
        assert_eq!(
            out,
            vec![(vs("ratings", "a"), -1), (vs("ratings", "fixed"), 1)]
        );
        assert!(rb.errors().is_empty());
        assert!(rb.rejections().is_empty());
    }

    #[test]
    fn a_new_object_rejected_is_taken_out_and_old_changes_are_left_alone() {
        let mut rb = Rollback::default();
        rb.admit(1, vec![(vs("reviews", "a"), 1)]);
        rb.admit(5, vec![(vs("ratings", "bad"), 1)]);
        // The proxy accepted a push of epoch 3: reviews (epoch 1) is not suspect.
        let (setback, described) = rb.reject(&rejection(&["reviews", "ratings"], 3, 5));
        assert_eq!(setback, vec![(vs("ratings", "bad"), -1)]);
        assert_eq!(described[0].op, ChangeOp::Delete);
        // Deleting the rejected object at its source: nothing left to retract.
        let (out, changed) = rb.admit(6, vec![(vs("ratings", "bad"), -1)]);
        assert!(out.is_empty(), "{out:?}");
        assert!(changed);
        assert!(rb.errors().is_empty());
        // Untracked records pass through untouched.
        let svc = Record::Proxy(Proxy {
            id: "sleep.default".into(),
            kind: ProxyKind::Sidecar,
            ips: vec![],
            namespace: "default".into(),
            labels: Default::default(),
            interception_none: false,
            service_account: None,
            locality: String::new(),
            idle_timeout_ns: None,
        });
        assert_eq!(rb.admit(7, vec![(svc.clone(), 1)]).0, vec![(svc, 1)]);
    }
}
