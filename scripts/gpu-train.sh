#!/usr/bin/env bash
# Trains the GQA test model of the accuracy table on the GPU machine, from the repository root
# (accuracy/train/train_gqa.py says what and how): builds the CPU `pulse` (warnings not errors:
# a compiler CI does not run must not stop the training; the training data
# come from its synthetic-task generator), trains, evaluates and exports to $OUT/gqa-tiny/, then
# loads the export with the suite on the CPU and checks its greedy tokens against transformers'
# (tests/test_acc_gqa_tiny.c). Needs python3 with torch (CUDA), transformers, tokenizers, numpy;
# no network: libjansson and libutf8proc come from the carried .deps/*.deb (scripts/setup-deps.sh).
#
#   OUT=out ./scripts/gpu-train.sh [train_gqa.py flags, e.g. --scale 0.1 --budget 30]
#
# $OUT receives 7 files: gqa-tiny/{model.safetensors, config.json, tokenizer.json,
# tokenizer_config.json, reference.json}, train_log.json (recipe, data, loss curve, watch: the
# held-out passkey and multi-key exact rates at 1K and 4K every 250 steps, times, evaluation,
# heads, export) and train.txt (this script's output: "watch step" lines show whether
# retrieval is forming while it trains). Copy gqa-tiny/ to
# models/gqa-tiny/ to ship it (README, Accuracy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${OUT:-$root/out}" && cd "${OUT:-$root/out}" && pwd)
build=${PULSE_TRAIN_BUILD:-$root/build-train}
cd "$root"
exec > >(tee "$out/train.txt") 2>&1
log() { echo "== $(date +%H:%M:%S) $*"; }
t0=$(date +%s)

log build
prefix=$("$root/scripts/setup-deps.sh")
args=(-DCMAKE_BUILD_TYPE=Release -DPULSE_CUDA=OFF -DPULSE_WERROR=OFF)
[ -n "$prefix" ] && args+=(-DJANSSON_ROOT="$prefix")
if ! { cmake -S "$root" -B "$build" "${args[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target pulse test_acc_gqa_tiny; } >/tmp/gpu-train-build.log 2>&1; then
    tail -30 /tmp/gpu-train-build.log
    exit 1
fi
log "built in $(($(date +%s) - t0)) s"

log train
rm -rf "${PULSE_TRAIN_WORK:-/tmp/gqa-train}"
PYTHONUNBUFFERED=1 python3 "$root/accuracy/train/train_gqa.py" --pulse "$build/pulse" \
    --out "$out" --work "${PULSE_TRAIN_WORK:-/tmp/gqa-train}" "$@"

log "the suite on the export (CPU backend)"
rc=0
PULSE_BIN="$build/pulse" PULSE_SRC="$root" PULSE_GQA_TINY="$out/gqa-tiny" \
    "$build/test_acc_gqa_tiny" || rc=$?
log "test_acc_gqa_tiny exit $rc (0 passed, 77 skipped); total $(($(date +%s) - t0)) s"
exit $rc
