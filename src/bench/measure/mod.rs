//! How each scenario is measured on a running engine: `connect` (every proxy opens its
//! stream at once), `idle` (the server's background cost), then every row of
//! [`super::scenarios::SCENARIOS`] asked for — a one-file edit ([`Change::Edit`]), a
//! sequence of edits ([`Change::Sequence`]), one-file edits one after another
//! ([`Change::Repeat`]), the sustained churn ([`Change::Churn`]) or a rolling update
//! ([`Change::Rollout`]) — each timed, counted and checked against the full recompute;
//! with several replicas, `failover` last ([`failover`]).

mod failover;

use super::churn;
use super::expected::{self, Affected, Expected, Inputs, Oracle};
use super::loadgen::{self, later, ms, Counters, Loadgen, Protocol};
use super::mesh_gen::{self, MeshState};
use super::options::Options;
use super::procstat::{self, ProcStats};
use super::render;
use super::report::{ReplicaFigures, ScenarioResult};
use super::scenarios::{self, Change, EditFn, Scenario, SequenceFn};
use super::server::Running;
use super::ui::Ui;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the `idle` row watches the server with nothing changing.
const IDLE_WINDOW: Duration = Duration::from_secs(1);
/// How many times the `proxy-status` row asks for the list of every proxy.
const PROXY_STATUS_CALLS: usize = 5;

/// How long to wait for the proxies to go quiet at most.
const QUIET_LIMIT: Duration = Duration::from_secs(30);

/// What the scenarios of one engine's run share.
pub struct RunContext<'a> {
    pub opts: &'a Options,
    pub ui: &'a Ui,
    pub state: &'a mut MeshState,
    pub config_dir: &'a Path,
    pub shadow_dir: &'a Path,
    pub inputs: &'a mut Inputs,
    pub oracle: &'a Oracle,
    /// What every proxy must hold now.
    pub expected: Expected,
    pub server: &'a Running,
}

/// The server's figures and the proxies' counters at a scenario's start.
struct Window {
    /// Each replica's.
    before: Vec<Option<ProcStats>>,
    /// The bench process's own figures (the load generator's CPU).
    before_self: Option<ProcStats>,
    peak_reset: bool,
    counters: Counters,
    messages: Vec<u64>,
}

impl Window {
    /// Starts a window; before the proxies connect, `lg` is `None` (everything counts).
    fn open(server: &Running, lg: Option<&Loadgen>) -> Result<Window, String> {
        Ok(Window {
            counters: lg.map(Loadgen::totals).unwrap_or_default(),
            messages: lg.map(Loadgen::messages_per_proxy).unwrap_or_default(),
            before: server.stats_each()?,
            before_self: procstat::read(std::process::id()).ok(),
            peak_reset: server.reset_peak(),
        })
    }

    /// Fills in the server's CPU and peak memory (summed over the replicas alive at both
    /// ends, and each one's with several) and what the proxies received since the window
    /// opened; returns the positions of the proxies that received a message.
    fn close(
        self,
        server: &Running,
        lg: &Loadgen,
        r: &mut ScenarioResult,
    ) -> Result<Vec<usize>, String> {
        let after = server.stats_each()?;
        let on = match server.count() {
            1 => vec![lg.proxies.len()],
            n => lg.proxies_per_server(n),
        };
        let (mut peak_sum, mut replicas) = (0, Vec::new());
        r.server_cpu_s = 0.0;
        r.server_cpu_task_s = 0.0;
        for (i, proxies) in on.into_iter().enumerate() {
            let mut fig = ReplicaFigures {
                proxies,
                ..Default::default()
            };
            if let (Some(Some(b)), Some(Some(a))) = (self.before.get(i), after.get(i)) {
                let cpu = a.cpu_s - b.cpu_s;
                r.server_cpu_s += cpu;
                r.server_cpu_task_s += (a.cpu_task_s - b.cpu_task_s).max(0.0);
                let peak = if self.peak_reset {
                    a.hwm_kib
                } else {
                    a.hwm_kib.max(b.hwm_kib)
                };
                peak_sum += peak;
                fig.cpu_s = Some(cpu);
                // A process being torn down reports no memory: no figure rather than 0.
                fig.peak_rss_kib = (peak > 0).then_some(peak);
            }
            replicas.push(fig);
        }
        if replicas.len() > 1 {
            r.replicas = replicas;
        }
        let own = procstat::read(std::process::id()).ok();
        r.loadgen_cpu_s = self
            .before_self
            .zip(own)
            .map(|(b, a)| (a.cpu_s - b.cpu_s).max(0.0));
        r.loadgen_peak_rss_kib = own.map(|a| a.hwm_kib);
        r.peak_rss_kib = (peak_sum > 0).then_some(peak_sum);
        r.received = lg.totals().since(&self.counters);
        let messaged: Vec<usize> = lg
            .messages_per_proxy()
            .iter()
            .enumerate()
            .filter(|(i, a)| **a > self.messages.get(*i).copied().unwrap_or(0))
            .map(|(i, _)| i)
            .collect();
        r.proxies_messaged = messaged.len();
        Ok(messaged)
    }

