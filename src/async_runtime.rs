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

/// Raises this process's soft limit of open files to its hard limit: a server of tens of
/// thousands of xDS connections (and a load generator opening them) needs more than the
/// usual 1,024. Returns the (old, new) soft limits; `Err` names what the kernel refused.
pub fn raise_open_files_limit() -> Result<(u64, u64), String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!(
            "reading RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        ));
    }
    let old = lim.rlim_cur as u64;
    if lim.rlim_cur >= lim.rlim_max {
        return Ok((old, old));
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads only the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(format!(
            "raising RLIMIT_NOFILE from {old} to {}: {}",
            lim.rlim_max,
            std::io::Error::last_os_error()
        ));
    }
    Ok((old, lim.rlim_max as u64))
}

/// [`raise_open_files_limit`], logging what happened (a refusal is a warning: the process
/// still runs, with fewer connections).
pub fn raise_open_files_limit_logged() {
    match raise_open_files_limit() {
        Ok((old, new)) if new > old => {
            tracing::debug!(old, new, "raised the limit of open files");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("{e}"),
    }
}
