//! `meshflow demo`: Istio's bookinfo on this machine in one command, and traffic moving.
//!
//! It starts, all on loopback: meshflow itself (in this process, through the same
//! [`crate::serve::serve`] as `meshflow serve`, on free ports) over a scratch copy of the
//! bundled `examples/bookinfo/config` ([`config`]); the bookinfo workloads on their pod
//! addresses ([`workloads`]); an Envoy ingress gateway and the `sleep` pod's Envoy sidecar with
//! the example's bootstraps ([`envoy`]), or, with `--no-envoy`, meshflow's own simulated
//! proxies ([`simulated`]). Then it walks through one edit ([`walk`]) drawing where requests
//! land ([`display`]), and, without `--once`, keeps the mesh running until Ctrl-C.
//!
//! Everything it starts is owned by a guard dropped on every way out (the walk's end, an
//! error, Ctrl-C, SIGTERM): Envoys are killed and reaped, the scratch directory removed.
//! Envoys also die with the demo if it is killed outright (see [`envoy::EnvoyProcess`]).
//!
//! Imports: `serve` (to run meshflow), `debug::client` (watch, diff, explain), `bench`'s
//! load generator (the simulated proxies); nothing imports this module.

pub mod config;
pub mod display;
pub mod envoy;
pub mod http;
pub mod proxies;
pub mod simulated;
pub mod walk;
pub mod workloads;

use crate::serve::{serve, Listening, ServeOptions};
use config::{Layout, ScratchDir};
use display::Screen;
use proxies::{Listeners, Proxies, Via, SIDECAR_NAME};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use workloads::Workloads;

/// How long the proxies may take to route their first request.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// `meshflow demo`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// The Envoy binary [default: $MESHFLOW_ENVOY, else `envoy` on PATH, else the one
    /// scripts/install-test-deps.sh installs into .venv-test/].
    #[arg(long, value_name = "PATH", conflicts_with = "no_envoy")]
    pub envoy: Option<PathBuf>,
    /// No Envoy: meshflow's own simulated proxies (real xDS clients; each request routed
    /// through the config they hold by meshflow's routing simulation, then sent to the
    /// workload it chose).
    #[arg(long)]
    pub no_envoy: bool,
    /// Walk through the edit once and exit (0 if the traffic moved as it should), instead of
    /// keeping the mesh running until Ctrl-C.
    #[arg(long)]
    pub once: bool,
}

