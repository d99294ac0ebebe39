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
//! The root namespace is the one the engine uses: the mesh config records in effect are
//! read too.
//!
//! What it cannot see: a proxy served by another control plane acknowledges nothing here,
//! so a server or client beside istiod is not waited for.

use crate::hub::Hub;
use dataflows::model::{
    ConfigKey, MeshConfig, MeshSettings, MtlsHold, MtlsMode, PeerModes, PolicyEffect, ProxyId,
    Record, ResourceType, SecurityPolicy, Workload,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime};

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
    since_wall: SystemTime,
    step: Step,
}

/// The controller's state: a mirror of the workloads and PeerAuthentications, the client
/// view each workload's policies give, and the holds in progress.
pub struct Transitions {
    timeout: Duration,
    /// The process's mesh settings, and the mesh config records in effect over them: the
    /// root namespace is the one the engine uses.
    mesh: MeshConfig,
    layers: Vec<MeshSettings>,
    root: String,
    workloads: HashMap<Id, Workload>,
    peers: BTreeMap<ConfigKey, SecurityPolicy>,
    /// The view clients would be sent now, where it disables mTLS somewhere.
    views: HashMap<Id, PeerModes>,
    holds: HashMap<Id, Held>,
}

impl Transitions {
    /// `timeout`: how long a step may wait for acknowledgments (zero: no holds); `mesh`:
    /// the settings mesh config records are layered over.
    pub fn new(timeout: Duration, mesh: &MeshConfig) -> Transitions {
        Transitions {
            timeout,
            root: mesh.root_namespace.clone(),
            mesh: mesh.clone(),
            layers: Vec::new(),
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

    /// The holds in progress, for the debug port, by workload.
    pub fn status(&self) -> Vec<crate::input::MtlsTransition> {
        let mut out: Vec<_> = self
            .holds
            .values()
            .map(|h| {
                let pending: &[(ProxyId, ResourceType)] = match &h.step {
                    Step::Waiting { pending, .. } => pending,
                    Step::Unapplied => &[],
                };
                crate::input::MtlsTransition {
                    workload: h.hold.workload.to_string(),
                    ip: h.hold.ip.clone(),
                    from: describe(h.hold.from.as_ref()),
                    to: describe(h.hold.to.as_ref()),
                    step: if h.hold.clients_moved {
                        "clients-moved"
                    } else {
                        "server-accepts-both"
                    },
                    step_since_unix_ms: h
                        .since_wall
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64),
                    waiting: pending.len(),
                    waiting_for: pending
                        .iter()
                        .take(5)
                        .map(|(p, t)| format!("{p} {t:?}"))
                        .collect(),
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.workload, &a.ip).cmp(&(&b.workload, &b.ip)));
        out
    }

    /// Reads one epoch's input changes; returns the hold records to add to the epoch.
    pub fn observe(&mut self, changes: &[(Record, isize)]) -> Vec<(Record, isize)> {
        let mut affected: BTreeSet<Id> = BTreeSet::new();
        let mut namespaces: BTreeSet<String> = BTreeSet::new();
        // A mesh config that moves the root namespace changes which policies are mesh-wide.
        let mut everywhere = self.follow_mesh(changes);
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
        // Workloads this epoch brings: their clients have nothing to move from.
        let arriving: BTreeSet<Id> = affected
            .iter()
            .filter(|id| !self.workloads.contains_key(*id))
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
            self.revisit(&id, !arriving.contains(&id), &mut out);
        }
        out
    }

    /// Takes the epoch's mesh config records; whether the root namespace moved.
    fn follow_mesh(&mut self, changes: &[(Record, isize)]) -> bool {
        let mut seen = false;
        for (r, d) in changes
            .iter()
            .filter(|(_, d)| *d < 0)
            .chain(changes.iter().filter(|(_, d)| *d > 0))
        {
            if let Record::Mesh(m) = r {
                seen = true;
                if *d > 0 {
                    self.layers.push(m.clone());
                } else if let Some(i) = self.layers.iter().position(|l| l == m) {
                    self.layers.remove(i);
                }
            }
        }
        if !seen {
            return false;
        }
        let root = MeshSettings::in_effect(self.layers.iter(), &self.mesh).root_namespace;
        let moved = root != self.root;
        self.root = root;
        moved
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
        let now = PeerModes::client_view(self.peers.values(), w, &self.root);
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
                since_wall: SystemTime::now(),
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
                h.since_wall = SystemTime::now();
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

/// What clients send under `view`: `mtls`, `plaintext`, or which ports differ.
fn describe(view: Option<&PeerModes>) -> String {
    let Some(m) = view else {
        return "mtls".to_string();
    };
    let plain = |mode: &MtlsMode| *mode == MtlsMode::Disable;
    let base = if plain(&m.mode) { "plaintext" } else { "mtls" };
    let others: Vec<String> = m
        .ports
        .iter()
        .filter(|(_, mode)| plain(mode) != plain(&m.mode))
        .map(|(p, _)| p.to_string())
        .collect();
    if others.is_empty() {
        base.to_string()
    } else {
        let other = if plain(&m.mode) { "mtls" } else { "plaintext" };
        format!("{base}, {other} on port(s) {}", others.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::HubOptions;
    use dataflows::model::{Kind, Labels, MtlsMode, Placement};

    fn pod(name: &str, ip: &str) -> Workload {
        Workload {
            ip: ip.into(),
            labels: [("app".to_string(), name.to_string())]
                .into_iter()
                .collect::<Labels>(),
            origin: ConfigKey::new(Kind::Pod, "default", name),
            ports: Default::default(),
            placement: Placement::default(),
            service_account: None,
            peer: None,
        }
    }

    fn namespace_mode(mode: MtlsMode) -> SecurityPolicy {
        SecurityPolicy {
            key: ConfigKey::new(Kind::PeerAuthentication, "default", "default"),
            created: String::new(),
            selector: None,
            effect: PolicyEffect::Peer {
                mode,
                ports: Default::default(),
            },
        }
    }

    fn holds(changes: &[(Record, isize)]) -> Vec<(MtlsHold, isize)> {
        changes
            .iter()
            .filter_map(|(r, d)| match r {
                Record::MtlsHold(h) => Some((h.clone(), *d)),
                _ => None,
            })
            .collect()
    }

    fn hub() -> Arc<Hub> {
        let (tx, _rx) = std::sync::mpsc::channel();
        Hub::new(tx, HubOptions::default())
    }
    use std::sync::Arc;

    /// DISABLE → STRICT of a namespace holds its existing workload (clients keep
    /// plaintext), moves its clients once the step is acknowledged (no proxy here: nothing
    /// to wait for), then ends; a workload that arrives with the policy is not held.
    #[test]
    fn a_flip_is_held_moved_and_ended() {
        let mut t = Transitions::new(Duration::from_secs(10), &MeshConfig::default());
        let a = pod("a", "10.0.0.1");
        let disable = namespace_mode(MtlsMode::Disable);
        let strict = namespace_mode(MtlsMode::Strict);
        let first = t.observe(&[
            (Record::Workload(a.clone()), 1),
            (Record::Security(disable.clone()), 1),
        ]);
        assert!(
            first.is_empty(),
            "a new workload has no clients to move: {first:?}"
        );
        assert!(!t.active());

        let flip = holds(&t.observe(&[
            (Record::Security(disable), -1),
            (Record::Security(strict.clone()), 1),
            (Record::Workload(pod("b", "10.0.0.2")), 1),
        ]));
        assert_eq!(flip.len(), 1, "only the existing workload: {flip:?}");
        let (held, d) = &flip[0];
        assert_eq!(*d, 1);
        assert_eq!(held.workload, a.origin);
        assert_eq!(held.from.as_ref().map(|m| m.mode), Some(MtlsMode::Disable));
        assert_eq!(held.to, None);
        assert!(!held.clients_moved);
        assert!(t.tracking());

        let hub = hub();
        assert!(
            t.advance(&hub).is_empty(),
            "not applied yet: nothing to advance"
        );
        t.applied(7, &[]);
        let moved = holds(&t.advance(&hub));
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert!(moved.contains(&(held.clone(), -1)));
        assert!(moved.iter().any(|(h, d)| *d == 1 && h.clients_moved));
        t.applied(8, &[]);
        let ended = holds(&t.advance(&hub));
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].1, -1);
        assert!(!t.active());
    }

    /// The root namespace is the mesh config's: a policy there is mesh-wide, and its flip
    /// holds a workload of another namespace.
    #[test]
    fn the_root_namespace_follows_the_mesh_config() {
        let mut t = Transitions::new(Duration::from_secs(10), &MeshConfig::default());
        let mut layer = MeshSettings::builtin(&MeshConfig::default());
        layer.layer = dataflows::model::MeshLayer::Configured;
        layer.root_namespace = "mesh-root".into();
        let mesh_wide = |mode| SecurityPolicy {
            key: ConfigKey::new(Kind::PeerAuthentication, "mesh-root", "default"),
            ..namespace_mode(mode)
        };
        t.observe(&[
            (Record::Mesh(layer), 1),
            (Record::Workload(pod("a", "10.0.0.1")), 1),
            (Record::Security(mesh_wide(MtlsMode::Disable)), 1),
        ]);
        let flip = holds(&t.observe(&[
            (Record::Security(mesh_wide(MtlsMode::Disable)), -1),
            (Record::Security(mesh_wide(MtlsMode::Strict)), 1),
        ]));
        assert_eq!(flip.len(), 1, "{flip:?}");
        assert_eq!(flip[0].0.workload.namespace, "default");
    }

    /// A change undone before its hold ended retracts the hold; a step waiting past the
    /// timeout ends too; a zero timeout holds nothing.
    #[test]
    fn undone_timed_out_and_disabled_holds() {
        let a = pod("a", "10.0.0.1");
        let disable = namespace_mode(MtlsMode::Disable);
        let strict = namespace_mode(MtlsMode::Strict);
        let setup = [
            (Record::Workload(a.clone()), 1),
            (Record::Security(disable.clone()), 1),
        ];
        let flip = [
            (Record::Security(disable.clone()), -1),
            (Record::Security(strict.clone()), 1),
        ];
        let back = [
            (Record::Security(strict.clone()), -1),
            (Record::Security(disable.clone()), 1),
        ];

        let mut t = Transitions::new(Duration::from_secs(10), &MeshConfig::default());
        t.observe(&setup);
        assert_eq!(holds(&t.observe(&flip)).len(), 1);
        let undone = holds(&t.observe(&back));
        assert_eq!(undone.len(), 1);
        assert_eq!(undone[0].1, -1);
        assert!(!t.active());

        // A connected proxy that holds a listener it never acknowledges: the step waits,
        // then ends at the timeout; a proxy that is gone is not waited for.
        let hub = hub();
        let id = "sidecar~10.0.0.7~c.default~default.svc.cluster.local".to_string();
        hub.connect(dataflows::model::Proxy {
            id: id.clone(),
            kind: dataflows::model::ProxyKind::Sidecar,
            ips: vec!["10.0.0.7".into()],
            namespace: "default".into(),
            labels: Default::default(),
            interception_none: false,
            service_account: None,
            locality: String::new(),
            idle_timeout_ns: None,
        })
        .expect("connects");
        let listener = dataflows::model::Resource::new(
            ResourceType::Listener,
            "virtualOutbound".into(),
            b"listener".to_vec(),
        );
        let out = dataflows::driver::EpochOutput {
            epoch: 3,
            proxy_resources: vec![(
                (
                    id.clone(),
                    dataflows::model::ResourceKey {
                        rtype: ResourceType::Listener,
                        name: listener.name.clone(),
                        version: listener.version.clone(),
                    },
                ),
                1,
            )],
            bodies: vec![(listener, 1)],
            ..Default::default()
        };
        let touched = hub.apply_tracking(
            out,
            crate::input::EpochMeta::now(),
            std::slice::from_ref(&id),
            &[],
            Vec::new(),
            true,
        );
        assert!(
            touched.contains(&(id.clone(), ResourceType::Listener)),
            "{touched:?}"
        );

        let mut t = Transitions::new(Duration::from_millis(30), &MeshConfig::default());
        t.observe(&setup);
        t.observe(&flip);
        t.applied(3, &touched);
        assert!(
            t.advance(&hub).is_empty(),
            "the listener is not acknowledged"
        );
        std::thread::sleep(Duration::from_millis(40));
        let ended = holds(&t.advance(&hub));
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(ended[0].1, -1, "the timeout ends the hold");
        assert!(!t.active());

        let mut t = Transitions::new(Duration::from_millis(30), &MeshConfig::default());
        t.observe(&setup);
        t.observe(&flip);
        hub.disconnect(&id, 0);
        t.applied(3, &touched);
        let moved = holds(&t.advance(&hub));
        assert_eq!(moved.len(), 2, "a proxy gone is not waited for: {moved:?}");

        let mut t = Transitions::new(Duration::ZERO, &MeshConfig::default());
        t.observe(&setup);
        assert!(t.observe(&flip).is_empty(), "a zero timeout flips at once");
    }
}
