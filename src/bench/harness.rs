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

use super::churn::{self, ChurnConfig};
use super::loadgen::{self, later, ms, percentile, type_index, Counters, Loadgen, Protocol};
use super::mesh_gen::{self, Edit, MeshState};
use super::procstat::{self, ProcStats};
use crate::sources::files::FileSource;
use dataflows::model::{MeshConfig, Proxy, Record, ResourceType};
use dataflows::naive::{self, Snapshot};
use dataflows::synth::{self, Shape};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the `idle` row watches the server with nothing changing.
const IDLE_WINDOW: Duration = Duration::from_secs(1);

pub use crate::engine::EngineKind;

/// The `meshflow serve` arguments selecting `engine` (none for the default, so that a
/// `--server-binary` from before `--engine` took `meshflow` still runs).
fn serve_args(engine: EngineKind) -> Vec<String> {
    match engine {
        EngineKind::Meshflow => Vec::new(),
        other => vec!["--engine".into(), other.name().into()],
    }
}

/// The baseline speaks State-of-the-World only, as Istio did before incremental pushes.
fn protocol_for(engine: EngineKind, requested: Protocol) -> Protocol {
    match engine {
        EngineKind::Meshflow => requested,
        EngineKind::FullPush => Protocol::Sotw,
    }
}

/// A change applied to the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScenarioKind {
    EndpointIp,
    /// An endpoint of a service that every proxy imports moves: the fan-out element of
    /// `churn` on its own.
    EndpointShared,
    ScaleUp,
    VsWeight,
    DrSubset,
    NewService,
    Sidecar,
    MeshWide,
    /// Sustained endpoint churn at a fixed rate ([`super::churn`]).
    Churn,
}

impl ScenarioKind {
    pub const ALL: [ScenarioKind; 9] = [
        ScenarioKind::EndpointIp,
        ScenarioKind::EndpointShared,
        ScenarioKind::ScaleUp,
        ScenarioKind::VsWeight,
        ScenarioKind::DrSubset,
        ScenarioKind::NewService,
        ScenarioKind::Sidecar,
        ScenarioKind::MeshWide,
        ScenarioKind::Churn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::EndpointIp => "endpoint-ip",
            ScenarioKind::EndpointShared => "endpoint-shared",
            ScenarioKind::ScaleUp => "scale-up",
            ScenarioKind::VsWeight => "vs-weight",
            ScenarioKind::DrSubset => "dr-subset",
            ScenarioKind::NewService => "new-service",
            ScenarioKind::Sidecar => "sidecar",
            ScenarioKind::MeshWide => "mesh-wide",
            ScenarioKind::Churn => "churn",
        }
    }

    pub fn parse(s: &str) -> Result<ScenarioKind, String> {
        ScenarioKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ScenarioKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown scenario {s:?} (one of {})", names.join(", "))
            })
    }
}

/// How the held configs are checked against the full recompute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// `full` up to 500 proxies, else `namespace`.
    Auto,
    /// The recompute includes every connected proxy, each with its own identity.
    Full,
    /// The recompute includes one proxy per namespace; every proxy of that namespace is
    /// checked against it. Exact for generated meshes — their proxies own no endpoints
    /// and no Sidecar selects workloads, so a sidecar's config depends only on its
    /// namespace — and the harness checks those two conditions before using it. Gateway
    /// proxies are recomputed one by one.
    Namespace,
}

impl VerifyMode {
    pub fn parse(s: &str) -> Result<VerifyMode, String> {
        match s {
            "auto" => Ok(VerifyMode::Auto),
            "full" => Ok(VerifyMode::Full),
            "namespace" => Ok(VerifyMode::Namespace),
            other => Err(format!(
                "unknown verify mode {other:?} (auto, full, namespace)"
            )),
        }
    }
}

/// A named shape: `small`, `M`, `M-unscoped`, `L`.
pub fn named_shape(name: &str) -> Result<Shape, String> {
    match name {
        "small" | "S" => Ok(Shape::small()),
        "M" | "m" => Ok(Shape::medium(true)),
        "M-unscoped" | "m-unscoped" => Ok(Shape::medium(false)),
        "L" | "l" => Ok(Shape::large()),
        other => Err(format!("unknown shape {other:?} (small, M, M-unscoped, L)")),
    }
}

/// Everything `meshflow bench` needs.
#[derive(Clone, Debug)]
pub struct Options {
    pub shape_name: String,
    pub shape: Shape,
    pub mesh: MeshConfig,
    pub engines: Vec<EngineKind>,
    pub protocol: Protocol,
    pub scenarios: Vec<ScenarioKind>,
    pub out_dir: PathBuf,
    /// Where the generated configs go; a fresh temporary directory if `None`.
    pub work_dir: Option<PathBuf>,
    pub keep_work: bool,
    /// The `meshflow` binary to run as the server; this executable if `None`.
    pub server_binary: Option<PathBuf>,
    pub workers: usize,
    pub debounce_ms: u64,
    pub verify: VerifyMode,
    pub timeout: Duration,
    pub settle: Duration,
    pub streams_per_connection: usize,
    /// The command line, recorded in the results.
    pub command: String,
    /// Repetitions of the whole run (every engine once per repetition, side by side);
    /// the report gives medians over them.
    pub runs: usize,
    /// The `churn` scenario's rate and duration.
    pub churn: ChurnConfig,
    /// A lock file held (flock) around each engine's run and released in between, so a
    /// long multi-repetition bench lets other users of the machine in between runs
    /// without disturbing a measurement.
    pub lock: Option<PathBuf>,
    /// Stop the server (and report it) when its resident memory passes this many MiB.
    pub max_server_rss_mib: Option<u64>,
    /// Extra `meshflow serve` arguments for every engine.
    pub server_args: Vec<String>,
    /// Worker threads of the simulated proxies' runtime.
    pub loadgen_threads: usize,
}

/// An exclusive `flock` on a file, released when dropped.
struct FileLock(std::fs::File);

