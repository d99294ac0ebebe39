//! What one watch (one kind, in one namespace or all) knows of the cluster: the last valid
//! version of each object it saw, the errors of the invalid ones, and what changed since
//! the last report. Pure: it is fed `kube::runtime::watcher` events and hands out
//! [`Diff`]s; no I/O, so relists, deletions and invalid objects are tested without a cluster.
//!
//! Three rules it keeps:
//! - An invalid object gets the error file input would get (kind/namespace/name, field) and
//!   its last valid version stays in effect until it is fixed or deleted.
//! - A relist (`Init` … `InitApply` … `InitDone`) is buffered and swapped in whole when it
//!   completes ([`ObjectSet::replace_all`]): objects it does not name are retracted, unchanged
//!   ones produce nothing, and a relist cut short changes nothing.
//! - An event whose object contributes the same records as before (a Pod's status or
//!   annotations, say) produces no change at all.

use super::super::objects::{Diff, Object, ObjectSet};
use super::object::KubeObject;
use crate::config::{parse_object, Invalid, Level};
use dataflows::model::{ConfigKey, Kind, MeshConfig};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the analysis of an accepted version says: `level: Kind ns/name: field: message`.
type Findings = Vec<(Level, String)>;

/// The objects, findings and errors a (re)list has read so far.
#[derive(Default)]
struct Listing {
    held: HashMap<ConfigKey, Object>,
    findings: HashMap<ConfigKey, Findings>,
    errors: BTreeMap<ConfigKey, String>,
    stored: HashMap<ConfigKey, Stored>,
}

/// What the API server holds of an object besides what it configures: its uid (for the
/// Events that name it) and its status as last written (so status writing starts from what
/// is there, not from nothing).
#[derive(Default)]
struct Stored {
    uid: Option<String>,
    /// `metadata.generation`: what a Gateway API condition's `observedGeneration` says.
    generation: Option<i64>,
    status: Option<serde_json::Value>,
}

impl Stored {
    fn of(obj: &KubeObject) -> Stored {
        Stored {
            uid: obj.metadata.uid.clone(),
            generation: obj.metadata.generation,
            status: obj
                .decoded
                .as_ref()
                .ok()
                .and_then(|o| o.data.get("status"))
                .filter(|s| !s.is_null())
                .cloned(),
        }
    }
}

/// What status writing needs of one object a watch saw.
pub struct Seen<'a> {
    pub key: &'a ConfigKey,
    pub uid: Option<&'a str>,
    /// Its status as the API server holds it.
    pub status: Option<&'a serde_json::Value>,
    /// The error of its latest version, when that is invalid.
    pub error: Option<&'a String>,
    /// The findings of the version in effect.
    pub findings: &'a [(Level, String)],
    /// The records of the version in effect (none while invalid and never valid).
    pub records: &'a [dataflows::model::Record],
    pub generation: Option<i64>,
}

/// One watch's state (see the module documentation).
pub struct Watched {
    kind: Kind,
    /// The `apiVersion` and `kind` the watch asked for: list items come without them.
    api_version: String,
    kind_name: String,
    mesh: MeshConfig,
    /// The last valid version of every object in effect.
    held: HashMap<ConfigKey, Object>,
    /// The analysis of each version in `held` that has something to say.
    findings: HashMap<ConfigKey, Findings>,
    /// Per invalid object, its error.
    errors: BTreeMap<ConfigKey, String>,
    /// The uid and status of every object seen (held or invalid).
    stored: HashMap<ConfigKey, Stored>,
    /// A relist in progress.
    relist: Option<Listing>,
    /// The first list is complete.
    listed: bool,
    /// A list completed since the last report: the next diff swaps everything.
    swap: bool,
    /// Objects touched by events since the last report.
    dirty: BTreeSet<ConfigKey>,
    /// What has been reported.
    emitted: ObjectSet,
}

