//! What each proxy holds, materialized from the dataflow's epoch outputs without ever
//! writing one record per (proxy, resource): the dataflow emits `proxy → scope`,
//! `scope → resources` and the few resources a proxy owns alone (inbound clusters, its
//! `virtualInbound`), and a proxy's set is resolved here as its scope's set plus its own.
//! Ten thousand sidecars in a hundred scopes hold a hundred maps, not ten thousand.
//!
//! Every set keeps a short log of the names it changed, so a stream that compared a proxy
//! at [`Stamp`] S looks only at the names changed since S ([`Held::changed_since`]) instead of
//! the proxy's whole set. Names and versions are interned: every map and every stream that
//! holds a name shares one allocation.

use crate::driver::EpochOutput;
use crate::model::{ProxyId, ResourceKey, ResourceType, ScopeKey};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// An interned resource name or version.
pub type Name = Arc<str>;

/// How many changes a scope's set remembers per type. A stream that fell further behind
/// compares the whole set once.
const SCOPE_LOG: usize = 4096;
/// The same for a proxy's own resources (a handful).
const OWN_LOG: usize = 64;

fn type_index(t: ResourceType) -> usize {
    t.index()
}

/// Name → version of one type, with the log of the names it changed.
#[derive(Debug, Default)]
struct TypeSet {
    map: BTreeMap<Name, Name>,
    /// Sequence number of the last change.
    seq: u64,
    /// `(seq, name)` of the last changes, consecutive sequence numbers.
    log: VecDeque<(u64, Name)>,
}

impl TypeSet {
    /// Sets (`Some`) or removes (`None`) `name`; returns the version it had.
    fn set(&mut self, name: &Name, version: Option<Name>, cap: usize) -> Option<Name> {
        let old = match version {
            Some(v) => self.map.insert(name.clone(), v),
            None => self.map.remove(name),
        };
        self.seq += 1;
        self.log.push_back((self.seq, name.clone()));
        if self.log.len() > cap {
            self.log.pop_front();
        }
        old
    }

    /// Appends the names changed after `seq`; false when the log does not reach back so far.
    fn since(&self, seq: u64, out: &mut Vec<Name>) -> bool {
        if seq == self.seq {
            return true;
        }
        match self.log.front() {
            Some((first, _)) if seq < self.seq && *first <= seq + 1 => {
                let start = (seq + 1 - first) as usize;
                out.extend(self.log.range(start..).map(|(_, n)| n.clone()));
                true
            }
            _ => false,
        }
    }
}

#[derive(Debug)]
struct ScopeSet {
    uid: u64,
    types: [TypeSet; ResourceType::COUNT],
    members: HashSet<ProxyId>,
}

#[derive(Debug)]
struct ProxySet {
    uid: u64,
    scope: Option<ScopeKey>,
    own: [TypeSet; ResourceType::COUNT],
}

/// Where a stream last compared a proxy's resources of one type with what the client
/// holds. Equal stamps mean nothing changed in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    proxy: u64,
    scope: u64,
    scope_seq: u64,
    own_seq: u64,
}

/// One resource that changed for a proxy in an epoch: name, old and new version.
pub type NameChange = (Name, Option<Name>, Option<Name>);

/// What one [`Materialized::apply`] changed.
#[derive(Debug, Default)]
pub struct Applied {
    /// Proxies whose resources (or scope) changed, sorted.
    pub touched: Vec<ProxyId>,
    /// Per touched proxy, the types that changed (only when asked for; every type for a
    /// proxy that changed scope).
    pub touched_types: Vec<(ProxyId, ResourceType)>,
    /// Per proxy and type, the resources that changed (only when asked for).
    pub changes: Vec<(ProxyId, ResourceType, Vec<NameChange>)>,
}

/// Every proxy's resources, as scope sets shared by their members plus own sets.
#[derive(Debug, Default)]
pub struct Materialized {
    proxies: HashMap<ProxyId, ProxySet>,
    scopes: HashMap<ScopeKey, ScopeSet>,
    interner: HashSet<Name>,
    /// Removals since the interner was last swept.
    retired: usize,
    next_uid: u64,
}

