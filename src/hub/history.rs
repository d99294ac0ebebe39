//! The per-proxy history: for every epoch that changed a proxy's resources, per xDS type,
//! which resources changed (name, old and new version, and both bodies so a diff can show
//! the old content), and what became of it on the wire (the push that carried it: stream,
//! nonce, send time; then its ACK, or its NACK with Envoy's message, and when). Next to it,
//! per epoch, the input changes that made it ([`InputChange`]).
//!
//! # Bounds
//!
//! One log for all proxies, oldest first, bounded by bytes (`serve --history-bytes`,
//! default 64 MiB) and age (`--history-age`, default 1h). The byte count covers names,
//! versions, input descriptions and every resource body the history keeps alive, each
//! distinct body once (bodies are `Arc`-shared with the hub and with other entries). Each
//! recorded entry is evicted at most once, so eviction is amortized O(1) per entry; it
//! happens while recording, never on a serving path that waits for it.
//!
//! # Locking
//!
//! The history has its own mutex. The hub takes it while holding its own lock (hub →
//! history, never the reverse) to append an epoch, so that a stream that sees an epoch's
//! resources always finds the epoch's entries; the work done under it is moves and
//! reference-count bumps. Pushes and ACKs touch only the entries of one proxy and type,
//! from the newest back to the first one already accounted for.
//!
//! # What "sent" means
//!
//! A push of type T covers every change of T for the proxy not yet covered by an earlier
//! push: responses coalesce, so one push may carry several epochs. A change that no push
//! ever carries (the stream does not subscribe to the name) stays "not sent".

use super::per_type::PerType;
use crate::input::InputChange;
use dataflows::materialize::Name;
use dataflows::model::{Body, ResourceType};
// foldhash (hashbrown's hasher): every push and ACK finds its proxy here.
use hashbrown::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How much history is kept.
#[derive(Clone, Copy, Debug)]
pub struct HistoryLimits {
    pub max_bytes: usize,
    pub max_age: Duration,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_bytes: 64 << 20,
            max_age: Duration::from_secs(3600),
        }
    }
}

/// One resource of one proxy that changed in an epoch. `None` versions: not held.
#[derive(Clone, Debug)]
pub struct ResourceChange {
    pub name: Name,
    pub old: Option<Name>,
    pub new: Option<Name>,
    pub old_body: Option<Body>,
    pub new_body: Option<Body>,
}

/// What became of a change on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub stream: u64,
    pub nonce: String,
    pub sent_at: SystemTime,
    pub acked_at: Option<SystemTime>,
    pub nacked_at: Option<SystemTime>,
    /// Envoy's error text.
    pub nack: Option<String>,
}

impl Delivery {
    /// `ACKED`, `NACKED` or `IN FLIGHT`.
    pub fn state(&self) -> &'static str {
        if self.nack.is_some() {
            "NACKED"
        } else if self.acked_at.is_some() {
            "ACKED"
        } else {
            "IN FLIGHT"
        }
    }
}

/// The changes of one type for one proxy in one epoch.
#[derive(Clone, Debug)]
pub struct Entry {
    id: u64,
    pub proxy: Arc<str>,
    pub epoch: u64,
    pub rtype: ResourceType,
    /// When the hub applied the epoch.
    pub at: SystemTime,
    /// When the epoch's first input arrived (convergence is measured from here).
    pub received: Instant,
    pub changes: Vec<ResourceChange>,
    pub delivery: Option<Delivery>,
    bytes: usize,
}

/// The input changes of one epoch.
#[derive(Clone, Debug)]
pub struct EpochInputs {
    pub epoch: u64,
    pub at: SystemTime,
    pub received: SystemTime,
    pub inputs: Arc<Vec<InputChange>>,
    bytes: usize,
}

/// A body kept alive by the history, counted once however many entries refer to it.
fn body_key(b: &Body) -> usize {
    Arc::as_ptr(&b.0) as *const u8 as usize
}

#[derive(Default)]
struct PerProxy {
    /// Entry ids per type, oldest first.
    by_type: PerType<VecDeque<u64>>,
}

