#!/usr/bin/env bash
# The main job: the vanilla serving run. On a machine with a GPU: qwen3-14b on the CUDA
# backend; without one: the tiny model on the CPU backend. Writes results/run.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
mkdir -p "$root/results"
pulse="${PULSE_BUILD:-$root/build}/pulse"
if "$pulse" run --backend cuda --help >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    "$pulse" run --backend cuda --model qwen3-14b --policy vanilla --workload uniform:16384:16 \
        --output-len 128 --kv-budget-gb 45 --seed 1 --out "$root/results/run.json"
else
    "$pulse" run --backend cpu --model tiny --policy vanilla --workload uniform:256:4 \
        --output-len 32 --kv-budget-gb 0.25 --seed 1 --out "$root/results/run.json"
fi
echo "result: $root/results/run.json"
