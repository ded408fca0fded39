#!/usr/bin/env python3
"""Fig. 24: IOAA against fixed offload thresholds: output throughput per workload (the summary's
variants, e.g. servegen and mooncake), one bar per admission value in the grid's order
(grid.axes["--admission"]), IOAA highlighted, from the admission summary of `pulse reproduce`.
Repeated points (--repeat) draw the means, the min-max ranges as error bars.

usage: python3 plots/fig24_admission.py INPUT [--out PREFIX]
  INPUT   admission/admission.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig24_admission)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "admission"
FIXED = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c"]


def draw(s):
    fig, ax = plt.subplots(figsize=(7, 4))
    if figlib.empty(ax, s):
        return figlib.finish(fig, s, "Fig. 24: IOAA against fixed admission thresholds")
    values = [str(v) for v in s.get("grid", {}).get("axes", {}).get("--admission", [])]
    by_name = {figlib.sanitize(v): v for v in values}
    tput = {}
    for v, p, _, st in figlib.aggregate(s, lambda r: figlib.metric(r, "output_throughput")):
        a = figlib.name_value(p, "admission")
        a = by_name.get(a, a)
        if a not in values:
            values.append(a)
        tput[(v, a)] = st
    workloads = [w for w in figlib.variants(s) if any(k[0] == w for k in tput)]
    fixed = iter(FIXED)
    for i, a in enumerate(values):
        ioaa = a == "ioaa"
        pts = [(j, tput[(wl, a)]) for j, wl in enumerate(workloads)
               if tput.get((wl, a)) is not None]
        xs, w = figlib.group_x([j for j, _ in pts], i, len(values))
        b = figlib.bar(ax, xs, [t for _, t in pts], w,
                       label="IOAA" if ioaa else a.replace(":", " "),
                       color=figlib.STYLE["pulseinfer"][0] if ioaa else next(fixed, "#2171b5"),
                       edgecolor="black" if ioaa else "white", linewidth=1.2 if ioaa else 0.5)
        ax.bar_label(b, fmt="%.0f", padding=2, fontsize=7,
                     fontweight="bold" if ioaa else "normal")
    figlib.bar_axes(ax, workloads, "output throughput (tok/s)", "workload")
    ax.legend(title="admission", ncols=len(values))
    return figlib.finish(fig, s, "Fig. 24: IOAA against fixed admission thresholds")


if __name__ == "__main__":
    figlib.main(__name__)