/// What was acknowledged by one ACK: when the epochs it completes started, for the
/// convergence histogram.
#[derive(Debug, Default)]
pub struct Acknowledged {
    pub entries: usize,
    pub oldest_received: Option<Instant>,
}

pub struct History {
    limits: HistoryLimits,
    entries: VecDeque<Entry>,
    next_id: u64,
    proxies: HashMap<Arc<str>, PerProxy>,
    epochs: VecDeque<EpochInputs>,
    /// Distinct bodies kept alive → number of references from entries.
    bodies: HashMap<usize, usize>,
    bytes: usize,
}

/// The part of a proxy's history between two bounds, copied out of the lock.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// The proxy's entries in the window, oldest first.
    pub entries: Vec<Entry>,
    /// The input changes of the window's epochs that are still kept.
    pub epochs: Vec<EpochInputs>,
    /// The oldest epoch still kept for this proxy (`None`: nothing kept).
    pub oldest_kept: Option<u64>,
    /// The newest epoch recorded for this proxy.
    pub newest_kept: Option<u64>,
}

/// A bound of a history query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Epoch(u64),
    Time(SystemTime),
}

impl Bound {
    /// Whether an entry of `epoch` applied at `at` is after this bound.
    fn before(&self, epoch: u64, at: SystemTime) -> bool {
        match self {
            Bound::Epoch(e) => epoch > *e,
            Bound::Time(t) => at > *t,
        }
    }
}

impl History {
    pub fn new(limits: HistoryLimits) -> History {
        History {
            limits,
            entries: VecDeque::new(),
            next_id: 0,
            proxies: HashMap::new(),
            epochs: VecDeque::new(),
            bodies: HashMap::new(),
            bytes: 0,
        }
    }

    pub fn limits(&self) -> HistoryLimits {
        self.limits
    }

