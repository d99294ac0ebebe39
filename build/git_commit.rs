//! The git commit a build comes from, for `meshflow --version`. Shared by `build.rs` (which
//! sets `MESHFLOW_COMMIT`) and `tests/cli.rs` (which checks the fallback), so the logic the
//! build runs is the logic the tests check.
//!
//! Never fails: a build from a crates tarball, a Docker context without `.git`, a machine
//! without `git` or a repository git refuses to read (another owner) all get `None`, and the
//! build says "unknown" instead of breaking.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `git -C dir ARGS` prints, trimmed; `None` if git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The commit checked out at `dir` (12 hex digits) and the files whose change means HEAD
/// moved (HEAD, the branch's ref, packed refs; a worktree's own and the shared ones), or
/// `None` when `dir` is not the top of a git checkout git can read.
pub fn git_commit(dir: &Path) -> Option<(String, Vec<PathBuf>)> {
    // An unpacked tarball inside some other repository is not that repository's commit.
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    if commit.len() < 7 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let absolute = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let mut watch = Vec::new();
    if let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]).map(absolute) {
        watch.push(git_dir.join("HEAD"));
    }
    if let Some(common) = git(dir, &["rev-parse", "--git-common-dir"]).map(absolute) {
        watch.push(common.join("packed-refs"));
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            watch.push(common.join(branch));
        }
    }
    Some((commit, watch))
}
