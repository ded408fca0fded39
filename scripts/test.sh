#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (GPU tests run only
# where a GPU is; elsewhere ctest reports them skipped).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$@"
ctest --test-dir "${PULSE_BUILD:-$root/build}" --output-on-failure -j"$(nproc)"
