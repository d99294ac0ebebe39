//! What a stream reads: a proxy's resources ([`Held`]: names and versions, shared per scope)
//! with access to the encoded bodies ([`Bodies`]). The protocol state machines take a
//! [`ProxyView`] and nothing else of the hub, so they can be driven from a materialized set
//! built by hand ([`ProxyView::new`]).
//!
//! A view with a workload CA ([`ProxyView::with_ca`]) serves the `default` SDS certificate
//! the CA issued for the proxy's identity in place of the dataflow's stand-in, which names
//! the identity only: the key is made here, at the edge, and is never in the dataflow.

use super::vhds::VhdsCache;
use crate::ca::WorkloadCa;
use dataflows::materialize::{Held, Materialized, Name};
use dataflows::model::{Body, Resource, ResourceType};
use dataflows::translate::secret;
use hashbrown::hash_map::Entry;
use hashbrown::{Equivalent, HashMap};

type BodyKey = (ResourceType, Name, Name);

/// A [`BodyKey`] borrowed: every stream's lookup of every body it sends goes through
/// [`Bodies::get`], so it neither clones the shared names nor hashes with SipHash. Hashes as
/// the tuple does (field by field, the `str`s as `str`s).
#[derive(Hash)]
struct BodyKeyRef<'a>(ResourceType, &'a str, &'a str);

/// Equal strings; the same shared allocation (the usual case: names and versions are
/// interned) without comparing the bytes.
fn same(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl Equivalent<BodyKey> for BodyKeyRef<'_> {
    fn equivalent(&self, key: &BodyKey) -> bool {
        self.0 == key.0 && same(self.1, &key.1) && same(self.2, &key.2)
    }
}

/// The encoded body of every resource version some proxy holds, once each, counted by how
/// many times the dataflow emitted it.
#[derive(Default)]
pub struct Bodies {
    counted: HashMap<BodyKey, (Body, isize)>,
    /// Keys whose count fell to zero in the epoch being applied: what [`Bodies::retire`]
    /// looks at, so an epoch costs its own changes and not a pass over every body.
    dropped: Vec<BodyKey>,
}

impl Bodies {
    /// Counts one epoch's body changes; names and versions use `held`'s shared copies.
    /// Bodies whose count fell to zero stay until [`Bodies::retire`], so what an epoch
    /// replaced can still be read while the epoch is recorded.
    pub fn add(&mut self, held: &mut Materialized, changes: Vec<(Resource, isize)>) {
        for (r, d) in changes {
            let key = (r.rtype, held.intern(&r.name), held.intern(&r.version));
            let mut counted = match self.counted.entry(key) {
                Entry::Occupied(o) => o,
                Entry::Vacant(v) => v.insert_entry((r.body, 0)),
            };
            counted.get_mut().1 += d;
            // The key is copied only for the bodies the epoch drops.
            if counted.get().1 <= 0 {
                self.dropped.push(counted.key().clone());
            }
        }
    }

    /// Forgets the bodies no resource holds any more.
    pub fn retire(&mut self) {
        for key in std::mem::take(&mut self.dropped) {
            if self.counted.get(&key).is_some_and(|(_, c)| *c <= 0) {
                self.counted.remove(&key);
            }
        }
    }

    pub fn get(&self, t: ResourceType, name: &Name, version: &Name) -> Option<&Body> {
        self.counted
            .get(&BodyKeyRef(t, name, version))
            .map(|(b, _)| b)
    }

    pub fn len(&self) -> usize {
        self.counted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counted.is_empty()
    }
}

/// A proxy's resources with access to their bodies.
pub struct ProxyView<'a> {
    held: Held<'a>,
    bodies: &'a Bodies,
    /// Bumped by the full-push baseline after every epoch: streams then resend everything.
    pub generation: u64,
    /// Resources to send again although the client may hold their version, by the epoch
    /// that asked (the istio-style baseline's pushes; empty for the other engines).
    pub forced: &'a [(u64, ResourceType, Name)],
    ca: Option<&'a WorkloadCa>,
    /// Route configurations are served over VHDS (`serve --vhds`; Delta streams only).
    pub vhds: Option<&'a VhdsCache>,
    /// Key material may be sent: certificates, keys and `kubernetes://` Secrets (only the
    /// mesh's public root otherwise).
    keys: bool,
}

