#!/usr/bin/env bash
# scripts/speculation_profile.py on a real pulse accuracy result: the GQA test model's infinigen
# runs at 1K (two budgets) become a version-2 speculation profile whose overlaps are its counts'
# ratios, which `pulse run --spec-overlap FILE` reads (mapped by depth onto the tiny model: its
# layers' target overlaps within the measured ones), its predicted_from the results' --spec-from; an
# input that is not such a result, a missing file, a result of two lengths and results of two
# prediction points are refused with one line and exit 1.
# Run from the repository root; PULSE_BIN names the binary. exit: 0 pass, 1 fail, 77 skipped.
set -u
PULSE_BIN=${PULSE_BIN:-./build/pulse}
fail() { echo "test_speculation_profile: FAIL: $*" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "test_speculation_profile: skipped: no python3"; exit 77; }
[ -f models/gqa-tiny/model.safetensors ] || { echo "test_speculation_profile: skipped: no models/gqa-tiny"; exit 77; }
tmp=$(mktemp -d) || fail mktemp
trap 'rm -rf "$tmp"' EXIT
"$PULSE_BIN" synth --tokenizer models/gqa-tiny --task passkey --length 1024 --length 1536 \
    --samples 3 --seed 1 --out-dir "$tmp/data" >"$tmp/synth.log" 2>&1 || fail "pulse synth"
for lens in 1024 1024,1536; do
    "$PULSE_BIN" accuracy --backend cpu --model models/gqa-tiny --data "$tmp/data" --lengths "$lens" \
        --tasks passkey --samples 1 --calib-samples 2 --policies full,infinigen --budgets 128,256 \
        --out "$tmp/acc_${lens/,/_}.json" >"$tmp/acc.log" 2>&1 || { tail -5 "$tmp/acc.log"; fail "pulse accuracy $lens"; }
done
python3 scripts/speculation_profile.py "$tmp/acc_1024.json" --model gqa-tiny --n-layers 6 \
    --out "$tmp/spec.json" >"$tmp/py.log" 2>&1 || { cat "$tmp/py.log"; fail "the script on a good result"; }
python3 - "$tmp/spec.json" <<'PY' || fail "the profile's content"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "pulse-speculation-profile" and p["version"] == 2 and p["n_layers"] == 6
assert p["predicted_from"] == "input", p.get("predicted_from")
assert sorted(r["budget_tokens"] for r in p["runs"]) == [128, 256], p["runs"]
for r in p["runs"]:
    assert r["context_tokens"] == 1024 and r["samples"] >= 1 and r["layers"]
    for l in r["layers"]:
        assert 0 <= l["hit"] <= l["exact"] and l["exact"] > 0
        assert abs(l["overlap"] - l["hit"] / l["exact"]) < 1e-12
PY
"$PULSE_BIN" run --backend cpu --model tiny --policy infinigen --workload uniform:600:3 --output-len 4 \
    --kv-budget-gb 0.002 --budget-tokens 64 --spec-overlap "$tmp/spec.json" --out "$tmp/run.json" >"$tmp/run.log" 2>&1 ||
    { tail -3 "$tmp/run.log"; fail "pulse run --spec-overlap on the profile"; }
python3 - "$tmp/run.json" "$tmp/spec.json" <<'PY' || fail "the run's misprediction model"
import json, sys
sp = json.load(open(sys.argv[1]))["config"]["offload"]["locality"]["speculation"]
prof = json.load(open(sys.argv[2]))
assert sp["mode"] == "profile" and sp["profile"]["model"] == "gqa-tiny", sp["mode"]
ov = [l["overlap"] for r in prof["runs"] for l in r["layers"]]
targets = [l["target_overlap"] for l in sp["layers"]]
assert targets and all(min(ov) - 1e-9 <= t <= max(ov) + 1e-9 for t in targets), (targets, ov)
PY
# the results' --spec-from is the profile's predicted_from; results of two points are refused
# (a copy of the 1K result marked as measured from mid-layer)
python3 - "$tmp/acc_1024.json" "$tmp/acc_mid.json" <<'PY' || fail "marking a result's point"
import json, sys
r = json.load(open(sys.argv[1]))
r["config"]["spec_from"] = "mid"
json.dump(r, open(sys.argv[2], "w"))
PY
python3 scripts/speculation_profile.py "$tmp/acc_mid.json" --model gqa-tiny --n-layers 6 \
    --out "$tmp/spec_mid.json" >"$tmp/py.log" 2>&1 || { cat "$tmp/py.log"; fail "the script on a mid-layer result"; }
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); assert p["predicted_from"] == "mid", p.get("predicted_from")' \
    "$tmp/spec_mid.json" || fail "a mid-layer result's profile is not predicted_from mid"
out=$(python3 scripts/speculation_profile.py "$tmp/acc_1024.json" "$tmp/acc_mid.json" --model x \
    --n-layers 6 --out "$tmp/x.json" 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ $out == *"different prediction points"* ]] ||
    fail "results of two points: exit $rc, $out"
echo '{"a": 1}' >"$tmp/bad.json"
for bad in "$tmp/bad.json" "$tmp/missing.json" "$tmp/acc_1024_1536.json"; do
    out=$(python3 scripts/speculation_profile.py "$bad" --model x --n-layers 6 --out "$tmp/x.json" 2>&1)
    rc=$?
    [ $rc -eq 1 ] || fail "$bad: exit $rc, expected 1"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ $out == speculation_profile:* ]] ||
        fail "$bad: not one line: $out"
done
echo "test_speculation_profile: passed"
