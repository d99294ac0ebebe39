//! The Envoy child process (`Envoy`): writing its bootstrap, starting it, learning its admin
//! address, and killing it on drop. What is asked of a running Envoy is in `envoy_admin`.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::envoy_bootstrap::{envoy_bootstrap, ProxyNode, XdsMode};
use super::process::{await_startup, read_log, stop_and_show_logs};

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

    /// `start` over delta ADS, then `wait_live` within the harness's startup timeout: what
    /// most tests begin with.
    pub fn start_live(binary: &Path, dir: &Path, node: &ProxyNode, xds_addr: SocketAddr) -> Envoy {
        let envoy = Self::start(binary, dir, node, xds_addr, XdsMode::Delta);
        envoy.wait_live(super::STARTUP_TIMEOUT);
        envoy
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

    /// Envoy writes its admin address (port 0 resolved) to `admin_path` once it listens.
    fn wait_for_admin_address(&mut self, admin_path: &Path) -> SocketAddr {
        await_startup(
            &mut self.child,
            "envoy",
            "its admin endpoint was up",
            &format!("write {}", admin_path.display()),
            || {
                let written = fs::read_to_string(admin_path).unwrap_or_default();
                written.trim().parse::<SocketAddr>().ok()
            },
        )
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole Envoy log so far.
    pub fn log(&self) -> String {
        read_log(&self.log_path)
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        stop_and_show_logs(
            &mut self.child,
            &[
                ("envoy stderr", &self.stderr_path),
                ("envoy log", &self.log_path),
            ],
        );
    }
}