impl Watched {
    pub fn new(kind: Kind, api_version: &str, kind_name: &str, mesh: MeshConfig) -> Self {
        Watched {
            kind,
            api_version: api_version.to_string(),
            kind_name: kind_name.to_string(),
            mesh,
            held: HashMap::new(),
            findings: HashMap::new(),
            errors: BTreeMap::new(),
            stored: HashMap::new(),
            relist: None,
            listed: false,
            swap: false,
            dirty: BTreeSet::new(),
            emitted: ObjectSet::default(),
        }
    }

    /// Whether the first list has completed.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Applies one watcher event.
    pub fn apply(&mut self, event: Event<KubeObject>) {
        match event {
            Event::Init => self.relist = Some(Listing::default()),
            Event::InitApply(obj) => {
                let stored = Stored::of(&obj);
                let (key, parsed) = self.parse(obj);
                let listing = self.relist.get_or_insert_with(Listing::default);
                listing.stored.insert(key.clone(), stored);
                match parsed {
                    Ok((object, findings)) => {
                        log_findings(self.findings.get(&key), &findings);
                        if !findings.is_empty() {
                            listing.findings.insert(key.clone(), findings);
                        }
                        listing.held.insert(key, object);
                    }
                    Err(e) => {
                        if let Some(previous) = self.held.get(&key) {
                            listing.held.insert(key.clone(), previous.clone());
                        }
                        if let Some(previous) = self.findings.get(&key) {
                            listing.findings.insert(key.clone(), previous.clone());
                        }
                        log_rejection(self.errors.get(&key), &e);
                        listing.errors.insert(key, e);
                    }
                }
            }
            Event::InitDone => {
                let listing = self.relist.take().unwrap_or_default();
                self.held = listing.held;
                self.findings = listing.findings;
                self.errors = listing.errors;
                self.stored = listing.stored;
                self.listed = true;
                self.swap = true;
                self.dirty.clear();
            }
            Event::Apply(obj) => {
                let stored = Stored::of(&obj);
                let (key, parsed) = self.parse(obj);
                self.stored.insert(key.clone(), stored);
                match parsed {
                    Ok((object, findings)) => {
                        log_findings(self.findings.get(&key), &findings);
                        self.errors.remove(&key);
                        self.held.insert(key.clone(), object);
                        if findings.is_empty() {
                            self.findings.remove(&key);
                        } else {
                            self.findings.insert(key.clone(), findings);
                        }
                    }
                    Err(e) => {
                        log_rejection(self.errors.get(&key), &e);
                        self.errors.insert(key.clone(), e);
                    }
                }
                self.dirty.insert(key);
            }
            Event::Delete(obj) => {
                let key = self.key_of(&obj);
                self.errors.remove(&key);
                self.findings.remove(&key);
                self.held.remove(&key);
                self.stored.remove(&key);
                self.dirty.insert(key);
            }
        }
    }

    /// The record changes since the last call (nothing before the first list completed).
    pub fn take_diff(&mut self) -> Diff {
        if !self.listed {
            return Diff::default();
        }
        if std::mem::take(&mut self.swap) {
            self.dirty.clear();
            return self.emitted.replace_all(self.held.clone());
        }
        let dirty = std::mem::take(&mut self.dirty);
        let held = &self.held;
        self.emitted.update(
            dirty
                .into_iter()
                .map(|k| (k.clone(), held.get(&k).cloned())),
        )
    }

    /// The errors of the invalid objects, sorted by object.
    pub fn errors(&self) -> impl Iterator<Item = &String> {
        self.errors.values()
    }

