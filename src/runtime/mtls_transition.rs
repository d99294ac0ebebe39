//! The mTLS transition controller: turns a PeerAuthentication change that flips what a
//! workload's clients send it (plaintext or mTLS, on some port) into the ordered steps of
//! an [`MtlsHold`], driven by what the proxies acknowledged.
//!
//! It reads every input change before the engine does, keeping the workloads and the
//! PeerAuthentications (nothing else), so the hold enters the very epoch that carries the
//! policy change: no proxy ever sees the all-at-once flip. Then, per held workload:
//!
//! 1. the epoch with the hold: its sidecar accepts both on the flipping ports, its clients
//!    keep what they sent;
//! 2. once every proxy that epoch changed acknowledged the types it changed (the server
//!    among them), the hold moves its clients (`clients_moved`);
//! 3. once every proxy that step changed acknowledged it (the clients), the hold is
//!    retracted and the server takes its policies' mode.
//!
//! A step not acknowledged within the timeout (`--mtls-transition-timeout`: a
//! proxy NACKs or hangs) ends the hold as a flip would: the policy's mode takes effect,
//! with a warning naming who did not answer. A zero timeout turns holds off.
//!
//! What it cannot see: a proxy served by another control plane acknowledges nothing here,
//! so a server or client beside istiod is not waited for.

