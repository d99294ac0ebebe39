#!/usr/bin/env bash
# The test suite: installs the test dependencies (Envoy 1.40, cargo-nextest), points the
# real-Envoy integration tests at that Envoy, and runs every test of the workspace.
# Extra arguments go to `cargo nextest run` (e.g. a test-name filter).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

MESHFLOW_ENVOY="$(scripts/install-test-deps.sh)"
export MESHFLOW_ENVOY
echo "MESHFLOW_ENVOY=$MESHFLOW_ENVOY" >&2

cargo nextest run --workspace --test-threads 2 --no-fail-fast "$@"
