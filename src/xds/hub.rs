//! The xDS hub: the state the streams serve. It holds the name and version of every
//! resource each connected proxy should have, as the dataflow emits them (per scope, shared
//! by the scope's proxies, plus each proxy's own: [`dataflows::materialize`]), and the
//! encoded bodies once each. It applies the dataflow's per-epoch diffs and wakes only the
//! streams of proxies whose resources changed. No protocol logic lives here.
//!
//! For debugging it also records, per proxy and type, when a push was sent and when it was
//! acknowledged (sync state with age), which versions the proxy acknowledged (CSDS), each
//! stream's subscriptions, and feeds the history ([`crate::debug::history`]), the
//! counters of `/metrics` ([`crate::debug::metrics::Counters`]) and the watch stream
//! ([`crate::debug::watch`]).

use crate::debug::history::{History, HistoryLimits, ResourceChange};
use crate::debug::metrics::Counters;
use crate::debug::watch::{NameChange, WatchEvent, WatchKind};
use crate::runtime::{EpochMeta, Input};
use crate::xds::{Feedback, Push, Subscription};
use dataflows::driver::EpochOutput;
use dataflows::materialize::{Held, Materialized, Name};
use dataflows::model::{Body, ConfigError, Proxy, ProxyId, ResourceType};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};
use tokio::sync::{broadcast, Notify};

/// Watch events buffered for slow watchers; a watcher further behind is told it lagged.
const WATCH_BUFFER: usize = 4096;

/// A response sent and not answered yet.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub stream: u64,
    pub nonce: String,
    pub sent_at: Instant,
    pub sent_wall: SystemTime,
    push: Push,
}

/// Per proxy and type: what went over the wire, and when.
#[derive(Clone, Debug, Default)]
pub struct TypeSync {
    pub last_sent: Option<SystemTime>,
    pub last_ack: Option<SystemTime>,
    pub last_nack_at: Option<Instant>,
    pub in_flight: Option<InFlight>,
    /// Name → version the proxy acknowledged (or brought when it resumed).
    pub acked: Versions,
    /// A Delta stream resumed with `initial_resource_versions`.
    pub resumed: bool,
}

/// One open stream of a proxy, for the debug API.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub protocol: &'static str,
    pub opened: SystemTime,
    pub subscriptions: Vec<Subscription>,
}

/// Resource name → version, for one type.
pub type Versions = BTreeMap<Name, Name>;

fn type_index(t: ResourceType) -> usize {
    t.index()
}

/// What one connected proxy should hold.
pub struct ProxyEntry {
    pub proxy: Proxy,
    /// Open streams for this node id; the proxy is an input while any is open.
    streams: usize,
    /// Its first epoch has been computed; until then there is nothing to send.
    pub ready: bool,
    notify: Arc<Notify>,
    /// ACKs received per type.
    pub acks: [u64; 4],
    /// Envoy's message for the last NACK per type.
    pub last_nack: [Option<String>; 4],
    /// Sends and ACKs per type.
    pub sync: [TypeSync; 4],
    /// When the first epoch with this proxy was applied.
    pub ready_at: Option<Instant>,
    /// Open streams by stream id.
    pub stream_info: BTreeMap<u64, StreamInfo>,
}

impl ProxyEntry {
    pub fn streams(&self) -> usize {
        self.streams
    }
}

type BodyKey = (ResourceType, Name, Name);

#[derive(Default)]
pub struct HubState {
    pub epoch: u64,
    proxies: HashMap<ProxyId, ProxyEntry>,
    /// What every proxy holds, shared per scope.
    held: Materialized,
    bodies: HashMap<BodyKey, (Body, isize)>,
    pub errors: BTreeMap<ConfigError, isize>,
    pub source_errors: Vec<String>,
    /// Bumped by the full-push baseline after every epoch: streams then resend everything.
    pub generation: u64,
}

/// A proxy's resources with access to their bodies.
pub struct ProxyView<'a> {
    pub entry: &'a ProxyEntry,
    held: Held<'a>,
    bodies: &'a HashMap<BodyKey, (Body, isize)>,
    /// See [`HubState::generation`].
    pub generation: u64,
}

impl<'a> ProxyView<'a> {
    /// The resources the proxy should hold.
    pub fn held(&self) -> Held<'a> {
        self.held
    }

    pub fn body(&self, t: ResourceType, name: &Name, version: &Name) -> Option<&'a Body> {
        self.bodies
            .get(&(t, name.clone(), version.clone()))
            .map(|(b, _)| b)
    }
}

pub struct Hub {
    state: Mutex<HubState>,
    inputs: Sender<Input>,
    full_push: std::sync::atomic::AtomicBool,
    /// What each resource was built from (`explain`), under its own lock.
    pub provenance: crate::debug::explain::ProvenanceStore,
    /// Taken after `state` when both are needed, never the other way round.
    history: Mutex<History>,
    pub metrics: Counters,
    watch: broadcast::Sender<Arc<WatchEvent>>,
    next_stream: AtomicU64,
}

