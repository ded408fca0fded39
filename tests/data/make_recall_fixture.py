#!/usr/bin/env python3
"""Makes tests/data/recall_h200_s16.json, the recall-bench result tests/test_plots.sh draws fig. 8
from: the H200 run of experiments/results/h200-2026-12-03-s16 (the recall experiment of pulse
reproduce) cut down to what the figure reads: the sweep points of its two panels (1024 chunks,
8 KB chunks) without their samples and engine counters, the peak, and the runs beside compute
(the "interference" object) whole. The values are the run's own.

usage: python3 tests/data/make_recall_fixture.py   (from the repository root)
"""
import gzip
import json

SRC = "experiments/results/h200-2026-12-03-s16/repro/recall/recall.json.gz"
DST = "tests/data/recall_h200_s16.json"

with gzip.open(SRC, "rt") as f:
    r = json.load(f)
out = {k: r[k] for k in ("experiment", "schema_version", "status", "date", "tool", "env",
                         "config", "peak", "engine_errors", "interference")}
out["sweep"] = [{k: v for k, v in p.items() if k not in ("samples_s", "stats")}
                for p in r["sweep"] if p["chunks"] == 1024 or p["chunk_bytes"] == 8192]
with open(DST, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"wrote {DST}: {len(out['sweep'])} sweep points of {len(r['sweep'])}")
