//! The server under test: a `meshflow serve` child process on the generated config
//! directory ([`Running`]), its `/proc` figures, and a watchdog that stops it when its
//! resident memory passes `--max-server-rss-mib`.

use super::options::Options;
use super::procstat::{self, ProcStats};
use crate::engine::EngineKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `meshflow serve` arguments selecting `engine` (none for the default, so that a
/// `--server-binary` from before `--engine` took `meshflow` still runs).
fn serve_args(engine: EngineKind) -> Vec<String> {
    match engine {
        EngineKind::Meshflow => Vec::new(),
        other => vec!["--engine".into(), other.name().into()],
    }
}

/// The server process under test; killed when dropped.
pub struct Server {
    child: Child,
    log: PathBuf,
    pub xds_addr: std::net::SocketAddr,
    /// The debug API (`proxy-status` and the other commands' port), if the server said
    /// where it listens.
    pub debug_addr: Option<std::net::SocketAddr>,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_tail(&self) -> String {
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

/// The address on the line after `label` in a server's log, once the line is whole (the
/// port may still be half written).
fn listed_addr(log: &str, label: &str) -> Option<std::net::SocketAddr> {
    let at = log.find(label)?;
    let (line, _) = log[at + label.len()..].split_once('\n')?;
    line.trim().parse().ok()
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
        .args(opts.vhds.then_some("--vhds"))
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
        debug_addr: None,
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = listed_addr(&text, "xDS server listening on ") {
            server.xds_addr = addr;
            // Printed before the xDS line, by servers that have the line.
            server.debug_addr = listed_addr(&text, "debug API listening on ");
            return Ok(server);
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

/// A started server and its memory watchdog: what the scenarios read the server's figures
/// from.
pub struct Running {
    pub server: Server,
    watchdog: RssWatchdog,
}

impl Running {
    /// Starts the server and its watchdog.
    pub fn start(
        opts: &Options,
        engine: EngineKind,
        config_dir: &Path,
        log: &Path,
    ) -> Result<Running, String> {
        let server = start_server(opts, engine, config_dir, log)?;
        let watchdog = RssWatchdog::start(server.pid(), opts.max_server_rss_mib);
        Ok(Running { server, watchdog })
    }

    /// The server's CPU and memory now; the watchdog's reason if it stopped the server.
    pub fn stats(&self) -> Result<ProcStats, String> {
        procstat::read(self.server.pid()).map_err(|e| match self.watchdog.killed() {
            Some(why) => why,
            None => e,
        })
    }

    /// Resets the server's peak RSS (see [`procstat::reset_peak`]).
    pub fn reset_peak(&self) -> bool {
        procstat::reset_peak(self.server.pid())
    }

    /// Stops the server; why the watchdog stopped it first, if it did.
    pub fn stop(self) -> Option<String> {
        let Running { server, watchdog } = self;
        drop(server);
        watchdog.killed()
    }
}
