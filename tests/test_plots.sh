#!/usr/bin/env bash
# The figure scripts (plots/) against real summaries: runs `pulse reproduce --tiny` into a
# temporary folder, draws every figure with plots/figures.py, and checks each PNG (> 1 KB) and
# PDF (non-empty) is there; then the same for the figures of a repeated run (--repeat 2, the
# experiments of REPEATED only), whose points the figures draw as means with min-max ranges; a
# figure script given a missing input must fail with one line; fig. 8 beside compute from a real
# H200 run (tests/data/recall_h200_s16.json) and without those runs.
# Run from the repository root; PULSE_BIN names the binary (default ./build/pulse).
# exit: 0 pass, 1 fail, 77 skipped (no python3 or no matplotlib).
set -u
PULSE_BIN=${PULSE_BIN:-./build/pulse}
FIGURES="fig8_recall fig17_throughput fig17b_ratio fig17c_long fig18_tpot fig20_21_util fig22_batches
         fig23_ablation fig24_admission fig25_capacity fig26_bandwidth"
REPEATED=e2e,ablation,bandwidth
REPEATED_FIGURES="fig17_throughput fig18_tpot fig22_batches fig23_ablation fig26_bandwidth"

fail() { echo "test_plots: FAIL: $*" >&2; exit 1; }

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import matplotlib" >/dev/null 2>&1; then
    echo "test_plots: skipped: python3 with matplotlib is not available"
    exit 77
fi
[ -x "$PULSE_BIN" ] || fail "$PULSE_BIN: not an executable (set PULSE_BIN)"

tmp=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
export MPLBACKEND=Agg MPLCONFIGDIR="$tmp/mplconfig" PYTHONDONTWRITEBYTECODE=1

# draw DIR FIGURES [REPRODUCE_ARGS...]: pulse reproduce --tiny into $tmp/DIR, its figures (by
# script name) into $tmp/DIR/figures, each PNG over 1 KB and each PDF non-empty
draw() {
    local dir=$tmp/$1 figures=$2 f rc
    shift 2
    "$PULSE_BIN" reproduce --tiny --out-dir "$dir" "$@" >"$dir.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { tail -n 20 "$dir.log" >&2; fail "pulse reproduce --tiny $* exited $rc"; }
    python3 plots/figures.py "$dir" --out "$dir/figures" --only "${figures// /,}" \
        >"$dir.figures.log" 2>&1
    rc=$?
    cat "$dir.figures.log"
    [ $rc -eq 0 ] || fail "plots/figures.py $dir exited $rc"
    for f in $figures; do
        [ -f "$dir/figures/$f.png" ] && [ "$(wc -c <"$dir/figures/$f.png")" -gt 1024 ] ||
            fail "$1: $f.png missing or under 1 KB"
        [ -s "$dir/figures/$f.pdf" ] || fail "$1: $f.pdf missing or empty"
    done
}