/// Per (holder, type): the version each changed name had before the epoch.
type Olds = BTreeMap<Name, Option<Name>>;

impl Materialized {
    /// The shared copy of `s`, interning it.
    pub fn intern(&mut self, s: &str) -> Name {
        if let Some(n) = self.interner.get(s) {
            return n.clone();
        }
        let n: Name = Arc::from(s);
        self.interner.insert(n.clone());
        n
    }

    /// The shared copy of `s` if some resource has that name or version; a fresh one
    /// otherwise (names a client asks for do not grow the interner).
    pub fn lookup(&self, s: &str) -> Name {
        self.interner
            .get(s)
            .cloned()
            .unwrap_or_else(|| Arc::from(s))
    }

    /// Applies one epoch's `proxy_scopes`, `scope_resources` and `proxy_resources`.
    /// With `changes`, also reports each touched proxy's changed resources.
    pub fn apply(&mut self, out: &EpochOutput, changes: bool) -> Applied {
        self.apply_typed(out, changes, false)
    }

    /// [`Materialized::apply`], with `types` also reporting which types of each touched
    /// proxy changed ([`Applied::touched_types`]).
    pub fn apply_typed(&mut self, out: &EpochOutput, changes: bool, types: bool) -> Applied {
        // Proxies that change scope (connect, disconnect, relabel): their before-image is
        // their whole resolved set, taken now.
        let mut switching: Vec<ProxyId> = out
            .proxy_scopes
            .iter()
            .map(|((p, _), _)| p.clone())
            .collect();
        switching.sort();
        switching.dedup();
        let before: HashMap<ProxyId, [BTreeMap<Name, Name>; ResourceType::COUNT]> = if changes {
            switching
                .iter()
                .map(|p| {
                    let held = self.held(p);
                    (p.clone(), ResourceType::ALL.map(|t| held.versions(t)))
                })
                .collect()
        } else {
            HashMap::new()
        };

        // proxy → scope: retractions first, so a move (-old, +new) ends in the new scope.
        for ((p, s), d) in out.proxy_scopes.iter().filter(|(_, d)| *d < 0) {
            debug_assert!(*d == -1);
            if let Some(ps) = self.proxies.get_mut(p) {
                if ps.scope.as_ref() == Some(s) {
                    ps.scope = None;
                    if let Some(ss) = self.scopes.get_mut(s) {
                        ss.members.remove(p);
                    }
                }
            }
        }
        for ((p, s), _) in out.proxy_scopes.iter().filter(|(_, d)| *d > 0) {
            let old = self.proxy_entry(p).scope.replace(s.clone());
            if let Some(old) = old.filter(|o| o != s) {
                if let Some(ss) = self.scopes.get_mut(&old) {
                    ss.members.remove(p);
                }
            }
            self.scope_entry(s).members.insert(p.clone());
        }

        // scope → resources, then a proxy's own.
        let scope_olds = self.apply_sets(&out.scope_resources, SCOPE_LOG, scope_types);
        let own_olds = self.apply_sets(&out.proxy_resources, OWN_LOG, own_types);

        let mut touched: Vec<ProxyId> = switching.clone();
        for (s, _) in scope_olds.keys() {
            if let Some(ss) = self.scopes.get(s) {
                touched.extend(ss.members.iter().cloned());
            }
        }
        touched.extend(own_olds.keys().map(|(p, _)| p.clone()));
        touched.sort();
        touched.dedup();

        let mut touched_types = Vec::new();
        if types {
            for p in &switching {
                touched_types.extend(ResourceType::ALL.map(|t| (p.clone(), t)));
            }
            for (s, t) in scope_olds.keys() {
                if let Some(ss) = self.scopes.get(s) {
                    touched_types.extend(ss.members.iter().map(|p| (p.clone(), *t)));
                }
            }
            touched_types.extend(own_olds.keys().cloned());
            touched_types.sort();
            touched_types.dedup();
        }
        let mut applied = Applied {
            touched,
            touched_types,
            changes: Vec::new(),
        };
        if changes {
            applied.changes = self.changes(&switching, before, scope_olds, own_olds);
        }

        // Forget what nothing refers to any more.
        self.proxies
            .retain(|_, ps| ps.scope.is_some() || ps.own.iter().any(|t| !t.map.is_empty()));
        self.scopes
            .retain(|_, ss| !ss.members.is_empty() || ss.types.iter().any(|t| !t.map.is_empty()));
        if self.retired > 4096 && self.retired * 2 > self.interner.len() {
            self.interner.retain(|n| Arc::strong_count(n) > 1);
            self.retired = 0;
        }
        applied
    }

