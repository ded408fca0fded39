#!/usr/bin/env bash
# prepared in s38 for the next GPU call: issue 34's figures not measured in s38, one call:
# both systems under CUPTI at 32K x 24 (GPU busy, the kernel tables after the joint selection),
# PulseInfer traced there (the timeline: whether a layer's correction waits on its prefetch),
# the published tier there (infinigen and arkvale as published), and vanilla at 1 : 8 (the 8x).
# first test_select_gpu and its memcheck (the kernels changed after s38's last call).
# `LIMIT=570 bash s39a.sh` with .deps, s39a.sh and s38sum.py carried
cd "$(dirname "$0")"
R=$(pwd)
W=$OUT/w; mkdir -p $W
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $OUT/gpu.txt
PULSE_BUILD=$R/build-gpu scripts/build.sh >$W/build.log 2>&1 || { tail -30 $W/build.log; exit 1; }
echo "build $(el) s"
# the selection kernels' __grid_constant__ jobs (s38, after the last GPU call): their test first
mkdir -p $W/tests; build-gpu/test_select_gpu > $W/tests/select.txt 2>&1; echo "test_select_gpu rc=$? $(el) s"; grep -E "FAIL|checks|two selections|solohead  batch 24" $W/tests/select.txt
PULSE_GPU_TEST_QUICK=1 PULSE_GPU_TEST_NO_TIMING=1 compute-sanitizer --tool memcheck build-gpu/test_select_gpu > $W/tests/select_memcheck.txt 2>&1; echo "memcheck rc=$? $(el) s"; tail -2 $W/tests/select_memcheck.txt
PROF=$R/experiments/results/h100-2026-12-06-s32/ioaa_profile_zc.json
runs() {
for v in "$@"; do
  IFS='|' read -r name pt pols a <<<"$v"
  [ $(( $(el) + ${RUN_S:-80} )) -lt ${LIMIT:-570} ] || { echo "skipped $name (time)"; continue; }
  SKIP_BUILD=1 PI_TRACE=$([[ $name == *T ]] && echo 1 || echo 0) PI_PROFILE=$PROF PI_POINTS=$pt PI_ARGS="$a" OUT=$W/${name} PI_POLICIES="$pols" \
    scripts/gpu-suite.sh pulseinfer > /dev/null 2>&1
  python3 s38sum.py $W 2>&1 | grep "^${name} " | tail -1
  tar cJf $OUT/runs.tar.xz -C $W .
done
}
IG="infinigen+solohead+zc:-:-"; PI="pulseinfer:solohead:zero-copy:spec=0.25"; A="--hot-slots auto"; F="--admission fixed:16384"
P=45:0:32768:24; Q=12:96:65536:18; C="--cupti"
runs "piC|$P|$PI|$F $A $C" "igC|$P|$IG|$A $C" "piT|$P|$PI|$F $A" "van8|$Q|vanilla:-:-|" "igpub|$P|infinigen:-:-|" "arkpub|$P|arkvale:-:-|"
for d in $W/*C; do python3 scripts/gpu_activity_table.py $d/pi_*.json > $d/kernels.txt 2>&1; done
tar cJf $OUT/runs.tar.xz -C $W .
python3 s38sum.py $W | tee $OUT/summary.txt
echo "total $(el) s"
