#!/usr/bin/env bash
# The figure scripts (plots/) against real summaries: runs `pulse reproduce --tiny` into a
# temporary folder, draws every figure with plots/figures.py, and checks each PNG (> 1 KB) and
# PDF (non-empty) is there; a figure script given a missing input must fail with one line.
# Run from the repository root; PULSE_BIN names the binary (default ./build/pulse).
# exit: 0 pass, 1 fail, 77 skipped (no python3 or no matplotlib).
set -u
PULSE_BIN=${PULSE_BIN:-./build/pulse}
FIGURES="fig8_recall fig17_throughput fig17b_ratio fig18_tpot fig20_21_util fig22_batches
         fig23_ablation fig24_admission fig25_capacity fig26_bandwidth"

fail() { echo "test_plots: FAIL: $*" >&2; exit 1; }

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import matplotlib" >/dev/null 2>&1; then
    echo "test_plots: skipped: python3 with matplotlib is not available"
    exit 77
fi
[ -x "$PULSE_BIN" ] || fail "$PULSE_BIN: not an executable (set PULSE_BIN)"

tmp=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
export MPLBACKEND=Agg MPLCONFIGDIR="$tmp/mplconfig" PYTHONDONTWRITEBYTECODE=1

"$PULSE_BIN" reproduce --tiny --out-dir "$tmp/results" >"$tmp/reproduce.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail -n 20 "$tmp/reproduce.log" >&2; fail "pulse reproduce --tiny exited $rc"; }

python3 plots/figures.py "$tmp/results" --out "$tmp/figures" >"$tmp/figures.log" 2>&1
rc=$?
cat "$tmp/figures.log"
[ $rc -eq 0 ] || fail "plots/figures.py exited $rc"

for f in $FIGURES; do
    png="$tmp/figures/$f.png" pdf="$tmp/figures/$f.pdf"
    [ -f "$png" ] && [ "$(wc -c <"$png")" -gt 1024 ] || fail "$f.png missing or under 1 KB"
    [ -s "$pdf" ] || fail "$f.pdf missing or empty"
done

# a missing input: a non-zero exit and a one-line message, no traceback
out=$(python3 plots/fig17_throughput.py "$tmp/no-such-dir" --out "$tmp/x" 2>&1) &&
    fail "fig17_throughput.py succeeded on a missing input"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "missing input: not one line: $out"

echo "test_plots: ok ($(echo $FIGURES | wc -w) figures)"
exit 0