    /// Per object of this watch (held or invalid): the error of its latest version, if it
    /// is invalid, and the findings of the version in effect; for status writing.
    pub fn statuses(&self) -> impl Iterator<Item = Seen<'_>> {
        let keys: BTreeSet<&ConfigKey> = self.held.keys().chain(self.errors.keys()).collect();
        keys.into_iter().map(|key| Seen {
            key,
            uid: self.stored.get(key).and_then(|s| s.uid.as_deref()),
            status: self.stored.get(key).and_then(|s| s.status.as_ref()),
            error: self.errors.get(key),
            findings: self
                .findings
                .get(key)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            records: self
                .held
                .get(key)
                .map(|o| o.records.as_slice())
                .unwrap_or_default(),
            generation: self.stored.get(key).and_then(|s| s.generation),
        })
    }

    /// The analysis of the versions in effect (unsorted).
    pub fn analysis(&self) -> impl Iterator<Item = &(Level, String)> {
        self.findings.values().flatten()
    }

    fn key_of(&self, obj: &KubeObject) -> ConfigKey {
        let namespace = match self.kind {
            Kind::Namespace | Kind::GatewayClass => String::new(),
            _ => obj
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
        };
        ConfigKey::new(
            self.kind,
            namespace,
            obj.metadata.name.clone().unwrap_or_default(),
        )
    }

    /// The object's key, and its records and findings or the error that rejects it.
    fn parse(&self, obj: KubeObject) -> (ConfigKey, Result<(Object, Findings), String>) {
        let key = self.key_of(&obj);
        let version = obj.metadata.resource_version.clone().unwrap_or_default();
        let named = |mut invalid: Invalid| {
            invalid.object.get_or_insert_with(|| key.clone());
            invalid.to_string()
        };
        let obj: DynamicObject = match obj.decoded {
            Ok(o) => o,
            Err(why) => return (key.clone(), Err(named(Invalid::field("", why)))),
        };
        let mut value = match serde_json::to_value(&obj) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) => return (key.clone(), Err(named(Invalid::field("", "not an object")))),
            Err(e) => {
                let e = Invalid::field("", format!("not a Kubernetes object: {e}"));
                return (key.clone(), Err(named(e)));
            }
        };
        // List items carry no apiVersion and kind; the watch knows what it asked for.
        value.insert("apiVersion".into(), self.api_version.clone().into());
        value.insert("kind".into(), self.kind_name.clone().into());
        let parsed = match parse_object(&value, &self.mesh) {
            Ok(Some(parsed)) => {
                let findings = parsed.finding_lines().collect();
                let object = Object {
                    records: parsed.records,
                    origin: format!("kubernetes (resourceVersion {version})"),
                };
                Ok((object, findings))
            }
            Ok(None) => Err(named(Invalid::field(
                "apiVersion",
                format!("{} is not read as {}", self.api_version, self.kind_name),
            ))),
            Err(invalid) => Err(named(invalid)),
        };
        (key, parsed)
    }
}

/// Logs an accepted version's findings when they differ from its previous version's.
fn log_findings(before: Option<&Findings>, now: &Findings) {
    if before.map_or(now.is_empty(), |b| b == now) {
        return;
    }
    for (level, line) in now {
        crate::sources::log_finding(*level, line);
    }
}

