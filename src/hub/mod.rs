//! The hub: the served state and everything recorded about it, owned in one place.
//!
//! It holds the name and version of every resource each connected proxy should have, as the
//! dataflow emits them (per scope, shared by the scope's proxies, plus each proxy's own:
//! [`dataflows::materialize`]), and the encoded bodies once each ([`view::Bodies`]). It
//! applies the runtime's per-epoch diffs ([`Hub::apply`]) and wakes only the streams of
//! proxies whose resources changed. No protocol logic lives here: streams read a
//! [`view::ProxyView`] and report what they did through the [`recorder::Recorder`] the hub
//! implements.
//!
//! What is recorded about the serving: sync state per proxy and type ([`sync`]), the
//! per-proxy history ([`history`]), provenance for `explain` ([`provenance`]), the event
//! counters of `/metrics` ([`counters`]) and the watch stream ([`events`]).
//!
//! May import: `crate::input`, `crate::engine`, the `dataflows` crate. Imported by the
//! runtime (which applies epochs), `xds` (which serves and records) and `debug` (which
//! only reads).

pub mod counters;
pub mod events;
pub mod health;
pub mod history;
pub mod identities;
pub mod per_type;
pub mod provenance;
pub mod recorder;
pub mod stream_events;
pub mod sync;
pub mod vhds;
pub mod view;

use crate::engine::EngineKind;
use crate::input::{EpochMeta, Input, SourceName};
use counters::Counters;
use dataflows::driver::EpochOutput;
use dataflows::materialize::{Held, Materialized, Name};
use dataflows::model::{Body, ConfigError, Proxy, ProxyId, ResourceType};
use events::WatchEvent;
use history::{History, HistoryLimits, ResourceChange};
use provenance::ProvenanceStore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use sync::ProxyEntry;
use tokio::sync::{broadcast, Notify};
use view::{Bodies, ProxyView};

/// Per proxy, resources a push must send again although the proxy holds their version
/// (the istio-style baseline resends whole listener and route sets): (proxy, type, name).
pub type Resend = Vec<(ProxyId, ResourceType, String)>;

/// How many epochs a proxy's forced resends stay readable for its streams: a stream reads
/// them at its next look after the epoch, long before this many epochs pass.
const RESEND_EPOCHS: u64 = 8;

/// How a hub serves and what it keeps.
#[derive(Clone, Copy, Debug)]
pub struct HubOptions {
    /// Bounds of the per-proxy history.
    pub history: HistoryLimits,
    /// The full-push baseline wakes every proxy with a new generation after each epoch.
    pub engine: EngineKind,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            history: HistoryLimits::default(),
            engine: EngineKind::Meshflow,
        }
    }
}

/// What one stream of a proxy watches, shared with the proxy's entry so that a wake-up
/// reads it without the hub's lock.
pub struct StreamWatch {
    /// Notified when the proxy's resources change.
    pub notify: Arc<Notify>,
    /// How many times the proxy's workload certificate was renewed while connected.
    pub rotations: Arc<AtomicU64>,
}

