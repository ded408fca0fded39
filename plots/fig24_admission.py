#!/usr/bin/env python3
"""Fig. 24: IOAA against fixed offload thresholds: output throughput and mean TPOT per workload
(the summary's variants, e.g. servegen and mooncake), one bar per admission value in the grid's
order (grid.axes["--admission"]), IOAA highlighted, from the admission summary of `pulse
reproduce`. With timed arrivals the throughput follows the arrivals wherever the system keeps
up, so the TPOT panel shows what the admission changed. Repeated points (--repeat) draw the
means, the min-max ranges as error bars.

usage: python3 plots/fig24_admission.py INPUT [--out PREFIX]
  INPUT   admission/admission.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig24_admission)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "admission"
FIXED = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c"]


PANELS = [("output_throughput", "output throughput (tok/s)", "%.0f"),
          ("mean_tpot_ms", "mean TPOT (ms)", "%.1f")]


def panel(ax, s, key, ylabel, fmt, values):
    by_name = {figlib.sanitize(v): v for v in values}
    val = {}
    for v, p, _, st in figlib.aggregate(s, lambda r: figlib.metric(r, key)):
        a = figlib.name_value(p, "admission")
        a = by_name.get(a, a)
        if a not in values:
            values.append(a)
        val[(v, a)] = st
    workloads = [w for w in figlib.variants(s) if any(k[0] == w for k in val)]
    fixed = iter(FIXED)
    for i, a in enumerate(values):
        ioaa = a == "ioaa"
        pts = [(j, val[(wl, a)]) for j, wl in enumerate(workloads)
               if val.get((wl, a)) is not None]
        xs, w = figlib.group_x([j for j, _ in pts], i, len(values))
        b = figlib.bar(ax, xs, [t for _, t in pts], w,
                       label="IOAA" if ioaa else a.replace(":", " "),
                       color=figlib.STYLE["pulseinfer"][0] if ioaa else next(fixed, "#2171b5"),
                       edgecolor="black" if ioaa else "white", linewidth=1.2 if ioaa else 0.5)
        ax.bar_label(b, fmt=fmt, padding=2, fontsize=7,
                     fontweight="bold" if ioaa else "normal")
    figlib.bar_axes(ax, workloads, ylabel, "workload")
    ax.margins(y=0.15)


def draw(s):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if figlib.empty(axes[0], s):
        return figlib.finish(fig, s, "Fig. 24: IOAA against fixed admission thresholds")
    values = [str(v) for v in s.get("grid", {}).get("axes", {}).get("--admission", [])]
    for ax, (key, ylabel, fmt) in zip(axes, PANELS):
        panel(ax, s, key, ylabel, fmt, values)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, title="admission", ncols=len(labels), loc="lower center",
               bbox_to_anchor=(0.5, -0.02), frameon=False)
    fig.subplots_adjust(bottom=0.25)
    return figlib.finish(fig, s, "Fig. 24: IOAA against fixed admission thresholds")


if __name__ == "__main__":
    figlib.main(__name__)