    /// Applies `(holder, resource)` diffs to the holders' sets (`types` finds a holder's
    /// sets, creating them for an addition); retractions first, so an update (-old, +new)
    /// leaves the new version. Returns the version each changed name had before.
    fn apply_sets<K: Clone + Eq + std::hash::Hash>(
        &mut self,
        diffs: &[((K, ResourceKey), isize)],
        cap: usize,
        types: for<'m> fn(
            &'m mut Materialized,
            &K,
            bool,
        ) -> Option<&'m mut [TypeSet; ResourceType::COUNT]>,
    ) -> HashMap<(K, ResourceType), Olds> {
        let mut olds: HashMap<(K, ResourceType), Olds> = HashMap::new();
        let retractions = diffs.iter().filter(|(_, d)| *d < 0);
        for ((holder, k), d) in retractions.chain(diffs.iter().filter(|(_, d)| *d > 0)) {
            let add = *d > 0;
            let name = self.intern(&k.name);
            let version = add.then(|| self.intern(&k.version));
            let Some(sets) = types(self, holder, add) else {
                continue;
            };
            let set = &mut sets[type_index(k.rtype)];
            if !add && set.map.get(&name).map(|v| &**v) != Some(k.version.as_str()) {
                continue;
            }
            let old = set.set(&name, version, cap);
            if !add {
                self.retired += 1;
            }
            olds.entry((holder.clone(), k.rtype))
                .or_default()
                .entry(name)
                .or_insert(old);
        }
        olds
    }

    /// The per-proxy change lists of one epoch.
    fn changes(
        &self,
        switching: &[ProxyId],
        mut before: HashMap<ProxyId, [BTreeMap<Name, Name>; ResourceType::COUNT]>,
        scope_olds: HashMap<(ScopeKey, ResourceType), Olds>,
        own_olds: HashMap<(ProxyId, ResourceType), Olds>,
    ) -> Vec<(ProxyId, ResourceType, Vec<NameChange>)> {
        let mut out = Vec::new();
        // Proxies that changed scope: their whole set before against their whole set now.
        for p in switching {
            let olds = before.remove(p).unwrap_or_default();
            let held = self.held(p);
            for (t, old) in ResourceType::ALL.into_iter().zip(olds) {
                let new = held.versions(t);
                let mut list: Vec<NameChange> = Vec::new();
                for (n, v) in &old {
                    if new.get(n) != Some(v) {
                        list.push((n.clone(), Some(v.clone()), new.get(n).cloned()));
                    }
                }
                for (n, v) in &new {
                    if !old.contains_key(n) {
                        list.push((n.clone(), None, Some(v.clone())));
                    }
                }
                if !list.is_empty() {
                    list.sort();
                    out.push((p.clone(), t, list));
                }
            }
        }
        let switched: HashSet<&ProxyId> = switching.iter().collect();
        // Everyone else: their scope's net changes plus their own.
        let mut per_proxy: BTreeMap<(ProxyId, ResourceType), Vec<NameChange>> = BTreeMap::new();
        for ((s, t), olds) in scope_olds {
            let Some(ss) = self.scopes.get(&s) else {
                continue;
            };
            let set = &ss.types[type_index(t)];
            let list = net(olds, &set.map);
            if list.is_empty() {
                continue;
            }
            for p in ss.members.iter().filter(|p| !switched.contains(p)) {
                per_proxy
                    .entry((p.clone(), t))
                    .or_default()
                    .extend(list.iter().cloned());
            }
        }
        for ((p, t), olds) in own_olds {
            if switched.contains(&p) {
                continue;
            }
            let Some(ps) = self.proxies.get(&p) else {
                continue;
            };
            let list = net(olds, &ps.own[type_index(t)].map);
            if !list.is_empty() {
                per_proxy.entry((p, t)).or_default().extend(list);
            }
        }
        out.extend(per_proxy.into_iter().map(|((p, t), mut list)| {
            list.sort();
            (p, t, list)
        }));
        out
    }

    fn proxy_entry(&mut self, p: &ProxyId) -> &mut ProxySet {
        let next = &mut self.next_uid;
        self.proxies.entry(p.clone()).or_insert_with(|| {
            *next += 1;
            ProxySet {
                uid: *next,
                scope: None,
                own: Default::default(),
            }
        })
    }

    fn scope_entry(&mut self, s: &ScopeKey) -> &mut ScopeSet {
        let next = &mut self.next_uid;
        self.scopes.entry(s.clone()).or_insert_with(|| {
            *next += 1;
            ScopeSet {
                uid: *next,
                types: Default::default(),
                members: HashSet::new(),
            }
        })
    }

    /// What proxy `p` holds (empty if it holds nothing).
    pub fn held(&self, p: &str) -> Held<'_> {
        let proxy = self.proxies.get(p);
        let scope = proxy
            .and_then(|ps| ps.scope.as_ref())
            .and_then(|s| self.scopes.get(s));
        Held { proxy, scope }
    }

    /// Proxies that hold anything.
    pub fn proxy_ids(&self) -> impl Iterator<Item = &ProxyId> {
        self.proxies.keys()
    }

    /// How many scope sets are held (for metrics and tests).
    pub fn scope_count(&self) -> usize {
        self.scopes.len()
    }

    /// Every proxy's `(type, name) → version`, for tests and oracles; proxies that hold
    /// nothing are left out.
    pub fn snapshot(&self) -> BTreeMap<ProxyId, BTreeMap<ResourceKey, ()>> {
        let mut out = BTreeMap::new();
        for p in self.proxies.keys() {
            let held = self.held(p);
            let mut keys = BTreeMap::new();
            for t in ResourceType::ALL {
                for (n, v) in held.iter(t) {
                    keys.insert(
                        ResourceKey {
                            rtype: t,
                            name: n.to_string(),
                            version: v.to_string(),
                        },
                        (),
                    );
                }
            }
            if !keys.is_empty() {
                out.insert(p.clone(), keys);
            }
        }
        out
    }
}

