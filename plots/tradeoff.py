#!/usr/bin/env python3
"""Throughput against accuracy: every system of the 1 : 8 ratio point (its output throughput,
from the ratio summary of `pulse reproduce`) against the relative score of the selection it
runs (from `pulse accuracy` results: the "average" row of each length at one budget, with its
paired-bootstrap 95% interval). The trade-off a reader has to see: a faster system whose lists
lose accuracy is not the faster system at equal quality.

Which accuracy policy each system's selection is (accuracy/sparse_attn.h's names): vanilla full
attention; arkvale mean (its page list from every head's scores); infinigen infinigen (head-wise
lists from the approximate query); the engine-matched arkvale+solohead+* and PulseInfer
solohead; infinigen+solohead+* infinigen-solohead. On a model with one KV head (Gemma 3 270M)
mean and solohead are the head-wise list and infinigen-solohead is infinigen's: the figure
then reads those rows and says so in its footnote.

With --runs the points are `pulse run` results instead (of one point: gpu-suite.sh's pi_*.json),
each read at its own token budget, so that one system at several budgets makes a curve: the
comparison at matched accuracy or matched throughput (a system at 1024 tokens against another at
2048). A run's name is its policy, "-spec" for pulseinfer's speculation, "-zc" for pulseinfer on
zero-copy, "@B" for a budget other than 2048.

usage: python3 plots/tradeoff.py RATIO ACCURACY [ACCURACY ...] [--budget N] [--out PREFIX]
       python3 plots/tradeoff.py --runs RUN [RUN ...] --accuracy ACCURACY [...] [--out PREFIX]
  RATIO     ratio/ratio.json(.gz), its folder, or the --out-dir of pulse reproduce
  ACCURACY  pulse accuracy result JSON(s) (.gz too), one marker per length they hold
  --budget  the token budget whose rows are read (default 2048, the suite's shared budget)
  --runs    pulse run result JSONs (each at its config.offload.budget_tokens; vanilla: full)
  --out     writes PREFIX.png and PREFIX.pdf (default tradeoff)
exit: 0 drawn, 1 an input is unusable (one line on stderr), 2 bad usage
"""
import argparse
import os
import re
import sys

import matplotlib.pyplot as plt

import figlib

# the accuracy policy of each system's selection, then what stands for it on a model where
# it coincides with another (one KV head)
SELECTION = {
    "vanilla": ("full",),
    "arkvale": ("mean", "headwise"),
    "infinigen": ("infinigen",),
    "arkvale+solohead+gs": ("solohead", "headwise"),
    "arkvale+solohead+zc": ("solohead", "headwise"),
    "infinigen+solohead+gs": ("infinigen-solohead", "infinigen"),
    "infinigen+solohead+zc": ("infinigen-solohead", "infinigen"),
    "pulseinfer": ("solohead", "headwise"),
    "pulseinfer-zc": ("solohead", "headwise"),
}
LENGTH_MARKERS = ["o", "s", "^", "D", "v"]


def accuracy_rows(paths, budget=None):
    """{(policy, length, budget): (relative, lo, hi)} of the 'average' rows at `budget` (None:
    every budget; full: 1 under budget 0), and the model's name."""
    rows, model = {}, None
    for path in paths:
        try:
            a = figlib.load_json(path)
        except (OSError, ValueError) as e:
            raise figlib.InputError(f"{path}: {e}") from None
        if not isinstance(a, dict) or not isinstance(a.get("table"), list):
            raise figlib.InputError(f"{path}: not a pulse accuracy result (no table)")
        model = model or os.path.basename(str(a.get("config", {}).get("model", "?")))
        for r in a["table"]:
            if r.get("task") != "average":
                continue
            if r.get("policy") == "full":
                rows[("full", r["length"], 0)] = (1.0, 1.0, 1.0)
            elif budget in (None, r.get("budget")) and isinstance(r.get("paired"), dict):
                p = r["paired"]
                lo, hi = p.get("relative_interval_95", [p["relative"]] * 2)
                rows[(r["policy"], r["length"], r.get("budget"))] = (p["relative"], lo, hi)
    if not rows:
        at = f" at budget {budget}" if budget is not None else ""
        raise figlib.InputError(f"no 'average' rows{at} in {', '.join(paths)}")
    return rows, model


