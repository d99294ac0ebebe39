//! Scratch space for one test: its directory (`TestDir`), a free loopback port, and the config
//! files written into meshflow's watched directory (`write_config`, `remove_config`).

use std::collections::BTreeSet;
use std::fs;
use std::hash::{Hash, Hasher};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;

/// Claims `port` for this test process against the others running at once (nextest runs each
/// test in a process of its own, so `free_port`'s own set cannot see them): a marker file
/// created exclusively in a shared directory. A marker older than ten minutes is from a run
/// long over and is taken over. Seen in CI: two tests given the same port, the second's Envoy
/// unable to bind its listener.
fn reserve_across_processes(port: u16) -> bool {
    let dir = std::env::temp_dir().join("meshflow-test-ports");
    if fs::create_dir_all(&dir).is_err() {
        return true; // no shared directory: the bind check alone
    }
    let marker = dir.join(port.to_string());
    let stale = fs::metadata(&marker)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > std::time::Duration::from_secs(600));
    if stale {
        let _ = fs::remove_file(&marker);
    }
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok()
}

/// A loopback TCP port that was free a moment ago, chosen below the kernel's ephemeral range.
///
/// Why not `bind 127.0.0.1:0`: the port is released before its user binds it, and in between a
/// meshflow or Envoy that binds port 0 may be given the very same one from the ephemeral range
/// (seen in CI: a test's listener port equal to meshflow's xDS port, so Envoy could not bind it).
/// Ports below the ephemeral range are never handed out for port 0, so only two tests choosing
/// the same random port at once could collide, and the bind check below makes that rarer still.
pub fn free_port() -> u16 {
    let (low, _) = ephemeral_range();
    let floor: u32 = 10_000;
    let span = u32::from(low).saturating_sub(floor).max(1);
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..1_000 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now(),
        )
            .hash(&mut hasher);
        let candidate = floor + (hasher.finish() % u64::from(span)) as u32;
        let Ok(port) = u16::try_from(candidate) else {
            continue;
        };
        // Never the same port twice in one test process: its users bind them later, not now.
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
            && reserve_across_processes(port)
        {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range after 1,000 tries")
}

/// The kernel's ephemeral port range (Linux's default when it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut parts = text
        .split_whitespace()
        .filter_map(|p| p.parse::<u16>().ok());
    match (parts.next(), parts.next()) {
        (Some(low), Some(high)) if low > 10_001 => (low, high),
        _ => (32_768, 60_999),
    }
}

/// A per-test scratch directory under Cargo's target tmpdir. Removed on drop, except when the
/// test is panicking: then it is kept (and its path printed) so logs and bootstraps can be read.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    pub fn new(label: &str) -> TestDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create test dir {}: {e}", path.display()));
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates (if needed) and returns a subdirectory.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.path.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        dir
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("test files kept in {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Replaces `dir/file_name` atomically: writes `dir/.file_name.tmp` (meshflow ignores dotfiles),
/// then renames it over the target, so the watcher never sees a half-written file.
pub fn write_config(dir: &Path, file_name: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file_name}.tmp"));
    let target = dir.join(file_name);
    fs::write(&tmp, yaml).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::rename(&tmp, &target)
        .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), target.display()));
}

/// Deletes `dir/file_name`.
pub fn remove_config(dir: &Path, file_name: &str) {
    let target = dir.join(file_name);
    fs::remove_file(&target).unwrap_or_else(|e| panic!("remove {}: {e}", target.display()));
}
