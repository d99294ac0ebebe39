//! What a `meshflow bench` run is asked to do: [`Options`], the named shapes, how the held
//! configs are verified ([`VerifyMode`]) and which xDS flavour each engine speaks.

use super::churn::ChurnConfig;
use super::loadgen::Protocol;
use super::scenarios::Scenario;
use crate::engine::EngineKind;
use dataflows::model::MeshConfig;
use dataflows::synth::Shape;
use std::path::PathBuf;
use std::time::Duration;

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

/// A named shape: `small`, `M`, `M-unscoped`, `L`, `XL`.
pub fn named_shape(name: &str) -> Result<Shape, String> {
    match name {
        "small" | "S" => Ok(Shape::small()),
        "M" | "m" => Ok(Shape::medium(true)),
        "M-unscoped" | "m-unscoped" => Ok(Shape::medium(false)),
        "L" | "l" => Ok(Shape::large()),
        "XL" | "xl" => Ok(Shape::xlarge()),
        other => Err(format!(
            "unknown shape {other:?} (small, M, M-unscoped, L, XL)"
        )),
    }
}

/// The full-push baseline speaks State-of-the-World only, as Istio did before incremental
/// pushes; the istio-style baseline speaks Delta, as Istio does today.
pub fn protocol_for(engine: EngineKind, requested: Protocol) -> Protocol {
    match engine {
        EngineKind::Meshflow => requested,
        EngineKind::FullPush => Protocol::Sotw,
        EngineKind::IstioStyle => Protocol::Delta,
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
    pub scenarios: Vec<&'static Scenario>,
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
    /// Serve with `--vhds`: Delta streams send route configurations without their virtual
    /// hosts, which follow as VHDS resources (the simulated proxies subscribe to them as
    /// Envoy does, and the expected configs are split the same way).
    pub vhds: bool,
    /// Worker threads of the simulated proxies' runtime.
    pub loadgen_threads: usize,
    /// Above this many proxies the full-push baseline is not run (see [`skip_reason`]).
    pub full_push_max_proxies: usize,
    /// Servers per engine, replicas on the same directory; the simulated proxies' connections
    /// are spread over them, and with two or more the run ends with `failover`.
    pub replicas: usize,
}

/// Why `engine` is not run on this shape, if it is not: the full-push baseline recomputes
/// and re-sends every proxy's whole config on every change, so its cost per change grows
/// with proxies × config; past `--full-push-max-proxies` a run would take hours (every
/// scenario ending at `--timeout`) or be stopped by `--max-server-rss-mib`, and the bench
/// says so instead of starting it.
pub fn skip_reason(opts: &Options, engine: EngineKind) -> Option<String> {
    let proxies = opts.shape.proxies + opts.shape.gateways;
    (engine == EngineKind::FullPush && proxies > opts.full_push_max_proxies).then(|| {
        format!(
            "full-push not run at {proxies} proxies (over --full-push-max-proxies {}): every \
             change recomputes and re-sends every proxy's whole config; at shape L (10,000 \
             proxies) one change already cost ~50 s of server CPU, ~60 s p99 and 6.4 GiB, and \
             it grows with proxies × config",
            opts.full_push_max_proxies
        )
    })
}
