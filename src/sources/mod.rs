//! Sources of input objects, and the contract every source keeps.
//!
//! A source is a named thing that reads objects ([`files`]: a watched directory; [`kube`]:
//! the watches of a Kubernetes cluster) and sends [`Report`]s through its [`Sink`]: the record
//! changes since its previous report, the objects behind them, and its complete list of
//! current problems. The runtime batches reports into epochs; the hub keeps each source's
//! problems apart, so one source's report never wipes another's. An unchanged object
//! produces no change: sources keep what they emitted in an [`objects::ObjectSet`], which
//! turns "the objects I hold now" into inserts and retractions.
//!
//! Adding a source is one file implementing [`Source`] and one line where `serve` lists its
//! sources. May import: `crate::input`, `crate::config`. Nothing here knows the runtime,
//! the hub or xDS.

pub mod files;
pub mod jwks;
pub mod kube;
pub mod mesh;
pub mod objects;

use crate::input::{Input, InputChange, SourceName};
use dataflows::model::Record;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// The log target of the config problems sources report (rejected objects, analysis
/// findings). `serve` logs them as they appear; `validate` prints the same problems as its
/// report and turns this target off, so each problem is one line.
pub const PROBLEMS_LOG_TARGET: &str = "meshflow::config_problems";

/// Logs a rejected object (the error names its file:line or kind/namespace/name and field).
pub fn log_rejection(error: &dyn std::fmt::Display) {
    tracing::warn!(target: PROBLEMS_LOG_TARGET, error = %error, "rejected config");
}

/// Logs one analysis finding of an accepted object.
pub fn log_finding(level: crate::config::Level, line: &str) {
    match level {
        crate::config::Level::Error => {
            tracing::warn!(target: PROBLEMS_LOG_TARGET, analysis = %line, "config not fully generated")
        }
        crate::config::Level::Warning => {
            tracing::info!(target: PROBLEMS_LOG_TARGET, analysis = %line, "config field not supported")
        }
        crate::config::Level::Deprecated => {
            tracing::info!(target: PROBLEMS_LOG_TARGET, analysis = %line, "config field deprecated")
        }
        crate::config::Level::Expiring => {
            tracing::warn!(target: PROBLEMS_LOG_TARGET, analysis = %line, "certificate expiring")
        }
    }
}

/// Told once, when a source's initial report is in (`Ok`) or it failed before (`Err`).
type Initial = Arc<Mutex<Option<tokio::sync::oneshot::Sender<Result<(), String>>>>>;

fn tell(initial: &Initial, r: Result<(), String>) {
    let taken = initial.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(tx) = taken {
        let _ = tx.send(r);
    }
}

/// What one source says at once.
#[derive(Debug, Default)]
pub struct Report {
    pub changes: Vec<(Record, isize)>,
    /// The objects behind `changes`: kind/namespace/name, insert/update/delete, origin.
    pub described: Vec<InputChange>,
    /// Every problem the source currently has (replaces what it reported before).
    pub errors: Vec<String>,
    /// Every analysis message about the objects in effect (`…: error: …`, `…: warning: …`):
    /// fields not translated, parts not generated, kinds not served. Replaces the previous.
    pub analysis: Vec<String>,
    /// When the source first saw what this report carries, if before it was sent: the
    /// file watch's first event of a burst, before the burst settled and was read. The
    /// runtime's debounce window counts from it, so the source's own settling is part of
    /// the window rather than added to it.
    pub seen: Option<std::time::Instant>,
}

/// A source of input objects. It runs on a thread of its own until its sink closes.
pub trait Source: Send + 'static {
    /// Names the source in errors, logs and health (`files`, `kubernetes`).
    fn name(&self) -> SourceName;

    /// Reads everything, sends that as the first report (the server is not ready before
    /// it), then sends a report per change until [`Sink::send`] says the runtime is gone.
    /// `Err` if it cannot start, or stops for good.
    fn run(self: Box<Self>, sink: Sink) -> Result<(), String>;
}

/// Where a source's reports go: the runtime's inputs, under the source's name.
pub struct Sink {
    name: SourceName,
    inputs: Sender<Input>,
    initial: Initial,
}

impl Sink {
    /// Sends one report; `false` once the runtime is gone (the source should stop).
    pub fn send(&mut self, report: Report) -> bool {
        tracing::info!(
            source = self.name,
            changes = report.changes.len(),
            errors = report.errors.len(),
            analysis = report.analysis.len(),
            "source report"
        );
        let sent = self
            .inputs
            .send(Input::Changes {
                source: self.name,
                changes: report.changes,
                described: report.described,
                errors: report.errors,
                analysis: report.analysis,
                seen: report.seen.unwrap_or_else(std::time::Instant::now),
            })
            .is_ok();
        tell(&self.initial, Ok(()));
        sent
    }
}

/// Starts every source on its own thread and returns once each has sent its initial
/// report into `inputs`, so that no proxy is ever computed without it. A source that fails
/// before that fails the start; one that fails later is logged.
pub async fn start(sources: Vec<Box<dyn Source>>, inputs: &Sender<Input>) -> Result<(), String> {
    let mut initial = Vec::new();
    for source in sources {
        let name = source.name();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let told: Initial = Arc::new(Mutex::new(Some(tx)));
        let sink = Sink {
            name,
            inputs: inputs.clone(),
            initial: told.clone(),
        };
        std::thread::Builder::new()
            .name(format!("meshflow-{name}"))
            .spawn(move || {
                if let Err(e) = source.run(sink) {
                    tracing::error!(source = name, error = %e, "source stopped");
                    tell(&told, Err(e));
                }
            })
            .map_err(|e| format!("starting source {name}: {e}"))?;
        initial.push((name, rx));
    }
    for (name, rx) in initial {
        match rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("source {name}: {e}")),
            Err(_) => return Err(format!("source {name} stopped before its initial read")),
        }
    }
    Ok(())
}
