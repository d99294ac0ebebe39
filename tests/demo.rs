//! `meshflow demo --once`, run as a user runs it (the built binary, its stdout a pipe): with
//! real Envoys, and with `--no-envoy` (meshflow's simulated proxies). Each run must show
//! reviews split over v1, v2 and v3 before the edit and only v3 after it, the push of the
//! edit as `meshflow watch` prints it, `diff` and `explain` naming the VirtualService; exit
//! 0 within a minute; and leave nothing behind: no process started from its scratch
//! directory, no scratch directory (each run gets a temporary directory of its own through
//! TMPDIR, which must be empty afterwards). The same holds when a running demo is
//! interrupted, and when one of its Envoys dies under it.

mod support;

use regex::Regex;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::{require_envoy, TestDir};

/// The brief's promise: traffic moving within a minute.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn demo_once_with_envoy_moves_reviews_to_v3_and_leaves_nothing_behind() {
    let envoy = require_envoy!();
    let envoy = envoy.to_string_lossy().into_owned();
    let out = run_demo("demo-envoy", &["--envoy", &envoy]);
    assert_walk(&out);
    assert_eq!(
        envoy_pids(&out).len(),
        2,
        "two Envoys in the header:\n{out}"
    );
}

#[test]
fn demo_once_without_envoy_routes_alike_through_simulated_proxies() {
    let out = run_demo("demo-no-envoy", &["--no-envoy"]);
    assert!(out.contains("simulated sleep.default"), "{out}");
    assert_walk(&out);
    // The simulation's choice among weighted clusters is exact.
    let before = bars(section(&out, "1/4", "2/4"), "reviews");
    assert_eq!(
        before,
        split(&[("v1", 50), ("v2", 25), ("v3", 25)]),
        "{out}"
    );
}

#[test]
fn demo_without_an_envoy_says_how_to_get_one() {
    let dir = TestDir::new("demo-no-envoy-found");
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["demo", "--once", "--envoy"])
        .arg(dir.path().join("missing-envoy"))
        .output()
        .expect("run meshflow demo");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not an executable file"), "{err}");
    // Nothing was started: the check comes first.
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
}

/// Runs `meshflow demo --once ARGS` with a TMPDIR of its own; its stdout. Asserts it exits 0
/// within `LIMIT`, and that no scratch directory and no process started from one remain.
fn run_demo(name: &str, args: &[&str]) -> String {
    let dir = TestDir::new(name);
    let tmp = dir.subdir("tmp");
    let started = Instant::now();
    let out = demo_command(&tmp, args)
        .arg("--once")
        .output()
        .expect("run meshflow demo");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("meshflow demo --once {args:?} took {took:?}\n{stdout}\nstderr:\n{stderr}");
    assert!(
        out.status.success(),
        "meshflow demo failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(took < LIMIT, "the demo took {took:?}");
    assert_nothing_left(&tmp, &envoy_pids(&stdout));
    stdout
}

/// `meshflow demo ARGS` with `tmp` as its TMPDIR, no colours.
fn demo_command(tmp: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_meshflow"));
    command
        .arg("demo")
        .args(args)
        .env("TMPDIR", tmp)
        .env("NO_COLOR", "1");
    command
}

/// No scratch directory in `tmp`, no process started from one, none of `pids` alive.
fn assert_nothing_left(tmp: &Path, pids: &[u32]) {
    let left: Vec<_> = std::fs::read_dir(tmp)
        .expect("the demo's TMPDIR")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let running = processes_mentioning(&tmp.to_string_lossy());
    assert!(running.is_empty(), "still running: {running:?}");
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "Envoy pid {pid} still exists after the demo ended"
        );
    }
}

/// Proves that Ctrl-C (SIGINT to the demo alone, not to its process group, so the Envoys
/// are not told by the terminal) stops everything the demo started, once the walk is done
/// and the mesh keeps running.
#[test]
fn demo_interrupted_stops_its_envoys_and_removes_its_copy() {
    let envoy = require_envoy!();
    let (mut demo, pids) = Running::with_envoy("demo-sigint", &envoy, "Ctrl-C stops everything");
    demo.signal(libc::SIGINT);
    let status = demo.wait_exit();
    assert_eq!(status.code(), Some(130), "{}", demo.seen);
    assert_nothing_left(&demo.tmp, &pids);
}

/// Proves the error path cleans up too: when the sidecar Envoy dies under the demo, the demo
/// says so and exits 1, and the gateway Envoy and the scratch copy are gone.
#[test]
fn demo_whose_envoy_dies_fails_and_leaves_nothing_behind() {
    let envoy = require_envoy!();
    let (mut demo, pids) = Running::with_envoy("demo-envoy-dies", &envoy, "ready ");
    // The sidecar, which this test's demo started.
    let sidecar = pids[1] as libc::pid_t;
    // SAFETY: kill(2) has no memory effects.
    assert_eq!(unsafe { libc::kill(sidecar, libc::SIGKILL) }, 0);
    let status = demo.wait_exit();
    assert_eq!(status.code(), Some(1), "{}", demo.seen);
    let stderr = std::fs::read_to_string(&demo.stderr).expect("the demo's stderr");
    assert!(stderr.contains("the sidecar Envoy exited"), "{stderr}");
    assert_nothing_left(&demo.tmp, &pids);
}