impl FileLock {
    fn acquire(path: &Path) -> Result<FileLock, String> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("opening the lock {}: {e}", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(format!(
                "locking {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(FileLock(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocking a descriptor we own.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

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
    /// The encoded size of the changed resources, summed over the proxies affected: what
    /// an ideal incremental server must send at least.
    pub min_bytes: u64,
    pub server_cpu_s: f64,
    pub server_cpu_task_s: f64,
    pub peak_rss_kib: Option<u64>,
    pub verified: bool,
    pub mismatched_proxies: usize,
    pub mismatches: Vec<String>,
    /// Sustained scenarios (`churn`): the window changes were written in, s, and how many.
    pub window_s: Option<f64>,
    pub changes: usize,
}

impl ScenarioResult {
    pub fn ok(&self) -> bool {
        self.skipped.is_some() || (self.verified && self.converged == self.affected)
    }

    fn sorted_latency(&self) -> Vec<f64> {
        let mut v = self.latency_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// Server CPU cores used over a sustained scenario's window.
    pub fn cpu_cores(&self) -> Option<f64> {
        self.window_s
            .filter(|w| *w > 0.0)
            .map(|w| self.server_cpu_s / w)
    }

    pub fn json(&self) -> serde_json::Value {
        let lat = self.sorted_latency();
        json!({
            "scenario": self.name,
            "window_s": self.window_s,
            "changes": self.changes,
            "server_cpu_cores": self.cpu_cores(),
            "description": self.description,
            "skipped": self.skipped,
            "affected_proxies": self.affected,
            "converged_proxies": self.converged,
            "latency_ms": {
                "p50": percentile(&lat, 0.50),
                "p99": percentile(&lat, 0.99),
                "max": lat.last().copied(),
            },
            "received": self.received.json(),
            "proxies_messaged": self.proxies_messaged,
            "unaffected_proxies_messaged": self.unaffected_messaged,
            "min_bytes": self.min_bytes,
            "server_cpu_s": self.server_cpu_s,
            "server_cpu_task_s": self.server_cpu_task_s,
            "server_peak_rss_kib": self.peak_rss_kib,
            "verified": self.verified,
            "mismatched_proxies": self.mismatched_proxies,
            "mismatches": self.mismatches,
            "ok": self.ok(),
        })
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

    pub fn json(&self) -> serde_json::Value {
        let o = &self.options;
        json!({
            "command": o.command,
            "started_unix": self.started_unix,
            "machine": self.machine,
            "shape_name": o.shape_name,
            "shape": mesh_gen::shape_json(&o.shape, &o.mesh),
            "workers": o.workers,
            "debounce_ms": o.debounce_ms,
            "settle_ms": o.settle.as_millis() as u64,
            "runs": o.runs,
            "churn": {"rate_per_s": o.churn.rate, "duration_s": o.churn.duration.as_secs_f64()},
            "ok": self.ok(),
            "summary": super::summary::json(&self.engines),
            "engines": self.engines.iter().map(|e| json!({
                "run": e.run + 1,
                "engine": e.engine.name(),
                "protocol": e.protocol.name(),
                "verify": e.verify,
                "error": e.error,
                "server_log": e.server_log.as_ref().map(|p| p.display().to_string()),
                "ok": e.ok(),
                "scenarios": e.results.iter().map(ScenarioResult::json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The shape and settings, the medians and ratios, then every repetition's rows.
    pub fn markdown(&self) -> String {
        let mut md = self.markdown_header();
        md.push_str(&super::summary::markdown(&self.engines, self.options.runs));
        md.push_str("\nEvery repetition:\n\n");
        md.push_str(&self.markdown_runs());
        md
    }

    fn markdown_header(&self) -> String {
        let o = &self.options;
        let s = &o.shape;
        let mut md = String::new();
        md.push_str(&format!(
            "Shape `{}`: {} services × {} endpoints, {} namespaces, {} proxies, \
             VirtualService+DestinationRule on every {}th service, Sidecar scoping {}{}; \
             {} timely worker(s), debounce {} ms.\n\n",
            o.shape_name,
            s.services,
            s.endpoints_per_service,
            s.namespaces,
            s.proxies,
            s.vs_every,
            if s.sidecar_scoping { "on" } else { "off" },
            if s.sidecar_scoping {
                format!(" (own namespace + {} shared)", s.shared_namespaces)
            } else {
                String::new()
            },
            o.workers,
            o.debounce_ms,
        ));
        if s.gateways > 0 {
            md.push_str(&format!(
                "{} gateway proxies (`router`, selected by one Gateway on port 80) and a \
                 VirtualService bound to it for every {}th service.\n\n",
                s.gateways, s.gateway_vs_every
            ));
        }
        if o.scenarios.contains(&ScenarioKind::Churn) {
            md.push_str(&format!(
                "`churn`: {} endpoint moves per second for {} s (latency: one sample per \
                 change and proxy that holds the service's assignment).\n\n",
                o.churn.rate,
                o.churn.duration.as_secs_f64()
            ));
        }
        md
    }

    /// Every repetition's rows (one per repetition, engine and scenario).
    pub fn markdown_runs(&self) -> String {
        let mut md = String::new();
        md.push_str(
            "| run | engine | xDS | scenario | affected proxies | proxies messaged | p50 ms | p99 ms | max ms \
             | messages | resources | bytes | min bytes | server CPU s | peak RSS MiB | verified |\n",
        );
        md.push_str(
            "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into());
        for e in &self.engines {
            if let Some(err) = &e.error {
                md.push_str(&format!(
                    "| {} | {} | {} | (did not run: {}) |||||||||||||\n",
                    e.run + 1,
                    e.engine.name(),
                    e.protocol.name(),
                    err.replace('|', "/")
                ));
            }
            for r in &e.results {
                if let Some(why) = &r.skipped {
                    md.push_str(&format!(
                        "| {} | {} | {} | {} (skipped: {}) |||||||||||||\n",
                        e.run + 1,
                        e.engine.name(),
                        e.protocol.name(),
                        r.name,
                        why
                    ));
                    continue;
                }
                let lat = r.sorted_latency();
                let verified = if r.verified {
                    format!("yes ({})", e.verify)
                } else {
                    format!("**NO** ({} proxies differ)", r.mismatched_proxies)
                };
                let affected = if r.converged == r.affected {
                    r.affected.to_string()
                } else {
                    format!(
                        "{} (**{} not converged**)",
                        r.affected,
                        r.affected - r.converged
                    )
                };
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {} |\n",
                    e.run + 1,
                    e.engine.name(),
                    e.protocol.name(),
                    r.name,
                    affected,
                    r.proxies_messaged,
                    f(percentile(&lat, 0.5)),
                    f(percentile(&lat, 0.99)),
                    f(lat.last().copied()),
                    r.received.total_messages(),
                    r.received.total_resources(),
                    r.received.total_bytes(),
                    r.min_bytes,
                    r.server_cpu_s,
                    r.peak_rss_kib
                        .map(|k| format!("{:.0}", k as f64 / 1024.0))
                        .unwrap_or_else(|| "–".into()),
                    verified,
                ));
            }
        }
        md.push_str(
            "\nLatency: file renamed into the config directory → the affected proxy holds every \
             changed resource in its new version (debounce included); for `connect`, stream \
             opened → proxy synced; `idle` is one second with no change (the server's \
             background cost, to read the other rows against). Messages, resources and bytes: everything every simulated \
             proxy received during the scenario (protobuf-encoded response size, no gRPC/HTTP/2 \
             framing). Min bytes: the encoded size of the changed resources times the proxies \
             that need them. Server CPU: utime+stime of the server process from /proc/PID/stat; \
             peak RSS: VmHWM, reset before each scenario.\n",
        );
        md
    }
}

/// Progress bars on a terminal; plain lines otherwise.
struct Ui {
    mp: MultiProgress,
    tty: bool,
}

impl Ui {
    fn new() -> Ui {
        let tty = std::io::stderr().is_terminal();
        let mp = if tty {
            MultiProgress::new()
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        };
        Ui { mp, tty }
    }

    fn bar(&self, len: u64, msg: &str) -> ProgressBar {
        let pb = self.mp.add(ProgressBar::new(len));
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg:<28} [{bar:30}] {pos}/{len} {elapsed_precise}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    }

    fn say(&self, line: &str) {
        if self.tty {
            let _ = self.mp.println(line);
        } else {
            eprintln!("{line}");
        }
    }
}

/// The server process under test; killed when dropped.
struct Server {
    child: Child,
    log: PathBuf,
    xds_addr: std::net::SocketAddr,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(
    opts: &Options,
    engine: EngineKind,
    config_dir: &Path,
    log: &Path,
) -> Result<Server, String> {
    let binary = match &opts.server_binary {
        Some(b) => b.clone(),
        None => std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?,
    };
    let log_file =
        std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let mut cmd = Command::new(&binary);
    cmd.arg("serve")
        .arg("--config-dir")
        .arg(config_dir)
        // Port 0: the server binds whatever is free and logs the address, so no other
        // process can take a port between choosing and binding it.
        .arg("--xds-addr")
        .arg("127.0.0.1:0")
        .arg("--debug-addr")
        .arg("127.0.0.1:0")
        // The simulated proxies share one async thread and these 2 cores with the server:
        // while 10,000 of them decode their first configs, a connection's keepalive ping
        // can wait longer than the server's 20 s default, and the server would then close
        // it with a hundred streams on it. A real Envoy has a core of its own.
        .arg("--keepalive-timeout-s")
        .arg("120")
        .arg("--workers")
        .arg(opts.workers.to_string())
        .arg("--debounce-ms")
        .arg(opts.debounce_ms.to_string())
        .arg("--root-namespace")
        .arg(&opts.mesh.root_namespace)
        .arg("--domain-suffix")
        .arg(&opts.mesh.domain_suffix)
        .args(serve_args(engine))
        .args(&opts.server_args)
        // The server's log filter: warnings, unless MESHFLOW_SERVER_LOG says otherwise
        // (e.g. `meshflow::xds::hub=debug` to see how long each epoch held the hub).
        .env(
            "RUST_LOG",
            std::env::var("MESHFLOW_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    let mut server = Server {
        child,
        log: log.to_path_buf(),
        xds_addr: ([127, 0, 0, 1], 0).into(),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    const LISTENING: &str = "xDS server listening on ";
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(at) = text.find(LISTENING) {
            // Only a whole line: the port may still be half written.
            let rest = &text[at + LISTENING.len()..];
            let addr = rest.split_once('\n').map(|(line, _)| line.trim());
            if let Some(Ok(addr)) = addr.map(str::parse) {
                server.xds_addr = addr;
                return Ok(server);
            }
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!(
                "the server exited ({status}) before listening:\n{}",
                server.log_tail()
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the server did not listen within 120 s:\n{}",
                server.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What one proxy must hold: (type, name) → (version, encoded body size).
type ExpectedConfig = BTreeMap<(ResourceType, String), (String, usize)>;

/// What every simulated proxy must hold, by proxy position (shared where identical).
struct Expected {
    per_proxy: Vec<Arc<ExpectedConfig>>,
}

/// One changed resource of a proxy: its new version, or `None` when it is removed.
type Change = (ResourceType, String, Option<String>);

fn to_expected(
    res: &BTreeMap<(ResourceType, String), dataflows::model::Resource>,
) -> ExpectedConfig {
    res.iter()
        .map(|(k, r)| (k.clone(), (r.version.clone(), r.body.0.len())))
        .collect()
}

/// Whether `namespace` verification is exact for these inputs (see [`VerifyMode`]): a
/// sidecar's config must depend on its namespace alone. Gateway proxies (routers) are
/// always recomputed one by one.
fn namespace_mode_exact(records: &BTreeSet<Record>, proxies: &[Proxy]) -> bool {
    let proxy_ips: BTreeSet<&str> = proxies
        .iter()
        .filter(|p| p.kind == dataflows::model::ProxyKind::Sidecar)
        .flat_map(|p| p.ips.iter().map(String::as_str))
        .collect();
    records.iter().all(|r| match r {
        Record::Sidecar(s) => s.selector.is_none(),
        Record::Endpoint(_, e) => !proxy_ips.contains(e.ip.as_str()),
        _ => true,
    })
}

/// The key a proxy's expected config is shared under in `namespace` mode.
fn verify_group(p: &Proxy) -> String {
    match p.kind {
        dataflows::model::ProxyKind::Sidecar => format!("ns {}", p.namespace),
        _ => format!("proxy {}", p.id),
    }
}

fn compute_expected(
    mesh: &MeshConfig,
    records: &BTreeSet<Record>,
    proxies: &[Proxy],
    mode: VerifyMode,
) -> Expected {
    let mut snapshot = Snapshot {
        records: records.clone(),
    };
    if mode == VerifyMode::Namespace {
        let mut reps: BTreeMap<String, &Proxy> = BTreeMap::new();
        for p in proxies {
            reps.entry(verify_group(p)).or_insert(p);
        }
        snapshot
            .records
            .extend(reps.values().map(|p| Record::Proxy((*p).clone())));
        let out = naive::compute(mesh, &snapshot);
        let by_group: BTreeMap<&str, Arc<ExpectedConfig>> = reps
            .iter()
            .map(|(group, p)| {
                let cfg = out.get(&p.id).map(to_expected).unwrap_or_default();
                (group.as_str(), Arc::new(cfg))
            })
            .collect();
        let empty = Arc::new(ExpectedConfig::new());
        Expected {
            per_proxy: proxies
                .iter()
                .map(|p| {
                    by_group
                        .get(verify_group(p).as_str())
                        .cloned()
                        .unwrap_or(empty.clone())
                })
                .collect(),
        }
    } else {
        snapshot
            .records
            .extend(proxies.iter().map(|p| Record::Proxy(p.clone())));
        let out = naive::compute(mesh, &snapshot);
        Expected {
            per_proxy: proxies
                .iter()
                .map(|p| Arc::new(out.get(&p.id).map(to_expected).unwrap_or_default()))
                .collect(),
        }
    }
}

fn diff_configs(old: &ExpectedConfig, new: &ExpectedConfig) -> (Vec<Change>, u64) {
    let mut changes = Vec::new();
    let mut bytes = 0u64;
    for (k, (v, len)) in new {
        if old.get(k).map(|(ov, _)| ov) != Some(v) {
            changes.push((k.0, k.1.clone(), Some(v.clone())));
            bytes += *len as u64;
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            changes.push((k.0, k.1.clone(), None));
        }
    }
    (changes, bytes)
}

/// Per proxy, the changes between two expectations (computed once per distinct pair).
/// One proxy config's changes and their encoded size.
type Diffed = (Arc<Vec<Change>>, u64);

/// Proxies (by position) with their changes.
type Affected = Vec<(usize, Arc<Vec<Change>>)>;

fn affected_changes(old: &Expected, new: &Expected) -> (Affected, u64) {
    // Keyed by the addresses of the two shared configs.
    let mut cache: HashMap<(usize, usize), Diffed> = HashMap::new();
    let mut out = Vec::new();
    let mut min_bytes = 0;
    for (i, (o, n)) in old.per_proxy.iter().zip(&new.per_proxy).enumerate() {
        let key = (Arc::as_ptr(o) as usize, Arc::as_ptr(n) as usize);
        let (changes, bytes) = cache
            .entry(key)
            .or_insert_with(|| {
                let (c, b) = diff_configs(o, n);
                (Arc::new(c), b)
            })
            .clone();
        if !changes.is_empty() {
            min_bytes += bytes;
            out.push((i, changes));
        }
    }
    (out, min_bytes)
}

/// The latency of a proxy that holds every change, from `t0`; `None` while it does not.
fn converged_at(lg: &Loadgen, p: usize, changes: &[Change], t0: Instant) -> Option<Duration> {
    let handle = lg.proxies.get(p)?;
    let st = handle.lock();
    let mut latest = Duration::ZERO;
    for (t, name, version) in changes {
        let at = match version {
            Some(v) => {
                let h = st.version(*t, name).filter(|h| &h.version == v)?;
                h.at
            }
            None => {
                if st.version(*t, name).is_some() {
                    return None;
                }
                st.removed_at[type_index(*t)]
                    .get(name)
                    .copied()
                    .unwrap_or(t0)
            }
        };
        latest = latest.max(at.saturating_duration_since(t0));
    }
    Some(latest)
}

/// Compares every proxy's held set with the expectation: (proxies that differ, examples).
fn verify(lg: &Loadgen, expected: &Expected) -> (usize, Vec<String>) {
    let mut bad = 0;
    let mut examples = Vec::new();
    for (handle, exp) in lg.proxies.iter().zip(&expected.per_proxy) {
        let held = handle.lock().held_versions();
        let mut diffs = Vec::new();
        for ((t, name), (v, _)) in exp.iter() {
            match held.get(&(*t, name.clone())) {
                None => diffs.push(format!("missing {} {name}", t.short())),
                Some(h) if h != v => {
                    diffs.push(format!("{} {name}: holds {h}, expected {v}", t.short()))
                }
                _ => {}
            }
        }
        for (t, name) in held.keys() {
            if !exp.contains_key(&(*t, name.clone())) {
                diffs.push(format!("unexpected {} {name}", t.short()));
            }
        }
        if !diffs.is_empty() {
            bad += 1;
            if examples.len() < 10 {
                let n = diffs.len();
                diffs.truncate(3);
                examples.push(format!(
                    "{}: {} ({n} differences)",
                    handle.id,
                    diffs.join("; ")
                ));
            }
        }
    }
    (bad, examples)
}

/// The input records of the mesh the server sees, maintained from file-source rescans.
struct Inputs {
    source: FileSource,
    records: BTreeMap<Record, isize>,
}

impl Inputs {
    fn rescan(&mut self) -> Result<(), String> {
        let scan = self.source.rescan();
        if !scan.errors.is_empty() {
            return Err(format!(
                "the generated config has errors: {}",
                scan.errors.join("; ")
            ));
        }
        for (r, d) in scan.changes {
            let e = self.records.entry(r.clone()).or_default();
            *e += d;
            if *e == 0 {
                self.records.remove(&r);
            }
        }
        Ok(())
    }

    fn set(&self) -> BTreeSet<Record> {
        self.records.keys().cloned().collect()
    }
}

/// Picks the target of a scenario and edits the mesh model. `Err` skips the scenario.
fn scenario_edit(kind: ScenarioKind, state: &mut MeshState) -> Result<(String, Edit), String> {
    let shape = state.shape.clone();
    let k = shape.namespaces;
    let with_rules = |s: &usize| shape.vs_every > 0 && s.is_multiple_of(shape.vs_every);
    // A service with a VirtualService outside the shared namespaces (seen by fewer proxies).
    let local_vs = (0..state.services.len())
        .filter(|s| with_rules(s) && state.services[*s].v1_weight.is_some())
        .find(|s| s % k >= shape.shared_namespaces)
        .or_else(|| (0..state.services.len()).find(|s| with_rules(s)));
    // The first service from `start` outside the namespaces every Sidecar imports: a
    // change seen by one namespace's proxies, not by all of them (`mesh-wide` is that).
    let n = state.services.len().max(1);
    let outside_shared = |start: usize| {
        (start..n)
            .find(|s| !shape.sidecar_scoping || s % k >= shape.shared_namespaces)
            .unwrap_or(start % n)
    };
    match kind {
        ScenarioKind::EndpointIp => {
            let s = outside_shared(1);
            let edit = state.move_endpoint(s, 0)?;
            Ok((format!("endpoint 0 of svc-{s} moves to a new IP"), edit))
        }
        ScenarioKind::EndpointShared => {
            // The first service after svc-0 in a namespace every Sidecar imports (any
            // service when nothing is scoped).
            let s = (1..n)
                .find(|s| !shape.sidecar_scoping || s % k < shape.shared_namespaces)
                .ok_or("the mesh has no second service in a shared namespace")?;
            let edit = state.move_endpoint(s, 0)?;
            Ok((
                format!("endpoint 0 of svc-{s} (seen by every proxy) moves to a new IP"),
                edit,
            ))
        }
        ScenarioKind::ScaleUp => {
            let s = outside_shared(outside_shared(1) + 1);
            let edit = state.scale_up(s, 10)?;
            Ok((format!("svc-{s} scales up by 10 endpoints"), edit))
        }
        ScenarioKind::VsWeight => {
            let s = local_vs.ok_or("the mesh has no VirtualService")?;
            let w = if state.services[s].v1_weight == Some(50) {
                90
            } else {
                50
            };
            let edit = state.shift_weight(s, w)?;
            Ok((format!("VirtualService svc-{s}: v1 weight → {w}"), edit))
        }
        ScenarioKind::DrSubset => {
            let s = local_vs.ok_or("the mesh has no DestinationRule")?;
            let name = format!("v{}", state.services[s].subsets.len() + 1);
            let edit = state.add_subset(s, &name)?;
            Ok((format!("DestinationRule svc-{s} gains subset {name}"), edit))
        }
        ScenarioKind::NewService => {
            let (s, edit) = state.add_service()?;
            Ok((
                format!("new service svc-{s} in {}", state.namespace_of(s)),
                edit,
            ))
        }
        ScenarioKind::Sidecar => {
            let n = k - 1;
            let other = synth::namespace(k / 2);
            let hosts = match state.sidecars.get(n).cloned().flatten() {
                Some(mut h) => {
                    h.push(format!("{other}/*"));
                    h
                }
                None => vec!["./*".to_string(), format!("{other}/*")],
            };
            let edit = state.set_sidecar(n, Some(hosts))?;
            Ok((
                format!("Sidecar of {} also imports {other}/*", synth::namespace(n)),
                edit,
            ))
        }
        ScenarioKind::Churn => Err("churn is not a single edit".into()),
        ScenarioKind::MeshWide => {
            // svc-0 lives in ns-0, which every Sidecar imports: every proxy sees it.
            if !with_rules(&0) || state.services.is_empty() {
                return Err("svc-0 has no VirtualService".into());
            }
            let w = if state.services[0].v1_weight == Some(50) {
                90
            } else {
                50
            };
            let edit = state.shift_weight(0, w)?;
            Ok((
                format!("VirtualService svc-0 (seen by every proxy): v1 weight → {w}"),
                edit,
            ))
        }
    }
}

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
    for (run, engine) in (0..runs).flat_map(|r| opts.engines.iter().map(move |e| (r, e))) {
        let protocol = protocol_for(*engine, opts.protocol);
        let dir = work.join(engine.name());
        let log = opts.out_dir.join(format!(
            "{}-{}-{}-run{}-server.log",
            opts.shape_name,
            engine.name(),
            started_unix,
            run + 1
        ));
        let mut report = EngineReport {
            run,
            engine: *engine,
            protocol,
            error: None,
            results: Vec::new(),
            verify: "full",
            server_log: Some(log.clone()),
        };
        let lock = match &opts.lock {
            Some(path) => {
                ui.say(&format!("waiting for the lock {}", path.display()));
                Some(FileLock::acquire(path)?)
            }
            None => None,
        };
        ui.say(&format!(
            "== run {}/{runs}: engine {} ({}), shape {}",
            run + 1,
            engine.name(),
            protocol.name(),
            opts.shape_name
        ));
        if let Err(e) = rt.block_on(run_engine(
            &opts,
            *engine,
            protocol,
            &dir,
            &log,
            &ui,
            &mut report,
        )) {
            ui.say(&format!("engine {}: {e}", engine.name()));
            report.error = Some(e);
        }
        drop(lock);
        if !opts.keep_work {
            let _ = std::fs::remove_dir_all(&dir);
            // The server's log is kept only when something went wrong.
            if report.ok() {
                let _ = std::fs::remove_file(&log);
                report.server_log = None;
            }
        }
        engines.push(report);
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
    let stem = report.options.out_dir.join(format!(
        "{}-{}-{}",
        report.options.shape_name,
        report.options.protocol.name(),
        started_unix
    ));
    let json_path = stem.with_extension("json");
    let md_path = stem.with_extension("md");
    let json_text = serde_json::to_string_pretty(&report.json()).unwrap_or_default();
    std::fs::write(&json_path, json_text + "\n")
        .map_err(|e| format!("writing {}: {e}", json_path.display()))?;
    let md = format!(
        "# meshflow bench, shape {}\n\n`{}`\n\n{}",
        report.options.shape_name,
        report.options.command,
        report.markdown()
    );
    std::fs::write(&md_path, md).map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    report.files = vec![json_path, md_path];
    match super::chart::write_svg(&report, &stem.with_extension("svg")) {
        Ok(p) => report.files.push(p),
        Err(e) => ui.say(&format!("chart not written: {e}")),
    }
    Ok(report)
}

async fn run_engine(
    opts: &Options,
    engine: EngineKind,
    protocol: Protocol,
    dir: &Path,
    log: &Path,
    ui: &Ui,
    report: &mut EngineReport,
) -> Result<(), String> {
    let mut state = MeshState::new(opts.shape.clone(), opts.mesh.clone())?;
    let config_dir = dir.join("config");
    let shadow_dir = dir.join("shadow");
    let _ = std::fs::remove_dir_all(dir);
    let files = state.files().len() as u64;
    {
        let pb = ui.bar(files * 2, "writing the mesh");
        mesh_gen::write_mesh(&config_dir, &state, false, |i, _| pb.set_position(i as u64))?;
        mesh_gen::write_mesh(&shadow_dir, &state, false, |i, _| {
            pb.set_position(files + i as u64)
        })?;
        pb.finish_and_clear();
    }
    let mut inputs = Inputs {
        source: FileSource::new(&shadow_dir, opts.mesh.clone()),
        records: BTreeMap::new(),
    };
    inputs.rescan()?;
    let mut proxies: Vec<Proxy> = (0..opts.shape.proxies)
        .map(|p| loadgen::proxy_record(p, opts.shape.namespaces))
        .collect::<Result<_, _>>()?;
    for g in 0..opts.shape.gateways {
        proxies.push(loadgen::router_record(g, &opts.mesh.root_namespace)?);
    }
    let mode = match opts.verify {
        VerifyMode::Auto if proxies.len() <= 500 => VerifyMode::Full,
        VerifyMode::Auto => VerifyMode::Namespace,
        m => m,
    };
    let mode = if mode == VerifyMode::Namespace && !namespace_mode_exact(&inputs.set(), &proxies) {
        ui.say("verification: the mesh has per-proxy configs, checking every proxy in full");
        VerifyMode::Full
    } else {
        mode
    };
    report.verify = if mode == VerifyMode::Full {
        "full"
    } else {
        "namespace"
    };
    let oracle = |records: BTreeSet<Record>| {
        let (mesh, proxies) = (opts.mesh.clone(), proxies.clone());
        tokio::task::spawn_blocking(move || compute_expected(&mesh, &records, &proxies, mode))
    };
    let expected = oracle(inputs.set())
        .await
        .map_err(|e| format!("the recompute failed: {e}"))?;

    let spinner = ui.bar(1, "starting the server");
    let server = start_server(opts, engine, &config_dir, log)?;
    spinner.finish_and_clear();
    let pid = server.pid();
    let watchdog = RssWatchdog::start(pid, opts.max_server_rss_mib);
    let proc_now = || {
        procstat::read(pid).map_err(|e| match watchdog.killed() {
            Some(why) => why,
            None => e,
        })
    };
    let result = run_scenarios(
        opts,
        engine,
        protocol,
        ui,
        report,
        RunContext {
            state: &mut state,
            config_dir: &config_dir,
            shadow_dir: &shadow_dir,
            inputs: &mut inputs,
            proxies: &proxies,
            mode,
            expected,
            server: &server,
            proc_now: &proc_now,
        },
    )
    .await;
    drop(server);
    let killed = watchdog.killed();
    drop(watchdog);
    if let Some(why) = killed {
        return Err(why);
    }
    result?;

    // The served directory holds exactly what the oracle read.
    let mut served = FileSource::new(&config_dir, opts.mesh.clone());
    let scan = served.rescan();
    let served_set: BTreeSet<Record> = scan
        .changes
        .into_iter()
        .filter(|(_, d)| *d > 0)
        .map(|(r, _)| r)
        .collect();
    if served_set != inputs.set() || !scan.errors.is_empty() {
        return Err("the served config directory differs from the harness's copy".into());
    }
    Ok(())
}

/// Kills the server when its resident memory passes a limit (a shared machine must not
/// be driven into swap or the OOM killer by a baseline that cannot fit).
struct RssWatchdog {
    stop: Arc<std::sync::atomic::AtomicBool>,
    killed: Arc<std::sync::Mutex<Option<String>>>,
}

impl RssWatchdog {
    fn start(pid: u32, limit_mib: Option<u64>) -> RssWatchdog {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let killed = Arc::new(std::sync::Mutex::new(None));
        if let Some(limit) = limit_mib {
            let (stop, killed) = (stop.clone(), killed.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(p) = procstat::read(pid) {
                        if p.rss_kib / 1024 > limit {
                            // SAFETY: signalling our own child process.
                            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                            if let Ok(mut k) = killed.lock() {
                                *k = Some(format!(
                                    "the server was stopped: its resident memory passed the \
                                     --max-server-rss-mib limit of {limit} MiB"
                                ));
                            }
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        RssWatchdog { stop, killed }
    }

    fn killed(&self) -> Option<String> {
        self.killed.lock().ok().and_then(|k| k.clone())
    }
}

impl Drop for RssWatchdog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the scenarios of one engine's run share.
struct RunContext<'a, F: Fn() -> Result<ProcStats, String>> {
    state: &'a mut MeshState,
    config_dir: &'a Path,
    shadow_dir: &'a Path,
    inputs: &'a mut Inputs,
    proxies: &'a [Proxy],
    mode: VerifyMode,
    expected: Expected,
    server: &'a Server,
    proc_now: &'a F,
}

async fn run_scenarios<F: Fn() -> Result<ProcStats, String>>(
    opts: &Options,
    _engine: EngineKind,
    protocol: Protocol,
    ui: &Ui,
    report: &mut EngineReport,
    ctx: RunContext<'_, F>,
) -> Result<(), String> {
    let RunContext {
        state,
        config_dir,
        shadow_dir,
        inputs,
        proxies,
        mode,
        mut expected,
        server,
        proc_now,
    } = ctx;
    let pid = server.pid();
    let oracle = |records: BTreeSet<Record>| {
        let (mesh, proxies) = (opts.mesh.clone(), proxies.to_vec());
        tokio::task::spawn_blocking(move || compute_expected(&mesh, &records, &proxies, mode))
    };

    // Scenario `connect`: every proxy opens its stream at once.
    let before = proc_now()?;
    let peak_reset = procstat::reset_peak(pid);
    let t0 = Instant::now();
    let mut lg = Loadgen::start(loadgen::Config {
        xds_addr: server.xds_addr,
        proxies: opts.shape.proxies,
        first_proxy: 0,
        namespaces: opts.shape.namespaces,
        protocol,
        streams_per_connection: opts.streams_per_connection,
        gateways: opts.shape.gateways,
        root_namespace: opts.mesh.root_namespace.clone(),
    })
    .await?;
    let pb = ui.bar(proxies.len() as u64, "connecting proxies");
    let synced = lg
        .wait_synced(opts.timeout, |n| pb.set_position(n as u64))
        .await;
    pb.finish_and_clear();
    lg.wait_quiet(opts.settle, Duration::from_secs(30)).await;
    let after = proc_now()?;
    let mut connect = ScenarioResult {
        name: "connect".into(),
        description: format!("{} proxies connect at once", proxies.len()),
        affected: lg.proxies.len(),
        received: lg.totals(),
        proxies_messaged: lg.messages_per_proxy().iter().filter(|m| **m > 0).count(),
        min_bytes: expected
            .per_proxy
            .iter()
            .map(|c| c.values().map(|(_, l)| *l as u64).sum::<u64>())
            .sum(),
        ..Default::default()
    };
    for p in &lg.proxies {
        if let Some(t) = p.lock().synced_at {
            connect.latency_ms.push(ms(t.saturating_duration_since(t0)));
        }
    }
    connect.converged = connect.latency_ms.len();
    fill_proc(&mut connect, &before, &after, peak_reset);
    let (bad, examples) = verify(&lg, &expected);
    connect.verified = bad == 0;
    connect.mismatched_proxies = bad;
    connect.mismatches = examples;
    ui.say(&summary_line(&connect));
    report.results.push(connect);
    if let Err(e) = synced {
        return Err(format!("{e}\nserver log:\n{}", server.log_tail()));
    }

    // Scenario `idle`: one second without changes — the server's background cost, to read
    // the other rows against.
    let before = proc_now()?;
    let peak_reset = procstat::reset_peak(pid);
    let counters_before = lg.totals();
    let msgs_before = lg.messages_per_proxy();
    tokio::time::sleep(IDLE_WINDOW).await;
    let after = proc_now()?;
    let mut idle = ScenarioResult {
        name: "idle".into(),
        description: format!(
            "no change for {} s (background cost)",
            IDLE_WINDOW.as_secs_f64()
        ),
        received: lg.totals().since(&counters_before),
        ..Default::default()
    };
    idle.proxies_messaged = lg
        .messages_per_proxy()
        .iter()
        .zip(&msgs_before)
        .filter(|(a, b)| a > b)
        .count();
    idle.unaffected_messaged = idle.proxies_messaged;
    fill_proc(&mut idle, &before, &after, peak_reset);
    let (bad, examples) = verify(&lg, &expected);
    idle.verified = bad == 0;
    idle.mismatched_proxies = bad;
    idle.mismatches = examples;
    ui.say(&summary_line(&idle));
    report.results.push(idle);

    let pb = ui.bar(opts.scenarios.len() as u64, "scenarios");
    // After a scenario that did not converge, the server is still busy with it: what
    // follows would measure that, so it is not run.
    let mut stuck: Option<String> = None;
    for kind in &opts.scenarios {
        pb.set_message(kind.name().to_string());
        let mut result = ScenarioResult {
            name: kind.name().into(),
            ..Default::default()
        };
        if let Some(prev) = &stuck {
            result.skipped = Some(format!(
                "not run: {prev} did not converge within {:.0} s",
                opts.timeout.as_secs_f64()
            ));
            report.results.push(result);
            pb.inc(1);
            continue;
        }
        if *kind == ScenarioKind::Churn {
            let msgs_before = lg.messages_per_proxy();
            let counters_before = lg.totals();
            let before = proc_now()?;
            let peak_reset = procstat::reset_peak(pid);
            let bar = ui.bar(1, "churn");
            let outcome = churn::drive(
                &lg,
                state,
                config_dir,
                opts.churn,
                opts.timeout,
                |done, total| {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                },
            )
            .await?;
            bar.finish_and_clear();
            lg.wait_quiet(opts.settle, Duration::from_secs(30)).await;
            let after = proc_now()?;
            result.description = format!(
                "{} endpoint moves at {}/s over {:.1} s (writer at most {:.1} ms late)",
                outcome.changes, opts.churn.rate, outcome.write_window_s, outcome.max_write_lag_ms
            );
            result.affected = outcome.pairs;
            result.converged = outcome.converged;
            result.latency_ms = outcome.latency_ms;
            result.changes = outcome.changes;
            // CPU over the window the changes were written in plus the tail to convergence.
            result.window_s = Some(
                outcome
                    .write_window_s
                    .max(opts.churn.duration.as_secs_f64()),
            );
            fill_proc(&mut result, &before, &after, peak_reset);
            result.received = lg.totals().since(&counters_before);
            for (b, a) in msgs_before.iter().zip(lg.messages_per_proxy()) {
                if a > *b {
                    result.proxies_messaged += 1;
                }
            }
            for edit in &outcome.edits {
                mesh_gen::apply_edit(shadow_dir, edit)?;
            }
            inputs.rescan()?;
            let next = oracle(inputs.set())
                .await
                .map_err(|e| format!("the recompute failed: {e}"))?;
            // A server that fell behind may still be catching up: wait for it (bounded).
            let deadline = later(Instant::now(), opts.timeout);
            let (bad, examples) = loop {
                let (bad, examples) = verify(&lg, &next);
                if bad == 0 || Instant::now() >= deadline {
                    break (bad, examples);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            result.min_bytes = outcome.min_bytes;
            result.verified = bad == 0;
            result.mismatched_proxies = bad;
            result.mismatches = examples;
            expected = next;
            ui.say(&summary_line(&result));
            if result.converged < result.affected {
                stuck = Some(result.name.clone());
            }
            report.results.push(result);
            pb.inc(1);
            continue;
        }
        let (description, edit) = match scenario_edit(*kind, state) {
            Ok(x) => x,
            Err(why) => {
                result.skipped = Some(why);
                report.results.push(result);
                pb.inc(1);
                continue;
            }
        };
        result.description = description;
        // The oracle first, on the shadow copy, before the clock starts.
        mesh_gen::apply_edit(shadow_dir, &edit)?;
        inputs.rescan()?;
        let next = oracle(inputs.set())
            .await
            .map_err(|e| format!("the recompute failed: {e}"))?;
        let (affected, min_bytes) = affected_changes(&expected, &next);
        result.affected = affected.len();
        result.min_bytes = min_bytes;
        let msgs_before = lg.messages_per_proxy();
        let counters_before = lg.totals();
        let before = proc_now()?;
        let peak_reset = procstat::reset_peak(pid);

        let t0 = Instant::now();
        mesh_gen::apply_edit(config_dir, &edit)?;
        let deadline = later(t0, opts.timeout);
        let mut pending = affected.clone();
        loop {
            pending.retain(|(p, changes)| match converged_at(&lg, *p, changes, t0) {
                Some(d) => {
                    result.latency_ms.push(ms(d));
                    false
                }
                None => true,
            });
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            if let Some(e) = lg.errors(1).into_iter().next() {
                return Err(format!("a simulated proxy failed: {e}"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        result.converged = result.affected - pending.len();
        // Whatever else the change causes (resends, late pushes, pushes to proxies that
        // should get nothing) counts too: wait at least a debounce window and a settle
        // period past the write, then until the proxies are quiet.
        let floor = later(
            t0,
            Duration::from_millis(opts.debounce_ms).saturating_add(opts.settle),
        );
        tokio::time::sleep(floor.saturating_duration_since(Instant::now())).await;
        lg.wait_quiet(opts.settle, Duration::from_secs(30)).await;
        let after = proc_now()?;
        fill_proc(&mut result, &before, &after, peak_reset);
        result.received = lg.totals().since(&counters_before);
        let msgs_after = lg.messages_per_proxy();
        let affected_set: BTreeSet<usize> = affected.iter().map(|(p, _)| *p).collect();
        for (i, (b, a)) in msgs_before.iter().zip(&msgs_after).enumerate() {
            if a > b {
                result.proxies_messaged += 1;
                if !affected_set.contains(&i) {
                    result.unaffected_messaged += 1;
                }
            }
        }
        let (bad, examples) = verify(&lg, &next);
        result.verified = bad == 0;
        result.mismatched_proxies = bad;
        result.mismatches = examples;
        expected = next;
        ui.say(&summary_line(&result));
        if result.converged < result.affected {
            stuck = Some(result.name.clone());
        }
        report.results.push(result);
        pb.inc(1);
    }
    pb.finish_and_clear();
    lg.stop();
    Ok(())
}

fn fill_proc(r: &mut ScenarioResult, before: &ProcStats, after: &ProcStats, peak_reset: bool) {
    r.server_cpu_s = after.cpu_s - before.cpu_s;
    r.server_cpu_task_s = (after.cpu_task_s - before.cpu_task_s).max(0.0);
    let peak = if peak_reset {
        after.hwm_kib
    } else {
        after.hwm_kib.max(before.hwm_kib)
    };
    // A process being torn down reports no memory: no figure rather than 0.
    r.peak_rss_kib = (peak > 0).then_some(peak);
}

fn summary_line(r: &ScenarioResult) -> String {
    if let Some(why) = &r.skipped {
        return format!("{:<12} skipped: {why}", r.name);
    }
    let lat = r.sorted_latency();
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    format!(
        "{:<12} affected {:>5} (converged {:>5}) p50 {:>7} ms p99 {:>7} ms | {} msgs {} res {} B (min {} B) | cpu {:.3} s | {}",
        r.name,
        r.affected,
        r.converged,
        f(percentile(&lat, 0.5)),
        f(percentile(&lat, 0.99)),
        r.received.total_messages(),
        r.received.total_resources(),
        r.received.total_bytes(),
        r.min_bytes,
        r.server_cpu_s,
        if r.verified {
            "verified".to_string()
        } else {
            format!("MISMATCH: {}", r.mismatches.join(" | "))
        }
    )
}