/// A scope's sets (see [`Materialized::apply_sets`]).
fn scope_types<'m>(
    m: &'m mut Materialized,
    s: &ScopeKey,
    create: bool,
) -> Option<&'m mut [TypeSet; ResourceType::COUNT]> {
    if create {
        Some(&mut m.scope_entry(s).types)
    } else {
        m.scopes.get_mut(s).map(|ss| &mut ss.types)
    }
}

/// A proxy's own sets (see [`Materialized::apply_sets`]).
fn own_types<'m>(
    m: &'m mut Materialized,
    p: &ProxyId,
    create: bool,
) -> Option<&'m mut [TypeSet; ResourceType::COUNT]> {
    if create {
        Some(&mut m.proxy_entry(p).own)
    } else {
        m.proxies.get_mut(p).map(|ps| &mut ps.own)
    }
}

/// The names whose version after the epoch differs from `olds`.
fn net(olds: Olds, now: &BTreeMap<Name, Name>) -> Vec<NameChange> {
    olds.into_iter()
        .filter_map(|(n, old)| {
            let new = now.get(&n).cloned();
            (old != new).then_some((n, old, new))
        })
        .collect()
}

/// One proxy's resources: its own set over its scope's.
#[derive(Clone, Copy)]
pub struct Held<'a> {
    proxy: Option<&'a ProxySet>,
    scope: Option<&'a ScopeSet>,
}

