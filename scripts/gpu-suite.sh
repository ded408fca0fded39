#!/usr/bin/env bash
# The GPU machine's suite, in one call: build with nvcc (sm_90), every test (each CUDA kernel
# against its CPU reference; the tiny model on CUDA against the CPU), compute-sanitizer on the
# decode test, the PyTorch peer, the decode-step benchmark, the main job; a short table last.
# Stages: any of  test sanitize sanitize-all peer bench run devwait offload pulseinfer recall gemm reproduce model accuracy ab  (default: test sanitize
# bench run recall; the peer's kept result in experiments/peer/results/ stands in). Results go
# to $OUT (or out/).
#   gemm      the decode GEMMs' paths in one call: bench decode-step at GEMM_POINTS (default
#             the six points of the decode-step table, 1x4096 .. 16x32768) with --gemm cublas,
#             lt (cuBLASLt's candidates timed) without and with --pdl, skinny (those and the
#             suite's skinny kernel) without and with --pdl, and lt-heuristic (or GEMM_VARIANTS),
#             and with lt leaving GEMM_RESERVES SMs free (default none); each one's
#             step/floor and gemm/cp (the weights' read rate over the copy bandwidth, goal >= 0.93)
#             per point into gemm.txt; then recall-bench's interference part (GEMM_RECALL_ARGS,
#             default zero-copy alone at 64K x 1024, grids 4,16,64): the decode GEMMs beside the
#             gather, cublas, lt and skinny with 0/8/16 SMs free. GEMM_ARGS: more flags of
#             every bench run (e.g. --cupti: each point's kernel table per step under its row).
#   ab        the offload step before and after: AB_BASE (a commit) built in a worktree in
#             /tmp/ab-base, then `bench decode-step --policy P` of each of AB_POLICIES at
#             AB_POINT (default 12x16384, 10 steps), base and head alternated AB_ROUNDS times
#             (default 2) into ab.txt: a change to the step is judged in one call, one machine.
#   model     copies the carried pieces .model/partNN to /tmp/model (the machine takes 64 MiB of
#             files per call, so the 253 MB Gemma 3 270M file comes over several calls while it
#             stays up); once the pieces there hash to .model/sha256.txt they are assembled into
#             /tmp/model/gemma.gguf.
#   accuracy  pulse accuracy on the assembled model (or ACC_MODEL, e.g. models/gqa-tiny, with
#             ACC_SYNTH to make its sets with its tokenizer) over the synthetic sets in ACC_DATA
#             (default .accdata; ACC_SAMPLES samples per task and length, default 10;
#             ACC_LENGTHS, ACC_TASKS, ACC_POLICIES (default: the model's, pulse accuracy --help),
#             ACC_BUDGETS; ACC_ARGS more flags, e.g. --check-serving; ACC_LIMIT the evaluation's
#             --time-limit, default ACC_TIMEOUT - 40: lower it to leave --serve-policies' runs,
#             which come after the evaluation, their time; ACC_SYNTH=N first makes ACC_DATA with
#             pulse synth, N samples per task and length, with the model's tokenizer).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
stages=${*:-test sanitize bench run recall}
has() { [[ " $stages " == *" $1 "* ]]; }
export PATH=$PATH:/usr/local/cuda/bin
log() { echo "== $(date +%H:%M:%S) $*"; }
# A variant "A,B,...": items that start with -- are pulse's flags (the runtime's tuning, e.g.
# --zc-blocks=8, --layer-graphs=off: pulse run --help), the others environment assignments of
# the diagnostics that remain (e.g. PULSE_SYNC=1); into the arrays v_flags and v_env.
variant() {
    v_flags=() v_env=()
    local item items
    IFS=, read -ra items <<<"$1"
    for item in "${items[@]}"; do
        if [[ $item == --* ]]; then v_flags+=("$item"); else v_env+=("$item"); fi
    done
}

uname -r | tee "$out/uname.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
# SKIP_BUILD=1 reuses the build of an earlier call on the same machine
if [ "${SKIP_BUILD:-0}" = 1 ] && [ -x "$root/build-gpu/pulse" ]; then
    log build skipped
else
    log build
    PULSE_BUILD="$root/build-gpu" "$root/scripts/build.sh" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