    /// Bytes currently accounted for.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn hold(&mut self, b: &Option<Body>) -> usize {
        let Some(b) = b else { return 0 };
        let refs = self.bodies.entry(body_key(b)).or_insert(0);
        *refs += 1;
        if *refs == 1 {
            b.0.len()
        } else {
            0
        }
    }

    fn release(&mut self, b: &Option<Body>) -> usize {
        let Some(b) = b else { return 0 };
        let k = body_key(b);
        match self.bodies.get_mut(&k) {
            Some(refs) if *refs > 1 => {
                *refs -= 1;
                0
            }
            Some(_) => {
                self.bodies.remove(&k);
                b.0.len()
            }
            None => 0,
        }
    }

    /// Records the input changes of an epoch.
    pub fn record_epoch(&mut self, epoch: u64, received: SystemTime, inputs: Vec<InputChange>) {
        let bytes = std::mem::size_of::<EpochInputs>()
            + inputs.iter().map(InputChange::bytes).sum::<usize>();
        self.bytes += bytes;
        self.epochs.push_back(EpochInputs {
            epoch,
            at: SystemTime::now(),
            received,
            inputs: Arc::new(inputs),
            bytes,
        });
        self.evict(SystemTime::now());
    }

    /// Records the changes of one type for one proxy in an epoch.
    pub fn record(
        &mut self,
        proxy: &str,
        epoch: u64,
        rtype: ResourceType,
        received: Instant,
        changes: Vec<ResourceChange>,
    ) {
        if changes.is_empty() {
            return;
        }
        let mut bytes = std::mem::size_of::<Entry>();
        let mut held = 0;
        for c in &changes {
            bytes += std::mem::size_of::<ResourceChange>()
                + c.name.len()
                + c.old.as_ref().map_or(0, |s| s.len())
                + c.new.as_ref().map_or(0, |s| s.len());
            held += self.hold(&c.old_body);
            held += self.hold(&c.new_body);
        }
        let key: Arc<str> = match self.proxies.get_key_value(proxy) {
            Some((k, _)) => k.clone(),
            None => Arc::from(proxy),
        };
        let id = self.next_id;
        self.next_id += 1;
        self.proxies.entry(key.clone()).or_default().by_type[rtype].push_back(id);
        // The entry's own bytes; the bodies it is first to keep alive count separately
        // until their last reference goes.
        self.bytes += bytes + held;
        self.entries.push_back(Entry {
            id,
            proxy: key,
            epoch,
            rtype,
            at: SystemTime::now(),
            received,
            changes,
            delivery: None,
            bytes,
        });
        self.evict(SystemTime::now());
    }

    /// Drops the oldest records while over the byte bound or older than the age bound.
    fn evict(&mut self, now: SystemTime) {
        let max_age = self.limits.max_age;
        let too_old = |at: SystemTime| now.duration_since(at).is_ok_and(|age| age > max_age);
        loop {
            let over = self.bytes > self.limits.max_bytes;
            let entry_front = self.entries.front().map(|e| (e.epoch, e.at));
            let epoch_front = self.epochs.front().map(|e| (e.epoch, e.at));
            // Evict whichever front is older (by epoch), if a bound says so.
            let take_entry = match (entry_front, epoch_front) {
                (None, None) => return,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((ee, _)), Some((pe, _))) => ee <= pe,
            };
            let at = if take_entry {
                entry_front.map(|f| f.1)
            } else {
                epoch_front.map(|f| f.1)
            };
            if !(over || at.is_some_and(too_old)) {
                // The other deque's front may still be too old.
                let other_old = if take_entry {
                    epoch_front.is_some_and(|f| too_old(f.1))
                } else {
                    entry_front.is_some_and(|f| too_old(f.1))
                };
                if !other_old {
                    return;
                }
                if take_entry {
                    self.pop_epoch();
                } else {
                    self.pop_entry();
                }
                continue;
            }
            if take_entry {
                self.pop_entry();
            } else {
                self.pop_epoch();
            }
        }
    }

    fn pop_epoch(&mut self) {
        if let Some(e) = self.epochs.pop_front() {
            self.bytes = self.bytes.saturating_sub(e.bytes);
        }
    }

    fn pop_entry(&mut self) {
        let Some(e) = self.entries.pop_front() else {
            return;
        };
        let mut freed = e.bytes;
        for c in &e.changes {
            freed += self.release(&c.old_body);
            freed += self.release(&c.new_body);
        }
        self.bytes = self.bytes.saturating_sub(freed);
        let slot = e.rtype;
        let empty = match self.proxies.get_mut(&e.proxy) {
            Some(p) => {
                if p.by_type[slot].front() == Some(&e.id) {
                    p.by_type[slot].pop_front();
                } else {
                    p.by_type[slot].retain(|id| *id != e.id);
                }
                p.by_type.iter().all(|(_, q)| q.is_empty())
            }
            None => false,
        };
        if empty {
            self.proxies.remove(&e.proxy);
        }
    }

    fn index(&self, id: u64) -> Option<usize> {
        let first = self.entries.front()?.id;
        let i = id.checked_sub(first)? as usize;
        (i < self.entries.len()).then_some(i)
    }

    /// A push of `rtype` to `proxy` on `stream`: covers every change not covered yet.
    /// Returns the covered entries' epochs, newest last, with their changes if
    /// `with_changes` (for watchers). Costs the number of entries it covers.
    pub fn record_push(
        &mut self,
        proxy: &str,
        stream: u64,
        rtype: ResourceType,
        nonce: &str,
        at: SystemTime,
        with_changes: bool,
    ) -> Vec<(u64, Vec<ResourceChange>)> {
        let mut covered = Vec::new();
        let (Some(p), Some(first)) = (self.proxies.get(proxy), self.entries.front().map(|e| e.id))
        else {
            return covered;
        };
        for id in p.by_type[rtype].iter().rev() {
            let Some(e) = id
                .checked_sub(first)
                .and_then(|i| self.entries.get_mut(i as usize))
            else {
                break;
            };
            if e.delivery.is_some() {
                break;
            }
            e.delivery = Some(Delivery {
                stream,
                nonce: nonce.to_string(),
                sent_at: at,
                acked_at: None,
                nacked_at: None,
                nack: None,
            });
            let changes = if with_changes {
                e.changes.clone()
            } else {
                Vec::new()
            };
            covered.push((e.epoch, changes));
        }
        covered.reverse();
        covered
    }

    /// The ACK (`nack: None`) or NACK of the push `nonce` on `stream`.
    pub fn record_feedback(
        &mut self,
        proxy: &str,
        stream: u64,
        rtype: ResourceType,
        nonce: &str,
        nack: Option<&str>,
        at: SystemTime,
    ) -> Acknowledged {
        let mut out = Acknowledged::default();
        let (Some(p), Some(first)) = (self.proxies.get(proxy), self.entries.front().map(|e| e.id))
        else {
            return out;
        };
        let mut found = false;
        for id in p.by_type[rtype].iter().rev() {
            let Some(e) = id
                .checked_sub(first)
                .and_then(|i| self.entries.get_mut(i as usize))
            else {
                break;
            };
            match &mut e.delivery {
                // Newer changes not sent yet.
                None => continue,
                Some(d) if d.stream == stream && d.nonce == nonce => {
                    found = true;
                    match nack {
                        Some(m) => {
                            d.nack = Some(m.to_string());
                            d.nacked_at = Some(at);
                        }
                        None => d.acked_at = Some(at),
                    }
                    out.entries += 1;
                    out.oldest_received = Some(match out.oldest_received {
                        Some(r) => r.min(e.received),
                        None => e.received,
                    });
                }
                // Another push: stop once past the matching ones, or at an older push
                // already answered.
                Some(d) => {
                    if found || d.acked_at.is_some() || d.nack.is_some() {
                        break;
                    }
                }
            }
        }
        out
    }

    /// The proxy's entries with `from < epoch/time <= to`, and the inputs of their epochs.
    pub fn window(&self, proxy: &str, from: Option<Bound>, to: Option<Bound>) -> Window {
        let mut out = Window::default();
        let Some(p) = self.proxies.get(proxy) else {
            return out;
        };
        let mut ids: Vec<u64> = p.by_type.values().flatten().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(i) = self.index(id) else { continue };
            let e = &self.entries[i];
            out.oldest_kept = Some(out.oldest_kept.map_or(e.epoch, |o: u64| o.min(e.epoch)));
            out.newest_kept = Some(out.newest_kept.map_or(e.epoch, |o: u64| o.max(e.epoch)));
            let after_from = from.is_none_or(|f| f.before(e.epoch, e.at));
            let before_to = to.is_none_or(|t| !t.before(e.epoch, e.at));
            if after_from && before_to {
                out.entries.push(e.clone());
            }
        }
        let mut epochs: Vec<u64> = out.entries.iter().map(|e| e.epoch).collect();
        epochs.dedup();
        for ep in epochs {
            if let Ok(i) = self.epochs.binary_search_by_key(&ep, |e| e.epoch) {
                out.epochs.push(self.epochs[i].clone());
            }
        }
        out
    }

    /// Proxies with history (connected or not).
    pub fn proxy_ids(&self) -> impl Iterator<Item = String> + '_ {
        self.proxies.keys().map(|k| k.to_string())
    }

    /// The newest epoch, at most `to`, that changed the proxy.
    pub fn last_change(&self, proxy: &str, to: Option<u64>) -> Option<u64> {
        let p = self.proxies.get(proxy)?;
        p.by_type
            .values()
            .filter_map(|ids| {
                ids.iter().rev().find_map(|id| {
                    let e = &self.entries[self.index(*id)?];
                    to.is_none_or(|t| e.epoch <= t).then_some(e.epoch)
                })
            })
            .max()
    }

    /// The epoch applied last at or before `at`, among those kept.
    pub fn epoch_at(&self, at: SystemTime) -> Option<u64> {
        self.epochs
            .iter()
            .rev()
            .find(|e| e.at <= at)
            .map(|e| e.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Option<Body> {
        Some(Body(Arc::from(s.as_bytes())))
    }

    fn change(name: &str, old: Option<&str>, new: Option<&str>, size: usize) -> ResourceChange {
        ResourceChange {
            name: name.into(),
            old: old.map(Name::from),
            new: new.map(Name::from),
            old_body: old.and(body(&"o".repeat(size))),
            new_body: new.and(body(&"n".repeat(size))),
        }
    }

    #[test]
    fn push_covers_unsent_changes_and_ack_marks_them() {
        let mut h = History::new(HistoryLimits::default());
        let t = ResourceType::Route;
        let now = Instant::now();
        h.record("p", 1, t, now, vec![change("80", None, Some("v1"), 10)]);
        h.record(
            "p",
            2,
            t,
            now,
            vec![change("80", Some("v1"), Some("v2"), 10)],
        );
        let covered = h.record_push("p", 7, t, "1", SystemTime::now(), true);
        assert_eq!(covered.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2]);
        // A newer epoch after the push is not covered by its ACK.
        h.record(
            "p",
            3,
            t,
            now,
            vec![change("80", Some("v2"), Some("v3"), 10)],
        );
        let acked = h.record_feedback("p", 7, t, "1", None, SystemTime::now());
        assert_eq!(acked.entries, 2);
        let w = h.window("p", None, None);
        let states: Vec<Option<&str>> = w
            .entries
            .iter()
            .map(|e| e.delivery.as_ref().map(Delivery::state))
            .collect();
        assert_eq!(states, vec![Some("ACKED"), Some("ACKED"), None]);
        h.record_push("p", 7, t, "2", SystemTime::now(), false);
        h.record_feedback("p", 7, t, "2", Some("bad regex"), SystemTime::now());
        let w = h.window("p", Some(Bound::Epoch(2)), Some(Bound::Epoch(3)));
        assert_eq!(w.entries.len(), 1);
        let d = w.entries[0].delivery.as_ref().expect("sent");
        assert_eq!(d.nack.as_deref(), Some("bad regex"));
        assert_eq!(w.oldest_kept, Some(1));
    }

    #[test]
    fn byte_bound_evicts_oldest_and_counts_shared_bodies_once() {
        let mut h = History::new(HistoryLimits {
            max_bytes: 64_000,
            max_age: Duration::from_secs(3600),
        });
        let shared = body(&"x".repeat(1000));
        for i in 0..100u64 {
            let c = ResourceChange {
                name: "c".into(),
                old: None,
                new: Some(format!("v{i}").into()),
                old_body: None,
                new_body: shared.clone(),
            };
            h.record(
                &format!("p{}", i % 3),
                i,
                ResourceType::Cluster,
                Instant::now(),
                vec![c],
            );
        }
        // One shared 1000-byte body: a hundred small entries fit.
        assert_eq!(h.len(), 100);
        for i in 100..200u64 {
            h.record(
                "p0",
                i,
                ResourceType::Cluster,
                Instant::now(),
                vec![change("c", None, Some("v"), 1000)],
            );
        }
        assert!(h.bytes() <= 64_000, "{} bytes", h.bytes());
        assert!(h.len() < 64, "{} entries", h.len());
        // The newest survive.
        let w = h.window("p0", None, None);
        assert_eq!(w.newest_kept, Some(199));
        // Everything evicted releases its bytes.
        let mut h2 = History::new(HistoryLimits {
            max_bytes: 0,
            max_age: Duration::from_secs(3600),
        });
        h2.record(
            "p",
            1,
            ResourceType::Cluster,
            Instant::now(),
            vec![change("c", Some("a"), Some("b"), 50)],
        );
        assert_eq!((h2.len(), h2.bytes()), (0, 0));
    }

    #[test]
    fn age_bound_evicts() {
        let mut h = History::new(HistoryLimits {
            max_bytes: usize::MAX,
            max_age: Duration::from_millis(1),
        });
        h.record(
            "p",
            1,
            ResourceType::Cluster,
            Instant::now(),
            vec![change("c", None, Some("a"), 5)],
        );
        h.record_epoch(1, SystemTime::now(), vec![]);
        std::thread::sleep(Duration::from_millis(5));
        h.record(
            "p",
            2,
            ResourceType::Cluster,
            Instant::now(),
            vec![change("c", Some("a"), Some("b"), 5)],
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h.window("p", None, None).oldest_kept, Some(2));
    }
}