impl Hub {
    pub fn new(inputs: Sender<Input>) -> Arc<Hub> {
        Hub::with_history(inputs, HistoryLimits::default())
    }

    pub fn with_history(inputs: Sender<Input>, limits: HistoryLimits) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            inputs,
            full_push: false.into(),
            provenance: Default::default(),
            history: Mutex::new(History::new(limits)),
            metrics: Counters::default(),
            watch: broadcast::channel(WATCH_BUFFER).0,
            next_stream: AtomicU64::new(1),
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

    /// A fresh id for a new stream.
    pub fn next_stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers a stream for `proxy`; the first stream makes the proxy a dataflow input.
    /// Returns the handle that is notified when the proxy's resources change.
    pub fn connect(&self, proxy: Proxy) -> Arc<Notify> {
        let mut st = self.lock();
        let entry = st
            .proxies
            .entry(proxy.id.clone())
            .or_insert_with(|| ProxyEntry {
                proxy: proxy.clone(),
                streams: 0,
                ready: false,
                notify: Arc::new(Notify::new()),
                acks: [0; 4],
                last_nack: Default::default(),
                sync: Default::default(),
                ready_at: None,
                stream_info: BTreeMap::new(),
            });
        entry.streams += 1;
        if entry.streams == 1 {
            // An entry without streams is waiting for its retraction to be computed: hide
            // that transient state until the re-insertion's epoch has been applied.
            entry.ready = false;
            entry.proxy = proxy.clone();
            // A new session: what the previous streams sent and had acknowledged is gone.
            entry.acks = [0; 4];
            entry.last_nack = Default::default();
            entry.sync = Default::default();
            let _ = self.inputs.send(Input::ProxyUp(proxy));
        }
        entry.notify.clone()
    }

    /// Unregisters a stream; the last one retracts the proxy from the dataflow.
    pub fn disconnect(&self, id: &str, stream: u64) {
        let mut st = self.lock();
        if let Some(entry) = st.proxies.get_mut(id) {
            entry.stream_info.remove(&stream);
            entry.streams = entry.streams.saturating_sub(1);
            if entry.streams == 0 {
                let _ = self.inputs.send(Input::ProxyDown(entry.proxy.clone()));
            }
        }
    }