bin="$root/build-gpu/pulse"
summary=()
if has test; then
    log tests
    # the CPU tests through ctest, then each GPU test once, each under a time limit (a stuck
    # device wait must not eat the session's device time); TEST_CPU=0 leaves the CPU tests to CI
    if [ "${TEST_CPU:-1}" = 1 ]; then
        ctest --test-dir "$root/build-gpu" --output-on-failure -j8 -LE gpu --timeout "${TEST_TIMEOUT:-180}" \
            >"$out/ctest.log" 2>&1
        summary+=("ctest (cpu tests): $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)")
    fi
    # GPU_TESTS="select offload": only those (test_select_gpu, test_offload_gpu)
    for t in "$root"/build-gpu/test_*_gpu; do
        n=$(basename "$t")
        if [ -n "${GPU_TESTS:-}" ] && [[ " $GPU_TESTS " != *" $(echo "$n" | sed 's/^test_//; s/_gpu$//') "* ]]; then
            continue
        fi
        timeout "${TEST_TIMEOUT:-180}" "$t" >"$out/$n.txt" 2>&1
        summary+=("$n exit $?")
    done
    # the GQA test model (models/gqa-tiny) through pulse generate and pulse accuracy on CUDA:
    # transformers' greedy tokens and passkey at 1K (test_acc_gqa_tiny, which CI runs on the CPU)
    if [ -z "${GPU_TESTS:-}" ] || [[ " $GPU_TESTS " == *" gqa_tiny "* ]]; then
        PULSE_GQA_BACKEND=cuda PULSE_BIN="$bin" PULSE_SRC="$root" timeout "${TEST_TIMEOUT:-180}" \
            "$root/build-gpu/test_acc_gqa_tiny" >"$out/test_acc_gqa_tiny_cuda.txt" 2>&1
        summary+=("test_acc_gqa_tiny (cuda) exit $?")
    fi
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
    log compute-sanitizer
    compute-sanitizer --tool memcheck --error-exitcode 9 "$root/build-gpu/test_decode_gpu" \
        >"$out/sanitizer.log" 2>&1
    summary+=("compute-sanitizer memcheck test_decode_gpu: exit $? ($(grep -c 'Invalid' "$out/sanitizer.log") invalid accesses)")
