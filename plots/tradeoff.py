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

usage: python3 plots/tradeoff.py RATIO ACCURACY [ACCURACY ...] [--budget N] [--out PREFIX]
  RATIO     ratio/ratio.json(.gz), its folder, or the --out-dir of pulse reproduce
  ACCURACY  pulse accuracy result JSON(s) (.gz too), one marker per length they hold
  --budget  the token budget whose rows are read (default 2048, the suite's shared budget)
  --out     writes PREFIX.png and PREFIX.pdf (default tradeoff)
exit: 0 drawn, 1 an input is unusable (one line on stderr), 2 bad usage
"""
import argparse
import os
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


def accuracy_rows(paths, budget):
    """{(policy, length): (relative, lo, hi)} of the 'average' rows at `budget` (full: 1), and
    the model's name."""
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
                rows[("full", r["length"])] = (1.0, 1.0, 1.0)
            elif r.get("budget") == budget and isinstance(r.get("paired"), dict):
                p = r["paired"]
                lo, hi = p.get("relative_interval_95", [p["relative"]] * 2)
                rows[(r["policy"], r["length"])] = (p["relative"], lo, hi)
    if not rows:
        raise figlib.InputError(f"no 'average' rows at budget {budget} in {', '.join(paths)}")
    return rows, model


def draw(ratio, rows, model, budget):
    fig, ax = plt.subplots(figsize=(11, 5.5))
    tput = {}
    for name, _, r in figlib.ok_points(ratio):
        v = figlib.metric(r, "output_throughput")
        if v is not None:
            tput[name] = v
    lengths = sorted({length for _, length in rows})
    cols = figlib.colors(list(tput))
    stood_in, missing = set(), []
    for name, tps in tput.items():
        want = SELECTION.get(figlib.system(name))
        if not want:
            missing.append(f"{name} (no selection known)")
            continue
        for i, length in enumerate(lengths):
            pol = next((p for p in want if (p, length) in rows), None)
            if pol is None:
                missing.append(f"{name} at {figlib.tokens(length)}")
                continue
            if pol != want[0]:
                stood_in.add(f"{want[0]} = {pol}")
            rel, lo, hi = rows[(pol, length)]
            tier = figlib.tier(name)
            ax.errorbar(rel, tps, xerr=[[rel - lo], [hi - rel]], fmt=LENGTH_MARKERS[i % 5],
                        color=cols[name], mfc=cols[name] if tier != "engine-matched" else "white",
                        ms=8, capsize=3, label=figlib.label(name) if i == 0 else None)
    for i, length in enumerate(lengths):
        ax.plot([], [], LENGTH_MARKERS[i % 5], color="#555555", label=f"{figlib.tokens(length)}")
    ax.set_xlabel(f"relative score against full attention (budget {budget}, 95% interval)")
    ax.set_ylabel("output tok/s at the 1 : 8 point")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    note = []
    if stood_in:
        note.append(f"{model or 'the model'} has one KV head: " + ", ".join(sorted(stood_in)))
    if missing:
        note.append("no accuracy row: " + ", ".join(missing[:6]))
    fig.suptitle(f"Throughput against accuracy ({model or '?'} accuracy; "
                 f"{figlib.provenance(ratio)})", fontsize=10)
    if note:
        fig.text(0.01, 0.01, "\n".join(note), fontsize=7, color="#aa0000", va="bottom")
    fig.tight_layout(rect=(0, 0.06 * len(note), 1, 1))
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ratio")
    ap.add_argument("accuracy", nargs="+")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--out", default="tradeoff")
    a = ap.parse_args()
    try:
        ratio = figlib.load(a.ratio, "ratio")
        rows, model = accuracy_rows(a.accuracy, a.budget)
    except figlib.InputError as e:
        print(f"tradeoff: {e}", file=sys.stderr)
        return 1
    for p in figlib.save(draw(ratio, rows, model, a.budget), a.out):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
