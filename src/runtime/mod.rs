//! The runtime: owns the dataflow engine on its own threads, batches input changes into
//! epochs (debounced), steps the dataflow one epoch at a time and hands each epoch's
//! output to the hub. A proxy never sees half an epoch. A change that finds the engine
//! idle is stepped as soon as it settles, inside its window, and its epoch handed over at
//! the window's close (what arrives after the early step is stepped then, and the two
//! outputs netted into one): the window then hides the step instead of preceding it. The engine is the incremental
//! dataflow or a baseline: full push ([`full_push`]) or Istio's push algorithm
//! ([`istio_style`]).
//!
//! May import: `crate::input` (what it consumes), `crate::hub` (where epochs go),
//! `crate::engine`. Nothing imports the runtime but `serve`.

use crate::hub::Hub;
use crate::input::{EpochMeta, Input, InputChange};
use dataflows::driver::{Batch, Engine, EpochOutput};
use dataflows::model::{MeshConfig, Record};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod full_push;
mod gather;
pub mod istio_style;
pub mod jwks;
pub mod mtls_transition;
pub mod rejections;

pub use crate::engine::EngineKind;

/// When an epoch closes: after `after` without a new input, and at most `max` after its
/// first input (Istio's `PILOT_DEBOUNCE_AFTER` / `PILOT_DEBOUNCE_MAX`). A fixed window is
/// `after == max`: everything arriving within it from the first input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    pub after: Duration,
    pub max: Duration,
}

impl Debounce {
    /// Changes arriving within `window` of the first share one epoch.
    pub fn fixed(window: Duration) -> Debounce {
        Debounce {
            after: window,
            max: window,
        }
    }

    /// How long to wait for more input, `first` and `last` being the epoch's first and
    /// latest input: zero when the epoch closes.
    fn left(&self, first: Instant, last: Instant) -> Duration {
        self.after
            .saturating_sub(last.elapsed())
            .min(self.max.saturating_sub(first.elapsed()))
    }
}

/// When epochs close, and how long a held mTLS change waits for acknowledgments.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    pub debounce: Debounce,
    /// Zero: PeerAuthentication changes flip at once ([`mtls_transition`]).
    pub mtls_transition_timeout: Duration,
}

/// How often acknowledgments are looked at while an mTLS change is held.
const HOLD_POLL: Duration = Duration::from_millis(10);

/// How long an idle engine's epoch waits without a new input before it is stepped ahead of
/// its close: the sources hand over settled bursts (a file burst settles for 5 ms first), so
/// a short quiet is enough to tell one burst from the next.
const EARLY_QUIET: Duration = Duration::from_millis(2);

enum Compute {
    Dataflow(Engine),
    FullPush(Box<full_push::FullPush>),
    IstioStyle(Box<istio_style::IstioStyle>),
}