fi
if has sanitize-all && command -v compute-sanitizer >/dev/null; then
    # every compute-sanitizer tool over the GPU tests of decode, selection, recall and offload
    # (SAN_TOOLS, SAN_TESTS); each run under SAN_TIMEOUT seconds; errors counted per tool. The
    # tools of SAN_QUICK (default racecheck and initcheck, which run the tests many times
    # slower) run them with PULSE_GPU_TEST_QUICK=1: a few cases each, every kernel and path once;
    # SAN_ENV="VAR=V ..." sets more environment for the tested programs (e.g. PULSE_SYNC=1);
    # SAN_ARGS more compute-sanitizer flags for every tool, SAN_RACE_ARGS for racecheck alone,
    # by default its kernels but cuBLAS's (not ours, and its shared-memory GEMMs make racecheck
    # take minutes a step; CUDA 13.0's compute-sanitizer calls --kernel-regex deprecated for
    # --kernel-name-exclude, and it still filters). initcheck runs with --nvtx yes: the GEMM's
    # output is marked initialized through NVTX (cuBLAS's stores are invisible to initcheck,
    # dev/initcheck_cublas). SAN_JOBS runs that many (tool, test) pairs at once (default 1; the
    # machine has 16 cores and 128 GB, and the runs' kernels share the GPU; racecheck's own host
    # memory reached 70 GB on test_offload_gpu and over 114 GB on the full test_pulseinfer_gpu,
    # alone, which then ended with no message of the tool's: killed for memory, san_memory.txt);
    # SAN_PRINT errors printed per run (default 20). A test that numbers its cases can be taken
    # in parts, a process each: SAN_ENV="PULSE_GPU_TEST_CASES=0-3" (test_pulseinfer_gpu), with
    # another OUT per part.
    [[ "${SAN_JOBS:-1}" =~ ^[1-9][0-9]*$ ]] || { echo "SAN_JOBS=${SAN_JOBS}: expected a count >= 1" >&2; exit 2; }
    log compute-sanitizer, every tool, ${SAN_JOBS:-1} at a time
    rm -f "$out"/san_*.sum # an earlier call's must not stand for a run that wrote none
    san_one() { # tool test quick
        local tool=$1 t=$2 quick=$3 extra=() rc errs note
        [ "$tool" = initcheck ] && extra=(--nvtx yes)
        [ "$tool" = racecheck ] &&
            read -ra extra <<<"${SAN_RACE_ARGS---kernel-regex-exclude kns=gemm|gemv|xmma|cutlass|splitKreduce}"
        env ${SAN_ENV:-} PULSE_GPU_TEST_QUICK=$quick timeout "${SAN_TIMEOUT:-300}" compute-sanitizer --tool "$tool" \
            --error-exitcode 9 --print-limit "${SAN_PRINT:-20}" "${extra[@]}" ${SAN_ARGS:-} "$root/build-gpu/$t" \
            >"$out/san_${tool}_$t.log" 2>&1
        rc=$?
        # memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK
        # SUMMARY: N hazards displayed"; a run killed by the time limit (exit 124) is partial
        errs=$(grep -oE '(ERROR SUMMARY: [0-9]+ errors?$|RACECHECK SUMMARY: [0-9]+)' "$out/san_${tool}_$t.log" |
            tail -1 | grep -oE '[0-9]+')
        note=
        [ $rc = 124 ] && note=", timed out after ${SAN_TIMEOUT:-300} s: partial"
        # a test that ran to its end printed its count (testutil.h tu_finish); without it the
        # run ended early (killed, e.g. for memory: san_memory.txt), whatever the tool counted
        [ $rc != 124 ] && ! grep -qE "^$t: [0-9]+ checks, [0-9]+ failed" "$out/san_${tool}_$t.log" &&
            note=", ended early: the test printed no result of its own"
        echo "compute-sanitizer $tool $t$([ "$quick" = 1 ] && echo ' (quick)'): exit $rc, ${errs:-?} errors$note" \
            >"$out/san_${tool}_$t.sum"
    }
    # the host's memory every 5 s while they run (a run that ends with no message of its own
    # may have been killed for memory: san_memory.txt says whether it ran short)
    (while :; do echo "$(date +%T) $(free -m | awk '/^Mem:/ {print "used " $3 " MB, available " $7 " MB"}')"; sleep 5; done) \
        >"$out/san_memory.txt" 2>&1 &
    sampler=$!
    trap 'kill "$sampler" 2>/dev/null' EXIT # should the suite end before the tools do
    pairs=()
    for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
        for t in ${SAN_TESTS:-test_decode_gpu test_select_gpu test_recall_gpu test_offload_kernels_gpu test_plan_build_gpu test_offload_gpu test_pulseinfer_gpu}; do
            pairs+=("$tool $t")
        done
    done
    for p in "${pairs[@]}"; do
        read -r tool t <<<"$p"
        quick=0
        [[ " ${SAN_QUICK:-racecheck initcheck} " == *" $tool "* ]] && quick=1
        while [ "$(jobs -rp | grep -vc "^$sampler$")" -ge "${SAN_JOBS:-1}" ]; do wait -n; done
        san_one "$tool" "$t" "$quick" &
    done
    while [ "$(jobs -rp | grep -vc "^$sampler$")" -gt 0 ]; do wait -n; done
    kill "$sampler" 2>/dev/null
    trap - EXIT
    least=$(grep -oE 'available [0-9]+' "$out/san_memory.txt" | sort -k2 -n | head -1 | grep -oE '[0-9]+')
    summary+=("host memory while they ran: least available ${least:-?} MB")
    for p in "${pairs[@]}"; do
        read -r tool t <<<"$p"
        summary+=("$(cat "$out/san_${tool}_$t.sum" 2>/dev/null || echo "compute-sanitizer $tool $t: no result")")
    done
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
    # variants (see variant()), e.g.
    # "--attn-blocks-per-sm=8 --attn-blocks-per-sm=8,--attn-min-tiles=32"
    if [ -n "${PULSE_BENCH_VARIANTS:-}" ]; then
        for v in $PULSE_BENCH_VARIANTS; do
            variant "$v"
            env "${v_env[@]}" "$bin" bench decode-step --backend cuda "${peer[@]}" "${v_flags[@]}" \
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
    # the offload path on the GPU: arkvale (head-wise, per-block) and SoloHead + gather-scatter
    for v in "headwise per-block" "solohead gather-scatter"; do
        set -- $v
        timeout 240 "$bin" run --backend cuda --model qwen3-14b --policy arkvale \
            --workload uniform:16384:4 --output-len 32 --selection $1 --recall-engine $2 \
            --out "$out/run_arkvale_$1.json" >"$out/run_arkvale_$1.txt" 2>&1
        summary+=("run arkvale $1 $2 exit $?")
    done
