//! The command-line side of `meshflow mesh-gen`, `meshflow loadgen` and `meshflow bench`.

use super::churn::ChurnConfig;
use super::harness;
use super::loadgen::{self, Protocol};
use super::mesh_gen::{self, MeshState};
use super::options::{self, Options, VerifyMode};
use super::render;
use super::scenarios::{self, SCENARIOS};
use crate::engine::EngineKind;
use dataflows::model::MeshConfig;
use dataflows::synth::Shape;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `meshflow mesh-gen`.
#[derive(clap::Args, Debug)]
pub struct MeshGenArgs {
    /// Directory to write (created; must be empty unless --force).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub services: usize,
    #[arg(long)]
    pub endpoints_per_service: usize,
    #[arg(long)]
    pub namespaces: usize,
    /// Proxies of the shape (recorded in the shape file; proxies connect, they are not config).
    #[arg(long, default_value_t = 0)]
    pub proxies: usize,
    /// Every V-th service gets a DestinationRule (v1/v2) and a 90/10 VirtualService (0: none).
    #[arg(long, default_value_t = 4)]
    pub vs_every: usize,
    /// Give every namespace a default Sidecar importing `./*` and the shared namespaces.
    #[arg(long)]
    pub sidecar_scoping: bool,
    /// Namespaces every Sidecar imports besides its own (ns-0, ns-1, …).
    #[arg(long, default_value_t = 1)]
    pub shared_namespaces: usize,
    /// Gateway proxies of the shape (recorded; they connect as `router~…` nodes labelled
    /// `istio: ingressgateway`); with any, an ingress Gateway is generated.
    #[arg(long, default_value_t = 0)]
    pub gateways: usize,
    /// Every G-th service gets a VirtualService bound to the ingress Gateway (0: none).
    #[arg(long, default_value_t = 10)]
    pub gateway_vs_every: usize,
    /// AuthorizationPolicies, each selecting one proxy (policy I selects proxy I mod P).
    #[arg(long, default_value_t = 0)]
    pub authz_policies: usize,
    /// HTTPRoutes, one for each of the first R services, on a Gateway API Gateway `web`
    /// (class istio, HTTP port 8080) the gateway proxies also run (needs --gateways).
    #[arg(long, default_value_t = 0)]
    pub http_routes: usize,
    /// Write into a non-empty directory.
    #[arg(long)]
    pub force: bool,
    #[arg(long, default_value = "istio-system")]
    pub root_namespace: String,
    #[arg(long, default_value = "cluster.local")]
    pub domain_suffix: String,
}

