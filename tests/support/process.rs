//! What the meshflow and Envoy child processes have in common: waiting for one to come up
//! (failing early if it dies first), stopping it, and its log files — read whole, or their tail
//! printed when a test panics, so a failure shows why without rerunning.

use std::fs;
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::Instant;

use super::polling::{POLL_INTERVAL, STARTUP_TIMEOUT};

/// How many log lines a panicking test prints per log file.
const LOG_TAIL_LINES: usize = 80;

/// Polls `probe` until it yields the started process's address (or whatever proves it is up),
/// and returns that. Panics with `<name> exited (<status>) before <before>` if the child dies
/// first, so a crash is reported at once rather than as a timeout, and with
/// `<name> did not <goal> within <STARTUP_TIMEOUT>` after the startup budget.
pub(super) fn await_startup<T>(
    child: &mut Child,
    name: &str,
    before: &str,
    goal: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Some(up) = probe() {
            return up;
        }
        let exited = child
            .try_wait()
            .unwrap_or_else(|e| panic!("poll {name}: {e:?}"));
        if let Some(status) = exited {
            panic!("{name} exited ({status}) before {before}");
        }
        if Instant::now() >= deadline {
            panic!("{name} did not {goal} within {STARTUP_TIMEOUT:?}");
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Kills and reaps `child`; if the test is panicking, prints the tail of each `(what, path)`
/// log, in order. Called from the `Drop` of the process wrappers.
pub(super) fn stop_and_show_logs(child: &mut Child, logs: &[(&str, &Path)]) {
    let _ = child.kill();
    let _ = child.wait();
    if thread::panicking() {
        for (what, path) in logs {
            print_log_tail(what, path);
        }
    }
}

/// The whole log file so far (lossy UTF-8); empty if it cannot be read yet.
pub(super) fn read_log(path: &Path) -> String {
    String::from_utf8_lossy(&fs::read(path).unwrap_or_default()).into_owned()
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
