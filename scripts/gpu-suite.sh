#!/usr/bin/env bash
# The GPU machine's suite, in one call: build with nvcc (sm_90), every test (each CUDA kernel
# against its CPU reference; the tiny model on CUDA against the CPU), compute-sanitizer on the
# decode test, the PyTorch peer, the decode-step benchmark, the main job; a short table last.
# Stages: any of  test sanitize peer bench run  (default: all but peer, whose kept result in
# experiments/peer/results/ stands in). Results go to $OUT (or out/).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
stages=${*:-test sanitize bench run recall}
has() { [[ " $stages " == *" $1 "* ]]; }
export PATH=$PATH:/usr/local/cuda/bin
log() { echo "== $(date +%H:%M:%S) $*"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
log build
PULSE_BUILD="$root/build-gpu" "$root/scripts/build.sh" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
bin="$root/build-gpu/pulse"
summary=()
if has test; then
    log tests
    ctest --test-dir "$root/build-gpu" --output-on-failure -j4 >"$out/ctest.log" 2>&1
    summary+=("ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)")
    "$root/build-gpu/test_kernels_gpu" >"$out/kernels_gpu.txt" 2>&1
    summary+=("test_kernels_gpu exit $?")
    for t in test_decode_gpu test_select_gpu test_recall_gpu; do
        "$root/build-gpu/$t" >"$out/$t.txt" 2>&1
        summary+=("$t exit $?")
    done
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
    log compute-sanitizer
    compute-sanitizer --tool memcheck --error-exitcode 9 "$root/build-gpu/test_decode_gpu" \
        >"$out/sanitizer.log" 2>&1
    summary+=("compute-sanitizer memcheck test_decode_gpu: exit $? ($(grep -c 'Invalid' "$out/sanitizer.log") invalid accesses)")
fi
if has peer; then
    log peer
    PYTHONUNBUFFERED=1 python3 "$root/experiments/peer/torch_decode_step.py" --out "$out/peer.json" \
        >"$out/peer.log" 2>&1
    summary+=("peer exit $?")
fi
if has bench; then
    log bench decode-step
    # the peer measured in this call, else the one kept from an earlier H200 run
    peer=(--peer "$root/experiments/peer/results/h200-qwen3-14b.json")
    [ -f "$out/peer.json" ] && peer=(--peer "$out/peer.json")
    "$bin" bench decode-step --backend cuda "${peer[@]}" --out "$out/bench_decode.json" \
        >"$out/bench.txt" 2>&1
    summary+=("bench exit $?")
    # e.g. "PULSE_ATTN_BLOCKS_PER_SM=8 PULSE_ATTN_BLOCKS_PER_SM=8,PULSE_ATTN_MIN_TILES=32"
    if [ -n "${PULSE_BENCH_VARIANTS:-}" ]; then
        for v in $PULSE_BENCH_VARIANTS; do
            env ${v//,/ } "$bin" bench decode-step --backend cuda "${peer[@]}" \
                --out "$out/bench_${v//[^A-Za-z0-9]/_}.json" >"$out/bench_${v//[^A-Za-z0-9]/_}.txt" 2>&1
            echo "--- bench with $v"; cat "$out/bench_${v//[^A-Za-z0-9]/_}.txt"
        done
    fi
fi
if has run; then
    log main job
    "$bin" run --backend cuda --model qwen3-14b --workload uniform:16384:16 --output-len 128 \
        --kv-budget-gb 45 --out "$out/run.json" >"$out/run.txt" 2>&1
    summary+=("run exit $?")
fi
if has recall; then
    log recall-bench
    timeout 200 "$bin" recall-bench --out "$out/recall_bench.json" >"$out/recall_bench.txt" 2>&1
    summary+=("recall-bench exit $?")
    python3 "$root/plots/recall_bandwidth.py" "$out/recall_bench.json" --out "$out/recall_bandwidth.png" \
        >/dev/null 2>&1 || true
fi
log done
printf '%s\n' "${summary[@]}"
for f in kernels_gpu.txt bench.txt run.txt recall_bench.txt; do
    [ -f "$out/$f" ] && { echo "--- $f"; tail -n 25 "$out/$f"; }
done
