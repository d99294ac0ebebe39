//! What a `meshflow bench` run measured: one [`ScenarioResult`] per scenario, one
//! [`EngineReport`] per engine and repetition, and the whole [`Report`]. Data only; the
//! JSON, markdown and SVG are made from it in [`super::render`], [`super::summary`] and
//! [`super::chart`].

use super::loadgen::{Counters, Protocol};
use super::options::Options;
use crate::engine::EngineKind;
use std::path::PathBuf;

/// The measurements of one scenario.
#[derive(Clone, Debug, Default)]
pub struct ScenarioResult {
    pub name: String,
    pub description: String,
    pub skipped: Option<String>,
    pub affected: usize,
    pub converged: usize,
    pub latency_ms: Vec<f64>,
    pub received: Counters,
    /// Proxies that received at least one message, and those of them not affected.
    pub proxies_messaged: usize,
    pub unaffected_messaged: usize,
    /// What an ideal incremental server must send at least: the smallest Delta responses
    /// delivering the changed resources (one per type per proxy, envelope included:
    /// [`super::min_bytes::delta_min_bytes`]), summed over the proxies affected.
    pub min_bytes: u64,
    /// The changed resources' encoded bodies alone, summed over the proxies affected (the
    /// minimum before the envelope was counted).
    pub min_body_bytes: u64,
    pub server_cpu_s: f64,
    pub server_cpu_task_s: f64,
    /// CPU seconds of the bench process itself over the same window: the simulated proxies
    /// (their runtime threads) plus the harness's polling — the load generator's cost, to
    /// read next to the server's (near threads × window, it was the bottleneck).
    pub loadgen_cpu_s: Option<f64>,
    /// The bench process's peak resident memory so far (VmHWM, never reset), KiB.
    pub loadgen_peak_rss_kib: Option<u64>,
    pub peak_rss_kib: Option<u64>,
    pub verified: bool,
    pub mismatched_proxies: usize,
    pub mismatches: Vec<String>,
    /// Sustained scenarios (`churn`): the window changes were written in, s, and how many.
    pub window_s: Option<f64>,
    pub changes: usize,
    /// Sustained scenarios: the server's resident memory (MiB) sampled every
    /// [`super::measure::RSS_EVERY`] (or a tenth of a shorter run), with the seconds since
    /// the scenario began: flat after warm-up, or the server leaks.
    pub rss_samples: Vec<(f64, f64)>,
    /// With several replicas (`--replicas`): each one's figures over the scenario, in
    /// start order (the server figures above are their sums).
    pub replicas: Vec<ReplicaFigures>,
    /// `failover`'s own figures.
    pub failover: Option<Failover>,
}

/// One replica's share of a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplicaFigures {
    /// CPU seconds over the scenario; `None` for a replica killed during it.
    pub cpu_s: Option<f64>,
    /// Peak resident memory over the scenario, KiB.
    pub peak_rss_kib: Option<u64>,
    /// Proxies whose stream was on it at the end of the scenario.
    pub proxies: usize,
}

/// What `failover` measured: the last replica killed, a change written at the same moment,
/// its proxies resuming on the replicas left.
#[derive(Clone, Debug, Default)]
pub struct Failover {
    /// The replica killed (1-based, start order).
    pub killed: usize,
    /// The proxies that were on it, and how many of them resumed on another.
    pub moved: usize,
    pub resumed: usize,
    /// Per moved proxy that resumed: kill → a new stream open and every change held, ms.
    pub resync_ms: Vec<f64>,
    /// What the moved proxies received from the kill on, and what the proxies that stayed
    /// received (both got the change).
    pub moved_received: Counters,
    pub stayed_received: Counters,
    /// The change's minimum for the moved proxies ([`ScenarioResult::min_bytes`]'s share of
    /// them): what resuming should cost them.
    pub moved_min_bytes: u64,
    /// Their whole configs as the smallest Delta responses: what connecting again without
    /// resuming would cost at least.
    pub moved_full_bytes: u64,
}

impl ScenarioResult {
    pub fn ok(&self) -> bool {
        self.skipped.is_some() || (self.verified && self.converged == self.affected)
    }

    pub fn sorted_latency(&self) -> Vec<f64> {
        let mut v = self.latency_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// Messages received (by every proxy) per affected proxy: how many pushes a change
    /// costs each proxy it concerns. `None` when no proxy is affected.
    pub fn messages_per_affected(&self) -> Option<f64> {
        (self.affected > 0).then(|| self.received.total_messages() as f64 / self.affected as f64)
    }

    /// Server CPU per message received by the simulated proxies, µs: what one push costs
    /// the server, all of it (dataflow, hub, streams, HTTP/2, the kernel's sends) divided
    /// over what it sent. `None` when nothing was sent.
    pub fn cpu_us_per_message(&self) -> Option<f64> {
        let messages = self.received.total_messages();
        (messages > 0).then(|| self.server_cpu_s * 1e6 / messages as f64)
    }

    /// Server CPU cores used over a sustained scenario's window.
    pub fn cpu_cores(&self) -> Option<f64> {
        self.window_s
            .filter(|w| *w > 0.0)
            .map(|w| self.server_cpu_s / w)
    }
}

/// One engine's run.
#[derive(Clone, Debug)]
pub struct EngineReport {
    /// Which repetition (0-based) this is.
    pub run: usize,
    pub engine: EngineKind,
    pub protocol: Protocol,
    pub error: Option<String>,
    /// Not run on purpose, and why ([`super::options::skip_reason`]).
    pub skipped: Option<String>,
    pub results: Vec<ScenarioResult>,
    pub verify: &'static str,
    pub server_log: Option<PathBuf>,
}

impl EngineReport {
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.results.iter().all(ScenarioResult::ok)
    }
}

/// The whole run.
pub struct Report {
    pub options: Options,
    pub machine: serde_json::Value,
    pub started_unix: u64,
    pub engines: Vec<EngineReport>,
    pub files: Vec<PathBuf>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.engines.iter().all(EngineReport::ok)
    }
}
