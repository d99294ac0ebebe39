//! Runs the dataflow on `workers` timely threads and drives it one epoch at a time:
//! `update` → `advance_to` → `flush` → step until the probe passes, then hands back the
//! consolidated output diffs of that epoch. Threads and channels only; no async runtime.

use crate::flow::{build, Coll, Inputs, Outputs};
use crate::model::*;
use differential_dataflow::input::{Input, InputSession};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use timely::dataflow::operators::probe::Handle;

/// One batch of input changes, applied atomically as epoch `epoch`.
#[derive(Clone, Debug)]
pub struct Batch {
    pub epoch: u64,
    pub changes: Vec<(Record, isize)>,
}

/// The consolidated output changes of one epoch.
#[derive(Clone, Debug, Default)]
pub struct EpochOutput {
    pub epoch: u64,
    /// Resources a proxy holds alone (inbound clusters, `virtualInbound`); the full-push
    /// baseline puts everything here.
    pub proxy_resources: Vec<((ProxyId, ResourceKey), isize)>,
    /// Resources every proxy of a scope holds ([`crate::materialize`] resolves them).
    pub scope_resources: Vec<((ScopeKey, ResourceKey), isize)>,
    pub bodies: Vec<(Resource, isize)>,
    pub errors: Vec<(ConfigError, isize)>,
    pub proxy_scopes: Vec<((ProxyId, ScopeKey), isize)>,
    pub provenance: Vec<(ProvenanceRow, isize)>,
}

#[derive(Default)]
struct Captured {
    proxy_resources: Vec<((ProxyId, ResourceKey), isize)>,
    scope_resources: Vec<((ScopeKey, ResourceKey), isize)>,
    bodies: Vec<(Resource, isize)>,
    errors: Vec<(ConfigError, isize)>,
    proxy_scopes: Vec<((ProxyId, ScopeKey), isize)>,
    provenance: Vec<(ProvenanceRow, isize)>,
}

/// Merge effort per idle step of an arrangement that has batches to merge.
const IDLE_MERGE_EFFORT: usize = 4096;
/// Steps taken while no batch waits, after each epoch, before blocking for the next batch.
/// Each costs microseconds when there is nothing left to merge.
const IDLE_STEPS: usize = 2000;

enum Tick {
    Epoch(u64),
    Stop,
}

/// A running dataflow: send batches in, receive one [`EpochOutput`] per batch, in order.
pub struct Engine {
    batches: Option<Sender<Batch>>,
    outputs: Receiver<EpochOutput>,
    thread: Option<JoinHandle<()>>,
}

struct Sessions {
    services: InputSession<u64, (Hostname, Service), isize>,
    endpoints: InputSession<u64, (Hostname, RawEndpoint), isize>,
    workloads: InputSession<u64, (String, Workload), isize>,
    virtual_services: InputSession<u64, (ConfigKey, VirtualService), isize>,
    destination_rules: InputSession<u64, (ConfigKey, DestinationRule), isize>,
    gateways: InputSession<u64, (ConfigKey, Gateway), isize>,
    sidecars: InputSession<u64, (ConfigKey, Sidecar), isize>,
    proxies: InputSession<u64, (ProxyId, Proxy), isize>,
    secrets: InputSession<u64, ((String, String), TlsSecret), isize>,
    mesh: InputSession<u64, MeshSettings, isize>,
    selections: InputSession<u64, (Hostname, WorkloadSelection), isize>,
    security: InputSession<u64, (ConfigKey, SecurityPolicy), isize>,
    mtls_holds: InputSession<u64, MtlsHold, isize>,
    gateway_api: InputSession<u64, (ConfigKey, GatewayApiObject), isize>,
}

impl Sessions {
    fn apply(&mut self, record: Record, diff: isize) {
        match record {
            Record::Service(s) => self.services.update((s.hostname.clone(), s), diff),
            Record::Endpoint(h, e) => self.endpoints.update((h, e), diff),
            Record::Workload(w) => self.workloads.update((w.ip.clone(), w), diff),
            Record::VirtualService(v) => self.virtual_services.update((v.key.clone(), v), diff),
            Record::DestinationRule(d) => self.destination_rules.update((d.key.clone(), d), diff),
            Record::Gateway(g) => self.gateways.update((g.key.clone(), g), diff),
            Record::Sidecar(s) => self.sidecars.update((s.key.clone(), s), diff),
            Record::Proxy(p) => self.proxies.update((p.id.clone(), p), diff),
            Record::Secret(s) => self
                .secrets
                .update(((s.key.namespace.clone(), s.key.name.clone()), s), diff),
            Record::Selection(h, sel) => self.selections.update((h, sel), diff),
            Record::Security(p) => self.security.update((p.key.clone(), p), diff),
            Record::MtlsHold(h) => self.mtls_holds.update(h, diff),
            Record::GatewayApi(o) => self.gateway_api.update((o.key().clone(), o), diff),
            Record::Mesh(m) => self.mesh.update(m, diff),
        }
    }

