//! `meshflow bench`: runs an engine (a `meshflow serve` child process) on a generated mesh
//! with simulated proxies, applies scenarios by editing files, and measures each one.
//!
//! Per engine, in one run:
//!
//! 1. The mesh is written twice: `config/` (served) and `shadow/` (the harness's own copy).
//!    Each scenario's edit goes to `shadow/` first; the harness reads it with the same
//!    [`FileSource`] the server uses and computes what every proxy must hold with
//!    [`dataflows::naive::compute`] (the full recompute the dataflow is tested against) —
//!    before the clock starts, so the oracle never competes with the server for CPU. Then the
//!    same bytes are renamed into `config/` and the clock starts.
//! 2. The simulated proxies run in this process ([`super::loadgen`]) on their own tokio
//!    runtime: the harness needs every proxy's per-resource arrival times and held sets at
//!    convergence, which in-process costs nothing, while the server's CPU and memory are read
//!    from its own `/proc` entry so the load generator's cost never appears in the server's
//!    figures. (`meshflow loadgen` runs the same code as a separate process.)
//! 3. Convergence: the proxies *affected* by a scenario are those whose expected config
//!    changed; a proxy has converged when it holds every changed `(type, name)` in its new
//!    version (or no longer holds a removed one). Its latency is the arrival time of the
//!    last of those, minus the moment the file was renamed into place. The debounce window
//!    (`--debounce-ms`) is part of it.
//! 4. Then the harness waits until no proxy has received anything for `--settle-ms`, takes
//!    the counters (messages/resources/bytes received by every proxy, affected or not), the
//!    server's CPU seconds and peak RSS of the scenario, and checks every proxy's held
//!    `(type, name, version)` set against the oracle. Any difference fails the run.
//!
//! Engines: `meshflow` (incremental, Delta or SotW) and `full-push`, the baseline
//! (`meshflow serve --engine full-push`: every change recomputes and pushes every proxy's
//! whole config over SotW), run one after the other with the same threads and encoders.
//!
//! This file owns the run over repetitions and engines (setup, server start, clean-up and
//! writing the results); each scenario is measured in [`super::measure`].

use super::chart;
use super::expected::{self, Inputs, Oracle};
use super::loadgen::{self, Protocol};
use super::lock::FileLock;
use super::measure::{self, RunContext};
use super::mesh_gen::{self, MeshState};
use super::options::{self, Options, VerifyMode};
use super::procstat;
use super::render;
use super::report::{EngineReport, Report};
use super::server::Running;
use super::ui::Ui;
use crate::engine::EngineKind;
use dataflows::model::Proxy;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Runs every engine and writes the results. `Err` only when nothing could run.
pub fn run(opts: Options) -> Result<Report, String> {
    mesh_gen::check_shape(&opts.shape)?;
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let temp_work = opts.work_dir.is_none();
    let work = opts.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("meshflow-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| format!("creating {}: {e}", opts.out_dir.display()))?;
    let rt = crate::async_runtime::multi_thread(Some(opts.loadgen_threads))
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    let ui = Ui::new();
    let mut engines = Vec::new();
    let runs = opts.runs.max(1);
    for (run, engine) in (0..runs).flat_map(|r| opts.engines.iter().map(move |e| (r, *e))) {
        let one = OneRun {
            opts: &opts,
            ui: &ui,
            run,
            engine,
            dir: work.join(engine.name()),
            log: opts.out_dir.join(format!(
                "{}-{}-{}-run{}-server.log",
                opts.shape_name,
                engine.name(),
                started_unix,
                run + 1
            )),
        };
        engines.push(one.run(&rt)?);
    }
    if temp_work && !opts.keep_work {
        let _ = std::fs::remove_dir_all(&work);
    }
    let mut report = Report {
        options: opts,
        machine: procstat::machine(),
        started_unix,
        engines,
        files: Vec::new(),
    };
    write_results(&mut report, &ui)?;
    Ok(report)
}

/// Writes the JSON, markdown and SVG next to each other in the output directory.
fn write_results(report: &mut Report, ui: &Ui) -> Result<(), String> {
    let stem = report.options.out_dir.join(format!(
        "{}-{}-{}",
        report.options.shape_name,
        report.options.protocol.name(),
        report.started_unix
    ));
    let json_path = stem.with_extension("json");
    let md_path = stem.with_extension("md");
    let json_text = serde_json::to_string_pretty(&render::json(report)).unwrap_or_default();
    std::fs::write(&json_path, json_text + "\n")
        .map_err(|e| format!("writing {}: {e}", json_path.display()))?;
    std::fs::write(&md_path, render::markdown_file(report))
        .map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    report.files = vec![json_path, md_path];
    match chart::write_svg(report, &stem.with_extension("svg")) {
        Ok(p) => report.files.push(p),
        Err(e) => ui.say(&format!("chart not written: {e}")),
    }
    Ok(())
}

/// One engine in one repetition.
struct OneRun<'a> {
    opts: &'a Options,
    ui: &'a Ui,
    run: usize,
    engine: EngineKind,
    /// Its generated configs.
    dir: PathBuf,
    /// The server's log.
    log: PathBuf,
}

