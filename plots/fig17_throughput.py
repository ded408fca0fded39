#!/usr/bin/env python3
"""Fig. 17: output throughput against the mean input length, one line per system, from the e2e
summary of `pulse reproduce`. Repeated points (--repeat) draw the means, the min-max ranges as error
bars.

usage: python3 plots/fig17_throughput.py INPUT [--out PREFIX]
  INPUT   e2e/e2e.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig17_throughput)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "e2e"


def draw(s):
    fig, ax = plt.subplots(figsize=(6, 4))
    if not figlib.empty(ax, s):
        data = figlib.series(s, figlib.input_len, lambda r: figlib.metric(r, "output_throughput"))
        figlib.plot_lines(ax, s, data, "mean input length (tokens)", "output throughput (tok/s)")
        figlib.length_ticks(ax, data)
        ax.legend()
    return figlib.finish(fig, s, "Fig. 17: output throughput against input length")


if __name__ == "__main__":
    figlib.main(__name__)