pub fn mesh_gen(a: MeshGenArgs) -> ExitCode {
    let shape = Shape {
        services: a.services,
        endpoints_per_service: a.endpoints_per_service,
        namespaces: a.namespaces,
        proxies: a.proxies,
        vs_every: a.vs_every,
        sidecar_scoping: a.sidecar_scoping,
        shared_namespaces: a.shared_namespaces,
        gateways: a.gateways,
        gateway_vs_every: a.gateway_vs_every,
        authz_policies: a.authz_policies,
        http_routes: a.http_routes,
    };
    let mesh = MeshConfig {
        root_namespace: a.root_namespace,
        domain_suffix: a.domain_suffix,
        ..MeshConfig::default()
    };
    let result = MeshState::new(shape, mesh)
        .and_then(|state| mesh_gen::write_mesh(&a.out, &state, a.force, |_, _| {}));
    match result {
        Ok(files) => {
            println!("wrote {files} files to {}", a.out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshflow mesh-gen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `meshflow loadgen`.
#[derive(clap::Args, Debug)]
pub struct LoadgenArgs {
    /// The ADS server to load.
    #[arg(long, default_value = "127.0.0.1:15010")]
    pub xds_addr: SocketAddr,
    #[arg(long)]
    pub proxies: usize,
    /// Namespaces of the mesh (proxy p lives in ns-{p mod K}).
    #[arg(long)]
    pub namespaces: usize,
    /// Number the proxies from here (to split a load over several processes).
    #[arg(long, default_value_t = 0)]
    pub first_proxy: usize,
    /// Speak Delta ADS (the default).
    #[arg(long, conflicts_with = "sotw")]
    pub delta: bool,
    /// Speak State-of-the-World ADS.
    #[arg(long)]
    pub sotw: bool,
    /// Seconds to keep the streams open after every proxy synced.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds to wait for every proxy to sync.
    #[arg(long, default_value_t = 120.0)]
    pub sync_timeout: f64,
    /// ADS streams per HTTP/2 connection.
    #[arg(long, default_value_t = 100)]
    pub streams_per_connection: usize,
    /// Gateway proxies (`router~…`, `istio: ingressgateway`) after the sidecars.
    #[arg(long, default_value_t = 0)]
    pub gateways: usize,
    /// The namespace of the gateway proxies.
    #[arg(long, default_value = "istio-system")]
    pub root_namespace: String,
    /// Another replica of the server (repeatable): connections are spread over
    /// `--xds-addr` and these, one after another.
    #[arg(long = "replica-addr")]
    pub replica_addrs: Vec<SocketAddr>,
    /// A Delta stream that ends opens again on the next server and resumes what it holds
    /// (its VHDS virtual hosts are not asked for again: do not combine with `serve --vhds`).
    /// Delta only: a SotW stream that opens again is sent everything, nothing resumes.
    #[arg(long, conflicts_with = "sotw")]
    pub failover: bool,
}

fn seconds(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("{what}: {s} is not a number of seconds"))
}

pub fn loadgen(a: LoadgenArgs) -> ExitCode {
    let run = || -> Result<serde_json::Value, String> {
        let duration = seconds(a.duration, "--duration")?;
        let sync_timeout = seconds(a.sync_timeout, "--sync-timeout")?;
        let config = loadgen::Config {
            xds_addr: a.xds_addr,
            proxies: a.proxies,
            first_proxy: a.first_proxy,
            namespaces: a.namespaces,
            protocol: if a.sotw {
                Protocol::Sotw
            } else {
                Protocol::Delta
            },
            streams_per_connection: a.streams_per_connection,
            gateways: a.gateways,
            root_namespace: a.root_namespace,
            more_servers: a.replica_addrs,
            failover: a.failover,
        };
        let rt = crate::async_runtime::multi_thread(None)
            .build()
            .map_err(|e| format!("starting the async runtime: {e}"))?;
        rt.block_on(loadgen::run_cli(config, duration, sync_timeout))
    };
    match run() {
        Ok(summary) => {
            let ok = summary["synced"] == summary["proxies"] && summary["failed_streams"] == 0;
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("meshflow loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `meshflow bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// small (200 services × 10, 10 namespaces, 200 proxies), M (1,000 × 10, 20 ns, 2,000
    /// proxies), M-unscoped (M without Sidecars), L (5,000 × 10, 100 ns, 10,000 proxies),
    /// XL (10,000 × 10, 250 ns, 25,000 proxies).
    #[arg(long, default_value = "M")]
    pub shape: String,
    /// Override the shape's number of services.
    #[arg(long)]
    pub services: Option<usize>,
    #[arg(long)]
    pub endpoints_per_service: Option<usize>,
    #[arg(long)]
    pub namespaces: Option<usize>,
    #[arg(long)]
    pub proxies: Option<usize>,
    #[arg(long)]
    pub vs_every: Option<usize>,
    #[arg(long)]
    pub sidecar_scoping: Option<bool>,
    // Help from `scenarios::cli_help`, so that it names every row of the table.
    #[arg(long, value_delimiter = ',', help = scenarios::cli_help())]
    pub scenarios: Vec<String>,
    /// Engines to compare, comma-separated: meshflow, istio-style, full-push.
    #[arg(long, value_delimiter = ',', default_value = "meshflow,full-push")]
    pub engine: Vec<String>,
    /// The simulated proxies' ADS flavour for meshflow (full-push is always SotW,
    /// istio-style always Delta).
    #[arg(long, value_enum, default_value = "delta")]
    pub protocol: ProtocolArg,
    /// Where the JSON, markdown and SVG results go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Where to generate the configs (default: a temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the generated configs.
    #[arg(long)]
    pub keep_work: bool,
    /// The meshflow binary to benchmark (default: this one).
    #[arg(long)]
    pub server_binary: Option<PathBuf>,
    /// Timely workers of the server.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    #[arg(long, default_value_t = 50)]
    pub debounce_ms: u64,
    /// auto, full or namespace (see `meshflow::bench::options::VerifyMode`).
    #[arg(long, default_value = "auto")]
    pub verify: String,
    /// Seconds a scenario may take to converge (and the proxies to sync).
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Quiet period that ends a scenario, ms.
    #[arg(long, default_value_t = 300)]
    pub settle_ms: u64,
    #[arg(long, default_value_t = 100)]
    pub streams_per_connection: usize,
    #[arg(long, default_value = "istio-system")]
    pub root_namespace: String,
    #[arg(long, default_value = "cluster.local")]
    pub domain_suffix: String,
    /// Repetitions of the whole run (every engine once per repetition, side by side); the
    /// report gives medians over them and the median of the per-repetition ratios.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// `churn`: endpoint changes per second.
    #[arg(long, default_value_t = 100.0)]
    pub churn_rate: f64,
    /// `churn`: seconds of churn.
    #[arg(long, default_value_t = 60.0)]
    pub churn_seconds: f64,
    /// Gateway proxies (`router`s selected by one ingress Gateway); overrides the shape's.
    #[arg(long)]
    pub gateways: Option<usize>,
    /// Every G-th service gets a VirtualService bound to the ingress Gateway (0: none).
    #[arg(long)]
    pub gateway_vs_every: Option<usize>,
    /// AuthorizationPolicies, each selecting one proxy; overrides the shape's (0).
    #[arg(long)]
    pub authz_policies: Option<usize>,
    /// HTTPRoutes on a Gateway API Gateway the gateway proxies also run, one for each of
    /// the first R services (needs --gateways); overrides the shape's (0).
    #[arg(long)]
    pub http_routes: Option<usize>,
    /// Hold this lock file (flock) around each engine's run only, releasing it in between,
    /// instead of wrapping the whole command in `flock` (do not do both: it would wait for
    /// itself).
    #[arg(long)]
    pub lock: Option<PathBuf>,
    /// Stop a server whose resident memory passes this many MiB and report it (0: no
    /// limit); keeps a baseline that cannot fit from pushing a shared machine into swap.
    #[arg(long, default_value_t = 8192)]
    pub max_server_rss_mib: u64,
    /// An extra `meshflow serve` argument for every engine (repeatable), e.g.
    /// `--server-arg=--history-bytes=0` to see what the history costs.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Serve route configurations over VHDS (`meshflow serve --vhds`) to the Delta
    /// engines: a virtual host's change sends that virtual host, not its route
    /// configuration. The simulated proxies subscribe to the virtual hosts as Envoy does.
    #[arg(long)]
    pub vhds: bool,
    /// Threads of the simulated proxies (they share the machine with the server).
    #[arg(long, default_value_t = 1)]
    pub loadgen_threads: usize,
    /// Above this many proxies the full-push baseline is reported as not run instead of
    /// being started (each of its changes recomputes every proxy's whole config).
    #[arg(long, default_value_t = 10_000)]
    pub full_push_max_proxies: usize,
    /// Servers per engine (replicas on the same config directory, as a Deployment's pods):
    /// the proxies' connections are spread over them, one after another, each replica's
    /// CPU and memory is reported, and with 2 or more the run ends with `failover` (the
    /// last replica killed, its proxies resuming on the others).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ProtocolArg {
    Delta,
    Sotw,
}

fn bench_options(a: BenchArgs) -> Result<Options, String> {
    let mut shape = options::named_shape(&a.shape)?;
    let mut name = a.shape.clone();
    let mut custom = false;
    macro_rules! over {
        ($field:ident) => {
            if let Some(v) = a.$field {
                shape.$field = v;
                custom = true;
            }
        };
    }
    over!(services);
    over!(endpoints_per_service);
    over!(namespaces);
    over!(proxies);
    over!(vs_every);
    over!(sidecar_scoping);
    over!(gateways);
    over!(gateway_vs_every);
    over!(authz_policies);
    over!(http_routes);
    if custom {
        name.push_str("-custom");
    }
    let scenarios = if a.scenarios.is_empty() {
        SCENARIOS.iter().collect()
    } else {
        a.scenarios
            .iter()
            .map(|s| scenarios::parse(s.trim()))
            .collect::<Result<_, _>>()?
    };
    let engines = a
        .engine
        .iter()
        .map(|e| EngineKind::parse(e.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if engines.is_empty() {
        return Err("--engine names no engine".into());
    }
    if a.replicas == 0 {
        return Err("--replicas must be at least 1".into());
    }
    if a.replicas > 1 && a.vhds {
        // A proxy resuming on another replica would have to resubscribe its virtual hosts
        // too; the simulated proxies do not.
        return Err("--replicas above 1 cannot be combined with --vhds".into());
    }
    let command = std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Options {
        shape_name: name,
        shape,
        mesh: MeshConfig {
            root_namespace: a.root_namespace,
            domain_suffix: a.domain_suffix,
            ..MeshConfig::default()
        },
        engines,
        protocol: match a.protocol {
            ProtocolArg::Delta => Protocol::Delta,
            ProtocolArg::Sotw => Protocol::Sotw,
        },
        scenarios,
        out_dir: a.out,
        work_dir: a.work_dir,
        keep_work: a.keep_work,
        server_binary: a.server_binary,
        workers: a.workers.max(1),
        debounce_ms: a.debounce_ms,
        verify: VerifyMode::parse(&a.verify)?,
        timeout: seconds(a.timeout, "--timeout")?,
        settle: Duration::from_millis(a.settle_ms),
        streams_per_connection: a.streams_per_connection,
        command,
        runs: a.runs.max(1),
        lock: a.lock,
        max_server_rss_mib: (a.max_server_rss_mib > 0).then_some(a.max_server_rss_mib),
        server_args: a.server_args,
        vhds: a.vhds,
        loadgen_threads: a.loadgen_threads,
        full_push_max_proxies: a.full_push_max_proxies,
        replicas: a.replicas,
        churn: ChurnConfig {
            rate: a.churn_rate,
            duration: seconds(a.churn_seconds, "--churn-seconds")?,
        },
    })
}

pub fn bench(a: BenchArgs) -> ExitCode {
    let opts = match bench_options(a) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("meshflow bench: {e}");
            return ExitCode::from(2);
        }
    };
    match harness::run(opts) {
        Ok(report) => {
            print!("{}", render::markdown(&report));
            for f in &report.files {
                println!("wrote {}", f.display());
            }
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                eprintln!("meshflow bench: FAILED (a scenario did not converge, did not verify, or an engine did not run)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("meshflow bench: {e}");
            ExitCode::from(2)
        }
    }
}