impl<'a> Held<'a> {
    fn own(&self, t: ResourceType) -> Option<&'a TypeSet> {
        self.proxy.map(|p| &p.own[type_index(t)])
    }

    fn shared(&self, t: ResourceType) -> Option<&'a TypeSet> {
        self.scope.map(|s| &s.types[type_index(t)])
    }

    /// The version of `name`, if the proxy holds it.
    pub fn get(&self, t: ResourceType, name: &str) -> Option<&'a Name> {
        self.own(t)
            .and_then(|s| s.map.get(name))
            .or_else(|| self.shared(t).and_then(|s| s.map.get(name)))
    }

    /// The shared copies of `name` and its version, if the proxy holds it.
    pub fn get_entry(&self, t: ResourceType, name: &str) -> Option<(&'a Name, &'a Name)> {
        self.own(t)
            .and_then(|s| s.map.get_key_value(name))
            .or_else(|| self.shared(t).and_then(|s| s.map.get_key_value(name)))
    }

    pub fn contains(&self, t: ResourceType, name: &str) -> bool {
        self.get(t, name).is_some()
    }

    /// Every `(name, version)` of type `t`: the proxy's own first, then its scope's.
    pub fn iter(&self, t: ResourceType) -> impl Iterator<Item = (&'a Name, &'a Name)> + 'a {
        let own = self.own(t);
        let own_map = own.map(|s| &s.map);
        own_map.into_iter().flatten().chain(
            self.shared(t)
                .into_iter()
                .flat_map(|s| s.map.iter())
                .filter(move |(n, _)| !own_map.is_some_and(|m| m.contains_key(*n))),
        )
    }

    /// How many resources of type `t` the proxy holds.
    pub fn len(&self, t: ResourceType) -> usize {
        if self.own(t).is_none_or(|o| o.map.is_empty()) {
            self.shared(t).map_or(0, |s| s.map.len())
        } else {
            self.iter(t).count()
        }
    }

    pub fn is_empty(&self, t: ResourceType) -> bool {
        self.len(t) == 0
    }

    /// Type `t` as an ordered map (debug reads; streams use [`Held::iter`]).
    pub fn versions(&self, t: ResourceType) -> BTreeMap<Name, Name> {
        self.iter(t).map(|(n, v)| (n.clone(), v.clone())).collect()
    }

    /// Where type `t` stands now.
    pub fn stamp(&self, t: ResourceType) -> Stamp {
        Stamp {
            proxy: self.proxy.map_or(0, |p| p.uid),
            scope: self.scope.map_or(0, |s| s.uid),
            scope_seq: self.shared(t).map_or(0, |s| s.seq),
            own_seq: self.own(t).map_or(0, |s| s.seq),
        }
    }

    /// The names of type `t` that may have changed since `stamp` (a superset, possibly
    /// with repeats), or `None` when that is not known any more: the proxy changed scope,
    /// or a log no longer reaches back to the stamp. Then compare everything.
    pub fn changed_since(&self, t: ResourceType, stamp: &Stamp) -> Option<Vec<Name>> {
        let now = self.stamp(t);
        if now.proxy != stamp.proxy || now.scope != stamp.scope {
            return None;
        }
        let mut names = Vec::new();
        if let Some(s) = self.shared(t) {
            if !s.since(stamp.scope_seq, &mut names) {
                return None;
            }
        }
        if let Some(o) = self.own(t) {
            if !o.since(stamp.own_seq, &mut names) {
                return None;
            }
        }
        Some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: ResourceType, n: &str, v: &str) -> ResourceKey {
        ResourceKey {
            rtype: t,
            name: n.into(),
            version: v.into(),
        }
    }

    fn scope(ns: &str) -> ScopeKey {
        ScopeKey::Sidecar {
            namespace: ns.into(),
            sidecar: None,
            interception_none: false,
            proxyless: false,
            source_labels: Vec::new(),
            locality: None,
            priority_labels: None,
            idle_timeout_ns: None,
            path_normalization: Default::default(),
            security: None,
        }
    }

    #[test]
    fn proxies_share_their_scope_and_keep_their_own() {
        let mut m = Materialized::default();
        let c = ResourceType::Cluster;
        let a = m.apply(
            &EpochOutput {
                proxy_scopes: vec![
                    (("p1".into(), scope("a")), 1),
                    (("p2".into(), scope("a")), 1),
                ],
                scope_resources: vec![((scope("a"), key(c, "out", "1")), 1)],
                proxy_resources: vec![(("p1".into(), key(c, "in", "1")), 1)],
                ..Default::default()
            },
            true,
        );
        assert_eq!(a.touched, vec!["p1".to_string(), "p2".to_string()]);
        assert_eq!(m.held("p1").len(c), 2);
        assert_eq!(m.held("p2").len(c), 1);
        assert_eq!(m.scope_count(), 1);
        let s1 = m.held("p2").stamp(c);

        // The scope's resource changes: both see it, and only that name is reported.
        let a = m.apply(
            &EpochOutput {
                scope_resources: vec![
                    ((scope("a"), key(c, "out", "1")), -1),
                    ((scope("a"), key(c, "out", "2")), 1),
                ],
                ..Default::default()
            },
            true,
        );
        assert_eq!(a.touched.len(), 2);
        assert_eq!(m.held("p2").get(c, "out").map(|v| &**v), Some("2"));
        let names = m.held("p2").changed_since(c, &s1).expect("in the log");
        assert!(names.iter().all(|n| &**n == "out"), "{names:?}");
        let p2 = a
            .changes
            .iter()
            .find(|(p, _, _)| p == "p2")
            .expect("p2 changed");
        assert_eq!(p2.2.len(), 1);
        assert_eq!(p2.2[0].1.as_deref(), Some("1"));
        assert_eq!(p2.2[0].2.as_deref(), Some("2"));

        // p2 moves to another scope: a comparison from before the move must be complete.
        m.apply(
            &EpochOutput {
                proxy_scopes: vec![
                    (("p2".into(), scope("a")), -1),
                    (("p2".into(), scope("b")), 1),
                ],
                scope_resources: vec![((scope("b"), key(c, "other", "1")), 1)],
                ..Default::default()
            },
            false,
        );
        assert!(m.held("p2").changed_since(c, &s1).is_none());
        assert_eq!(m.held("p2").versions(c).len(), 1);

        // The last member leaves: its scope is forgotten once its resources are retracted.
        m.apply(
            &EpochOutput {
                proxy_scopes: vec![(("p1".into(), scope("a")), -1)],
                scope_resources: vec![((scope("a"), key(c, "out", "2")), -1)],
                proxy_resources: vec![(("p1".into(), key(c, "in", "1")), -1)],
                ..Default::default()
            },
            false,
        );
        assert_eq!(m.scope_count(), 1);
        assert!(m.held("p1").is_empty(c));
        assert_eq!(m.snapshot().len(), 1);
    }

    #[test]
    fn a_stamp_older_than_the_log_asks_for_a_full_comparison() {
        let mut m = Materialized::default();
        let e = ResourceType::Endpoint;
        m.apply(
            &EpochOutput {
                proxy_scopes: vec![(("p".into(), scope("a")), 1)],
                ..Default::default()
            },
            false,
        );
        let s0 = m.held("p").stamp(e);
        for i in 0..SCOPE_LOG + 1 {
            m.apply(
                &EpochOutput {
                    scope_resources: vec![((scope("a"), key(e, &format!("c{i}"), "1")), 1)],
                    ..Default::default()
                },
                false,
            );
        }
        assert!(m.held("p").changed_since(e, &s0).is_none());
        let s1 = m.held("p").stamp(e);
        assert_eq!(m.held("p").changed_since(e, &s1), Some(vec![]));
    }
}