/// Runs the demo on its own runtime until it ends, fails, or is interrupted.
pub fn main(args: DemoArgs) -> ExitCode {
    let rt = match crate::async_runtime::multi_thread(None).build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("meshflow demo: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut screen = Screen::new();
    // `block_on` polls `run` on this thread: the Envoys it starts are tied to it.
    let ended = rt.block_on(async {
        tokio::select! {
            result = run(&args, &mut screen) => result.map(|()| None),
            signal = interrupted() => Ok(Some(signal)),
        }
    });
    // Dropping `run` above stopped what it started; the server's own tasks go with the
    // runtime (and its threads with the process).
    rt.shutdown_timeout(Duration::from_millis(500));
    match ended {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(signal)) => {
            eprintln!("meshflow demo: {signal}; everything it started is stopped and removed");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("meshflow demo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C, or SIGTERM (what a test runner or a service manager sends).
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "interrupted",
            _ = term.recv() => "terminated",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}

/// What the demo says when it finds no Envoy and walks with the simulated proxies.
const NO_ENVOY_FOUND: &str = "no Envoy found: meshflow's simulated proxies play the gateway \
     and the sidecar (for real Envoys: scripts/install-test-deps.sh, or --envoy PATH)";

/// The Envoy to run, if any, and a line to say: `--no-envoy` runs none; an Envoy asked for
/// by path must be there; otherwise, when none is found, the same walk runs with the
/// simulated proxies and says so in one line, so the first command shows traffic on a
/// fresh machine.
fn choose_envoy(
    no_envoy: bool,
    flag: Option<&std::path::Path>,
    find: impl Fn(Option<&std::path::Path>) -> Result<std::path::PathBuf, String>,
) -> Result<(Option<std::path::PathBuf>, Option<&'static str>), String> {
    match (no_envoy, flag) {
        (true, _) => Ok((None, None)),
        (false, Some(path)) => Ok((Some(find(Some(path))?), None)),
        (false, None) => Ok(match find(None) {
            Ok(binary) => (Some(binary), None),
            Err(_) => (None, Some(NO_ENVOY_FOUND)),
        }),
    }
}

/// Starts everything, walks, and (without `--once`) keeps running. The guards are locals,
/// dropped in reverse order on every way out: proxies, meshflow, workloads, scratch directory.
async fn run(args: &DemoArgs, screen: &mut Screen) -> Result<(), String> {
    let started = Instant::now();
    // Before anything is started: a missing Envoy is the likeliest problem.
    let (envoy_binary, said) = choose_envoy(args.no_envoy, args.envoy.as_deref(), envoy::find)?;
    if let Some(line) = said {
        screen.say(line)?;
    }
    let scratch = ScratchDir::create()?;
    let workloads = Workloads::start(config::pods()?).await?;
    let layout = Layout {
        gateway_port: free_port()?,
        workload_port: workloads.port,
        sidecar_ip: free_loopback_ip(config::SERVICE_PORT)?,
    };
    let config_dir = scratch.path().join("config");
    config::write(&config_dir, layout)?;
    let meshflow = Meshflow::start(&config_dir).await?;
    let listeners = Listeners::new(layout);
    let mut proxies = match &envoy_binary {
        Some(binary) => Proxies::envoy(binary, scratch.path(), meshflow.xds, listeners).await?,
        None => Proxies::simulated(meshflow.xds, listeners).await?,
    };

    screen.say(&header(&config_dir, &meshflow, &workloads, &proxies))?;
    let probes: Vec<(Via, &str, &str)> = walk::TARGETS
        .iter()
        .map(|t| (t.via, t.service, t.path))
        .collect();
    proxies.wait_routing(&probes, READY_TIMEOUT).await?;
    screen.say(&format!(
        "ready {:.1} s after start: every service answers through the proxies",
        started.elapsed().as_secs_f64()
    ))?;

    let mut walk = walk::Walk {
        proxies: &mut proxies,
        screen,
        debug: meshflow.debug,
        config_dir: &config_dir,
    };
    walk.run().await?;
    if args.once {
        walk.screen.say(&format!(
            "\ndone in {:.1} s; stopping everything the demo started",
            started.elapsed().as_secs_f64()
        ))?;
        return Ok(());
    }
    walk.screen.say(&keep_running_hint(
        &config_dir,
        meshflow.debug,
        envoy_binary.is_some(),
        listeners,
    ))?;
    walk.keep_running().await
}

/// What is running, and where.
fn header(
    config_dir: &Path,
    meshflow: &Meshflow,
    workloads: &Workloads,
    proxies: &Proxies,
) -> String {
    let pods: Vec<String> = workloads
        .pods
        .iter()
        .map(|p| format!("{} {}", p.name, p.addr(workloads.port)))
        .collect();
    let mut lines = vec![
        "meshflow demo: Istio's bookinfo, served by meshflow to two proxies on loopback".into(),
        format!(
            "  config     {} (a copy of examples/bookinfo/config)",
            config_dir.display()
        ),
        format!(
            "  meshflow   xDS {}, debug {} (in this process)",
            meshflow.xds, meshflow.debug
        ),
        format!("  workloads  {}", pods.join(", ")),
    ];
    lines.extend(proxies.describe().into_iter().map(|l| format!("  {l}")));
    lines.join("\n")
}

fn keep_running_hint(
    config_dir: &Path,
    debug: std::net::SocketAddr,
    envoy: bool,
    listeners: Listeners,
) -> String {
    let mut out = format!(
        "\nThe mesh keeps running; Ctrl-C stops everything the demo started. Edit the files in\n\
         {} and watch the bars move, or ask meshflow:\n\
         \x20 meshflow proxy-status --debug-addr {debug}\n\
         \x20 meshflow watch {SIDECAR_NAME} --debug-addr {debug}\n",
        config_dir.display()
    );
    if envoy {
        out.push_str(&format!(
            "  curl -H 'Host: reviews' http://{}/reviews/0\n  curl http://{}/productpage\n",
            listeners.sidecar, listeners.gateway
        ));
    }
    out
}

/// A loopback port for a listener Envoy binds itself (so it is let go first), below the
/// kernel's ephemeral range: a port handed out for port 0 a moment ago (meshflow's own, an
/// Envoy's admin port, a connection's local end) could be handed out again in between, while
/// ports below that range never are. Random, and checked free.
fn free_port() -> Result<u16, String> {
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low = range
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .filter(|low| *low > 10_001)
        .unwrap_or(32_768);
    for _ in 0..100 {
        let random = getrandom::u32().map_err(|e| format!("finding a free port: {e}"))?;
        let port = 10_000 + random % (low - 10_000);
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free loopback port below the ephemeral range after 100 tries".into())
}

/// A loopback address (`127.0.x.y`, off the bookinfo pods' `127.0.1.x`) where nothing
/// listens on `port`: the sidecar's egress listener gets one of its own (see `config`).
/// Random, so that two demos started at once do not pick the same one.
fn free_loopback_ip(port: u16) -> Result<std::net::Ipv4Addr, String> {
    for _ in 0..100 {
        let random = getrandom::u32().map_err(|e| format!("choosing an address: {e}"))?;
        let [third, fourth, ..] = random.to_le_bytes();
        if third < 2 || fourth == 0 || fourth == 255 {
            continue;
        }
        let ip = std::net::Ipv4Addr::new(127, 0, third, fourth);
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return Ok(ip);
        }
    }
    Err(format!(
        "no loopback address free on port {port} after 100 tries"
    ))
}

/// meshflow, serving in this process; stopped when dropped.
struct Meshflow {
    xds: std::net::SocketAddr,
    debug: std::net::SocketAddr,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Meshflow {
    /// `meshflow serve --config-dir DIR` on free loopback ports, once it accepts proxies.
    async fn start(config_dir: &Path) -> Result<Meshflow, String> {
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<Listening>();
        let loopback_any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let opts = ServeOptions {
            config_dir: Some(config_dir.to_path_buf()),
            kube: None,
            xds_addr: loopback_any,
            debug_addr: loopback_any,
            debug_public: false,
            debug_read_timeout: Duration::from_secs(10),
            jwks_refresh: Duration::from_secs(1200),
            jwks_blocked: Vec::new(),
            debug_hosts: Vec::new(),
            state_file: None,
            vhds: false,
            workers: 1,
            engine: crate::engine::EngineKind::Meshflow,
            debounce: crate::serve::Debounce::fixed(Duration::from_millis(20)),
            mtls_transition_timeout: Duration::from_secs(10),
            mesh: Default::default(),
            mesh_source: None,
            limits: Default::default(),
            tls: None,
            // The demo's own Envoys on loopback, proving no identity, are given their
            // workload certificates (the bookinfo sidecars speak ISTIO_MUTUAL).
            auth: crate::serve::XdsAuth {
                insecure_serve_keys: true,
                ..Default::default()
            },
            token_review_audiences: None,
            plaintext: false,
            history: Default::default(),
            ca: None,
            workload_cert_ttl: crate::serve::WORKLOAD_CERT_TTL,
            ready: Some(ready_tx),
        };
        let mut task = tokio::spawn(serve(opts));
        let listening = tokio::select! {
            listening = ready => listening,
            ended = &mut task => {
                return Err(match ended {
                    Ok(Err(e)) => format!("meshflow did not start: {e}"),
                    _ => "meshflow did not start".into(),
                });
            }
        };
        let Ok(Listening {
            xds,
            debug: Some(debug),
        }) = listening
        else {
            task.abort();
            return Err("meshflow started without its debug port".into());
        };
        Ok(Meshflow { xds, debug, task })
    }
}

impl Drop for Meshflow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod choose_envoy_tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn no_envoy_found_falls_back_to_the_simulated_proxies_and_says_so() {
        let none = |_: Option<&Path>| Err::<PathBuf, _>("no Envoy found".to_string());
        assert_eq!(
            choose_envoy(false, None, none).unwrap(),
            (None, Some(NO_ENVOY_FOUND))
        );
        assert!(
            choose_envoy(false, Some(Path::new("/missing")), none).is_err(),
            "asked for: an error"
        );
        assert_eq!(choose_envoy(true, None, none).unwrap(), (None, None));
        let found = |_: Option<&Path>| Ok::<_, String>(PathBuf::from("/usr/bin/envoy"));
        assert_eq!(
            choose_envoy(false, None, found).unwrap(),
            (Some(PathBuf::from("/usr/bin/envoy")), None)
        );
    }
}