fi
if has devwait; then
    # the device-side recall wait (the default --recall-wait device; host waits on the host) at
    # scale, each host-planned engine; a run that stops making progress gets every thread's
    # stack (PULSE_STACKS_AFTER_S), resolved
    log device wait
    for eng in ${DW_ENGINES:-per-block gather-scatter}; do
        PULSE_STACKS_AFTER_S=${DW_STACKS_S:-20} timeout "${DW_TIMEOUT:-60}" \
            "$bin" run --backend cuda --model qwen3-14b --policy arkvale --workload "${DW_SPEC:-uniform:16384:12}" \
            --output-len "${DW_OUT:-8}" --kv-budget-gb 8 --selection solohead --recall-engine "$eng" \
            --recall-wait device \
            --out "$out/dw_$eng.json" >"$out/dw_$eng.txt" 2>&1
        summary+=("device wait $eng exit $? ($(grep -v '^ ' "$out/dw_$eng.txt" | tail -n 1 | cut -c1-160))")
        grep -q "pulse watchdog" "$out/dw_$eng.txt" &&
            python3 "$root/scripts/stacks.py" "$out/dw_$eng.txt" >"$out/dw_${eng}_stacks.txt" 2>&1
    done
fi
if has offload; then
    # the offload step against its floor: every policy and engine on one workload
    # (OFFLOAD_SPEC, default the issue's uniform:16384:12, 32 new tokens, 8 GB of GPU KV);
    # each of OFFLOAD_RUNS is policy:selection:engine[:VARIANT] (variant(): that run's flags,
    # e.g. --zc-blocks=8,--layer-graphs=off, and diagnostics' environment)
    log offload
    spec=${OFFLOAD_SPEC:-uniform:16384:12}
    # (arkvale:-:- and infinigen:-:- are the published baselines; X+solohead+gs with a
    # selection and engine is that schedule with PulseInfer's page, cache and reuse)
    for v in ${OFFLOAD_RUNS:-vanilla:-:- arkvale+solohead+gs:solohead:gather-scatter \
             arkvale+solohead+gs:solohead:zero-copy arkvale:-:- arkvale+solohead+gs:solohead:per-block \
             arkvale+solohead+gs:solohead:batch infinigen:-:- infinigen+solohead+gs:solohead:gather-scatter \
             infinigen+solohead+gs:solohead:per-block}; do
        IFS=: read -r pol sel eng envs <<<"$v"
        tag="${pol//+/-}_${sel}_${eng}"
        [ -n "$envs" ] && tag="${tag}_${envs//[^A-Za-z0-9]/_}"
        variant "$envs"
        args=("${v_flags[@]}")
        [ "$pol" != vanilla ] && [ "$sel" != - ] && args+=(--selection "$sel" --recall-engine "$eng")
        [ "$pol" != vanilla ] && args+=(${OFFLOAD_ARGS:-})
        env "${v_env[@]}" /usr/bin/time -f "%e s wall, %M KB" timeout "${OFFLOAD_TIMEOUT:-150}" "$bin" run --backend cuda \
            --model qwen3-14b --policy "$pol" --workload "$spec" --output-len "${OFFLOAD_OUT:-32}" \
            --kv-budget-gb "${OFFLOAD_KV_GB:-8}" "${args[@]}" --out "$out/off_$tag.json" \
            >"$out/off_$tag.txt" 2>&1
        summary+=("offload $tag exit $? ($(tail -n 1 "$out/off_$tag.txt"))")
    done
    python3 "$root/scripts/offload_table.py" "$out"/off_*.json | tee "$out/offload_table.txt"
    python3 "$root/scripts/gpu_activity_table.py" "$out"/off_*.json >"$out/gpu_activity.txt" 2>&1 || true
    python3 "$root/plots/step_floor.py" "$out"/off_*.json --out "$out/step_floor.png" >/dev/null 2>&1 || true
    # the offload step alone against its floor (no serving loop), at the workload's point
    # OFFLOAD_BENCH=none: no bench runs
    for v in ${OFFLOAD_BENCH:-arkvale+solohead+gs:solohead:zero-copy \
             arkvale+solohead+gs:solohead:gather-scatter infinigen+solohead+gs:solohead:gather-scatter}; do
        [ "$v" = none ] && continue
        IFS=: read -r pol sel eng <<<"$v"
        timeout "${OFFLOAD_TIMEOUT:-150}" "$bin" bench decode-step --backend cuda --model qwen3-14b \
            --policy "$pol" --selection "$sel" --recall-engine "$eng" \
            --points "${OFFLOAD_POINTS:-12x16384}" --iters 10 ${OFFLOAD_BENCH_ARGS:-} \
            --out "$out/bench_off_${pol}_${sel}_${eng}.json" >"$out/bench_off_${pol}_${sel}_${eng}.txt" 2>&1
        summary+=("bench --policy $v exit $?")
        tail -n 3 "$out/bench_off_${pol}_${sel}_${eng}.txt"
    done