/// Logs a rejection once: a relist or a resync of the same invalid object says nothing new.
fn log_rejection(before: Option<&String>, now: &str) {
    if before.map(String::as_str) != Some(now) {
        crate::sources::log_rejection(&now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::ChangeOp;
    use dataflows::model::Record;

    fn watched() -> Watched {
        Watched::new(
            Kind::VirtualService,
            "networking.istio.io/v1",
            "VirtualService",
            MeshConfig::default(),
        )
    }

    /// A VirtualService `name` routing `host` to itself with `timeout`, as a list item
    /// comes: without apiVersion and kind.
    fn vs(name: &str, timeout: &str, version: &str) -> KubeObject {
        KubeObject::from_json(&serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "resourceVersion": version},
            "spec": {"hosts": ["reviews"], "http": [{"timeout": timeout, "route": [{"destination": {"host": "reviews"}}]}]}
        }).to_string())
    }

    fn records(d: &Diff) -> Vec<(String, isize)> {
        d.changes
            .iter()
            .map(|(r, n)| match r {
                Record::VirtualService(v) => (v.key.name.clone(), *n),
                other => (format!("{other:?}"), *n),
            })
            .collect()
    }

    fn list(w: &mut Watched, objects: Vec<KubeObject>) {
        w.apply(Event::Init);
        for o in objects {
            w.apply(Event::InitApply(o));
        }
        w.apply(Event::InitDone);
    }

    #[test]
    fn nothing_before_the_first_list_completes() {
        let mut w = watched();
        w.apply(Event::Init);
        w.apply(Event::InitApply(vs("a", "1s", "1")));
        assert!(!w.listed());
        assert_eq!(w.take_diff(), Diff::default());
        w.apply(Event::InitDone);
        assert!(w.listed());
        assert_eq!(records(&w.take_diff()), vec![("a".into(), 1)]);
    }

    #[test]
    fn relist_retracts_the_vanished_and_skips_the_unchanged() {
        let mut w = watched();
        list(&mut w, vec![vs("a", "1s", "1"), vs("b", "1s", "2")]);
        w.take_diff();
        // Same content, newer resourceVersions: no change. `b` vanished while disconnected.
        list(&mut w, vec![vs("a", "1s", "7"), vs("c", "2s", "8")]);
        let d = w.take_diff();
        assert_eq!(records(&d), vec![("b".into(), -1), ("c".into(), 1)]);
        let ops: Vec<ChangeOp> = d.described.iter().map(|c| c.op).collect();
        assert_eq!(ops, vec![ChangeOp::Delete, ChangeOp::Insert]);
    }

    #[test]
    fn a_relist_cut_short_changes_nothing() {
        let mut w = watched();
        list(&mut w, vec![vs("a", "1s", "1")]);
        w.take_diff();
        w.apply(Event::Init);
        assert_eq!(w.take_diff(), Diff::default());
        // The watcher starts over: the partial listing is dropped.
        list(&mut w, vec![vs("a", "1s", "3")]);
        assert_eq!(w.take_diff(), Diff::default());
    }

    #[test]
    fn an_invalid_version_keeps_the_last_valid_one_and_names_object_and_field() {
        let mut w = watched();
        list(&mut w, vec![vs("a", "1s", "1")]);
        w.take_diff();
        w.apply(Event::Apply(vs("a", "soon", "2")));
        assert_eq!(w.take_diff(), Diff::default());
        let errors: Vec<&String> = w.errors().collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("VirtualService default/a: spec.http[0].timeout: "),
            "{}",
            errors[0]
        );
        // Still invalid on a relist: still kept, still reported.
        list(&mut w, vec![vs("a", "soon", "3")]);
        assert_eq!(w.take_diff(), Diff::default());
        assert_eq!(w.errors().count(), 1);
        // Fixed: the new version replaces the old, the error goes.
        w.apply(Event::Apply(vs("a", "2s", "4")));
        assert_eq!(
            records(&w.take_diff()),
            vec![("a".into(), -1), ("a".into(), 1)]
        );
        assert_eq!(w.errors().count(), 0);
    }

    #[test]
    fn deletion_retracts_and_clears_the_error() {
        let mut w = watched();
        list(&mut w, vec![vs("a", "1s", "1")]);
        w.take_diff();
        w.apply(Event::Apply(vs("a", "bad", "2")));
        w.apply(Event::Delete(vs("a", "bad", "3")));
        assert_eq!(records(&w.take_diff()), vec![("a".into(), -1)]);
        assert_eq!(w.errors().count(), 0);
        // A new object that is invalid from the start has nothing in effect.
        w.apply(Event::Apply(vs("b", "bad", "4")));
        assert_eq!(w.take_diff(), Diff::default());
        assert_eq!(w.errors().count(), 1);
    }
}
