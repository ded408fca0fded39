#!/usr/bin/env python3
"""The speculation profile (workloads/locality_spec.h, version 2) from `pulse accuracy` results:
per (budget, context) run of the `infinigen` policy (head-wise lists from the approximate query)
and per measured layer, the exact query's blocks chosen by score, the approximate lists' hits
and the lists' step-to-step persistence (the result's speculation[].per_layer[]); the results'
--spec-from (one for all) is the profile's predicted_from. The profile is
what `pulse run --spec-overlap FILE` reads as the throughput runs' misprediction model.

usage: python3 scripts/speculation_profile.py RESULT.json... --model NAME --out FILE
       [--machine TEXT] [--command TEXT] [--results TEXT]
  RESULT.json  pulse accuracy results, each of one length (--lengths N), with infinigen runs
               at margin 0; every (budget, length) pair once over all of them
  --model      the profile's model name (e.g. gqa-tiny)
exit: 0 written, 1 an input without what the profile needs, 2 bad usage
"""
import argparse
import json
import sys

PERSIST_KEYS = ("steps", "churn_exact", "churn_approx", "missed", "missed_again",
                "miss_persistence", "wrong", "wrong_again", "wrong_persistence")


def fail(msg):
    print(f"speculation_profile: {msg}", file=sys.stderr)
    sys.exit(1)


def runs_of(path):
    """The profile's runs from one accuracy result; its commit, date and layer count."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(r, dict) or not isinstance(r.get("speculation"), list):
        fail(f"{path}: not a pulse accuracy result (no speculation list)")
    cfg = r.get("config", {})
    lengths = cfg.get("lengths") or []
    if len(lengths) != 1:
        fail(f"{path}: {len(lengths)} lengths; run pulse accuracy once per length")
    n_samples = sum(int(s) for s in (r.get("samples_scored") or {}).values()) \
        if isinstance(r.get("samples_scored"), dict) else int(r.get("samples_scored") or 0)
    out = []
    for sp in r.get("speculation", []):
        if sp.get("policy") != "infinigen":
            continue
        if sp.get("margin", 0) != 0:
            fail(f"{path}: measured at --spec-margin {sp['margin']}; the profile is margin 0")
        layers = []
        for pl in sp["per_layer"]:
            if pl["exact"] <= 0:
                continue
            pt = {"layer": pl["layer"], "exact": pl["exact"], "hit": pl["hit"],
                  "overlap": pl["hit"] / pl["exact"]}
            if pl.get("steps", 0) > 0 and all(pl.get(k) is not None for k in PERSIST_KEYS):
                pt["persistence"] = {k: pl[k] for k in PERSIST_KEYS}
            layers.append(pt)
        if not layers:
            continue
        run = {"budget_tokens": sp["budget"], "context_tokens": lengths[0],
               "samples": n_samples, "layers": layers}
        if all("persistence" in p for p in layers):
            run["persistence_samples"] = n_samples
        else:
            for p in layers:
                p.pop("persistence", None)
        out.append(run)
    if not out:
        fail(f"{path}: no infinigen run with per-layer speculation counts")
    tool = r.get("tool", {})
    return out, tool.get("git_commit", ""), r.get("date", ""), cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-layers", type=int, required=True, help="the measured model's layers")
    ap.add_argument("--machine", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--results-path", default="")
    a = ap.parse_args()
    runs, commits, dates, points = [], set(), set(), set()
    for p in a.results:
        rr, c, d, cfg = runs_of(p)
        runs += rr
        commits.add(c)
        dates.add(d[:10])
        points.add(cfg.get("spec_from", "input"))
    if len(points) != 1:
        fail("results measured from different prediction points (--spec-from): "
             + ", ".join(sorted(points)))
    keys = [(r["budget_tokens"], r["context_tokens"]) for r in runs]
    if len(set(keys)) != len(keys):
        fail("a (budget, length) pair measured twice")
    for r in runs:
        if any(p["layer"] >= a.n_layers for p in r["layers"]):
            fail(f"a layer past --n-layers {a.n_layers}")
    prof = {"format": "pulse-speculation-profile", "version": 2, "source": "measured",
            "model": a.model, "n_layers": a.n_layers, "policy": "infinigen",
            "selection": "headwise", "predicted_from": points.pop(),
            "block_size": int(cfg.get("block_size", 16)),
            "mapping": "depth",
            "provenance": {"machine": a.machine, "date": ", ".join(sorted(dates)),
                           "commit": ", ".join(sorted(commits)), "command": a.command,
                           "results": a.results_path or ", ".join(a.results)},
            "runs": sorted(runs, key=lambda r: (r["context_tokens"], r["budget_tokens"]))}
    with open(a.out, "w") as f:
        json.dump(prof, f, indent=2)
        f.write("\n")
    print(f"wrote {a.out}: {len(runs)} runs, "
          + ", ".join(f"{r['budget_tokens']}@{r['context_tokens']} overlap "
                      f"{sum(p['hit'] for p in r['layers']) / sum(p['exact'] for p in r['layers']):.3f}"
                      for r in prof["runs"]))


if __name__ == "__main__":
    main()