    fn advance_and_flush(&mut self, t: u64) {
        macro_rules! each {
            ($($f:ident),*) => { $( self.$f.advance_to(t); self.$f.flush(); )* };
        }
        each!(
            services,
            endpoints,
            workloads,
            virtual_services,
            destination_rules,
            gateways,
            sidecars,
            proxies,
            secrets,
            mesh,
            selections,
            security,
            mtls_holds,
            gateway_api
        );
    }
}

impl Engine {
    /// Starts `workers` timely worker threads running the dataflow for `mesh`.
    pub fn start(workers: usize, mesh: MeshConfig) -> Engine {
        let workers = workers.max(1);
        let (batch_tx, batch_rx) = channel::<Batch>();
        let (out_tx, out_rx) = channel::<EpochOutput>();
        // Worker 0 owns the batch channel and ticks the others so every worker advances
        // its inputs through the same epochs.
        let mut tick_txs = Vec::new();
        let mut tick_rxs = vec![None];
        for _ in 1..workers {
            let (tx, rx) = channel::<Tick>();
            tick_txs.push(tx);
            tick_rxs.push(Some(rx));
        }
        let leader = Arc::new(Mutex::new(Some((batch_rx, out_tx, tick_txs))));
        let followers = Arc::new(Mutex::new(tick_rxs));
        let captured = Arc::new(Mutex::new(Captured::default()));
        let thread = std::thread::Builder::new()
            .name("meshflow-dataflow".into())
            .spawn(move || {
                let result = timely::execute(config(workers), move |worker| {
                    let index = worker.index();
                    let probe = Handle::new();
                    let cap = captured.clone();
                    let mesh = mesh.clone();
                    let mut sessions = worker.dataflow::<u64, _, _>(|scope| {
                        let (services, s1) = scope.new_collection();
                        let (endpoints, s2) = scope.new_collection();
                        let (workloads, s3) = scope.new_collection();
                        let (virtual_services, s4) = scope.new_collection();
                        let (destination_rules, s5) = scope.new_collection();
                        let (gateways, s6) = scope.new_collection();
                        let (sidecars, s7) = scope.new_collection();
                        let (proxies, s8) = scope.new_collection();
                        let (mut mesh_input, s9) = scope.new_collection();
                        let (secrets, s11) = scope.new_collection();
                        let (selections, s10) = scope.new_collection();
                        let (security, s12) = scope.new_collection();
                        let (mtls_holds, s13) = scope.new_collection();
                        let (gateway_api, s14) = scope.new_collection();
                        // The built-in settings are always there, below any configured
                        // ones: the mesh has settings before (and without) a mesh config.
                        if index == 0 {
                            mesh_input.insert(MeshSettings::builtin(&mesh));
                        }
                        let out = build(
                            &mesh,
                            Inputs {
                                services: s1,
                                endpoints: s2,
                                workloads: s3,
                                virtual_services: s4,
                                destination_rules: s5,
                                gateways: s6,
                                sidecars: s7,
                                proxies: s8,
                                secrets: s11,
                                mesh: s9,
                                selections: s10,
                                security: s12,
                                mtls_holds: s13,
                                gateway_api: s14,
                            },
                        );
                        capture(out, &cap, &probe);
                        Sessions {
                            services,
                            endpoints,
                            workloads,
                            virtual_services,
                            destination_rules,
                            gateways,
                            sidecars,
                            proxies,
                            secrets,
                            mesh: mesh_input,
                            selections,
                            security,
                            mtls_holds,
                            gateway_api,
                        }
                    });
                    if index == 0 {
                        let Some((batch_rx, out_tx, tick_txs)) = lock(&leader).take() else {
                            return;
                        };
                        let mut idle = 0;
                        while let Some(batch) = recv_stepping(&batch_rx, worker, &mut idle) {
                            for tx in &tick_txs {
                                let _ = tx.send(Tick::Epoch(batch.epoch));
                            }
                            sessions.advance_and_flush(batch.epoch);
                            for (record, diff) in batch.changes {
                                sessions.apply(record, diff);
                            }
                            sessions.advance_and_flush(batch.epoch + 1);
                            worker.step_while(|| probe.less_than(&(batch.epoch + 1)));
                            let taken = std::mem::take(&mut *lock(&captured));
                            let output = EpochOutput {
                                epoch: batch.epoch,
                                proxy_resources: consolidated(taken.proxy_resources),
                                scope_resources: consolidated(taken.scope_resources),
                                bodies: consolidated(taken.bodies),
                                errors: consolidated(taken.errors),
                                proxy_scopes: consolidated(taken.proxy_scopes),
                                provenance: consolidated(taken.provenance),
                            };
                            if out_tx.send(output).is_err() {
                                break;
                            }
                        }
                        for tx in &tick_txs {
                            let _ = tx.send(Tick::Stop);
                        }
                    } else {
                        let Some(rx) = lock(&followers).get_mut(index).and_then(Option::take)
                        else {
                            return;
                        };
                        let mut idle = 0;
                        while let Some(Tick::Epoch(epoch)) = recv_stepping(&rx, worker, &mut idle) {
                            sessions.advance_and_flush(epoch);
                            sessions.advance_and_flush(epoch + 1);
                            worker.step_while(|| probe.less_than(&(epoch + 1)));
                        }
                    }
                });
                if let Err(e) = result {
                    eprintln!("meshflow: dataflow failed to start: {e}");
                }
            })
            .expect("spawning the dataflow thread");
        Engine {
            batches: Some(batch_tx),
            outputs: out_rx,
            thread: Some(thread),
        }
    }

