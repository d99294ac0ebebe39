//! The git commit a build comes from, for `meshflow --version`. Shared by `build.rs` (which
//! sets `MESHFLOW_COMMIT` from [`commit_of`]) and `tests/cli.rs` (which checks each way of
//! finding it), so the logic the build runs is the logic the tests check.
//!
//! In order: the builder's `MESHFLOW_COMMIT` (a Docker build, whose context has no `.git`);
//! git, in a checkout; the `.cargo_vcs_info.json` that `cargo package` writes into a crates
//! tarball; else "unknown". Never fails: a machine without `git` or a repository git refuses
//! to read (another owner) falls through to the next way, and the build goes on.

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

/// The commit `cargo package` recorded in a crates tarball's `.cargo_vcs_info.json`
/// (`{"git": {"sha1": "<40 hex>"}, ...}`), cut to 12 digits. Read by hand: build.rs has no
/// JSON parser among its dependencies, and this one field is all it needs.
pub fn vcs_info_commit(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let after = text.split_once("\"sha1\"")?.1;
    let value = after.split('"').nth(1)?;
    (value.len() >= 12 && value.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| value[..12].to_string())
}

/// The commit to name for a build of the crate at `dir` (see the module doc), and the files
/// whose change means it moved.
pub fn commit_of(dir: &Path, from_env: Option<&str>) -> (String, Vec<PathBuf>) {
    if let Some(c) = from_env.map(str::trim).filter(|c| !c.is_empty()) {
        return (c.to_string(), Vec::new());
    }
    if let Some(found) = git_commit(dir) {
        return found;
    }
    let vcs_info = dir.join(".cargo_vcs_info.json");
    match vcs_info_commit(dir) {
        Some(c) => (c, vec![vcs_info]),
        None => ("unknown".to_string(), Vec::new()),
    }
}
