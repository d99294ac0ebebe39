//! The runtime: owns the dataflow engine on its own threads, batches input changes into
//! epochs (debounced), steps the dataflow one epoch at a time and hands each epoch's
//! output to the hub. A proxy never sees half an epoch. The engine is the incremental
//! dataflow or a baseline: full push ([`full_push`]) or Istio's push algorithm
//! ([`istio_style`]).
//!
//! May import: `crate::input` (what it consumes), `crate::hub` (where epochs go),
//! `crate::engine`. Nothing imports the runtime but `serve`.

use crate::hub::Hub;
use crate::input::{EpochMeta, Input, InputChange};
use dataflows::driver::{Batch, Engine};
use dataflows::model::{MeshConfig, ProxyId, Record};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod full_push;
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
        // The window counts from when the source saw the first change (a file burst's
        // first event, before it settled and was read), not from when it was handed over.
        let started = match &first {
            Some(Input::Changes { seen, .. }) => (*seen).min(Instant::now()),
            _ => Instant::now(),
        };
        let mut batch: Vec<Input> = first.into_iter().collect();
        let mut last = started;
        // Collect what arrives within the debounce window into the same epoch (a step of
        // a held change alone goes at once).
        while !batch.is_empty() {
            let left = debounce.left(started, last);
            if left.is_zero() {
                break;
            }
            match inputs.recv_timeout(left) {
                Ok(i) => {
                    batch.push(i);
                    last = Instant::now();
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        epoch += 1;
        let span = tracing::debug_span!("epoch", epoch);
        let _entered = span.enter();
        let now = std::time::SystemTime::now();
        let received = now.checked_sub(started.elapsed()).unwrap_or(now);
        let mut described: Vec<InputChange> = Vec::new();
        let mut changes = Vec::new();
        let mut up: Vec<ProxyId> = Vec::new();
        let mut down: Vec<ProxyId> = Vec::new();
        let mut source_errors = Vec::new();
        let mut source_analysis: Vec<(_, Vec<String>)> = Vec::new();
        let mut n_config = 0usize;
        let mut rejections = Vec::new();
        for input in batch {
            match input {
                Input::Changes {
                    source,
                    changes: c,
                    described: d,
                    errors,
                    analysis,
                    ..
                } => {
                    n_config += c.len();
                    if rejected.admit(epoch, &c) {
                        source_errors.retain(|(s, _)| *s != rejections::SOURCE);
                        source_errors.push((rejections::SOURCE, rejected.errors()));
                    }
                    changes.extend(keys.rewrite(c));
                    described.extend(d);
                    // A later report of the same source in this epoch replaces its earlier one.
                    source_errors.retain(|(s, _)| *s != source);
                    source_errors.push((source, errors));
                    source_analysis.retain(|(s, _)| *s != source);
                    source_analysis.push((source, analysis));
                }
                Input::ProxyUp(p) => {
                    up.push(p.id.clone());
                    described.push(InputChange::proxy(&p, true));
                    changes.push((Record::Proxy(p), 1));
                }
                Input::ProxyDown(p) => {
                    down.push(p.id.clone());
                    described.push(InputChange::proxy(&p, false));
                    changes.push((Record::Proxy(p), -1));
                }
                Input::Rejected(r) => rejections.push(r),
                Input::Jwks { uri, outcome } => {
                    let (c, objects) = keys.fetched(&uri, outcome);
                    n_config += c.len();
                    changes.extend(c);
                    described.extend(objects.iter().map(|k| {
                        InputChange::object(
                            k,
                            crate::input::ChangeOp::Update,
                            format!("jwks {uri}"),
                        )
                    }));
                }
            }
        }
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
        tracing::debug!(
            inputs = described.len(),
            records = changes.len(),
            "epoch batched"
        );
        // Holds after the epoch's own changes, so a policy change enters with its hold.
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
        let batch = Batch { epoch, changes };
        let stepped = Instant::now();
        let mut resend = crate::hub::Resend::new();
        let out = match &mut engine {
            Compute::Dataflow(e) => e.step(batch),
            Compute::FullPush(f) => Some(f.step(batch)),
            Compute::IstioStyle(i) => {
                let (out, r) = i.step(batch);
                resend = r;
                Some(out)
            }
        };
        let Some(out) = out else {
            let why = format!("the dataflow stopped at epoch {epoch}");
            tracing::error!("{why}");
            hub.health.fail(why.clone());
            return Err(why);
        };
        tracing::debug!(
            epoch,
            config_changes = n_config,
            proxies_up = up.len(),
            proxies_down = down.len(),
            output_changes = out.proxy_resources.len() + out.scope_resources.len(),
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
        if tracking {
            transitions.applied(epoch, &touched);
        }
        publish_transitions(&hub, &transitions);
    }
    Ok(())
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
