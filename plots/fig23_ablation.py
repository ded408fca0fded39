#!/usr/bin/env python3
"""Fig. 23: ablation, pulseinfer's mechanisms added one at a time: output throughput per step as
bars in the grid's order, each labelled with its speedup over the first, from the ablation summary
of `pulse reproduce`. Repeated points (--repeat) draw the means, the min-max ranges as error bars,
the speedups of the means.

usage: python3 plots/fig23_ablation.py INPUT [--out PREFIX]
  INPUT   ablation/ablation.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig23_ablation)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "ablation"


def draw(s):
    fig, ax = plt.subplots(figsize=(12, 4.8))
    if not figlib.empty(ax, s):
        figlib.throughput_bars(ax, s, figlib.variants(s)[0], "speedup over")
    return figlib.finish(fig, s, "Fig. 23: ablation, mechanisms added one at a time")


if __name__ == "__main__":
    figlib.main(__name__)