    /// Applies one batch and waits for its output. `None` if the dataflow has stopped.
    pub fn step(&self, batch: Batch) -> Option<EpochOutput> {
        self.batches.as_ref()?.send(batch).ok()?;
        self.outputs.recv().ok()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.batches.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Timely's configuration for `workers` threads in this process.
fn config(workers: usize) -> timely::Config {
    let mut config = timely::Config::process(workers);
    // Arrangements finish the merges they have started while the worker is idle
    // (see `IDLE_STEPS`), so the epoch after a burst (10k proxies connecting) does
    // not pay for the merging the burst deferred. Only started merges: forcing
    // every arrangement into one batch (differential's own idle logic) would copy
    // whole arrangements after every small epoch.
    let finish_started: differential_dataflow::trace::ExertionLogic =
        Arc::new(|levels: &[(usize, usize, usize)]| {
            levels
                .iter()
                .any(|(_level, count, _len)| *count > 1)
                .then_some(IDLE_MERGE_EFFORT)
        });
    config.worker.set(
        "differential/default_exert_logic".to_string(),
        finish_started,
    );
    config
}

/// Appends every output change to `captured`, for the leader to take after each epoch, and
/// makes `probe` wait for all of them.
fn capture(out: Outputs<'_>, captured: &Arc<Mutex<Captured>>, probe: &Handle<u64>) {
    tap(out.scope_resources, captured, probe, |c| {
        &mut c.scope_resources
    });
    tap(out.proxy_scopes, captured, probe, |c| &mut c.proxy_scopes);
    tap(out.provenance, captured, probe, |c| &mut c.provenance);
    tap(out.proxy_resources, captured, probe, |c| {
        &mut c.proxy_resources
    });
    tap(out.bodies, captured, probe, |c| &mut c.bodies);
    tap(out.errors, captured, probe, |c| &mut c.errors);
}

/// One output's changes into its `field` of `captured`.
fn tap<D: differential_dataflow::ExchangeData>(
    out: Coll<'_, D>,
    captured: &Arc<Mutex<Captured>>,
    probe: &Handle<u64>,
    field: fn(&mut Captured) -> &mut Vec<(D, isize)>,
) {
    let captured = captured.clone();
    out.inspect(move |(d, _t, r)| field(&mut lock(&captured)).push((d.clone(), *r)))
        .probe_with(probe);
}

/// The next message from `rx`; while none waits, first steps `worker` up to `IDLE_STEPS`
/// times (counted in `idle`, reset by each message) so arrangements finish their merges,
/// then blocks. `None` once the sender is gone.
fn recv_stepping<T>(
    rx: &Receiver<T>,
    worker: &mut timely::worker::Worker,
    idle: &mut usize,
) -> Option<T> {
    loop {
        match rx.try_recv() {
            Ok(m) => {
                *idle = 0;
                return Some(m);
            }
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if *idle < IDLE_STEPS => {
                *idle += 1;
                worker.step();
            }
            Err(TryRecvError::Empty) => {
                *idle = 0;
                return rx.recv().ok();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn consolidated<D: Ord>(mut v: Vec<(D, isize)>) -> Vec<(D, isize)> {
    differential_dataflow::consolidation::consolidate(&mut v);
    v
}
