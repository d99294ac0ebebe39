//! The objects a source holds now, and the record changes that take the dataflow from what
//! the source said before to what it says now. Every source keeps one [`ObjectSet`]: the
//! file source sets the objects of the files that changed, a Kubernetes watch sets the
//! object of each event and swaps everything on a relist ([`ObjectSet::replace_all`]).
//! An object whose records did not change produces no change at all, so a rewrite of the
//! same content or a relist of unchanged objects costs the mesh nothing.

use crate::input::{ChangeOp, InputChange};
use dataflows::model::{ConfigKey, Record};
use std::collections::{BTreeMap, HashMap};

/// One object in effect: the records it contributes and where it came from (a file path,
/// `kubernetes`, …), which the debug history shows next to its changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub records: Vec<Record>,
    pub origin: String,
}

/// The record changes of one update, and the objects behind them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Consolidated, sorted by record; never a zero.
    pub changes: Vec<(Record, isize)>,
    /// Every object with a changed record once, sorted by key.
    pub described: Vec<InputChange>,
}

/// The objects in effect, by key.
#[derive(Default)]
pub struct ObjectSet {
    objects: HashMap<ConfigKey, Object>,
}

impl ObjectSet {
    pub fn get(&self, key: &ConfigKey) -> Option<&Object> {
        self.objects.get(key)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Sets (`Some`) or removes (`None`) objects; the last update of a key wins.
    pub fn update(
        &mut self,
        updates: impl IntoIterator<Item = (ConfigKey, Option<Object>)>,
    ) -> Diff {
        let updates: BTreeMap<ConfigKey, Option<Object>> = updates.into_iter().collect();
        let mut diff = DiffBuilder::default();
        for (key, now) in updates {
            let before = match &now {
                Some(o) => self.objects.insert(key.clone(), o.clone()),
                None => self.objects.remove(&key),
            };
            diff.object(&key, before.as_ref(), now.as_ref());
        }
        diff.finish()
    }

    /// Everything the source holds now (a relist, a full rescan): objects `all` does not
    /// name are removed, unchanged ones produce nothing.
    pub fn replace_all(&mut self, all: HashMap<ConfigKey, Object>) -> Diff {
        let before = std::mem::replace(&mut self.objects, all);
        let mut keys: Vec<&ConfigKey> = before.keys().chain(self.objects.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut diff = DiffBuilder::default();
        for key in keys {
            diff.object(key, before.get(key), self.objects.get(key));
        }
        diff.finish()
    }
}

#[derive(Default)]
struct DiffBuilder {
    changes: Vec<(Record, isize)>,
    described: Vec<InputChange>,
}

impl DiffBuilder {
    /// Adds what changed between an object's two versions (either may be absent).
    fn object(&mut self, key: &ConfigKey, before: Option<&Object>, now: Option<&Object>) {
        let mut counts: BTreeMap<&Record, isize> = BTreeMap::new();
        for r in before.iter().flat_map(|o| &o.records) {
            *counts.entry(r).or_default() -= 1;
        }
        for r in now.iter().flat_map(|o| &o.records) {
            *counts.entry(r).or_default() += 1;
        }
        let n = self.changes.len();
        self.changes.extend(
            counts
                .into_iter()
                .filter(|(_, d)| *d != 0)
                .map(|(r, d)| (r.clone(), d)),
        );
        if self.changes.len() == n {
            return;
        }
        let op = match (before, now) {
            (None, Some(_)) => ChangeOp::Insert,
            (Some(_), None) => ChangeOp::Delete,
            _ => ChangeOp::Update,
        };
        let origin = now.or(before).map(|o| o.origin.clone()).unwrap_or_default();
        self.described.push(InputChange::object(key, op, origin));
    }

    fn finish(mut self) -> Diff {
        // Two objects never contribute the same record (records carry their object's key),
        // but consolidate anyway: a change list must hold each record once.
        self.changes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut merged: Vec<(Record, isize)> = Vec::with_capacity(self.changes.len());
        for (r, d) in self.changes {
            match merged.last_mut() {
                Some((last, n)) if *last == r => *n += d,
                _ => merged.push((r, d)),
            }
        }
        merged.retain(|(_, d)| *d != 0);
        self.described.sort();
        Diff {
            changes: merged,
            described: self.described,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::{Kind, Sidecar};

    /// A Sidecar selecting `app`.
    fn sidecar(name: &str, app: &str) -> (ConfigKey, Record) {
        let key = ConfigKey::new(Kind::Sidecar, "default", name);
        let record = Record::Sidecar(Sidecar {
            registry_only: None,
            egress_proxy: None,
            inbound_connection_pool: None,
            ingress: Vec::new(),
            key: key.clone(),
            selector: Some([("app".to_string(), app.to_string())].into()),
            egress: Vec::new(),
        });
        (key, record)
    }

    fn object(r: &Record, origin: &str) -> Option<Object> {
        Some(Object {
            records: vec![r.clone()],
            origin: origin.into(),
        })
    }

    #[test]
    fn updates_insert_change_and_remove_with_descriptions() {
        let mut set = ObjectSet::default();
        let (a, a1) = sidecar("a", "x");
        let d = set.update([(a.clone(), object(&a1, "a.yaml"))]);
        assert_eq!(d.changes, vec![(a1.clone(), 1)]);
        assert_eq!(d.described[0].op, ChangeOp::Insert);
        assert_eq!(d.described[0].source, "a.yaml");

        // The same records from elsewhere: nothing changes.
        assert_eq!(
            set.update([(a.clone(), object(&a1, "b.yaml"))]),
            Diff::default()
        );

        let (_, a2) = sidecar("a", "y");
        let d = set.update([(a.clone(), object(&a2, "b.yaml"))]);
        assert_eq!(d.changes.len(), 2);
        assert!(d.changes.contains(&(a1, -1)) && d.changes.contains(&(a2.clone(), 1)));
        assert_eq!(d.described[0].op, ChangeOp::Update);

        let d = set.update([(a, None)]);
        assert_eq!(d.changes, vec![(a2, -1)]);
        assert_eq!(d.described[0].op, ChangeOp::Delete);
        assert_eq!(d.described[0].source, "b.yaml");
        assert!(set.is_empty());
    }

    #[test]
    fn replace_all_retracts_what_it_does_not_name_and_skips_the_unchanged() {
        let mut set = ObjectSet::default();
        let (a, ra) = sidecar("a", "x");
        let (b, rb) = sidecar("b", "x");
        let (c, rc) = sidecar("c", "x");
        set.update([(a.clone(), object(&ra, "k")), (b.clone(), object(&rb, "k"))]);
        let all = HashMap::from([
            (a.clone(), object(&ra, "k").unwrap()),
            (c.clone(), object(&rc, "k").unwrap()),
        ]);
        let d = set.replace_all(all);
        assert_eq!(d.changes, vec![(rb, -1), (rc, 1)]);
        let ops: Vec<(String, ChangeOp)> =
            d.described.iter().map(|c| (c.name.clone(), c.op)).collect();
        assert_eq!(
            ops,
            vec![
                ("b".into(), ChangeOp::Delete),
                ("c".into(), ChangeOp::Insert)
            ]
        );
        assert_eq!(set.len(), 2);
        assert!(set.get(&a).is_some() && set.get(&b).is_none());
    }
}
