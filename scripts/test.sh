#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (GPU tests run only
# where a GPU is; elsewhere ctest reports them skipped).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$@"
# the real model for the accuracy tests (they skip themselves when it cannot be installed)
"$root/scripts/setup-model.sh" >/dev/null || echo "test.sh: real model not installed; its tests will be skipped" >&2
ctest --test-dir "${PULSE_BUILD:-$root/build}" --output-on-failure -j"$(nproc)"