    /// [`Window::close`], then counts the proxies messaged that are not in `affected`.
    fn close_counting(
        self,
        server: &Running,
        lg: &Loadgen,
        r: &mut ScenarioResult,
        affected: &BTreeSet<usize>,
    ) -> Result<(), String> {
        let messaged = self.close(server, lg, r)?;
        r.unaffected_messaged = messaged.iter().filter(|i| !affected.contains(i)).count();
        Ok(())
    }
}

/// Whatever else a change causes (resends, late pushes, pushes to proxies that should get
/// nothing) counts too: waits at least a debounce window and a settle period past `from`,
/// then until the proxies are quiet.
async fn settle_after(opts: &Options, lg: &Loadgen, from: Instant) {
    let floor = later(
        from,
        Duration::from_millis(opts.debounce_ms).saturating_add(opts.settle),
    );
    tokio::time::sleep(floor.saturating_duration_since(Instant::now())).await;
    lg.wait_quiet(opts.settle, QUIET_LIMIT).await;
}

/// Records the check of every proxy's held set: (proxies that differ, examples).
fn record_check(r: &mut ScenarioResult, (bad, examples): (usize, Vec<String>)) {
    r.verified = bad == 0;
    r.mismatched_proxies = bad;
    r.mismatches = examples;
}

/// Runs `connect`, `idle` and the scenarios asked for, pushing each one's result.
pub async fn run_scenarios(
    mut ctx: RunContext<'_>,
    protocol: Protocol,
    results: &mut Vec<ScenarioResult>,
) -> Result<(), String> {
    let (opts, ui) = (ctx.opts, ctx.ui);
    let mut lg = ctx.connect(protocol, results).await?;
    results.push(ctx.idle(&lg).await?);
    if let Some(r) = ctx.proxy_status(&lg).await? {
        results.push(r);
    }

    let pb = ui.bar(opts.scenarios.len() as u64, "scenarios");
    // After a scenario that did not converge, the server is still busy with it: what
    // follows would measure that, so it is not run.
    let mut stuck: Option<String> = None;
    for scenario in &opts.scenarios {
        pb.set_message(scenario.name.to_string());
        let mut result = ScenarioResult {
            name: scenario.name.into(),
            ..Default::default()
        };
        if let Some(prev) = &stuck {
            result.skipped = Some(format!(
                "not run: {prev} did not converge within {:.0} s",
                opts.timeout.as_secs_f64()
            ));
        } else {
            ctx.scenario(scenario, &lg, &mut result).await?;
        }
        if result.skipped.is_none() {
            ui.say(&render::line(&result));
            if result.converged < result.affected {
                stuck = Some(result.name.clone());
            }
        }
        results.push(result);
        pb.inc(1);
    }
    pb.finish_and_clear();
    if ctx.server.count() > 1 {
        let mut result = ScenarioResult {
            name: "failover".into(),
            ..Default::default()
        };
        match &stuck {
            Some(prev) => {
                result.skipped = Some(format!(
                    "not run: {prev} did not converge within {:.0} s",
                    opts.timeout.as_secs_f64()
                ))
            }
            None => ctx.failover(&lg, protocol, &mut result).await?,
        }
        if result.skipped.is_none() {
            ui.say(&render::line(&result));
        }
        results.push(result);
    }
    lg.stop();
    Ok(())
}

