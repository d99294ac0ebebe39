//! The tokio runtime every multi-threaded meshflow command runs on (the server, the load
//! generator, the bench harness): one place to tune it.
//!
//! Tried and left out (BENCHMARKS.md, session 4): tokio's `disable_lifo_slot` (behind
//! `--cfg tokio_unstable`), so that the streams of one HTTP/2 connection would queue their
//! frames before the connection writes them together. A 10,000-proxy fan-out and the L churn
//! were no faster with it.

/// A multi-threaded runtime builder (`threads`: worker threads, else one per core).
pub fn multi_thread(threads: Option<usize>) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = threads {
        b.worker_threads(n.max(1));
    }
    b
}