impl OneRun<'_> {
    /// Runs it (holding `--lock`), then removes what is not kept. `Err` only when the
    /// lock cannot be taken; the engine's own failure is in the report.
    fn run(self, rt: &tokio::runtime::Runtime) -> Result<EngineReport, String> {
        let (opts, ui, engine) = (self.opts, self.ui, self.engine);
        let protocol = options::protocol_for(engine, opts.protocol);
        let mut report = EngineReport {
            run: self.run,
            engine,
            protocol,
            error: None,
            skipped: options::skip_reason(opts, engine),
            results: Vec::new(),
            verify: "full",
            server_log: Some(self.log.clone()),
        };
        if let Some(why) = &report.skipped {
            ui.say(&format!("== run {}: {why}", self.run + 1));
            return Ok(report);
        }
        let lock = match &opts.lock {
            Some(path) => {
                ui.say(&format!("waiting for the lock {}", path.display()));
                Some(FileLock::acquire(path)?)
            }
            None => None,
        };
        ui.say(&format!(
            "== run {}/{}: engine {} ({}), shape {}",
            self.run + 1,
            opts.runs.max(1),
            engine.name(),
            protocol.name(),
            opts.shape_name
        ));
        if let Err(e) = rt.block_on(self.engine_run(protocol, &mut report)) {
            ui.say(&format!("engine {}: {e}", engine.name()));
            report.error = Some(e);
        }
        drop(lock);
        if !opts.keep_work {
            let _ = std::fs::remove_dir_all(&self.dir);
            // The servers' logs are kept only when something went wrong.
            if report.ok() {
                for i in 0..opts.replicas.max(1) {
                    let _ = std::fs::remove_file(super::server::replica_log(&self.log, i));
                }
                report.server_log = None;
            }
        }
        Ok(report)
    }

    /// Writes the mesh, computes what every proxy must hold, starts the server and runs
    /// the scenarios on it.
    async fn engine_run(
        &self,
        protocol: Protocol,
        report: &mut EngineReport,
    ) -> Result<(), String> {
        let (opts, ui) = (self.opts, self.ui);
        let config_dir = self.dir.join("config");
        let shadow_dir = self.dir.join("shadow");
        let mut state = self.write_mesh(&config_dir, &shadow_dir)?;
        let mut inputs = Inputs::new(&shadow_dir, opts.mesh.clone())?;
        let proxies = proxy_records(opts)?;
        let (mode, fell_back) = expected::resolve_mode(opts.verify, &inputs.set(), &proxies);
        if fell_back {
            ui.say("verification: the mesh has per-proxy configs, checking every proxy in full");
        }
        report.verify = if mode == VerifyMode::Full {
            "full"
        } else {
            "namespace"
        };
        let oracle = Oracle {
            mesh: opts.mesh.clone(),
            proxies: Arc::new(proxies),
            mode,
            vhds: opts.vhds && protocol == Protocol::Delta,
        };
        let expected = oracle.compute(inputs.set()).await?;

        let spinner = ui.bar(1, "starting the server");
        let server = Running::start(opts, self.engine, &config_dir, &self.log)?;
        spinner.finish_and_clear();
        let ctx = RunContext {
            opts,
            ui,
            state: &mut state,
            config_dir: &config_dir,
            shadow_dir: &shadow_dir,
            inputs: &mut inputs,
            oracle: &oracle,
            expected,
            server: &server,
        };
        let result = measure::run_scenarios(ctx, protocol, &mut report.results).await;
        if let Some(why) = server.stop() {
            return Err(why);
        }
        result?;
        // The served directory holds exactly what the oracle read.
        if !expected::same_records(&config_dir, opts.mesh.clone(), &inputs) {
            return Err("the served config directory differs from the harness's copy".into());
        }
        Ok(())
    }

    /// Writes the generated mesh twice: the served copy and the harness's own.
    fn write_mesh(&self, config_dir: &Path, shadow_dir: &Path) -> Result<MeshState, String> {
        let state = MeshState::new(self.opts.shape.clone(), self.opts.mesh.clone())?;
        let _ = std::fs::remove_dir_all(&self.dir);
        let files = state.files().len() as u64;
        let pb = self.ui.bar(files * 2, "writing the mesh");
        mesh_gen::write_mesh(config_dir, &state, false, |i, _| pb.set_position(i as u64))?;
        mesh_gen::write_mesh(shadow_dir, &state, false, |i, _| {
            pb.set_position(files + i as u64)
        })?;
        pb.finish_and_clear();
        Ok(state)
    }
}

/// The identities of every simulated proxy: the sidecars, then the gateways.
fn proxy_records(opts: &Options) -> Result<Vec<Proxy>, String> {
    let mut proxies: Vec<Proxy> = (0..opts.shape.proxies)
        .map(|p| loadgen::proxy_record(p, opts.shape.namespaces))
        .collect::<Result<_, _>>()?;
    for g in 0..opts.shape.gateways {
        proxies.push(loadgen::router_record(g, &opts.mesh.root_namespace)?);
    }
    Ok(proxies)
}
