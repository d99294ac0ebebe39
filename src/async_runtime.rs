//! The tokio runtime every multi-threaded meshflow command runs on (the server, the load
//! generator, the bench harness), and the process settings they start with (open-files
//! limit, no transparent huge pages): one place to tune them.
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
    let old = lim.rlim_cur;
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
    Ok((old, lim.rlim_max))
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

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`; inherited
/// by children). mimalloc asks for huge pages on its arenas, and with THP the kernel zeroes
/// a whole 2 MiB page on the first touch of any byte of it, again after every purge of freed
/// memory: while 25,000 proxies connected (shape XL), a third of the server's CPU was
/// `clear_page_erms` under `do_huge_pmd_anonymous_page` (perf). Without them (BENCHMARKS.md,
/// shape XL): connect p99 46.9 → 39.3 s, server CPU 40.8 → 33.9 s, peak RSS 5,217 → 5,074 MiB.
/// `serve`, `bench` and `loadgen` call it unless `MESHFLOW_ALLOW_THP` is set. `Err` names
/// what the kernel refused (the process then runs as before).
pub fn disable_transparent_huge_pages() -> Result<(), String> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only this process's
    // memory policy.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(format!(
            "disabling transparent huge pages: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
