#!/usr/bin/env python3
"""Fig. 18: mean and p99 time per output token (TPOT) against the mean input length, one line per
system, from the e2e summary of `pulse reproduce`. Repeated points (--repeat) draw the means, the
min-max ranges as error bars.

usage: python3 plots/fig18_tpot.py INPUT [--out PREFIX]
  INPUT   e2e/e2e.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig18_tpot)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "e2e"
PANELS = [("mean_tpot_ms", "mean TPOT"), ("p99_tpot_ms", "p99 TPOT")]


def draw(s):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, what) in zip(axes, PANELS):
        if figlib.empty(ax, s):
            continue
        data = figlib.series(s, figlib.input_len, lambda r, k=key: figlib.metric(r, k))
        figlib.plot_lines(ax, s, data, "mean input length (tokens)", f"{what} (ms)")
        figlib.length_ticks(ax, data)
        ax.set_title(what)
    if axes[0].lines:
        axes[0].legend()
    return figlib.finish(fig, s, "Fig. 18: time per output token against input length")


if __name__ == "__main__":
    figlib.main(__name__)
