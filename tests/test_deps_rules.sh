#!/usr/bin/env bash
# scripts/check-deps.sh refuses what the rules forbid: a copy of the tree with one bad include
# at a time must fail with that include named, and the untouched copy must pass.
set -euo pipefail
root=${1:?usage: test_deps_rules.sh SRC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
copy() {
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t"
    cp -r "$root/runtime" "$root/workloads" "$root/baselines" "$root/accuracy" "$root/CMakeLists.txt" "$tmp/t/"
}
# expect FILE LINE MESSAGE: FILE (relative) with LINE added after its first line fails with MESSAGE
expect() {
    copy
    sed -i "1a $2" "$tmp/t/$1"
    local out
    if out=$("$root/scripts/check-deps.sh" "$tmp/t" 2>&1); then
        echo "FAIL: $1 with '$2' passed"; fails=$((fails + 1))
    elif [[ $out != *"$3"* ]]; then
        echo "FAIL: $1 with '$2': '$out' does not say '$3'"; fails=$((fails + 1))
    fi
}
copy
"$root/scripts/check-deps.sh" "$tmp/t" >/dev/null || { echo "FAIL: the untouched tree"; fails=$((fails + 1)); }
expect runtime/model/model.c '#include "offload.h"' "includes offload.h of runtime/offload/"
expect runtime/select/select_ref.c '#include "hot_cache.h"' "includes hot_cache.h of runtime/store/"
expect runtime/common.c '#include "engine.h"' "includes engine.h of runtime/model/"
expect runtime/store/recall.c '#include "baselines/registry.h"' "runtime/ includes runtime/ headers only"
expect baselines/arkvale.c '#include "offload_impl.h"' "internal offload_impl.h"
expect workloads/locality.c '#include "accuracy/gguf.h"' "may include its own and runtime/ headers"
expect runtime/store/recall.c 'static const char *zc(void) { return getenv("PULSE_ZC"); }' \
    "runtime/store/recall.c:2: reads the environment"
echo "test_deps_rules: $((8 - fails)) of 8 cases as expected"
[ "$fails" -eq 0 ]