impl<'a> ProxyView<'a> {
    pub fn new(held: Held<'a>, bodies: &'a Bodies, generation: u64) -> ProxyView<'a> {
        ProxyView {
            held,
            bodies,
            generation,
            forced: &[],
            ca: None,
            vhds: None,
            keys: true,
        }
    }

    /// The view of a stream that may (or may not) be sent key material.
    pub fn with_keys(self, keys: bool) -> ProxyView<'a> {
        ProxyView { keys, ..self }
    }

    /// The view with the proxy's forced resends.
    pub fn with_forced(mut self, forced: &'a [(u64, ResourceType, Name)]) -> ProxyView<'a> {
        self.forced = forced;
        self
    }

    /// The view whose workload certificates `ca` issues.
    pub fn with_ca(self, ca: Option<&'a WorkloadCa>) -> ProxyView<'a> {
        ProxyView { ca, ..self }
    }

    /// The view whose Delta streams serve route configurations over VHDS.
    pub fn with_vhds(self, vhds: Option<&'a VhdsCache>) -> ProxyView<'a> {
        ProxyView { vhds, ..self }
    }

    /// The resources the proxy should hold.
    pub fn held(&self) -> Held<'a> {
        self.held
    }

    /// The body to send: the stored one, except a workload certificate's stand-in, which
    /// becomes the certificate the CA issued for its identity (`None` if it cannot be
    /// issued: the resource is then not sent, rather than sent without a key). A stream
    /// that may not hold keys gets no Secret but `ROOTCA` (`None`: not sent; what needs it
    /// stays warming, failing closed).
    pub fn body(&self, t: ResourceType, name: &Name, version: &Name) -> Option<Body> {
        if t == ResourceType::Secret && !self.keys && **name != *secret::ROOT_CA {
            return None;
        }
        let body = self.bodies.get(t, name, version)?;
        match self.ca {
            Some(ca) if t == ResourceType::Secret => ca.substitute(body),
            _ => Some(body.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A body is found by names equal to the interned ones whether or not they are the same
    /// allocation, and not by a different version or type.
    #[test]
    fn bodies_found_by_equal_names() {
        let mut held = Materialized::default();
        let mut bodies = Bodies::default();
        let r = Resource::new(
            ResourceType::Cluster,
            "outbound|80||a".into(),
            vec![1, 2, 3],
        );
        let version = r.version.clone();
        bodies.add(&mut held, vec![(r, 1)]);
        let name: Name = Arc::from("outbound|80||a");
        let v: Name = Arc::from(version.as_str());
        assert_eq!(
            bodies
                .get(ResourceType::Cluster, &name, &v)
                .map(|b| b.0.to_vec()),
            Some(vec![1, 2, 3])
        );
        let interned = (held.intern("outbound|80||a"), held.intern(&version));
        assert!(bodies
            .get(ResourceType::Cluster, &interned.0, &interned.1)
            .is_some());
        let other: Name = Arc::from("0000");
        assert!(bodies.get(ResourceType::Cluster, &name, &other).is_none());
        assert!(bodies.get(ResourceType::Endpoint, &name, &v).is_none());
    }

    /// An epoch retires the bodies it took the last count of, after the history could read
    /// them, and only those: a body taken back and given again in one epoch stays, and so
    /// do the ones the epoch did not touch.
    #[test]
    fn an_epoch_retires_only_the_bodies_it_dropped() {
        let mut held = Materialized::default();
        let mut bodies = Bodies::default();
        let res =
            |name: &str, bytes: u8| Resource::new(ResourceType::Cluster, name.into(), vec![bytes]);
        bodies.add(
            &mut held,
            vec![(res("a", 1), 1), (res("b", 2), 1), (res("c", 3), 1)],
        );
        bodies.retire();
        assert_eq!(bodies.len(), 3);
        let get = |bodies: &Bodies, held: &Materialized, r: &Resource| {
            bodies
                .get(r.rtype, &held.lookup(&r.name), &held.lookup(&r.version))
                .is_some()
        };
        // `a` is replaced by a new version, `b` is taken back and given again.
        bodies.add(
            &mut held,
            vec![
                (res("a", 1), -1),
                (res("a", 9), 1),
                (res("b", 2), -1),
                (res("b", 2), 1),
            ],
        );
        // Until the epoch is retired, the replaced version can still be read.
        assert!(get(&bodies, &held, &res("a", 1)));
        bodies.retire();
        assert!(!get(&bodies, &held, &res("a", 1)));
        for kept in [res("a", 9), res("b", 2), res("c", 3)] {
            assert!(get(&bodies, &held, &kept), "{}", kept.name);
        }
        assert_eq!(bodies.len(), 3);
        // Nothing dropped since: retiring again forgets nothing.
        bodies.retire();
        assert_eq!(bodies.len(), 3);
    }
}
