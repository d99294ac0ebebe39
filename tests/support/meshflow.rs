//! The meshflow binary under test: a `meshflow serve` child process (`Meshflow`) and one-shot
//! CLI runs (`meshflow_cli`).

use std::ffi::OsStr;
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::process::{await_startup, read_log, stop_and_show_logs};
use super::scratch::free_port;

/// A `meshflow serve` child process watching a config directory or a (fake) Kubernetes API
/// server, serving xDS on a fresh loopback port. Killed on drop; its log tail is printed if the test is panicking.
pub struct Meshflow {
    child: Child,
    xds_addr: SocketAddr,
    log_path: PathBuf,
}

/// Put among a start's extra arguments, it keeps the harness from adding
/// `--insecure-serve-keys` (and is not passed on): the meshflow then serves key material
/// only to streams that prove their identity, as a deployed one does.
pub const PROVEN_KEYS_ONLY: &str = "<proven keys only>";

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
        let source = [OsStr::new("--config-dir"), config_dir.as_os_str()];
        Self::spawn(&source, log_dir, xds_addr, log_name, extra_args)
    }

    /// Starts `meshflow serve --kube --kubeconfig <kubeconfig>` (no config directory unless
    /// `extra_args` gives one), logging to `<log_dir>/meshflow.log`, and waits until the xDS
    /// port accepts connections: after every watch has completed its initial list.
    pub fn start_kube(kubeconfig: &Path, log_dir: &Path, extra_args: &[&str]) -> Meshflow {
        let xds_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let source = [
            OsStr::new("--kube"),
            OsStr::new("--kubeconfig"),
            kubeconfig.as_os_str(),
        ];
        Self::spawn(&source, log_dir, xds_addr, "meshflow.log", extra_args)
    }

    fn spawn(
        source_args: &[&OsStr],
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

        // The tests' Envoys connect over plaintext loopback and prove no identity; most of
        // them need their workload certificates and Secrets all the same. Tests of identity
        // opt out (PROVEN_KEYS_ONLY), as does any start that configures authentication.
        let proves = extra_args.iter().any(|a| {
            [
                PROVEN_KEYS_ONLY,
                "--tls-client-ca",
                "--token-review",
                "--insecure-serve-keys",
            ]
            .contains(a)
        });
        let extra_args: Vec<&str> = extra_args
            .iter()
            .copied()
            .filter(|a| *a != PROVEN_KEYS_ONLY)
            .chain((!proves).then_some("--insecure-serve-keys"))
            .collect();
        let mut command = Command::new(env!("CARGO_BIN_EXE_meshflow"));
        command
            .arg("serve")
            .args(source_args)
            .arg("--xds-addr")
            .arg(xds_addr.to_string())
            .args(["--debounce-ms", "10"])
            .args(&extra_args)
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
        let xds_addr = self.xds_addr;
        await_startup(
            &mut self.child,
            "meshflow",
            &format!("listening on {xds_addr}"),
            &format!("accept connections on {xds_addr}"),
            || TcpStream::connect_timeout(&xds_addr, Duration::from_millis(200)).ok(),
        );
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
        read_log(&self.log_path)
    }
}

impl Drop for Meshflow {
    fn drop(&mut self) {
        stop_and_show_logs(&mut self.child, &[("meshflow log", &self.log_path)]);
    }
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

/// `GET path` on meshflow's debug port at `debug`, which must answer 200 with JSON.
pub fn debug_json(debug: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = super::http_get(debug, "127.0.0.1", path, &[])
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}