/// A `meshflow demo` kept running, its stdout read as it comes. Killed on drop (a failing
/// test leaves nothing either).
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Everything read from stdout so far.
    seen: String,
    tmp: PathBuf,
    stderr: PathBuf,
    _dir: TestDir,
}

impl Running {
    /// A demo with this Envoy, once it printed `until`; and its Envoys' pids (gateway,
    /// sidecar).
    fn with_envoy(name: &str, envoy: &Path, until: &str) -> (Running, Vec<u32>) {
        let mut demo = Running::start(name, &["--envoy", &envoy.to_string_lossy()]);
        demo.wait_for(until);
        let pids = envoy_pids(&demo.seen);
        assert_eq!(pids.len(), 2, "{}", demo.seen);
        (demo, pids)
    }

    fn start(name: &str, args: &[&str]) -> Running {
        let dir = TestDir::new(name);
        let tmp = dir.subdir("tmp");
        let stderr = dir.path().join("stderr");
        let mut child = demo_command(&tmp, args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("the demo's stderr file"))
            .spawn()
            .expect("start meshflow demo");
        let stdout = child.stdout.take().expect("the demo's stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running {
            child,
            lines,
            seen: String::new(),
            tmp,
            stderr,
            _dir: dir,
        }
    }

    /// Reads stdout until a line contains `text` (within `LIMIT`).
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(text) {
                        return;
                    }
                }
                Err(e) => panic!(
                    "no {text:?} from the demo ({e}); it printed:\n{}",
                    self.seen
                ),
            }
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory effects; the pid is this test's child, not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits for the demo to exit (within 15 s).
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the demo") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the demo did not exit:\n{}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every run shows, with Envoy or without.
fn assert_walk(out: &str) {
    let before = bars(section(out, "1/4", "2/4"), "reviews");
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["v1", "v2", "v3"],
        "reviews before the edit:\n{out}"
    );
    for service in ["productpage", "ratings", "details"] {
        assert_eq!(
            bars(section(out, "1/4", "2/4"), service),
            split(&[("v1", 100)]),
            "{service}:\n{out}"
        );
    }
    let after = section(out, "3/4", "4/4");
    assert_eq!(
        bars(after, "reviews"),
        split(&[("v3", 100)]),
        "reviews after the edit:\n{out}"
    );
    assert_eq!(bars(after, "productpage"), split(&[("v1", 100)]), "{out}");

    let push = section(out, "2/4", "3/4");
    let pushed = Regex::new(r"epoch \d+ RDS push nonce \S+ \(\d+ bytes, 1 changes\)\n  ~ 9080 ")
        .expect("regex");
    assert!(pushed.is_match(push), "the watch line of the push:\n{push}");
    assert!(
        Regex::new(r"epoch \d+ RDS ACK nonce")
            .expect("regex")
            .is_match(push),
        "the sidecar's ACK:\n{push}"
    );

    let why = section(out, "4/4", "\ndone in");
    assert!(
        why.contains("input  VirtualService default/reviews update"),
        "diff names the edit:\n{why}"
    );
    assert!(
        why.contains(
            "route.cluster: (none) → \"outbound|9080|v3|reviews.default.svc.cluster.local\""
        ),
        "diff shows the route's new cluster:\n{why}"
    );
    assert!(
        Regex::new(r"VirtualService +default +reviews")
            .expect("regex")
            .is_match(why),
        "explain lists the VirtualService:\n{why}"
    );
    assert!(out.contains("\ndone in "), "{out}");
}

/// The text between the lines starting with `from` and `to`.
fn section<'a>(out: &'a str, from: &str, to: &str) -> &'a str {
    let start = out
        .find(&format!("\n{from}"))
        .unwrap_or_else(|| panic!("no {from:?} in:\n{out}"));
    let rest = &out[start + 1..];
    let end = rest
        .find(&format!("\n{}", to.trim_start_matches('\n')))
        .unwrap_or_else(|| panic!("no {to:?} after {from:?} in:\n{out}"));
    &rest[..end]
}

/// The split of `service`'s bar in `text` (the last one): label → percent.
fn bars(text: &str, service: &str) -> BTreeMap<String, u32> {
    let line = text
        .lines()
        .rfind(|l| l.starts_with(&format!("{service} ")))
        .unwrap_or_else(|| panic!("no {service} bar in:\n{text}"));
    let segment = Regex::new(r"(\S+(?: \d+)?) █+ (\d+)%").expect("regex");
    segment
        .captures_iter(line)
        .map(|c| (c[1].to_string(), c[2].parse().expect("a percentage")))
        .collect()
}

fn split(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(l, p)| (l.to_string(), *p)).collect()
}

/// The Envoy pids the header names (`Envoy (pid 123)`).
fn envoy_pids(out: &str) -> Vec<u32> {
    Regex::new(r"Envoy \(pid (\d+)\)")
        .expect("regex")
        .captures_iter(out)
        .map(|c| c[1].parse().expect("a pid"))
        .collect()
}

/// Processes whose command line mentions `text` (Envoys run with their bootstrap in the
/// demo's scratch directory).
fn processes_mentioning(text: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(text).then_some(cmdline)
        })
        .collect()
}