fi
if has pulseinfer; then
    # the paper's comparison: every policy at each point of PI_POINTS, each
    # KV_GB:POOL_GB:LEN:COUNT (POOL_GB 0: sized to the run); 128 output tokens (PI_OUT); the
    # IOAA profile of each recall engine measured before its first pulseinfer run (PI_PROFILE
    # reuses a file for every run; PI_PROFILE_ARGS more flags of pulse profile); a trace of the
    # first pulseinfer run; PI_ARGS more flags of every run (e.g. --locality-profile
    # workloads/profiles/churn_gqa-tiny.json, with the same in PI_PROFILE_ARGS)
    log pulseinfer
    # profile_for ENGINE [BUDGET]: the profile's path in $prof, measured once per engine and
    # budget (a budget other than the default 2048 is in the file's name: its r and t_O are
    # that budget's)
    profile_for() {
        local b=${2:-} sfx=$1${2:+_b$2}
        prof=${PI_PROFILE:-$out/ioaa_profile_$sfx.json}
        [ -f "$prof" ] && return
        timeout "${PI_PROFILE_TIMEOUT:-240}" "$bin" profile --backend cuda --model qwen3-14b \
            --batches "${PI_PROFILE_BATCHES:-1,4,16}" --contexts "${PI_PROFILE_CONTEXTS:-4096,16384,65536}" \
            --selection solohead --recall-engine "$1" ${b:+--budget-tokens "$b"} ${PI_PROFILE_ARGS:-} \
            --out "$prof" >"$out/profile_$sfx.txt" 2>&1
        summary+=("pulse profile ($sfx) exit $?")
    }
    traced=0 # the first pulseinfer run writes a trace; PI_TRACE=0: none
    [ "${PI_TRACE:-1}" = 0 ] && traced=1
    for pt in ${PI_POINTS:-12:96:65536:18 45:0:16384:32 45:0:32768:24 45:0:65536:12}; do
        IFS=: read -r kv pool len cnt <<<"$pt"
        # POLICY:SELECTION:ENGINE[:spec[=F]|:specmid|:spechits|:spechitslate|:selfint[=M]|:spec+selfint|:specmid+selfint|:-[:BUDGET]]
        # (any of them, or ar alone, may end in +ar: --attend-recall on; without it the runtime's
        # default, --attend-recall corrections: PI_ARGS="--attend-recall off" gathers them)
        # (spec: --speculate; =F: --spec-margin F; specmid: --speculate --spec-from mid; spechits:
        # --speculate --spec-from hits (zero-copy); spechitslate: the same with every correction
        # after the attention over the predicted lists (--spec-correction late); selfint:
        # --self-interleave on, =M: --self-interleave M; both; BUDGET: --budget-tokens, e.g.
        # pulseinfer:solohead:zero-copy:spec:1024 beside
        # a baseline at the default 2048: the comparison at matched throughput or accuracy)
        for v in ${PI_POLICIES:-vanilla:-:- arkvale:-:- infinigen:-:- \
                 arkvale+solohead+gs:-:- infinigen+solohead+gs:-:- infinigen+solohead+zc:-:- \
                 pulseinfer:-:- pulseinfer:-:-:spec pulseinfer:-:-:selfint pulseinfer:solohead:zero-copy \
                 pulseinfer:solohead:zero-copy:spec pulseinfer:solohead:zero-copy:spec=0.25}; do
            IFS=: read -r pol sel eng x bud <<<"$v"
            [ "${x:-}" = - ] && x=
            tag="${kv}g_${len}x${cnt}_${pol//+/-}_${sel}_${eng}${x:+_${x/=/}}${bud:+_b$bud}"
            args=()
            # a trailing +ar: --attend-recall on (zero-copy's attention recalls a layer's misses)
            if [[ "${x:-}" == ar || "${x:-}" == *+ar ]]; then
                args+=(--attend-recall on)
                x=${x%ar} && x=${x%+}
            fi
            [ -n "${bud:-}" ] && args+=(--budget-tokens "$bud")
            [[ "${x:-}" == spec* ]] && args+=(--speculate)
            [[ "${x:-}" == spec=* ]] && args+=(--spec-margin "${x#spec=}")
            [[ "${x:-}" == selfint ]] && args+=(--self-interleave on)
            [[ "${x:-}" == selfint=* ]] && args+=(--self-interleave "${x#selfint=}")
            [[ "${x:-}" == spec*+selfint ]] && args+=(--self-interleave on)
            [[ "${x:-}" == specmid* ]] && args+=(--spec-from mid)
            [[ "${x:-}" == spechits* ]] && args+=(--spec-from hits)
            [[ "${x:-}" == spechitslate ]] && args+=(--spec-correction late)
            [ "$sel" != - ] && args+=(--selection "$sel" --recall-engine "$eng")
            [ "$pool" != 0 ] && [ "$pol" != vanilla ] && args+=(--host-pool-gb "$pool")
            args+=(${PI_ARGS:-})
            if [ "$pol" = pulseinfer ]; then
                profile_for "$([ "$eng" != - ] && echo "$eng" || echo gather-scatter)" "${bud:-}"
                [ -f "$prof" ] && args+=(--profile "$prof")
                [ $traced = 0 ] && args+=(--trace "$out/trace_$tag.json") && traced=1
            fi
            /usr/bin/time -f "%e s wall" timeout "${PI_TIMEOUT:-150}" "$bin" run --backend cuda \
                --model qwen3-14b --policy "$pol" --workload "uniform:$len:$cnt" \
                --output-len "${PI_OUT:-128}" --kv-budget-gb "$kv" "${args[@]}" \
                --out "$out/pi_$tag.json" >"$out/pi_$tag.txt" 2>&1
            summary+=("pulseinfer point $tag exit $? ($(tail -n 1 "$out/pi_$tag.txt"))")
        done
    done
    python3 "$root/scripts/pulseinfer_table.py" "$out"/pi_*.json | tee "$out/pulseinfer_table.txt"
    python3 "$root/scripts/gpu_activity_table.py" "$out"/pi_*.json >"$out/pi_gpu_activity.txt" 2>&1 || true
    for t in "$out"/trace_*.json; do
        [ -f "$t" ] && python3 "$root/plots/timeline.py" "$t" --step 4 --out "${t%.json}.png" \
            >/dev/null 2>&1
    done