draw results "$(echo $FIGURES)"
draw repeated "$REPEATED_FIGURES" --repeat 2 --only "$REPEATED"
for e in ${REPEATED//,/ }; do
    grep -q '"repeat": *2' "$tmp/repeated/$e/$e.json" || fail "$e: the summary has no \"repeat\": 2"
done

# the title names the points' builds and dates: the tiny run's one commit, and a summary whose
# points came from two builds on two days (a run resumed elsewhere); a trace's point is not on
# the length axis of figs. 17, 18 and 22
prov=$(cd plots && python3 -c '
import sys, figlib
s = figlib.load_json(sys.argv[1])
print(figlib.provenance(s))
s["point_commits"] = ["0123456-dirty", "89abcde"]
s["point_dates"] = ["2026-12-03T16:28:01Z", "2026-12-04T09:00:00Z"]
print(figlib.provenance(s))
w = {"spec": "uniform:256:6", "requests": 6, "prompt_tokens_total": 1536}
assert figlib.input_len({"workload": w}) == 256
w["spec"] = "trace:workloads/traces/mooncake_like_24k_poisson.jsonl"
assert figlib.input_len({"workload": w}) is None, "a trace on the length axis"' \
    "$tmp/results/e2e/e2e.json" 2>&1) || fail "provenance: $prov"
commit=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["point_commits"][0])' \
    "$tmp/results/e2e/e2e.json") || fail "e2e.json has no point_commits"
[[ "$(printf '%s\n' "$prov" | head -1)" == *"tiny scale, $commit, "* ]] || fail "provenance: $prov"
[[ "$(printf '%s\n' "$prov" | tail -1)" == *"0123456-dirty + 89abcde, 2026-12-03 to 2026-12-04"* ]] ||
    fail "provenance of two builds: $prov"

# fig. 8 beside compute, from real runs: the H200 result of tests/data/recall_h200_s16.json
# (tests/data/make_recall_fixture.py cuts it from experiments/results/h200-2026-12-03-s16) drawn
# by the script, and its panels read back: the zero-copy GB/s alone (the kernels' mean), the goal
# at 0.80 of it, the PCIe peak and the GB/s beside each kernel; each kernel's slowdown, the goal
# at 1.15x and the grids meeting both goals in the title. The tiny run's runs beside compute are
# skipped (the CPU backend), and a result that skipped them, ran out of memory or has none says
# so in their place.
fix=tests/data/recall_h200_s16.json
out=$(cd plots && python3 fig8_recall.py "../$fix" --out "$tmp/fig8_s16" 2>&1) ||
    fail "fig8_recall.py $fix: $out"
[ "$(wc -c <"$tmp/fig8_s16.png")" -gt 1024 ] && [ -s "$tmp/fig8_s16.pdf" ] ||
    fail "fig8_s16.png missing or under 1 KB"
out=$(cd plots && python3 - "../$fix" "$tmp/results" 2>&1 <<'PY'
import sys
import figlib, fig8_recall, recall_bandwidth as rb

def panels(fig):
    return {a.get_label(): a for a in fig.axes if a.get_label()}

def close(a, b):
    return len(a) == len(b) and all(abs(x - y) < 1e-9 for x, y in zip(a, b))

r = figlib.load(sys.argv[1], "recall")
ks = r["interference"]["kernels"]
assert len(ks) == 2 and all(len(k["grids"]) == 5 for k in ks), "the fixture's kernels"
p = panels(fig8_recall.draw(r))
assert {"size", "count", "beside", "slowdown"} <= set(p), sorted(p)
lines = {ln.get_label(): ln for ln in p["beside"].lines}
grids = [g["zc_blocks"] for g in ks[0]["grids"]]
alone = [sum(k["grids"][i]["zc_GBps_alone"] for k in ks) / len(ks) for i in range(len(grids))]
assert close(list(lines["zero-copy alone"].get_xdata()), grids), "alone: grids"
assert close(list(lines["zero-copy alone"].get_ydata()), alone), "alone"
assert close(list(lines["goal: 0.80 x alone"].get_ydata()), [0.8 * a for a in alone]), "goal"
peak = r["peak"]["GBps"]
assert list(lines[f"PCIe peak {peak:.1f} GB/s"].get_ydata()) == [peak] * 2, "peak"
for ax, key, name in ((p["beside"], "zc_GBps_beside", lambda k: "beside " + rb.short(k)),
                      (p["slowdown"], "slowdown", lambda k: k["kernel"])):
    got = {c.get_label(): c.lines[0] for c in ax.containers}
    for k in ks:
        line = next(v for n, v in got.items() if n.startswith(name(k)))
        assert close(list(line.get_xdata()), grids), (key, k["kernel"])
        assert close(list(line.get_ydata()), [g[key] for g in k["grids"]]), (key, k["kernel"])
assert any(list(ln.get_ydata()) == [1.15] * 2 for ln in p["slowdown"].lines), "no 1.15x goal"
title = p["slowdown"].get_title()
assert "gemm_bf16: none" in title and "attn_decode: 4 blocks" in title, title
tiny = figlib.load(sys.argv[2], "recall")
for s, want in ((tiny, "skipped: --no-interference"), (dict(r, interference={"status": "oom"}),
                 "(oom)"), ({k: v for k, v in r.items() if k != "interference"}, "no runs")):
    p = panels(fig8_recall.draw(s))
    got = " ".join(t.get_text() for t in p["interference"].texts) if "interference" in p else ""
    assert "beside" not in p and want in got, (want, sorted(p), got)
PY
) || fail "fig. 8 beside compute: $out"

# the throughput-accuracy trade-off: the tiny ratio point against an accuracy table of two
# lengths (each policy's "average" row at budget 64; mean missing at 8K, so arkvale reads
# nothing there and says so), and a file that is no accuracy result refused in one line
python3 - "$tmp/acc.json" <<'PY' || fail "writing the accuracy fixture"
import json, sys
rows = [{"task": "average", "policy": "full", "budget": 0, "length": n, "score": 40.0}
        for n in (4096, 8192)]
for n, pols in ((4096, ("headwise", "solohead", "mean", "infinigen", "infinigen-solohead")),
                (8192, ("headwise", "solohead", "infinigen", "infinigen-solohead"))):
    for i, p in enumerate(pols):
        rel = 0.95 - 0.1 * i
        rows.append({"task": "average", "policy": p, "budget": 64, "length": n,
                     "paired": {"relative": rel, "relative_interval_95": [rel - 0.05, rel + 0.05]}})
json.dump({"config": {"model": "/m/gqa-test"}, "table": rows}, open(sys.argv[1], "w"))
PY
out=$(cd plots && python3 tradeoff.py "$tmp/results/ratio" "$tmp/acc.json" --budget 64 \
    --out "$tmp/tradeoff" 2>&1) || fail "tradeoff.py: $out"
[ "$(wc -c <"$tmp/tradeoff.png")" -gt 1024 ] && [ -s "$tmp/tradeoff.pdf" ] ||
    fail "tradeoff.png missing or under 1 KB"
out=$(cd plots && python3 tradeoff.py "$tmp/results/ratio" "$tmp/results/e2e/e2e.json" \
    --out "$tmp/x" 2>&1) && fail "tradeoff.py took an e2e summary for an accuracy result"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "tradeoff, bad input: not one line: $out"
# --runs: pulse run results, each read at its own budget (the ratio's pulseinfer point at 64 and
# again at 32 tokens, infinigen+solohead+zc at 64): the points land on their budget's rows
out=$(python3 - "$tmp/results/ratio" "$tmp/acc.json" "$tmp" <<'PY' 2>&1
import json, os, sys
sys.path.insert(0, "plots")
import figlib, tradeoff
ratio, acc, tmp = sys.argv[1:]
a = json.load(open(acc))
a["table"].append({"task": "average", "policy": "solohead", "budget": 32, "length": 4096,
                   "paired": {"relative": 0.6, "relative_interval_95": [0.55, 0.65]}})
json.dump(a, open(acc + ".32", "w"))
runs = []
for name, _, r in figlib.ok_points(figlib.load(ratio, "ratio")):
    if name not in ("pulseinfer", "infinigen+solohead+zc"):
        continue
    for b in (64, 32) if name == "pulseinfer" else (64,):
        r = json.loads(json.dumps(r))
        r["config"]["offload"]["budget_tokens"] = b
        if name == "pulseinfer" and b == 32:  # a self-interleaved run is named so
            r.setdefault("counters", {}).setdefault("pulseinfer", {})["self_interleave"] = {
                "mode": "on"}
        runs.append(os.path.join(tmp, f"run_{name}_{b}.json"))
        json.dump(r, open(runs[-1], "w"))
assert len(runs) == 3, runs
pts, prov = tradeoff.run_points(runs)
names = sorted(n for n, _, _ in pts)
assert names == ["infinigen+solohead+zc@64", "pulseinfer-selfint@32", "pulseinfer@64"], names
rows, _ = tradeoff.accuracy_rows([acc + ".32"])
fig = tradeoff.draw(pts, rows, "m", None, prov)
xs = sorted(round(float(c.lines[0].get_xdata()[0]), 3) for c in fig.axes[0].containers)
# 4K: pulseinfer (solohead) 0.85 at 64 and 0.6 at 32, infinigen-solohead 0.55 at 64; 8K: 0.85
# and 0.65; pulseinfer@32 has no 8K row (said in the note)
assert xs == [0.55, 0.6, 0.65, 0.85, 0.85], xs
assert any("pulseinfer-selfint@32 at 8K" in t.get_text() for t in fig.texts), \
    [t.get_text() for t in fig.texts]
figlib.save(fig, os.path.join(tmp, "tradeoff_runs"))
PY
) || fail "tradeoff.py --runs: $out"
[ "$(wc -c <"$tmp/tradeoff_runs.png")" -gt 1024 ] || fail "tradeoff_runs.png missing or under 1 KB"
out=$(cd plots && python3 tradeoff.py --runs "$tmp/acc.json" --accuracy "$tmp/acc.json" \
    --out "$tmp/x" 2>&1) && fail "tradeoff.py --runs took an accuracy result for a run"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "tradeoff --runs, bad input: not one line: $out"

# a missing input: a non-zero exit and a one-line message, no traceback
out=$(python3 plots/fig17_throughput.py "$tmp/no-such-dir" --out "$tmp/x" 2>&1) &&
    fail "fig17_throughput.py succeeded on a missing input"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "missing input: not one line: $out"

# plots/timeline.py on a real trace (PulseInfer predicting from its predicted lists on the tiny
# model): the picture, and --chain's per-step account of the recall I/O track (prefetches and
# corrections busy, the idle gaps between them, within the step); a trace without an
# offload-batch step from --from-step on is refused with one line
"$PULSE_BIN" run --backend cpu --model tiny --policy pulseinfer --speculate --spec-from hits \
    --recall-engine zero-copy --workload lengths:300,260 --output-len 6 --max-batch 2 \
    --budget-tokens 32 --admission fixed:0 --trace "$tmp/trace.json" --out "$tmp/run.json" \
    >"$tmp/run.log" 2>&1 || { tail -5 "$tmp/run.log"; fail "pulse run --trace"; }
python3 plots/timeline.py "$tmp/trace.json" --out "$tmp/timeline.png" >/dev/null 2>&1 ||
    fail "timeline.py on the trace"
[ "$(wc -c <"$tmp/timeline.png")" -gt 1024 ] || fail "timeline.png missing or under 1 KB"
python3 plots/timeline.py "$tmp/trace.json" --chain --from-step 1 --chain-json "$tmp/chain.json" \
    >"$tmp/chain.txt" 2>&1 || { cat "$tmp/chain.txt"; fail "timeline.py --chain"; }
python3 - "$tmp/chain.json" <<'PY' || fail "timeline.py --chain's account"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["steps"] >= 4 and c["from_step"] == 1, c
assert c["busy_ms"].get("prefetch", 0) > 0 and c["busy_ms"].get("gather", 0) > 0, c["busy_ms"]
assert "prefetch -> gather" in c["idle_ms"], c["idle_ms"]
assert all(v >= 0 for v in c["idle_ms"].values()), c["idle_ms"]
assert 0 <= c["before_first_io_ms"] and 0 <= c["after_last_io_ms"], c
assert c["before_first_io_ms"] + c["after_last_io_ms"] <= c["step_ms"] + 1e-9, c
PY
grep -q "I/O spans a step" "$tmp/chain.txt" || fail "timeline.py --chain: no summary line"
out=$(python3 plots/timeline.py "$tmp/trace.json" --chain --from-step 1000 2>&1) &&
    fail "timeline.py --chain took a step past the run"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "timeline --chain, no step: not one line: $out"

echo "test_plots: ok ($(echo $FIGURES | wc -w) figures," \
    "$(echo $REPEATED_FIGURES | wc -w) of a repeated run, fig. 8 beside compute from $fix)"
exit 0
