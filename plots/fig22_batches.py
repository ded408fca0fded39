#!/usr/bin/env python3
"""Fig. 22: batch sizes against the mean input length: vanilla's batch beside pulseinfer's normal
batch (solid) and offload batch (hatched, stacked on it), their means over the run's steps
(counters.schedule.batch_mean), from the e2e summary of `pulse reproduce`. Repeated points
(--repeat) draw the means, the min-max ranges as error bars (the offload batch's on its stack).

usage: python3 plots/fig22_batches.py INPUT [--out PREFIX]
  INPUT   e2e/e2e.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig22_batches)
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

import figlib

EXPERIMENT = "e2e"
NONE = figlib.Stat(0, 0, 0, 1)  # no offload batch


def draw(s):
    fig, ax = plt.subplots(figsize=(7, 4))
    if figlib.empty(ax, s):
        return figlib.finish(fig, s, "Fig. 22: batch sizes against input length")
    shown = [v for v in figlib.variants(s) if v == "vanilla" or v.startswith("pulseinfer")]
    normal = figlib.series(s, figlib.input_len, lambda r: figlib.batch_mean(r, 0))
    offload = figlib.series(s, figlib.input_len, lambda r: figlib.batch_mean(r, 1))
    lengths = sorted({x for v in shown for x, _ in normal.get(v, [])})
    cols = figlib.colors(figlib.variants(s))
    for i, v in enumerate(shown):
        n, o = dict(normal.get(v, [])), dict(offload.get(v, []))
        xs, w = figlib.group_x([j for j, x in enumerate(lengths) if x in n], i, len(shown))
        nv = [n[x] for x in lengths if x in n]
        b = figlib.bar(ax, xs, nv, w, color=cols[v], label=v, edgecolor="white")
        if v == "vanilla":
            ax.bar_label(b, fmt="%.1f", padding=2, fontsize=7)
            continue
        ov = [o.get(x, NONE) for x in lengths if x in n]
        b = figlib.bar(ax, xs, ov, w, bottom=[a.mean for a in nv], color=cols[v], hatch="//",
                       alpha=0.6, edgecolor="white")
        ax.bar_label(b, labels=[f"{a.mean:.1f}+{c.mean:.1f}" for a, c in zip(nv, ov)],
                     padding=2, fontsize=7)
    figlib.bar_axes(ax, [figlib.tokens(x) for x in lengths], "mean batch size (requests)",
                    "mean input length (tokens)")
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(facecolor="#cccccc", label="normal batch"),
                Patch(facecolor="#cccccc", hatch="//", label="offload batch")]
    ax.legend(handles=handles, ncols=2)
    ax.set_title("pulseinfer bars: normal + offload")
    return figlib.finish(fig, s, "Fig. 22: batch sizes against input length")


if __name__ == "__main__":
    figlib.main(__name__)
