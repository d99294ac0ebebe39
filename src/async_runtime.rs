//! The tokio runtime every multi-threaded meshflow command runs on (the server, the load
//! generator, the bench harness).
//!
//! Built with `--cfg tokio_unstable` (`.cargo/config.toml`), woken tasks queue behind the
//! ones already runnable instead of jumping ahead through tokio's LIFO slot. That matters
//! for a push to ten thousand streams: with the slot, each stream's response runs straight
//! through its HTTP/2 stream task into the connection task, one `writev` per message; without
//! it, the streams of a connection queue their frames first and the connection writes them
//! together.

/// A multi-threaded runtime builder (`threads`: worker threads, else one per core).
pub fn multi_thread(threads: Option<usize>) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = threads {
        b.worker_threads(n.max(1));
    }
    #[cfg(tokio_unstable)]
    b.disable_lifo_slot();
    b
}
