#!/usr/bin/env python3
"""Fig. 25: output throughput against the GPU KV budget (result.config.kv_budget_gb), one line per
system, from the capacity summary of `pulse reproduce`. Repeated points (--repeat) draw the means,
the min-max ranges as error bars.

usage: python3 plots/fig25_capacity.py INPUT [--out PREFIX]
  INPUT   capacity/capacity.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig25_capacity)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "capacity"


def draw(s):
    fig, ax = plt.subplots(figsize=(6, 4))
    if not figlib.empty(ax, s):
        data = figlib.series(s, lambda r: r.get("config", {}).get("kv_budget_gb"),
                             lambda r: figlib.metric(r, "output_throughput"))
        figlib.plot_lines(ax, s, data, "GPU KV budget (GB)", "output throughput (tok/s)")
        xs = sorted({x for pts in data.values() for x, _ in pts})
        if xs and xs[0] > 0 and xs[-1] / xs[0] > 10:
            ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.legend()
    return figlib.finish(fig, s, "Fig. 25: throughput against the GPU KV budget")


if __name__ == "__main__":
    figlib.main(__name__)