impl StreamWatch {
    /// Renewals so far ([`Hub::certificates_rotated`]).
    pub fn rotations(&self) -> u64 {
        self.rotations.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct HubState {
    pub epoch: u64,
    /// By node id; hashed with foldhash (hashbrown's): every stream's every look, push and
    /// ACK finds its proxy here.
    proxies: hashbrown::HashMap<ProxyId, ProxyEntry>,
    /// What every proxy holds, shared per scope.
    held: Materialized,
    bodies: Bodies,
    pub errors: BTreeMap<ConfigError, isize>,
    /// The current problems each source reported (a source's report replaces only its own).
    pub source_errors: BTreeMap<SourceName, Vec<String>>,
    /// The current analysis messages of each source (fields not translated, parts of
    /// objects not generated, kinds not served).
    pub source_analysis: BTreeMap<SourceName, Vec<String>>,
    /// Bumped by the full-push baseline after every epoch: streams then resend everything.
    pub generation: u64,
}

pub struct Hub {
    state: Mutex<HubState>,
    /// Issues the workload certificates streams send in place of the dataflow's stand-ins
    /// (`serve` sets it once, before any proxy connects).
    pub workload_ca: std::sync::OnceLock<Arc<crate::ca::WorkloadCa>>,
    /// Set by `serve --vhds`: Delta streams then send route configurations without their
    /// virtual hosts, which follow as VHDS resources ([`vhds`]).
    pub vhds: std::sync::OnceLock<Arc<vhds::VhdsCache>>,
    inputs: Sender<Input>,
    engine: EngineKind,
    /// What each resource was built from (`explain`), under its own lock.
    pub provenance: ProvenanceStore,
    /// Live and ready, for `/healthz` and `/readyz`.
    pub health: health::Health,
    /// Taken after `state` when both are needed, never the other way round.
    history: Mutex<History>,
    pub metrics: Counters,
    /// The objects proxies rejected, where they may say so (published by the runtime; read
    /// by status writing).
    /// The `jwksUri`s the records in effect use, with their fetch timeouts (ms), published
    /// by the runtime for the key fetcher (`sources::jwks`).
    pub jwks_uris: tokio::sync::watch::Sender<crate::input::JwksUris>,
    /// The mTLS changes held part-way now, published by the runtime.
    pub mtls_transitions: tokio::sync::watch::Sender<Vec<crate::input::MtlsTransition>>,
    pub rejections: tokio::sync::watch::Sender<crate::input::ProxyRejections>,
    /// The dataflow's errors by object (read by status writing).
    pub object_errors: tokio::sync::watch::Sender<crate::input::ObjectErrors>,
    watch: events::Watchers,
    next_stream: AtomicU64,
    /// The service account of each known workload: node ids bound to identities.
    workload_accounts: Mutex<identities::WorkloadAccounts>,
}

impl Hub {
    /// A hub whose proxies' arrivals and departures go to `inputs` (the runtime's).
    pub fn new(inputs: Sender<Input>, options: HubOptions) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            workload_ca: Default::default(),
            vhds: Default::default(),
            inputs,
            engine: options.engine,
            provenance: Default::default(),
            health: Default::default(),
            history: Mutex::new(History::new(options.history)),
            metrics: Counters::default(),
            rejections: tokio::sync::watch::Sender::new(Default::default()),
            jwks_uris: tokio::sync::watch::Sender::new(Default::default()),
            mtls_transitions: tokio::sync::watch::Sender::new(Vec::new()),
            object_errors: tokio::sync::watch::Sender::new(Default::default()),
            watch: Default::default(),
            next_stream: AtomicU64::new(1),
            workload_accounts: Default::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the history (debug reads: copy out, render after).
    pub fn read_history<R>(&self, f: impl FnOnce(&History) -> R) -> R {
        f(&self.history())
    }

    /// A receiver of every push, ACK and NACK from now on.
    pub fn watch(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.watch.subscribe()
    }

    /// A watcher dropped its receiver: the last one takes the buffered events with it.
    pub fn watch_closed(&self) {
        self.watch.release();
    }

    /// Watch events buffered now (for tests of the bound).
    pub fn watch_buffered(&self) -> usize {
        self.watch.buffered()
    }

    /// Notes the workloads of an epoch's record changes (the runtime calls it).
    pub fn note_workloads(&self, changes: &[(dataflows::model::Record, isize)]) {
        self.workload_accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(changes);
    }

    /// Why a stream proved to be `namespace`/`service_account` may not speak for `proxy`
    /// ([`identities::WorkloadAccounts::conflict`]).
    pub fn identity_conflict(
        &self,
        proxy: &Proxy,
        namespace: &str,
        service_account: &str,
    ) -> Option<String> {
        self.workload_accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .conflict(proxy, namespace, service_account)
    }

    /// The workload certificates of `identities` (`spiffe://TD/ns/NS/sa/SA`) were renewed
    /// ([`crate::ca::WorkloadCa::rotate_due`]): the connected proxies of those identities
    /// are woken to resend their `default` Secret, and no other.
    pub fn certificates_rotated(&self, identities: &[String]) {
        let mut st = self.lock();
        for e in st.proxies.values_mut().filter(|e| e.connected()) {
            let mine = format!("/ns/{}/sa/{}", e.proxy.namespace, e.proxy.service_account());
            if identities.iter().any(|i| i.ends_with(&mine)) {
                e.rotations.fetch_add(1, Ordering::Relaxed);
                e.notify.notify_one();
            }
        }
    }

    /// A fresh id for a new stream.
    pub fn next_stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    /// The engine this hub serves.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Registers a stream for `proxy`; the first stream makes the proxy a dataflow input.
    /// Returns what the stream watches: the handle notified when the proxy's resources
    /// change, and its certificate renewals.
    ///
    /// One node id is one proxy: while a stream is open for it, a stream that describes the
    /// node differently (namespace, labels, IPs, kind) is refused, so it can neither be
    /// served nor change what the open stream is served.
    pub fn connect(&self, proxy: Proxy) -> Result<StreamWatch, String> {
        let mut st = self.lock();
        let entry = st
            .proxies
            .entry(proxy.id.clone())
            .or_insert_with(|| ProxyEntry::new(proxy.clone()));
        if entry.streams > 0 && entry.proxy != proxy {
            return Err(format!(
                "node {:?} is already connected with a different definition (namespace, labels, \
                 IPs or kind); close that stream first",
                proxy.id
            ));
        }
        entry.streams += 1;
        if entry.streams == 1 {
            // An entry without streams is waiting for its retraction to be computed: hide
            // that transient state until the re-insertion's epoch has been applied.
            entry.ready = false;
            entry.proxy = proxy.clone();
            // A new session: what the previous streams sent and had acknowledged is gone.
            entry.sync = Default::default();
            entry.forced.clear();
            if self.inputs.send(Input::ProxyUp(proxy)).is_err() {
                self.health
                    .fail("the runtime stopped: proxies can no longer be computed");
            }
        }
        Ok(StreamWatch {
            notify: entry.notify.clone(),
            rotations: entry.rotations.clone(),
        })
    }

    /// Unregisters a stream; the last one retracts the proxy from the dataflow.
    pub fn disconnect(&self, id: &str, stream: u64) {
        let mut st = self.lock();
        if let Some(entry) = st.proxies.get_mut(id) {
            entry.stream_info.remove(&stream);
            entry.streams = entry.streams.saturating_sub(1);
            if entry.streams == 0 {
                // A runtime that is gone has nothing left to retract (and has said so).
                let _ = self.inputs.send(Input::ProxyDown(entry.proxy.clone()));
            }
        }
    }

    /// Applies one epoch of dataflow output. `up` are proxies whose insertion was part of
    /// this epoch (now ready), `down` those retracted. `meta` describes the inputs, for the
    /// history, and carries the problems of the sources that reported.
    pub fn apply(&self, out: EpochOutput, meta: EpochMeta, up: &[ProxyId], down: &[ProxyId]) {
        self.apply_resending(out, meta, up, down, Resend::new());
    }

    /// [`Hub::apply`], with resources the engine's push sends again unchanged: the proxies
    /// they belong to are woken, and their streams resend them ([`ProxyView::forced`]).
    pub fn apply_resending(
        &self,
        out: EpochOutput,
        meta: EpochMeta,
        up: &[ProxyId],
        down: &[ProxyId],
        resend: Resend,
    ) {
        self.apply_tracking(out, meta, up, down, resend, false);
    }

    /// [`Hub::apply_resending`]; with `track`, returns which types of which proxies the
    /// epoch changed (what they must acknowledge to hold it: [`Hub::unacknowledged`]).
    pub fn apply_tracking(
        &self,
        mut out: EpochOutput,
        meta: EpochMeta,
        up: &[ProxyId],
        down: &[ProxyId],
        resend: Resend,
        track: bool,
    ) -> Vec<(ProxyId, ResourceType)> {
        self.provenance.apply(&out.proxy_scopes, &out.provenance);
        let epoch = out.epoch;
        for c in &meta.inputs {
            self.metrics.input_change(&c.kind, c.op.as_str());
        }
        self.metrics
            .epoch_lag
            .observe(meta.received_instant.elapsed().as_secs_f64());
        let mut guard = self.lock();
        let locked_at = Instant::now();
        let st = &mut *guard;
        st.epoch = epoch;
        // New bodies first, retired ones after the history took what it needs of them.
        st.bodies.add(&mut st.held, std::mem::take(&mut out.bodies));
        // The history lock is taken after the state lock, never the other way round.
        let recording = self.history().limits().max_bytes > 0;
        let applied = st.held.apply_typed(&out, recording, track);
        let mut touched = applied.touched;
        let touched_types = applied.touched_types;
        if recording {
            let mut history = self.history();
            history.record_epoch(epoch, meta.received, meta.inputs);
            for (id, t, list) in applied.changes {
                if !st.proxies.contains_key(&id) {
                    continue;
                }
                let changes = resource_changes(&st.bodies, t, list);
                history.record(&id, epoch, t, meta.received_instant, changes);
            }
        }
        st.bodies.retire();
        let errors_changed = !out.errors.is_empty();
        for (e, d) in out.errors {
            *st.errors.entry(e).or_default() += d;
        }
        st.errors.retain(|_, c| *c != 0);
        if errors_changed {
            let mut by_object = crate::input::ObjectErrors::new();
            for e in st.errors.keys() {
                by_object
                    .entry(e.object.clone())
                    .or_default()
                    .push(e.clone());
            }
            // Only when they changed: a watcher is woken by every send.
            self.object_errors.send_if_modified(|published| {
                let changed = *published != by_object;
                *published = by_object;
                changed
            });
        }
        for (source, lines) in meta.source_analysis {
            st.source_analysis.insert(source, lines);
        }
        for (source, errors) in meta.source_errors {
            st.source_errors.insert(source, errors);
            self.health.source_applied(source);
        }
        for id in down {
            if st.proxies.get(id).is_some_and(|e| e.streams == 0) {
                st.proxies.remove(id);
            }
        }
        let now = Instant::now();
        for id in up {
            if let Some(e) = st.proxies.get_mut(id) {
                e.ready = true;
                e.ready_at = Some(now);
                touched.push(id.clone());
            }
        }
        // Forced resends: readable for a few epochs, then dropped.
        for e in st.proxies.values_mut() {
            if !e.forced.is_empty() {
                e.forced.retain(|(g, _, _)| g + RESEND_EPOCHS > epoch);
            }
        }
        for (id, t, name) in resend {
            let name = st.held.lookup(&name);
            if let Some(e) = st.proxies.get_mut(&id) {
                e.forced.push((epoch, t, name));
                touched.push(id);
            }
        }
        touched.sort();
        touched.dedup();
        touched.retain(|id| st.proxies.contains_key(id));
        tracing::debug!(
            proxies = touched.len(),
            bodies = st.bodies.len(),
            held_lock_us = locked_at.elapsed().as_micros() as u64,
            "hub applied epoch"
        );
        // The full-push baseline wakes every proxy with a new generation; waking only the
        // touched ones first would let a stream push the epoch's changes and then
        // everything again once that is answered.
        if self.engine.pushes_everything() {
            st.generation += 1;
            touched = st.proxies.keys().cloned().collect();
        }
        // Woken after the lock is released: ten thousand streams woken under it would each
        // find it taken and sleep again.
        let wake: Vec<Arc<Notify>> = touched
            .iter()
            .filter_map(|id| st.proxies.get(id).map(|e| e.notify.clone()))
            .collect();
        drop(guard);
        for n in wake {
            n.notify_one();
        }
        touched_types
    }

    /// Keeps of `pending` the (proxy, type) pairs whose proxy has not yet acknowledged
    /// what it was to hold of that type as of `epoch`: it acknowledged a response sent at
    /// or after the epoch, or it has nothing in flight and acknowledged exactly what it
    /// holds (a resumed stream, a change undone before it was sent). A proxy gone, or a
    /// stream not subscribed to the type, has nothing to wait for; a NACK since keeps it.
    pub fn unacknowledged(&self, pending: &mut Vec<(ProxyId, ResourceType)>, epoch: u64) {
        let st = self.lock();
        pending.retain(|(id, t)| {
            let Some(e) = st.proxies.get(id).filter(|e| e.connected()) else {
                return false;
            };
            if !sync::asked(e, *t) {
                return false;
            }
            let s = &e.sync[*t];
            // Envoy keeps the last configuration it took: one taken at or after the epoch
            // stands, whatever it refused since.
            if s.acked_epoch >= epoch {
                return false;
            }
            if s.last_nack.is_some() {
                return true;
            }
            // Compared in place: this runs every few milliseconds while a hold waits.
            let held = st.held.held(id);
            let caught_up = s.in_flight.is_none()
                && held.len(*t) == s.acked.len()
                && held.iter(*t).all(|(n, v)| s.acked.get(n) == Some(v));
            !caught_up
        });
    }

    /// Runs `f` on the proxy's view if the proxy is connected and computed.
    pub fn with_view<R>(&self, id: &str, f: impl FnOnce(&ProxyView<'_>) -> R) -> Option<R> {
        self.with_view_keys(id, true, f)
    }

    /// [`Hub::with_view`] for a stream that may (`keys`) or may not be sent key material:
    /// without, every Secret but the mesh's public root (`ROOTCA`) is withheld.
    pub fn with_view_keys<R>(
        &self,
        id: &str,
        keys: bool,
        f: impl FnOnce(&ProxyView<'_>) -> R,
    ) -> Option<R> {
        let st = self.lock();
        let entry = st.proxies.get(id).filter(|e| e.ready)?;
        Some(f(&ProxyView::new(
            st.held.held(id),
            &st.bodies,
            st.generation,
        )
        .with_forced(&entry.forced)
        .with_ca(self.workload_ca.get().map(|c| &**c))
        .with_vhds(self.vhds.get().map(|c| &**c))
        .with_keys(keys)))
    }

    /// Runs `f` with the shared copies of resource names: one lock for all the names of a
    /// request, which then cost a stream no allocation of their own.
    pub fn with_names<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> Name) -> R) -> R {
        let st = self.lock();
        f(&|s| st.held.lookup(s))
    }

    /// Runs `f` on the whole state (debug and status reads).
    pub fn read<R>(&self, f: impl FnOnce(&HubState) -> R) -> R {
        f(&self.lock())
    }
}

/// The history's record of one proxy's changes of type `t`, with the bodies of both sides.
fn resource_changes(
    bodies: &Bodies,
    t: ResourceType,
    list: Vec<dataflows::materialize::NameChange>,
) -> Vec<ResourceChange> {
    let body = |name: &Name, v: &Option<Name>| -> Option<Body> {
        v.as_ref().and_then(|v| bodies.get(t, name, v).cloned())
    };
    list.into_iter()
        .map(|(name, old, new)| ResourceChange {
            old_body: body(&name, &old),
            new_body: body(&name, &new),
            name,
            old,
            new,
        })
        .collect()
}

impl HubState {
    pub fn proxies(&self) -> impl Iterator<Item = &ProxyEntry> {
        self.proxies.values()
    }

    /// Proxies with an open stream (an entry without one is waiting for its retraction).
    pub fn connected(&self) -> impl Iterator<Item = &ProxyEntry> {
        self.proxies.values().filter(|e| e.connected())
    }

    pub fn proxy(&self, id: &str) -> Option<&ProxyEntry> {
        self.proxies.get(id)
    }

    /// What proxy `id` should hold (empty if nothing).
    pub fn held(&self, id: &str) -> Held<'_> {
        self.held.held(id)
    }

    /// The shared copy of a resource name or version (a fresh one if no resource has it).
    pub fn name(&self, s: &str) -> Name {
        self.held.lookup(s)
    }

    /// The encoded body of one resource version, if any proxy holds it.
    pub fn body(&self, t: ResourceType, name: &str, version: &str) -> Option<&Body> {
        self.bodies.get(t, &self.name(name), &self.name(version))
    }

    /// Every source's problems and every config error, as lines for people.
    pub fn error_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.source_errors.values().flatten().cloned().collect();
        out.extend(self.errors.keys().map(|e| match e.code.is_warning() {
            true => format!("{}: warning: {}", e.object, e.message),
            false => format!("{}: {}", e.object, e.message),
        }));
        out.extend(self.source_analysis.values().flatten().cloned());
        out
    }
}