def run_points(paths):
    """[(name, tok/s, budget)] of `pulse run` results, and a provenance line."""
    pts, gpus, dates, where = [], set(), set(), set()
    for path in paths:
        try:
            r = figlib.load_json(path)
        except (OSError, ValueError) as e:
            raise figlib.InputError(f"{path}: {e}") from None
        tps = figlib.metric(r, "output_throughput") if isinstance(r, dict) else None
        if tps is None or r.get("status") != "ok":
            raise figlib.InputError(f"{path}: not a pulse run result that ran (status ok, "
                                    "metrics.output_throughput)")
        cfg = r.get("config", {})
        pol, off = cfg.get("policy", "?"), cfg.get("offload", {})
        budget = 0 if pol == "vanilla" else off.get("budget_tokens", 2048)
        name = pol
        if pol == "pulseinfer":
            if off.get("schedule") == "speculate-exact":
                m = off.get("spec_margin") or 0
                name += "-spec" + (f"+{m:.2f}".rstrip("0").rstrip(".") if m else "")
            si = (r.get("counters", {}).get("pulseinfer", {}).get("self_interleave") or {})
            if si.get("mode", "off") != "off":
                name += "-selfint" + ("" if si["mode"] == "on" else "=" + si["mode"])
            name += "-zc" if off.get("recall_engine") == "zero-copy" else ""
        if budget not in (0, 2048):
            name += f"@{budget}"
        pts.append((name, tps, budget))
        gpus.add(r.get("env", {}).get("gpu", "?"))
        where.add("%s, %g GB GPU KV" % (r.get("workload", {}).get("spec", "?"),
                                       cfg.get("kv_budget_gb", 0)))
        dates.add(str(r.get("date", "?"))[:10])
    return pts, (f"{len(pts)} pulse run results on {', '.join(sorted(gpus))}, "
                 f"{', '.join(sorted(dates))}; {'; '.join(sorted(where))}")


def draw(points, rows, model, budget, provenance):
    """points: [(name, tok/s, budget)]; budget: the one the points share, or None."""
    fig, ax = plt.subplots(figsize=(11, 5.5))
    lengths = sorted({length for _, length, _ in rows})
    cols = figlib.colors(list(dict.fromkeys(n for n, _, _ in points)))
    stood_in, missing = set(), []
    for name, tps, b in points:
        base = re.sub(r"-spec(\+[0-9.]+)?|-selfint(=\w+)?", "", figlib.system(name).split("@", 1)[0])
        want = SELECTION.get(base)
        if not want:
            missing.append(f"{name} (no selection known)")
            continue
        for i, length in enumerate(lengths):
            key = 0 if want[0] == "full" else b
            pol = next((p for p in want if (p, length, key) in rows), None)
            if pol is None:
                missing.append(f"{name} at {figlib.tokens(length)}")
                continue
            if pol != want[0]:
                stood_in.add(f"{want[0]} = {pol}")
            rel, lo, hi = rows[(pol, length, key)]
            tier = figlib.tier(name)
            ax.errorbar(rel, tps, xerr=[[rel - lo], [hi - rel]], fmt=LENGTH_MARKERS[i % 5],
                        color=cols[name], mfc=cols[name] if tier != "engine-matched" else "white",
                        ms=8, capsize=3, label=figlib.label(name) if i == 0 else None)
    for i, length in enumerate(lengths):
        ax.plot([], [], LENGTH_MARKERS[i % 5], color="#555555", label=f"{figlib.tokens(length)}")
    ax.set_xlabel("relative score against full attention (" +
                  (f"budget {budget}" if budget else "each point at its own budget") +
                  ", 95% interval)")
    ax.set_ylabel("output tok/s" + (" at the 1 : 8 point" if budget else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    note = []
    if stood_in:
        note.append(f"{model or 'the model'} has one KV head: " + ", ".join(sorted(stood_in)))
    if missing:
        note.append("no accuracy row: " + ", ".join(missing[:6]))
    fig.suptitle(f"Throughput against accuracy ({model or '?'} accuracy; {provenance})",
                 fontsize=10)
    if note:
        fig.text(0.01, 0.01, "\n".join(note), fontsize=7, color="#aa0000", va="bottom")
    fig.tight_layout(rect=(0, 0.06 * len(note), 1, 1))
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="RATIO ACCURACY [ACCURACY ...]")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--runs", nargs="+")
    ap.add_argument("--accuracy", nargs="+", default=[])
    ap.add_argument("--out", default="tradeoff")
    a = ap.parse_args()
    if a.runs and (a.inputs or not a.accuracy):
        ap.error("--runs takes --accuracy FILE..., and no RATIO")
    if not a.runs and (len(a.inputs) < 2 or a.accuracy):
        ap.error("expected RATIO ACCURACY [ACCURACY ...], or --runs and --accuracy")
    try:
        if a.runs:
            points, prov = run_points(a.runs)
            rows, model = accuracy_rows(a.accuracy)
            budget = None
        else:
            ratio = figlib.load(a.inputs[0], "ratio")
            points = [(name, v, a.budget) for name, _, r in figlib.ok_points(ratio)
                      if (v := figlib.metric(r, "output_throughput")) is not None]
            rows, model = accuracy_rows(a.inputs[1:], a.budget)
            budget, prov = a.budget, figlib.provenance(ratio)
    except figlib.InputError as e:
        print(f"tradeoff: {e}", file=sys.stderr)
        return 1
    for p in figlib.save(draw(points, rows, model, budget, prov), a.out):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