    /// Applies one epoch of dataflow output. `up` are proxies whose insertion was part of
    /// this epoch (now ready), `down` those retracted. `meta` describes the inputs, for the
    /// history.
    pub fn apply(
        &self,
        mut out: EpochOutput,
        meta: EpochMeta,
        up: &[ProxyId],
        down: &[ProxyId],
        source_errors: Option<Vec<String>>,
    ) {
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
        for (r, d) in std::mem::take(&mut out.bodies) {
            let key = (r.rtype, st.held.intern(&r.name), st.held.intern(&r.version));
            let e = st.bodies.entry(key).or_insert((r.body, 0));
            e.1 += d;
        }
        // The history lock is taken after the state lock, never the other way round.
        let recording = self.history().limits().max_bytes > 0;
        let applied = st.held.apply(&out, recording);
        let mut touched = applied.touched;
        if recording {
            let mut history = self.history();
            history.record_epoch(epoch, meta.received, meta.inputs);
            for (id, t, list) in applied.changes {
                if !st.proxies.contains_key(&id) {
                    continue;
                }
                let body = |name: &Name, v: &Option<Name>| {
                    v.as_ref().and_then(|v| {
                        st.bodies
                            .get(&(t, name.clone(), v.clone()))
                            .map(|(b, _)| b.clone())
                    })
                };
                let changes: Vec<ResourceChange> = list
                    .into_iter()
                    .map(|(name, old, new)| ResourceChange {
                        old_body: body(&name, &old),
                        new_body: body(&name, &new),
                        name,
                        old,
                        new,
                    })
                    .collect();
                history.record(&id, epoch, t, meta.received_instant, changes);
            }
        }
        st.bodies.retain(|_, (_, c)| *c > 0);
        for (e, d) in out.errors {
            *st.errors.entry(e).or_default() += d;
        }
        st.errors.retain(|_, c| *c != 0);
        if let Some(errs) = source_errors {
            st.source_errors = errs;
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
        touched.sort();
        touched.dedup();
        touched.retain(|id| st.proxies.contains_key(id));
        tracing::debug!(
            proxies = touched.len(),
            bodies = st.bodies.len(),
            held_lock_us = locked_at.elapsed().as_micros() as u64,
            "hub applied epoch"
        );
        // The full-push baseline wakes every proxy right after, with a new generation;
        // waking the touched ones first would let a stream push the epoch's changes and
        // then everything again once that is answered.
        if self.is_full_push() {
            return;
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
    }

    /// The full-push baseline: every connected proxy is sent its whole config again.
    pub fn push_everything(&self) {
        self.full_push
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut st = self.lock();
        st.generation += 1;
        for e in st.proxies.values() {
            e.notify.notify_one();
        }
    }

    /// Marks this hub as serving the full-push baseline (State-of-the-World only).
    pub fn set_full_push(&self) {
        self.full_push
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_full_push(&self) -> bool {
        self.full_push.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records an ACK, NACK or resume from one of the proxy's streams.
    pub fn record_feedback(&self, id: &str, stream: u64, fb: Feedback) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let epoch;
        {
            let mut st = self.lock();
            epoch = st.epoch;
            let Some(e) = st.proxies.get_mut(id) else {
                return;
            };
            match &fb {
                // A later ACK means the proxy took a newer version: the NACK is over.
                Feedback::Ack { rtype, nonce } => {
                    let i = type_index(*rtype);
                    e.acks[i] += 1;
                    e.last_nack[i] = None;
                    let sync = &mut e.sync[i];
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
                    }
                }
                Feedback::Nack(n) => {
                    let i = type_index(n.rtype);
                    e.last_nack[i] = Some(n.message.clone());
                    let sync = &mut e.sync[i];
                    sync.last_nack_at = Some(now);
                    let _ = sync
                        .in_flight
                        .take_if(|f| f.stream == stream && f.nonce == n.nonce);
                    self.metrics.nack(n.rtype);
                }
                Feedback::Resumed { rtype, versions } => {
                    let sync = &mut e.sync[type_index(*rtype)];
                    sync.resumed = true;
                    sync.acked = versions
                        .iter()
                        .map(|(k, v)| (Name::from(k.as_str()), Name::from(v.as_str())))
                        .collect();
                    return;
                }
            }
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
        if self.watch.receiver_count() > 0 {
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
            let _ = self.watch.send(Arc::new(WatchEvent {
                proxy: id.to_string(),
                at: wall,
                epoch,
                kind,
            }));
        }
    }

    /// Records a response one of the proxy's streams sent.
    pub fn record_push(&self, id: &str, stream: u64, push: Push) {
        let now = Instant::now();
        let wall = SystemTime::now();
        let epoch = {
            let mut st = self.lock();
            let epoch = st.epoch;
            if let Some(e) = st.proxies.get_mut(id) {
                let sync = &mut e.sync[type_index(push.rtype)];
                sync.last_sent = Some(wall);
                sync.in_flight = Some(InFlight {
                    stream,
                    nonce: push.nonce.clone(),
                    sent_at: now,
                    sent_wall: wall,
                    push: push.clone(),
                });
            }
            epoch
        };
        // Under a span named like the runtime's, so `RUST_LOG=meshflow=debug` shows the push
        // next to the epoch's dataflow step and hub apply.
        let _span = tracing::debug_span!("epoch", epoch).entered();
        self.metrics.push(push.rtype, push.bytes);
        let covered = self.history().record_push(
            id,
            stream,
            push.rtype,
            &push.nonce,
            wall,
            self.watch.receiver_count() > 0,
        );
        tracing::debug!(
            epoch,
            proxy = id,
            rtype = push.rtype.short(),
            nonce = %push.nonce,
            resources = push.resources.len(),
            removed = push.removed.len(),
            bytes = push.bytes,
            epochs_covered = covered.len(),
            "push"
        );
        if self.watch.receiver_count() == 0 {
            return;
        }
        let changes: Vec<NameChange> = if covered.is_empty() {
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
        let _ = self.watch.send(Arc::new(WatchEvent {
            proxy: id.to_string(),
            at: wall,
            epoch: covered.last().map_or(epoch, |c| c.0),
            kind: WatchKind::Push {
                rtype: push.rtype,
                nonce: push.nonce,
                bytes: push.bytes as u64,
                changes,
            },
        }));
    }

    /// Records a stream's subscriptions (when they changed).
    pub fn record_subscriptions(
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

    /// Runs `f` on the proxy's view if the proxy is connected and computed.
    pub fn with_view<R>(&self, id: &str, f: impl FnOnce(&ProxyView<'_>) -> R) -> Option<R> {
        let st = self.lock();
        let entry = st.proxies.get(id).filter(|e| e.ready)?;
        Some(f(&ProxyView {
            entry,
            held: st.held.held(id),
            bodies: &st.bodies,
            generation: st.generation,
        }))
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

impl HubState {
    pub fn proxies(&self) -> impl Iterator<Item = &ProxyEntry> {
        self.proxies.values()
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
        self.bodies
            .get(&(t, self.name(name), self.name(version)))
            .map(|(b, _)| b)
    }
}
