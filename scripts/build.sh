#!/usr/bin/env bash
# Configures and builds into ${PULSE_BUILD:-build} (CUDA backend wherever nvcc is present).
# Extra CMake arguments pass through. Installs missing build dependencies first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$("$root/scripts/setup-deps.sh")
build=${PULSE_BUILD:-$root/build}
args=(-DCMAKE_BUILD_TYPE=Release)
[ -n "$prefix" ] && args+=(-DJANSSON_ROOT="$prefix")
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] && \
    args+=(-DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
cmake -S "$root" -B "$build" "${args[@]}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