impl RunContext<'_> {
    async fn scenario(
        &mut self,
        scenario: &Scenario,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        match scenario.change {
            Change::Edit(edit) => self.edit(edit, lg, result).await,
            Change::Sequence(edits, gap_ms) => self.sequence(edits, gap_ms, lg, result).await,
            Change::Repeat(edit, times) => self.repeat(edit, times, lg, result).await,
            Change::Churn => {
                let (cfg, moves) = (self.opts.churn, churn::Moves::RoundRobin);
                self.churn(cfg, moves, lg, result).await
            }
            Change::Rollout => {
                let s = match scenarios::shared_service(self.state) {
                    Ok(s) => s,
                    Err(why) => {
                        result.skipped = Some(why);
                        return Ok(());
                    }
                };
                let gap = Duration::from_millis(scenarios::ROLLOUT_GAP_MS);
                let cfg = churn::ChurnConfig {
                    rate: 1.0 / gap.as_secs_f64(),
                    duration: gap.saturating_mul(scenarios::ROLLOUT_CHANGES as u32),
                };
                self.churn(cfg, churn::Moves::OneService(s), lg, result)
                    .await?;
                result.description = format!(
                    "rolling update of svc-{s} (seen by every proxy): {} endpoints replaced one \
                     by one, {} ms apart",
                    scenarios::ROLLOUT_CHANGES,
                    scenarios::ROLLOUT_GAP_MS
                );
                Ok(())
            }
        }
    }

    /// Takes in the shadow copy's changes and recomputes what every proxy must hold.
    async fn recompute(&mut self) -> Result<Expected, String> {
        self.inputs.rescan()?;
        self.oracle.compute(self.inputs.set()).await
    }

    /// `connect`: every proxy opens its stream at once. Returns the connected proxies
    /// (after pushing the result, also when they did not all sync).
    async fn connect(
        &self,
        protocol: Protocol,
        results: &mut Vec<ScenarioResult>,
    ) -> Result<Loadgen, String> {
        let (opts, proxies) = (self.opts, self.oracle.proxies.len());
        let window = Window::open(self.server, None)?;
        let t0 = Instant::now();
        let servers = self.server.xds_addrs();
        let (first, more) = servers
            .split_first()
            .ok_or("internal: no server was started")?;
        let lg = Loadgen::start(loadgen::Config {
            xds_addr: *first,
            more_servers: more.to_vec(),
            // Only `failover` ends a replica's streams.
            failover: !more.is_empty(),
            proxies: opts.shape.proxies,
            first_proxy: 0,
            namespaces: opts.shape.namespaces,
            protocol,
            streams_per_connection: opts.streams_per_connection,
            gateways: opts.shape.gateways,
            root_namespace: opts.mesh.root_namespace.clone(),
        })
        .await?;
        let pb = self.ui.bar(proxies as u64, "connecting proxies");
        let synced = lg
            .wait_synced(opts.timeout, |n| pb.set_position(n as u64))
            .await;
        pb.finish_and_clear();
        lg.wait_quiet(opts.settle, QUIET_LIMIT).await;
        let mut connect = ScenarioResult {
            name: "connect".into(),
            description: format!("{proxies} proxies connect at once"),
            affected: lg.proxies.len(),
            min_bytes: self.expected.total_bytes(),
            min_body_bytes: self.expected.total_body_bytes(),
            ..Default::default()
        };
        window.close(self.server, &lg, &mut connect)?;
        for p in &lg.proxies {
            if let Some(t) = p.lock().synced_at {
                connect.latency_ms.push(ms(t.saturating_duration_since(t0)));
            }
        }
        connect.converged = connect.latency_ms.len();
        record_check(&mut connect, expected::verify(&lg, &self.expected));
        self.ui.say(&render::line(&connect));
        results.push(connect);
        if let Err(e) = synced {
            return Err(format!("{e}\nserver log:\n{}", self.server.log_tail()));
        }
        Ok(lg)
    }

    /// `idle`: one second without changes — the server's background cost, to read the
    /// other rows against.
    async fn idle(&self, lg: &Loadgen) -> Result<ScenarioResult, String> {
        let window = Window::open(self.server, Some(lg))?;
        tokio::time::sleep(IDLE_WINDOW).await;
        let mut idle = ScenarioResult {
            name: "idle".into(),
            description: format!(
                "no change for {} s (background cost)",
                IDLE_WINDOW.as_secs_f64()
            ),
            ..Default::default()
        };
        window.close(self.server, lg, &mut idle)?;
        idle.unaffected_messaged = idle.proxies_messaged;
        record_check(&mut idle, expected::verify(lg, &self.expected));
        self.ui.say(&render::line(&idle));
        Ok(idle)
    }

    /// `proxy-status`: the debug port's list of every connected proxy with its sync state
    /// per type, fetched and printed as `meshflow proxy-status` does, [`PROXY_STATUS_CALLS`]
    /// times one after the other; one latency sample per call (request sent → table
    /// rendered). With several replicas each is asked in turn and the lists are merged, as
    /// an operator asks every pod. Converged: the calls that listed every proxy, none of
    /// them STALE or NACKED on any type. `None` for a server that does not say where its
    /// debug API listens (a `--server-binary` from before it did).
    async fn proxy_status(&self, lg: &Loadgen) -> Result<Option<ScenarioResult>, String> {
        let addrs = self.server.debug_addrs();
        if addrs.is_empty() {
            return Ok(None);
        }
        let window = Window::open(self.server, Some(lg))?;
        let mut r = ScenarioResult {
            name: "proxy-status".into(),
            description: format!(
                "`meshflow proxy-status` over {} proxies, {PROXY_STATUS_CALLS} calls",
                lg.proxies.len()
            ),
            affected: PROXY_STATUS_CALLS,
            ..Default::default()
        };
        for _ in 0..PROXY_STATUS_CALLS {
            let t0 = Instant::now();
            let mut list = crate::debug::client::list_proxies(addrs[0], false).await?;
            for addr in &addrs[1..] {
                let more = crate::debug::client::list_proxies(*addr, false).await?;
                list.epoch = list.epoch.max(more.epoch);
                list.proxies.extend(more.proxies);
            }
            list.proxies.sort_by(|a, b| a.id.cmp(&b.id));
            let table = crate::debug::client::render::proxy_status(&list, false);
            r.latency_ms.push(ms(t0.elapsed()));
            // After `idle` nothing is in flight or refused: every type a proxy asked for
            // is SYNCED, and the ones it never asked for are NOT SENT.
            let synced = list.proxies.iter().all(|p| {
                p.types
                    .iter()
                    .all(|t| t.sync == "SYNCED" || t.sync == "NOT SENT")
            });
            if list.proxies.len() == lg.proxies.len() && synced && !table.is_empty() {
                r.converged += 1;
            }
        }
        window.close(self.server, lg, &mut r)?;
        r.unaffected_messaged = r.proxies_messaged;
        record_check(&mut r, expected::verify(lg, &self.expected));
        self.ui.say(&render::line(&r));
        Ok(Some(r))
    }

    /// A one-file edit: the recompute first, on the shadow copy, before the clock starts;
    /// then the file is renamed into the served directory and the affected proxies are
    /// timed until they hold every change.
    async fn edit(
        &mut self,
        edit_fn: EditFn,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        self.edits(edit_fn, 1, lg, result).await.map(|_| ())
    }

    /// `times` one-file edits, each measured as [`Self::edit`] measures one, before the
    /// next: one latency sample per (edit, affected proxy), and every message in the window
    /// counts (the harness's recomputes between edits fall in the window: they cost the
    /// bench process, not the server).
    async fn repeat(
        &mut self,
        edit_fn: EditFn,
        times: usize,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        if let Some((start, made)) = self.edits(edit_fn, times, lg, result).await? {
            result.changes = made;
            result.window_s = Some(start.elapsed().as_secs_f64());
            result.description = format!(
                "{made} edits one after another, each converged before the next; the first: {}",
                result.description
            );
        }
        Ok(())
    }

    /// Up to `times` one-file edits, one after another: for each, the recompute on the
    /// shadow copy, then the file renamed into the served directory and the affected
    /// proxies timed until they hold it, then a debounce window, the settle period and
    /// quiet; every proxy's held set checked against the last recompute at the end. Stops
    /// early when an edit does not converge. Returns when the first edit was written and
    /// how many were made (`None`: skipped, the reason in `result`).
    async fn edits(
        &mut self,
        edit_fn: EditFn,
        times: usize,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<Option<(Instant, usize)>, String> {
        let opts = self.opts;
        let mut affected_set = BTreeSet::new();
        let mut window = None;
        let start = Instant::now();
        let mut made = 0;
        for _ in 0..times {
            let (description, edit) = match edit_fn(self.state) {
                Ok(x) => x,
                Err(why) => {
                    result.skipped = Some(why);
                    return Ok(None);
                }
            };
            if result.description.is_empty() {
                result.description = description;
            }
            mesh_gen::apply_edit(self.shadow_dir, &edit)?;
            let next = self.recompute().await?;
            let (affected, min_bytes) = expected::affected_changes(&self.expected, &next);
            result.affected += affected.len();
            result.min_bytes += min_bytes.responses;
            result.min_body_bytes += min_bytes.bodies;
            affected_set.extend(affected.iter().map(|(p, _)| *p));
            if window.is_none() {
                window = Some(Window::open(self.server, Some(lg))?);
            }
            let t0 = Instant::now();
            mesh_gen::apply_edit(self.config_dir, &edit)?;
            tracing::debug!(edit = made, "edit written");
            let before = result.latency_ms.len();
            let pending = wait_converged(lg, &affected, t0, opts.timeout, result).await?;
            // The edit's own samples, to read beside the server's log (`MESHFLOW_SERVER_LOG`).
            tracing::debug!(edit = made, samples_ms = ?&result.latency_ms[before..], "edit converged");
            result.converged += affected.len() - pending;
            made += 1;
            settle_after(opts, lg, t0).await;
            self.expected = next;
            if pending > 0 {
                break;
            }
        }
        let Some(window) = window else {
            return Ok(None);
        };
        window.close_counting(self.server, lg, result, &affected_set)?;
        record_check(result, expected::verify(lg, &self.expected));
        Ok(Some((start, made)))
    }

    /// Several edits, `gap_ms` apart: the recompute of the end state first, on the shadow
    /// copy; then the files are renamed into the served directory on schedule, and the
    /// proxies whose config differs at the end are timed from the last write until they
    /// hold it. Every message any proxy receives in the window counts.
    async fn sequence(
        &mut self,
        edits_fn: SequenceFn,
        gap_ms: u64,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        let opts = self.opts;
        let (description, edits) = match edits_fn(self.state) {
            Ok(x) => x,
            Err(why) => {
                result.skipped = Some(why);
                return Ok(());
            }
        };
        result.description = description;
        result.changes = edits.len();
        for edit in &edits {
            mesh_gen::apply_edit(self.shadow_dir, edit)?;
        }
        let next = self.recompute().await?;
        let (affected, min_bytes) = expected::affected_changes(&self.expected, &next);
        result.affected = affected.len();
        result.min_bytes = min_bytes.responses;
        result.min_body_bytes = min_bytes.bodies;
        let window = Window::open(self.server, Some(lg))?;
        let start = Instant::now();
        let mut last = start;
        for (i, edit) in edits.iter().enumerate() {
            let due = later(
                start,
                Duration::from_millis(gap_ms.saturating_mul(i as u64)),
            );
            tokio::time::sleep_until(due.into()).await;
            mesh_gen::apply_edit(self.config_dir, edit)?;
            last = Instant::now();
        }
        let pending = wait_converged(lg, &affected, last, opts.timeout, result).await?;
        result.converged = result.affected - pending;
        settle_after(opts, lg, last).await;
        let affected_set: BTreeSet<usize> = affected.iter().map(|(p, _)| *p).collect();
        window.close_counting(self.server, lg, result, &affected_set)?;
        result.window_s = Some(last.saturating_duration_since(start).as_secs_f64());
        record_check(result, expected::verify(lg, &next));
        self.expected = next;
        Ok(())
    }

    /// `churn` (and `rollout`): endpoint moves written at a fixed rate
    /// ([`churn::drive`]), then the same edits replayed on the shadow copy and every proxy
    /// checked against the recompute.
    async fn churn(
        &mut self,
        cfg: churn::ChurnConfig,
        moves: churn::Moves,
        lg: &Loadgen,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        let opts = self.opts;
        let window = Window::open(self.server, Some(lg))?;
        let bar = self.ui.bar(1, "churn");
        let every = RSS_EVERY.min(cfg.duration / 10).max(Duration::from_secs(1));
        let started = Instant::now();
        let server = self.server;
        let sample = || {
            server
                .stats()
                .ok()
                .map(|s| (started.elapsed().as_secs_f64(), s.rss_kib as f64 / 1024.0))
        };
        let mut samples = Vec::new();
        let mut ticks = tokio::time::interval(every);
        // The server's RSS over the run, sampled while the changes are written.
        let outcome = {
            let drive = churn::drive(
                lg,
                self.state,
                self.config_dir,
                cfg,
                moves,
                opts.timeout,
                |done, total| {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                },
            );
            tokio::pin!(drive);
            loop {
                tokio::select! {
                    outcome = &mut drive => break outcome?,
                    _ = ticks.tick() => samples.extend(sample()),
                }
            }
        };
        // And once at the end, unless a tick just took it.
        if let Some(last) = sample() {
            if samples
                .last()
                .is_none_or(|(t, _)| last.0 - t >= every.as_secs_f64() / 2.0)
            {
                samples.push(last);
            }
        }
        result.rss_samples = samples;
        bar.finish_and_clear();
        lg.wait_quiet(opts.settle, QUIET_LIMIT).await;
        window.close(self.server, lg, result)?;
        result.description = format!(
            "{} endpoint moves at {}/s over {:.1} s (writer at most {:.1} ms late)",
            outcome.changes, cfg.rate, outcome.write_window_s, outcome.max_write_lag_ms
        );
        result.affected = outcome.pairs;
        result.converged = outcome.converged;
        result.latency_ms = outcome.latency_ms;
        result.changes = outcome.changes;
        result.min_bytes = outcome.min_bytes;
        result.min_body_bytes = outcome.min_body_bytes;
        // CPU over the window the changes were written in plus the tail to convergence.
        result.window_s = Some(outcome.write_window_s.max(cfg.duration.as_secs_f64()));
        for edit in &outcome.edits {
            mesh_gen::apply_edit(self.shadow_dir, edit)?;
        }
        let next = self.recompute().await?;
        // A server that fell behind may still be catching up: wait for it (bounded).
        let deadline = later(Instant::now(), opts.timeout);
        let check = loop {
            let check = expected::verify(lg, &next);
            if check.0 == 0 || Instant::now() >= deadline {
                break check;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        record_check(result, check);
        self.expected = next;
        Ok(())
    }
}

/// How often a sustained scenario samples the server's resident memory.
pub const RSS_EVERY: Duration = Duration::from_secs(60);

/// Waits (until `timeout` past `t0`) for every affected proxy to hold its changes,
/// recording each one's latency; returns how many did not.
async fn wait_converged(
    lg: &Loadgen,
    affected: &Affected,
    t0: Instant,
    timeout: Duration,
    result: &mut ScenarioResult,
) -> Result<usize, String> {
    let deadline = later(t0, timeout);
    let mut pending = affected.clone();
    loop {
        let scan = Instant::now();
        pending.retain(
            |(p, changes)| match expected::converged_at(lg, *p, changes, t0) {
                Some(d) => {
                    result.latency_ms.push(ms(d));
                    false
                }
                None => true,
            },
        );
        if pending.is_empty() || Instant::now() >= deadline {
            return Ok(pending.len());
        }
        if let Some(e) = lg.errors(1).into_iter().next() {
            return Err(format!("a simulated proxy failed: {e}"));
        }
        let pause = churn::poll_pause(scan.elapsed(), Duration::from_millis(2));
        tokio::time::sleep(pause).await;
    }
}