/// Runs until every sender of `inputs` is gone (`Ok`), or until the dataflow stops
/// (`Err`, also recorded as the hub's health).
pub fn run(
    engine_kind: EngineKind,
    workers: usize,
    mesh: MeshConfig,
    pacing: Pacing,
    inputs: Receiver<Input>,
    hub: Arc<Hub>,
) -> Result<(), String> {
    let debounce = pacing.debounce;
    let root_namespace = mesh.root_namespace.clone();
    let mut transitions = mtls_transition::Transitions::new(pacing.mtls_transition_timeout, &mesh);
    let mut engine = match engine_kind {
        EngineKind::Meshflow => Compute::Dataflow(Engine::start(workers, mesh)),
        EngineKind::FullPush => Compute::FullPush(Box::new(full_push::FullPush::new(mesh))),
        EngineKind::IstioStyle => Compute::IstioStyle(Box::new(istio_style::IstioStyle::new(mesh))),
    };
    hub.health.running();
    let mut rejected = rejections::Rejections::default();
    let mut keys = jwks::Resolver::default();
    let mut epoch = 0u64;
    // The dataflow's own clock: an epoch is one tick, or two when it was stepped ahead.
    let mut tick = 0u64;
    // When the last epoch was handed to the hub.
    let mut closed: Option<Instant> = None;
    loop {
        // While an mTLS change is held, acknowledgments are looked at between inputs.
        let first = if transitions.active() {
            match inputs.recv_timeout(HOLD_POLL) {
                Ok(i) => Some(i),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match inputs.recv() {
                Ok(i) => Some(i),
                Err(_) => break,
            }
        };
        let steps = transitions.advance(&hub);
        if first.is_none() && steps.is_empty() {
            publish_transitions(&hub, &transitions);
            continue;
        }
        epoch += 1;
        let span = tracing::debug_span!("epoch", epoch);
        let _entered = span.enter();
        // The window counts from when the source saw the first change (a file burst's
        // first event, before it settled and was read), not from when it was handed over.
        let started = match &first {
            Some(Input::Changes { seen, .. }) => (*seen).min(Instant::now()),
            _ => Instant::now(),
        };
        let mut gathered = gather::Gathered::default();
        if let Some(i) = first {
            gathered.take(i, epoch, &mut rejected, &mut keys);
        }
        // A change that finds the engine idle (no epoch closed within the debounce's quiet
        // period: the window itself when fixed) is computed as soon as it has settled,
        // while the window is still open; the epoch is still handed over whole at the
        // window's close. Under a stream of changes epochs are computed at their close
        // only, once each: the early step would double the per-epoch cost exactly when the
        // engine is busiest.
        let idle = epoch > 1
            && !transitions.active()
            && closed.is_none_or(|c| started.saturating_duration_since(c) >= debounce.after)
            && matches!(engine, Compute::Dataflow(_));
        let mut early: Option<EpochOutput> = None;
        let mut last = started;
        // Collect what arrives within the debounce window into the same epoch (a step of
        // a held change alone goes at once).
        while gathered.any {
            let left = debounce.left(started, last);
            if left.is_zero() {
                break;
            }
            let ahead = idle && early.is_none() && !gathered.changes.is_empty();
            let wait = if ahead {
                left.min(EARLY_QUIET.saturating_sub(last.elapsed()))
            } else {
                left
            };
            match inputs.recv_timeout(wait) {
                Ok(i) => {
                    gathered.take(i, epoch, &mut rejected, &mut keys);
                    last = Instant::now();
                }
                Err(RecvTimeoutError::Timeout) if ahead && last.elapsed() >= EARLY_QUIET => {
                    let Compute::Dataflow(e) = &mut engine else {
                        break;
                    };
                    let changes = std::mem::take(&mut gathered.changes);
                    tick += 1;
                    let stepped = Instant::now();
                    let Some(out) = e.step(Batch {
                        epoch: tick,
                        changes: changes.clone(),
                    }) else {
                        return Err(stopped(&hub, epoch));
                    };
                    tracing::debug!(
                        epoch,
                        records = changes.len(),
                        step_ms = stepped.elapsed().as_secs_f64() * 1e3,
                        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                        "epoch stepped before its close"
                    );
                    hub.metrics.step("ahead");
                    gathered.stepped.extend(changes);
                    early = Some(out);
                    // What arrived while the step ran arrived within the window: it is
                    // this epoch's, however long the step took (and with a quiet-period
                    // debounce it moves the quiet period on).
                    while let Ok(i) = inputs.try_recv() {
                        gathered.take(i, epoch, &mut rejected, &mut keys);
                        last = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let now = std::time::SystemTime::now();
        let received = now.checked_sub(started.elapsed()).unwrap_or(now);
        let gather::Gathered {
            stepped: ahead,
            changes: rest,
            mut described,
            up,
            down,
            mut source_errors,
            source_analysis,
            n_config,
            rejections,
            ..
        } = gathered;
        // The key fetcher follows the URIs in use (woken only when they change).
        if let Some(now) = keys.changed_uris() {
            hub.jwks_uris.send_if_modified(|published| {
                let changed = *published != now;
                *published = now;
                changed
            });
        }
        // Rejections after the epoch's own changes: an object that changed again in this
        // epoch is not blamed for a push made before. They change no record: what a proxy
        // says never changes what another is served.
        for r in &rejections {
            if rejected.reject(r, &root_namespace) {
                source_errors.retain(|(s, _)| *s != rejections::SOURCE);
                source_errors.push((rejections::SOURCE, rejected.errors()));
            }
        }
        // Only when they changed: a watcher is woken by every send.
        hub.rejections.send_if_modified(|published| {
            let now = rejected.rejections();
            let changed = *published != now;
            *published = now;
            changed
        });
        let stepped_ahead = ahead.len();
        let mut changes = ahead;
        changes.extend(rest);
        tracing::debug!(
            inputs = described.len(),
            records = changes.len(),
            "epoch batched"
        );
        // Holds after the epoch's own changes (all of them, the ones stepped ahead
        // included), so a policy change enters with its hold.
        let holds = hold_changes(steps, transitions.observe(&changes));
        described.extend(holds.iter().filter_map(|(r, _)| match r {
            Record::MtlsHold(h) => Some(InputChange::object(
                &h.workload,
                crate::input::ChangeOp::Update,
                "mtls transition".to_string(),
            )),
            _ => None,
        }));
        changes.extend(holds);
        hub.note_workloads(&changes);
        let rest = changes.split_off(stepped_ahead);
        let stepped = Instant::now();
        let mut resend = crate::hub::Resend::new();
        let out = match (&mut engine, early) {
            // Stepped ahead, and nothing came since: the early step is the epoch.
            (_, Some(out)) if rest.is_empty() => Some(out),
            (Compute::Dataflow(e), early) => {
                tick += 1;
                hub.metrics.step("close");
                e.step(Batch {
                    epoch: tick,
                    changes: rest,
                })
                .map(|out| match early {
                    Some(before) => gather::joined(before, out),
                    None => out,
                })
            }
            (Compute::FullPush(f), _) => Some(f.step(Batch {
                epoch,
                changes: rest,
            })),
            (Compute::IstioStyle(i), _) => {
                let (out, r) = i.step(Batch {
                    epoch,
                    changes: rest,
                });
                resend = r;
                Some(out)
            }
        };
        let Some(mut out) = out else {
            return Err(stopped(&hub, epoch));
        };
        // The hub counts epochs, whatever ticks the dataflow took for one.
        out.epoch = epoch;
        tracing::debug!(
            epoch,
            config_changes = n_config,
            proxies_up = up.len(),
            proxies_down = down.len(),
            output_changes = out.proxy_resources.len() + out.scope_resources.len(),
            stepped_ahead,
            step_ms = stepped.elapsed().as_secs_f64() * 1e3,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "epoch computed"
        );
        let meta = EpochMeta {
            inputs: described,
            received,
            received_instant: started,
            source_errors,
            source_analysis,
        };
        let tracking = transitions.tracking();
        let touched = hub.apply_tracking(out, meta, &up, &down, resend, tracking);
        closed = Some(Instant::now());
        if tracking {
            transitions.applied(epoch, &touched);
        }
        publish_transitions(&hub, &transitions);
    }
    Ok(())
}

/// Records that the dataflow stopped at `epoch` (the hub's health) and says so.
fn stopped(hub: &Hub, epoch: u64) -> String {
    let why = format!("the dataflow stopped at epoch {epoch}");
    tracing::error!("{why}");
    hub.health.fail(why.clone());
    why
}

/// Publishes the holds in progress for the debug port (nothing to do while there are none).
fn publish_transitions(hub: &Hub, transitions: &mtls_transition::Transitions) {
    if !transitions.active() && hub.mtls_transitions.borrow().is_empty() {
        return;
    }
    let now = transitions.status();
    hub.mtls_transitions.send_if_modified(|published| {
        let changed = *published != now;
        *published = now;
        changed
    });
}

/// The hold records of one epoch (the steps acknowledged, then the changes the epoch's
/// inputs start or end), netted out: a hold moved and restarted at once appears once.
fn hold_changes(
    steps: Vec<(Record, isize)>,
    observed: Vec<(Record, isize)>,
) -> Vec<(Record, isize)> {
    let mut net: std::collections::BTreeMap<Record, isize> = Default::default();
    for (r, d) in steps.into_iter().chain(observed) {
        *net.entry(r).or_default() += d;
    }
    net.into_iter().filter(|(_, d)| *d != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::Debounce;
    use std::time::{Duration, Instant};

    /// The real dataflow behind a real hub, fed as the sources feed it: a change that finds
    /// the engine idle is stepped inside its window (`steps{when="ahead"}`), yet its epoch
    /// reaches the hub only at the window's close, with what came after the early step in
    /// the same epoch; a change undone within the window reaches the hub as no change; and
    /// a change right after an epoch (a busy engine) is stepped at its close only. The
    /// window is long (600 ms) against the pauses the test relies on (a 250 ms gap between
    /// two sends, a send within ms of a close), and only its lower bound is asserted as a
    /// time (the runtime waits it out).
    #[test]
    fn an_epoch_stepped_ahead_is_handed_over_whole_at_its_close() {
        use crate::hub::counters::labels;
        use crate::hub::{Hub, HubOptions};
        use crate::input::Input;
        use dataflows::model::{MeshConfig, Record, ResourceType};
        use dataflows::synth;

        const WINDOW: Duration = Duration::from_millis(600);
        let mesh = MeshConfig::default();
        let shape = synth::Shape {
            services: 4,
            endpoints_per_service: 2,
            namespaces: 1,
            proxies: 1,
            ..synth::Shape::small()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        // The hub's own sender (streams' proxies) is not this test's: the runtime stops when
        // `tx` is dropped.
        let hub = Hub::new(std::sync::mpsc::channel().0, HubOptions::default());
        let runner = {
            let (hub, mesh) = (hub.clone(), mesh.clone());
            let pacing = super::Pacing {
                debounce: Debounce::fixed(WINDOW),
                mtls_transition_timeout: Duration::ZERO,
            };
            std::thread::spawn(move || {
                super::run(super::EngineKind::Meshflow, 1, mesh, pacing, rx, hub)
            })
        };
        let send = |changes: Vec<(Record, isize)>| {
            tx.send(Input::Changes {
                source: "files",
                changes,
                described: Vec::new(),
                errors: Vec::new(),
                analysis: Vec::new(),
                seen: Instant::now(),
            })
            .unwrap();
        };
        let wait_epoch = |n: u64| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while hub.read(|st| st.epoch) < n {
                assert!(Instant::now() < deadline, "epoch {n} never reached the hub");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let steps = |when: &str| {
            hub.metrics
                .steps
                .get_or_create(&labels(&[("when", when)]))
                .get()
        };
        let proxy = match synth::proxy(0, &shape) {
            Record::Proxy(p) => p.id,
            _ => unreachable!(),
        };
        let host = synth::hostname(0, &shape, &mesh);
        // The endpoints of svc-0 as the proxy holds them: (version, body). The service's
        // own cluster, not a subset's (its DestinationRule's subsets select labels these
        // endpoints do not have).
        let eds = dataflows::model::names::outbound_cluster_name(80, None, &host);
        let held = || {
            hub.read(|st| {
                let held = st.held(&proxy);
                let (name, version) = held
                    .get_entry(ResourceType::Endpoint, &eds)
                    .expect("the proxy holds svc-0's endpoints");
                let body = st.body(ResourceType::Endpoint, name, version).unwrap();
                (version.to_string(), body.0.to_vec())
            })
        };
        let has = |body: &[u8], ip: &str| body.windows(ip.len()).any(|w| w == ip.as_bytes());
        let (ip_a, ip_b) = (synth::endpoint_ip(0, 5), synth::endpoint_ip(0, 6));
        let a = || synth::endpoint(0, 5, &shape, &mesh);
        let b = || synth::endpoint(0, 6, &shape, &mesh);

        send(
            synth::records(&shape, &mesh)
                .into_iter()
                .map(|r| (r, 1))
                .collect(),
        );
        wait_epoch(1);
        let (before, _) = held();
        assert_eq!((steps("ahead"), steps("close")), (0, 1), "the first epoch");

        // Idle for longer than a window: A is stepped ahead; B comes after that step.
        std::thread::sleep(WINDOW + Duration::from_millis(200));
        let sent_a = Instant::now();
        send(vec![(a(), 1)]);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            hub.read(|st| st.epoch),
            1,
            "nothing is handed over before the close"
        );
        send(vec![(b(), 1)]);
        wait_epoch(2);
        assert!(
            sent_a.elapsed() >= WINDOW,
            "closed after {:?}",
            sent_a.elapsed()
        );
        assert_eq!(hub.read(|st| st.epoch), 2, "A and B are one epoch");
        let (after, body) = held();
        assert_ne!(after, before);
        assert!(
            has(&body, &ip_a) && has(&body, &ip_b),
            "both endpoints are served"
        );
        assert_eq!(
            (steps("ahead"), steps("close")),
            (1, 2),
            "A ahead, B at the close"
        );

        // Undone within the window: an epoch that changes nothing the proxy holds.
        std::thread::sleep(WINDOW + Duration::from_millis(200));
        send(vec![(a(), -1)]);
        std::thread::sleep(Duration::from_millis(250));
        send(vec![(a(), 1)]);
        wait_epoch(3);
        assert_eq!(held().0, after, "A removed and put back is no change");
        assert_eq!((steps("ahead"), steps("close")), (2, 3));

        // Right after a close the engine is busy: the next epoch is stepped at its close.
        send(vec![(b(), -1)]);
        wait_epoch(4);
        let (_, body) = held();
        assert!(has(&body, &ip_a) && !has(&body, &ip_b), "B is gone");
        assert_eq!(
            (steps("ahead"), steps("close")),
            (2, 4),
            "no step ahead when busy"
        );

        drop(tx);
        runner.join().unwrap().unwrap();
    }

    #[test]
    fn debounce_closes_on_quiet_or_at_the_maximum() {
        let ms = Duration::from_millis;
        let ago = |d| Instant::now().checked_sub(d).unwrap();
        let istio = Debounce {
            after: ms(100),
            max: ms(10_000),
        };
        // Quiet for 150 ms: closed.
        assert!(istio.left(ago(ms(500)), ago(ms(150))).is_zero());
        // A change 20 ms ago: waits for the rest of the quiet period.
        let l = istio.left(ago(ms(500)), ago(ms(20)));
        assert!(!l.is_zero() && l <= ms(80), "{l:?}");
        // Busy for 10 s: closed, however recent the last change.
        assert!(istio.left(ago(ms(10_001)), Instant::now()).is_zero());
        // A fixed window counts from the first change only.
        let fixed = Debounce::fixed(ms(50));
        assert!(fixed.left(ago(ms(60)), Instant::now()).is_zero());
        assert!(!fixed.left(ago(ms(10)), Instant::now()).is_zero());
    }
}