use crate::hub::Hub;
use dataflows::model::{
    ConfigKey, MtlsHold, PeerModes, PolicyEffect, ProxyId, Record, ResourceType, SecurityPolicy,
    Workload,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// A workload: its address and its object.
type Id = (String, ConfigKey);

/// What a held workload waits for.
#[derive(Debug)]
enum Step {
    /// Its record changed in the epoch being computed.
    Unapplied,
    /// The (proxy, type) pairs that epoch changed, until they are acknowledged.
    Waiting {
        epoch: u64,
        pending: Vec<(ProxyId, ResourceType)>,
    },
}

#[derive(Debug)]
struct Held {
    hold: MtlsHold,
    since: Instant,
    step: Step,
}

/// The controller's state: a mirror of the workloads and PeerAuthentications, the client
/// view each workload's policies give, and the holds in progress.
pub struct Transitions {
    timeout: Duration,
    root: String,
    workloads: HashMap<Id, Workload>,
    peers: BTreeMap<ConfigKey, SecurityPolicy>,
    /// The view clients would be sent now, where it disables mTLS somewhere.
    views: HashMap<Id, PeerModes>,
    holds: HashMap<Id, Held>,
}

impl Transitions {
    /// `timeout`: how long a step may wait for acknowledgments (zero: no holds);
    /// `root`: the mesh's root namespace.
    pub fn new(timeout: Duration, root: &str) -> Transitions {
        Transitions {
            timeout,
            root: root.to_string(),
            workloads: HashMap::new(),
            peers: BTreeMap::new(),
            views: HashMap::new(),
            holds: HashMap::new(),
        }
    }

    /// Whether a hold is in progress (the runtime then looks at acknowledgments often).
    pub fn active(&self) -> bool {
        !self.holds.is_empty()
    }

    /// Whether the epoch about to be applied changed a hold: the hub is then asked which
    /// proxies it touched ([`Transitions::applied`]).
    pub fn tracking(&self) -> bool {
        self.holds
            .values()
            .any(|h| matches!(h.step, Step::Unapplied))
    }

    /// Reads one epoch's input changes; returns the hold records to add to the epoch.
    pub fn observe(&mut self, changes: &[(Record, isize)]) -> Vec<(Record, isize)> {
        let mut affected: BTreeSet<Id> = BTreeSet::new();
        let mut namespaces: BTreeSet<String> = BTreeSet::new();
        let mut everywhere = false;
        for (r, _) in changes {
            match r {
                Record::Workload(w) => {
                    affected.insert((w.ip.clone(), w.origin.clone()));
                }
                Record::Security(p) if matches!(p.effect, PolicyEffect::Peer { .. }) => {
                    if p.key.namespace == self.root {
                        everywhere = true;
                    } else {
                        namespaces.insert(p.key.namespace.clone());
                    }
                }
                _ => {}
            }
        }
        if affected.is_empty() && namespaces.is_empty() && !everywhere {
            return Vec::new();
        }
        let existed: BTreeSet<Id> = affected
            .iter()
            .filter(|id| self.workloads.contains_key(*id))
            .cloned()
            .collect();
        for (r, d) in changes
            .iter()
            .filter(|(_, d)| *d < 0)
            .chain(changes.iter().filter(|(_, d)| *d > 0))
        {
            match r {
                Record::Workload(w) => {
                    let id = (w.ip.clone(), w.origin.clone());
                    if *d > 0 {
                        self.workloads.insert(id, w.clone());
                    } else if self.workloads.get(&id) == Some(w) {
                        self.workloads.remove(&id);
                    }
                }
                Record::Security(p) if matches!(p.effect, PolicyEffect::Peer { .. }) => {
                    if *d > 0 {
                        self.peers.insert(p.key.clone(), p.clone());
                    } else if self.peers.get(&p.key) == Some(p) {
                        self.peers.remove(&p.key);
                    }
                }
                _ => {}
            }
        }
        if everywhere {
            affected.extend(self.workloads.keys().cloned());
            affected.extend(self.views.keys().cloned());
        } else if !namespaces.is_empty() {
            let within = |id: &Id| namespaces.contains(&id.1.namespace);
            affected.extend(self.workloads.keys().filter(|id| within(id)).cloned());
            affected.extend(self.views.keys().filter(|id| within(id)).cloned());
        }
        let mut out = Vec::new();
        for id in affected {
            self.revisit(&id, existed.contains(&id), &mut out);
        }
        out
    }

    /// Compares what a workload's clients are sent with what its policies now give, and
    /// starts, restarts or ends its hold. `existed`: it was there before this epoch (a new
    /// workload's clients have nothing to move from).
    fn revisit(&mut self, id: &Id, existed: bool, out: &mut Vec<(Record, isize)>) {
        let Some(w) = self.workloads.get(id) else {
            self.views.remove(id);
            if let Some(h) = self.holds.remove(id) {
                out.push((Record::MtlsHold(h.hold), -1));
            }
            return;
        };
        let root = self.root.as_str();
        let applying = self
            .peers
            .values()
            .filter(|p| p.applies(&w.origin.namespace, &w.labels, root));
        let now = PeerModes::compose(applying, root).filter(PeerModes::disables_any);
        let before = match now.clone() {
            Some(v) => self.views.insert(id.clone(), v),
            None => self.views.remove(id),
        };
        let served = match self.holds.get(id) {
            Some(h) => h.hold.client_view().cloned(),
            None if existed => before,
            None => now.clone(),
        };
        if served == now {
            if let Some(h) = self.holds.remove(id) {
                tracing::info!(workload = %id.1, ip = %id.0, "mTLS change undone before it completed: hold ended");
                out.push((Record::MtlsHold(h.hold), -1));
            }
            return;
        }
        if self.timeout.is_zero() {
            return;
        }
        let hold = MtlsHold {
            ip: id.0.clone(),
            workload: id.1.clone(),
            from: served,
            to: now,
            clients_moved: false,
        };
        tracing::info!(
            workload = %id.1,
            ip = %id.0,
            "mTLS change held: the workload's sidecar accepts mTLS and plaintext on the ports \
             that flip, its clients keep what they sent until it acknowledges"
        );
        if let Some(old) = self.holds.remove(id) {
            out.push((Record::MtlsHold(old.hold), -1));
        }
        out.push((Record::MtlsHold(hold.clone()), 1));
        self.holds.insert(
            id.clone(),
            Held {
                hold,
                since: Instant::now(),
                step: Step::Unapplied,
            },
        );
    }

    /// After the hub applied `epoch`: the holds it changed wait for `touched` (the types of
    /// the proxies it changed) to be acknowledged.
    pub fn applied(&mut self, epoch: u64, touched: &[(ProxyId, ResourceType)]) {
        for h in self.holds.values_mut() {
            if matches!(h.step, Step::Unapplied) {
                h.since = Instant::now();
                h.step = Step::Waiting {
                    epoch,
                    pending: touched.to_vec(),
                };
            }
        }
    }

    /// Moves every hold whose step was acknowledged to its next step, and ends those past
    /// the timeout; returns the record changes for the next epoch.
    pub fn advance(&mut self, hub: &Hub) -> Vec<(Record, isize)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        for (id, h) in self.holds.iter_mut() {
            let Step::Waiting { epoch, pending } = &mut h.step else {
                continue;
            };
            hub.unacknowledged(pending, *epoch);
            if pending.is_empty() {
                out.push((Record::MtlsHold(h.hold.clone()), -1));
                if h.hold.clients_moved {
                    tracing::info!(workload = %id.1, ip = %id.0, "mTLS change complete: clients acknowledged, the sidecar takes its policies' mode");
                    done.push(id.clone());
                } else {
                    tracing::info!(workload = %id.1, ip = %id.0, "mTLS change: the sidecar acknowledged accepting both; clients are moved");
                    h.hold.clients_moved = true;
                    h.step = Step::Unapplied;
                    out.push((Record::MtlsHold(h.hold.clone()), 1));
                }
            } else if h.since.elapsed() >= self.timeout {
                let waiting: Vec<String> = pending
                    .iter()
                    .take(5)
                    .map(|(p, t)| format!("{p} ({t:?})"))
                    .collect();
                tracing::warn!(
                    workload = %id.1,
                    ip = %id.0,
                    timeout_ms = self.timeout.as_millis() as u64,
                    unacknowledged = pending.len(),
                    first = %waiting.join(", "),
                    "mTLS change not acknowledged in time: the policies' mode takes effect now, \
                     and requests in flight between the proxies still waited for may fail"
                );
                out.push((Record::MtlsHold(h.hold.clone()), -1));
                done.push(id.clone());
            }
        }
        for id in done {
            self.holds.remove(&id);
        }
        out
    }
}
