//! Scratch space for one test: its directory (`TestDir`), a free loopback port, and the config
//! files written into meshflow's watched directory (`write_config`, `remove_config`).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

/// A loopback TCP port that was free a moment ago (bind `127.0.0.1:0`, read it, release it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
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
