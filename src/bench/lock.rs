//! `--lock`: an exclusive `flock` held around each engine's run, so a long bench lets other
//! users of the machine in between runs without disturbing a measurement.

use std::path::Path;

/// An exclusive `flock` on a file, released when dropped.
pub struct FileLock(std::fs::File);

impl FileLock {
    pub fn acquire(path: &Path) -> Result<FileLock, String> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("opening the lock {}: {e}", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(format!(
                "locking {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(FileLock(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocking a descriptor we own.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
