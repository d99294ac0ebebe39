//! Waiting for eventual consistency: the time budgets of the tests and the helpers that poll
//! until something holds (`wait_until`) or a sample is acceptable (`converge`). Everything
//! meshflow pushes lands asynchronously, so tests poll instead of sleeping a fixed time.

use std::thread;
use std::time::{Duration, Instant};

/// How long any single convergence (config change → observable Envoy behaviour) may take.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a child process may take to start listening.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the helpers here (and process start-up) look again.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(20);

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

/// Takes samples of 10 (`sample(10)`) until one satisfies `accept`, then returns a fresh
/// sample of `n`, which the caller asserts on. Panics as [`converge`] does.
pub fn converge_then<S: std::fmt::Debug>(
    what: &str,
    sample: impl Fn(usize) -> S,
    accept: impl Fn(&S) -> bool,
    n: usize,
    context: impl FnOnce() -> String,
) -> S {
    converge(what, CONVERGE_TIMEOUT, || sample(10), accept, context);
    sample(n)
}