fi
if has recall; then
    log recall-bench
    # RECALL_ARGS: recall-bench's flags instead of its whole default grid
    timeout 200 "$bin" recall-bench ${RECALL_ARGS:-} --out "$out/recall_bench.json" >"$out/recall_bench.txt" 2>&1
    summary+=("recall-bench exit $?")
    python3 "$root/plots/recall_bandwidth.py" "$out/recall_bench.json" --out "$out/recall_bandwidth.png" \
        >/dev/null 2>&1 || true
    # variants (see variant()), e.g. RECALL_VARIANTS="PULSE_SYNC=1 --zc-inflight-kb=32": zero-copy
    # and gather-scatter at 8K/64K only
    for v in ${RECALL_VARIANTS:-}; do
        tag=${v//[^A-Za-z0-9]/_}
        variant "$v"
        env "${v_env[@]}" timeout 120 "$bin" recall-bench "${v_flags[@]}" --engines zero-copy,gather-scatter \
            --sizes 8K,64K --counts 1024,4096 --no-interference --caps 0.4,0.6,0.8 \
            --out "$out/recall_$tag.json" >"$out/recall_$tag.txt" 2>&1
        echo "--- recall-bench with $v"; tail -n 20 "$out/recall_$tag.txt"
    done
fi
if has gemm; then
    log gemm paths
    : >"$out/gemm.txt"
    # GEMM_VARIANTS="--gemm=lt --gemm=skinny,--pdl=on": those alone
    read -ra gemm_variants <<<"${GEMM_VARIANTS:---gemm=cublas --gemm=lt --gemm=lt,--pdl=on --gemm=skinny --gemm=skinny,--pdl=on --gemm=lt-heuristic}"
    for r in ${GEMM_RESERVES:-}; do gemm_variants+=("--gemm=lt,--gemm-sm-reserve=$r"); done
    for v in "${gemm_variants[@]}"; do
        tag=gemm_${v//[^A-Za-z0-9]/_}
        variant "$v"
        timeout 200 "$bin" bench decode-step --backend cuda --points "${GEMM_POINTS:-1x4096,8x4096,32x4096,1x32768,8x32768,16x32768}" \
            "${v_flags[@]}" ${GEMM_ARGS:-} --out "$out/bench_$tag.json" >"$out/bench_$tag.txt" 2>&1
        rc=$?
        # each row's batch x context, step/floor and gemm/cp, and the plan counters' line
        cols=$(awk '/^ *[0-9]+ +[0-9]+ / {printf " %sx%s %s/%s", $1, $2, $5, $10}' "$out/bench_$tag.txt")
        echo "$v (exit $rc):$cols | $(grep '^gemm ' "$out/bench_$tag.txt" | cut -c1-150)" | tee -a "$out/gemm.txt"
    done
    timeout 300 "$bin" recall-bench ${GEMM_RECALL_ARGS:---engines zero-copy --sizes 64K --counts 1024 --caps 0.8 --zc-grids 4,16,64 --reps 3} \
        --out "$out/recall_gemm.json" >"$out/recall_gemm.txt" 2>&1
    summary+=("gemm: recall-bench exit $?, $(wc -l <"$out/gemm.txt") bench rows in gemm.txt")
    grep -E "decode gemm|weights read" "$out/recall_gemm.txt" >>"$out/gemm.txt"
fi
if has reproduce; then
    # pulse reproduce (REPRO_SCALE, default quick; REPRO_ONLY) into results/repro, which stays
    # on the machine between warm calls, so a call cut short by REPRO_TIMEOUT resumes in the
    # next; then every figure, and the results packed into $out/repro.tgz
    log reproduce
    only=()
    [ -n "${REPRO_ONLY:-}" ] && only=(--only "$REPRO_ONLY")
    # REPRO_PROFILES=DIR: IOAA profiles kept from an earlier run (DIR/ioaa_*.json[.gz]) stand
    # in for pulse profile's, where results/repro has none yet
    if [ -n "${REPRO_PROFILES:-}" ] && [ ! -d "$root/results/repro/profile" ]; then
        mkdir -p "$root/results/repro/profile"
        for f in "$REPRO_PROFILES"/ioaa_*.json*; do
            b=$(basename "${f%.gz}")
            if [ "${f%.gz}" != "$f" ]; then gunzip -c "$f" >"$root/results/repro/profile/$b"; else cp "$f" "$root/results/repro/profile/$b"; fi
        done
    fi
    timeout "${REPRO_TIMEOUT:-480}" "$bin" reproduce --"${REPRO_SCALE:-quick}" "${only[@]}" \
        --out-dir "$root/results/repro" >"$out/reproduce.txt" 2>&1
    summary+=("reproduce exit $? ($(ls "$root"/results/repro/*/points/*.json 2>/dev/null | wc -l) points)")
    python3 "$root/plots/figures.py" "$root/results/repro" --out "$root/results/repro/figures" \
        >"$out/figures.txt" 2>&1
    summary+=("figures exit $?")
    tar czf "$out/repro.tgz" -C "$root/results" repro
fi
if has ab && [ -n "${AB_BASE:-}" ]; then
    log "ab: $AB_BASE against the head"
    rm -rf /tmp/ab-base && git -C "$root" worktree add -f --detach /tmp/ab-base "$AB_BASE" >"$out/ab_build.log" 2>&1 &&
        { [ ! -d "$root/.deps" ] || cp -r "$root/.deps" /tmp/ab-base/; } &&
        PULSE_BUILD=/tmp/ab-base/build-gpu /tmp/ab-base/scripts/build.sh >>"$out/ab_build.log" 2>&1
    if [ -x /tmp/ab-base/build-gpu/pulse ]; then
        : >"$out/ab.txt"
        for round in $(seq "${AB_ROUNDS:-2}"); do
            for p in ${AB_POLICIES:-arkvale infinigen arkvale+solohead+zc infinigen+solohead+gs infinigen+solohead+zc}; do
                for side in base head; do
                    b=$bin; [ $side = base ] && b=/tmp/ab-base/build-gpu/pulse
                    row=$(timeout 120 "$b" bench decode-step --backend cuda --policy "$p" \
                        --points "${AB_POINT:-12x16384}" --iters 10 2>&1 | grep -E "^ *[0-9]+ +[0-9]+ " | tail -1)
                    echo "$round $side $p: $row" | tee -a "$out/ab.txt"
                done
            done
        done
        summary+=("ab: $(wc -l <"$out/ab.txt") rows in ab.txt")
    else
        summary+=("ab: the base did not build (ab_build.log)")
    fi
fi
if has model; then
    mkdir -p /tmp/model
    cp "$root"/.model/part* "$root"/.model/sha256.txt /tmp/model/ 2>/dev/null
    # every call tries the pieces it has: the set is complete when they hash to sha256.txt
    if [ ! -f /tmp/model/gemma.gguf ]; then
        cat /tmp/model/part[0-9][0-9] > /tmp/model/gemma.gguf
        want=$(cut -d' ' -f1 /tmp/model/sha256.txt 2>/dev/null)
        got=$(sha256sum /tmp/model/gemma.gguf | cut -d' ' -f1)
        [ -n "$want" ] && [ "$want" = "$got" ] || rm -f /tmp/model/gemma.gguf
    fi
    summary+=("model pieces on this machine: $(ls /tmp/model | tr '\n' ' ')")
fi
acc_model=${ACC_MODEL:-/tmp/model/gemma.gguf}
if has accuracy && [ -e "$acc_model" ]; then
    log "accuracy on $acc_model"
    m=$acc_model
    if [ -n "${ACC_SYNTH:-}" ]; then
        synth=()
        for l in $(echo "${ACC_LENGTHS:-4096,8192,16384}" | tr , " "); do synth+=(--length "$l"); done
        for t in $(echo "${ACC_TASKS:-passkey,niah_multikey,variable_tracking,kv_retrieval}" | tr , ' '); do synth+=(--task "$t"); done
        "$bin" synth "${synth[@]}" --samples "$ACC_SYNTH" --seed 1 --tokenizer $m \
            --out-dir "${ACC_DATA:-$root/.accdata}" >"$out/synth.txt" 2>&1
        summary+=("synth exit $?")
    fi
    if [ -z "${ACC_MODEL:-}" ]; then
        "$bin" generate --backend cuda --model $m --prompt "The capital of France is" \
            --max-new-tokens 8 >"$out/generate_cuda.txt" 2>&1
        want=$(grep '^generated ids:' "$root/tests/golden/gemma3_270m_q4km.txt")
        got=$(grep '^generated ids:' "$out/generate_cuda.txt")
        summary+=("gemma3 golden completion on cuda: $([ "$want" = "$got" ] && echo same || echo "DIFFERS: $got")")
    fi
    # the churn profile needs a SoloHead run at the MAM budget (2048); the run stops itself
    # 40 s before ACC_TIMEOUT and writes what it scored (status "partial"), and timeout's
    # SIGTERM, should it still come, ends it after the sample in progress, result written
    churn=(--churn-profile "$out/churn_profile.json")
    [[ -n "${ACC_BUDGETS:-}" && ",$ACC_BUDGETS," != *,2048,* ]] && churn=()
    [[ -n "${ACC_POLICIES:-}" && "$ACC_POLICIES" != *solohead* ]] && churn=()
    acc_limit=${ACC_LIMIT:-$(( ${ACC_TIMEOUT:-480} > 80 ? ${ACC_TIMEOUT:-480} - 40 : 40 ))}
    timeout "${ACC_TIMEOUT:-480}" "$bin" accuracy --backend cuda --model $m \
        --data "${ACC_DATA:-$root/.accdata}" --lengths "${ACC_LENGTHS:-4096,8192,16384}" \
        --tasks "${ACC_TASKS:-passkey,niah_multikey,variable_tracking,kv_retrieval}" \
        ${ACC_POLICIES:+--policies "$ACC_POLICIES"} ${ACC_BUDGETS:+--budgets "$ACC_BUDGETS"} \
        --samples "${ACC_SAMPLES:-10}" --calib-samples 2 --max-gen 32 ${ACC_ARGS:-} \
        --time-limit "$acc_limit" --out "$out/accuracy.json" "${churn[@]}" \
        >"$out/accuracy.txt" 2>&1
    summary+=("accuracy exit $?")
fi
log done
printf '%s\n' "${summary[@]}"
for f in gemm.txt ab.txt test_kernels_gpu.txt test_gemm_lt_gpu.txt test_gemma3_gpu.txt test_offload_gpu.txt bench.txt run.txt run_arkvale_headwise.txt run_arkvale_solohead.txt recall_bench.txt accuracy.txt; do
    [ -f "$out/$f" ] && { echo "--- $f"; tail -n 25 "$out/$f"; }
done
