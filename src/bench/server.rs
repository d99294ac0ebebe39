//! The server under test: `--replicas` `meshflow serve` child processes on the generated
//! config directory ([`Running`]), their `/proc` figures, a watchdog that stops one when its
//! resident memory passes `--max-server-rss-mib`, and the kill `failover` measures.

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

/// One started replica and its memory watchdog.
struct Replica {
    server: Server,
    watchdog: RssWatchdog,
    /// Killed on purpose ([`Running::kill`]): its figures are gone.
    killed: std::sync::atomic::AtomicBool,
}

impl Replica {
    fn alive(&self) -> bool {
        !self.killed.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stats(&self) -> Result<ProcStats, String> {
        procstat::read(self.server.pid()).map_err(|e| match self.watchdog.killed() {
            Some(why) => why,
            None => e,
        })
    }
}

/// The started replicas (one unless `--replicas`): what the scenarios read the server's
/// figures from, summed over the replicas alive.
pub struct Running {
    replicas: Vec<Replica>,
}

/// The log of replica `i`: `log` itself for the first, `…-replicaN.log` for the others.
pub fn replica_log(log: &Path, i: usize) -> PathBuf {
    if i == 0 {
        return log.to_path_buf();
    }
    let stem = log.file_stem().and_then(|s| s.to_str()).unwrap_or("server");
    log.with_file_name(format!("{stem}-replica{}.log", i + 1))
}

impl Running {
    /// Starts `opts.replicas` servers on the same directory, one after another, each with
    /// its own watchdog.
    pub fn start(
        opts: &Options,
        engine: EngineKind,
        config_dir: &Path,
        log: &Path,
    ) -> Result<Running, String> {
        let mut replicas = Vec::new();
        for i in 0..opts.replicas.max(1) {
            let server = start_server(opts, engine, config_dir, &replica_log(log, i))?;
            let watchdog = RssWatchdog::start(server.pid(), opts.max_server_rss_mib);
            replicas.push(Replica {
                server,
                watchdog,
                killed: Default::default(),
            });
        }
        Ok(Running { replicas })
    }

    pub fn count(&self) -> usize {
        self.replicas.len()
    }

    /// Every replica's xDS address, in start order.
    pub fn xds_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.replicas.iter().map(|r| r.server.xds_addr).collect()
    }

    /// The live replicas' debug APIs; empty unless every one said where it listens.
    pub fn debug_addrs(&self) -> Vec<std::net::SocketAddr> {
        let live = self.replicas.iter().filter(|r| r.alive());
        live.map(|r| r.server.debug_addr)
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }

    /// The end of each replica's log.
    pub fn log_tail(&self) -> String {
        let tails: Vec<String> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(i, r)| match self.replicas.len() {
                1 => r.server.log_tail(),
                _ => format!("replica {}:\n{}", i + 1, r.server.log_tail()),
            })
            .collect();
        tails.join("\n")
    }

    /// Each replica's CPU and memory now (`None` for one killed on purpose).
    pub fn stats_each(&self) -> Result<Vec<Option<ProcStats>>, String> {
        self.replicas
            .iter()
            .map(|r| r.alive().then(|| r.stats()).transpose())
            .collect()
    }

    /// The live replicas' CPU and memory now, summed; the watchdog's reason if it stopped
    /// one.
    pub fn stats(&self) -> Result<ProcStats, String> {
        let mut sum = ProcStats::default();
        for s in self.stats_each()?.into_iter().flatten() {
            sum.cpu_s += s.cpu_s;
            sum.cpu_task_s += s.cpu_task_s;
            sum.rss_kib += s.rss_kib;
            sum.hwm_kib += s.hwm_kib;
        }
        Ok(sum)
    }

    /// Resets every live replica's peak RSS (see [`procstat::reset_peak`]).
    pub fn reset_peak(&self) -> bool {
        self.replicas
            .iter()
            .filter(|r| r.alive())
            .all(|r| procstat::reset_peak(r.server.pid()))
    }

    /// Kills replica `i` (SIGKILL: no goodbye to its streams, as a node failure).
    pub fn kill(&self, i: usize) -> Result<(), String> {
        let r = self
            .replicas
            .get(i)
            .ok_or_else(|| format!("no replica {}", i + 1))?;
        r.killed.store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: signalling our own child process, not yet reaped (dropping it reaps it).
        if unsafe { libc::kill(r.server.pid() as i32, libc::SIGKILL) } != 0 {
            return Err(format!(
                "killing replica {}: {}",
                i + 1,
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Stops every replica; why a watchdog stopped one first, if it did.
    pub fn stop(self) -> Option<String> {
        let mut why = None;
        for r in self.replicas {
            let Replica {
                server, watchdog, ..
            } = r;
            drop(server);
            why = why.or(watchdog.killed());
        }
        why
    }
}
