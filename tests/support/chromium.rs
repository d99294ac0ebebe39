//! A real headless browser for the debug UI's tests: Chromium (Debian's `chromium`, which
//! `scripts/install-test-deps.sh` installs), driven from the command line — `--dump-dom`
//! gives the page as rendered after its script ran, `--screenshot` a PNG of it. When there
//! is none: a loud skip on a developer's machine, a failure under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `$MESHFLOW_CHROMIUM`, else `chromium`, `chromium-browser` or `google-chrome` on `PATH`.
pub fn chromium_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MESHFLOW_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|c| c.is_file())
}

/// Called when no Chromium was found: a failure under `CI=true`, otherwise a loud skip.
pub fn chromium_missing() {
    let message = "chromium not found: run scripts/install-test-deps.sh (apt-get install \
                   chromium), set MESHFLOW_CHROMIUM, or put `chromium` on PATH";
    let on_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if on_ci {
        panic!("{message} (CI is set, so a missing browser fails the test instead of skipping it)");
    }
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
}

/// Evaluates to a [`Browser`], or returns from the calling test (after a loud `SKIPPED`
/// notice) when there is no Chromium; panics instead when `CI=true`.
#[allow(unused_macros)] // only the UI test needs a browser
macro_rules! require_chromium {
    () => {
        match $crate::support::chromium::chromium_binary() {
            Some(path) => $crate::support::chromium::Browser::new(path),
            None => {
                $crate::support::chromium::chromium_missing();
                return;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use require_chromium;

/// One headless Chromium binary; each call is a fresh browser process with its own profile.
pub struct Browser {
    binary: PathBuf,
}

impl Browser {
    pub fn new(binary: PathBuf) -> Browser {
        Browser { binary }
    }

    fn command(&self, profile: &Path) -> Command {
        let mut c = Command::new(&self.binary);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,860",
            // Time enough for the page's fetches before the DOM is taken.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
        c
    }

    /// The page at `url` as rendered once its script has drawn the view (`data-ready` on
    /// the body); a few tries, as a fresh browser may be slow on a loaded machine.
    pub fn dom(&self, url: &str, scratch: &Path) -> String {
        let mut last = String::new();
        for attempt in 0..3 {
            let profile = scratch.join(format!("chromium-profile-{attempt}"));
            let out = self
                .command(&profile)
                .arg("--dump-dom")
                .arg(url)
                .output()
                .unwrap_or_else(|e| panic!("run {}: {e}", self.binary.display()));
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            if last.contains("data-ready=\"true\"") {
                return last;
            }
        }
        panic!("{url} never finished drawing; last DOM:\n{last}");
    }

    /// A PNG of the page at `url`, written to `path`.
    pub fn screenshot(&self, url: &str, path: &Path, scratch: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        let out = self
            .command(&scratch.join("chromium-profile-shot"))
            .arg(format!("--screenshot={}", path.display()))
            .arg(url)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.binary.display()));
        assert!(
            path.is_file(),
            "no screenshot of {url} at {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
