//! The xDS hub: the state the streams serve. It holds, per connected proxy, the name and
//! version of every resource the dataflow says it should have, and the encoded bodies
//! once each (shared by every proxy). It applies the dataflow's per-epoch diffs and wakes
//! only the streams of proxies whose resources changed. No protocol logic lives here.

use crate::runtime::Input;
use dataflows::driver::EpochOutput;
use dataflows::model::{Body, ConfigError, Proxy, ProxyId, ResourceType};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Resource name → version, for one type.
pub type Versions = BTreeMap<String, String>;

fn type_index(t: ResourceType) -> usize {
    match t {
        ResourceType::Cluster => 0,
        ResourceType::Endpoint => 1,
        ResourceType::Listener => 2,
        ResourceType::Route => 3,
    }
}

/// What one connected proxy should hold.
pub struct ProxyEntry {
    pub proxy: Proxy,
    /// Open streams for this node id; the proxy is an input while any is open.
    streams: usize,
    /// Its first epoch has been computed; until then there is nothing to send.
    pub ready: bool,
    resources: [Versions; 4],
    /// Per type, bumped whenever `resources` of that type change: a stream that saw the
    /// same count has nothing new to look at for that type.
    changes: [u64; 4],
    notify: Arc<Notify>,
    /// ACKs received per type.
    pub acks: [u64; 4],
    /// Envoy's message for the last NACK per type.
    pub last_nack: [Option<String>; 4],
}

impl ProxyEntry {
    pub fn versions(&self, t: ResourceType) -> &Versions {
        &self.resources[type_index(t)]
    }

    /// How many times this proxy's resources of type `t` have changed.
    pub fn changes(&self, t: ResourceType) -> u64 {
        self.changes[type_index(t)]
    }

    pub fn streams(&self) -> usize {
        self.streams
    }
}

type BodyKey = (ResourceType, String, String);

#[derive(Default)]
pub struct HubState {
    pub epoch: u64,
    proxies: HashMap<ProxyId, ProxyEntry>,
    bodies: HashMap<BodyKey, (Body, isize)>,
    pub errors: BTreeMap<ConfigError, isize>,
    pub source_errors: Vec<String>,
    /// Bumped by the full-push baseline after every epoch: streams then resend everything.
    pub generation: u64,
}

/// A proxy's resources with access to their bodies.
pub struct ProxyView<'a> {
    pub entry: &'a ProxyEntry,
    bodies: &'a HashMap<BodyKey, (Body, isize)>,
    /// See [`HubState::generation`].
    pub generation: u64,
}

impl<'a> ProxyView<'a> {
    pub fn versions(&self, t: ResourceType) -> &'a Versions {
        self.entry.versions(t)
    }

    /// See [`ProxyEntry::changes`].
    pub fn changes(&self, t: ResourceType) -> u64 {
        self.entry.changes(t)
    }

    pub fn body(&self, t: ResourceType, name: &str, version: &str) -> Option<&'a Body> {
        self.bodies
            .get(&(t, name.to_string(), version.to_string()))
            .map(|(b, _)| b)
    }
}

pub struct Hub {
    state: Mutex<HubState>,
    inputs: Sender<Input>,
    full_push: std::sync::atomic::AtomicBool,
}

impl Hub {
    pub fn new(inputs: Sender<Input>) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            inputs,
            full_push: false.into(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
                resources: Default::default(),
                changes: [0; 4],
                notify: Arc::new(Notify::new()),
                acks: [0; 4],
                last_nack: Default::default(),
            });
        entry.streams += 1;
        if entry.streams == 1 {
            // An entry without streams is waiting for its retraction to be computed: hide
            // that transient state until the re-insertion's epoch has been applied.
            entry.ready = false;
            entry.proxy = proxy.clone();
            let _ = self.inputs.send(Input::ProxyUp(proxy));
        }
        entry.notify.clone()
    }

    /// Unregisters a stream; the last one retracts the proxy from the dataflow.
    pub fn disconnect(&self, id: &str) {
        let mut st = self.lock();
        if let Some(entry) = st.proxies.get_mut(id) {
            entry.streams = entry.streams.saturating_sub(1);
            if entry.streams == 0 {
                let _ = self.inputs.send(Input::ProxyDown(entry.proxy.clone()));
            }
        }
    }

    /// Applies one epoch of dataflow output. `up` are proxies whose insertion was part of
    /// this epoch (now ready), `down` those retracted.
    pub fn apply(
        &self,
        out: EpochOutput,
        up: &[ProxyId],
        down: &[ProxyId],
        source_errors: Option<Vec<String>>,
    ) {
        let mut st = self.lock();
        st.epoch = out.epoch;
        for (r, d) in out.bodies {
            let key = (r.rtype, r.name, r.version);
            let e = st.bodies.entry(key).or_insert((r.body, 0));
            e.1 += d;
        }
        st.bodies.retain(|_, (_, c)| *c > 0);
        let mut touched: Vec<ProxyId> = Vec::new();
        // Retractions first, so an update (-old, +new) leaves the new version.
        let (removals, additions): (Vec<_>, Vec<_>) =
            out.proxy_resources.into_iter().partition(|(_, d)| *d < 0);
        for ((id, key), _) in removals {
            if let Some(e) = st.proxies.get_mut(&id) {
                let map = &mut e.resources[type_index(key.rtype)];
                if map.get(&key.name) == Some(&key.version) {
                    map.remove(&key.name);
                }
                e.changes[type_index(key.rtype)] += 1;
                touched.push(id);
            }
        }
        for ((id, key), _) in additions {
            if let Some(e) = st.proxies.get_mut(&id) {
                e.changes[type_index(key.rtype)] += 1;
                e.resources[type_index(key.rtype)].insert(key.name, key.version);
                touched.push(id);
            }
        }
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
        for id in up {
            if let Some(e) = st.proxies.get_mut(id) {
                e.ready = true;
                touched.push(id.clone());
            }
        }
        touched.sort();
        touched.dedup();
        for id in touched {
            if let Some(e) = st.proxies.get(&id) {
                e.notify.notify_one();
            }
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

    /// Records an ACK or NACK from one of the proxy's streams.
    pub fn record_feedback(&self, id: &str, fb: crate::xds::Feedback) {
        let mut st = self.lock();
        if let Some(e) = st.proxies.get_mut(id) {
            match fb {
                // A later ACK means the proxy took a newer version: the NACK is over.
                crate::xds::Feedback::Ack(t) => {
                    e.acks[type_index(t)] += 1;
                    e.last_nack[type_index(t)] = None;
                }
                crate::xds::Feedback::Nack(n) => e.last_nack[type_index(n.rtype)] = Some(n.message),
            }
        }
    }

    /// Runs `f` on the proxy's view if the proxy is connected and computed.
    pub fn with_view<R>(&self, id: &str, f: impl FnOnce(&ProxyView<'_>) -> R) -> Option<R> {
        let st = self.lock();
        let entry = st.proxies.get(id).filter(|e| e.ready)?;
        Some(f(&ProxyView {
            entry,
            bodies: &st.bodies,
            generation: st.generation,
        }))
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

    /// The encoded body of one resource version, if any proxy holds it.
    pub fn body(&self, t: ResourceType, name: &str, version: &str) -> Option<&Body> {
        self.bodies
            .get(&(t, name.to_string(), version.to_string()))
            .map(|(b, _)| b)
    }
}
