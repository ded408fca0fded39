#!/usr/bin/env python3
"""Fig. 17 (the 1 : 8 GPU : host memory ratio): output throughput per system as bars, each bar
labelled with its ratio to vanilla's, from the ratio summary of `pulse reproduce`. Repeated points
(--repeat) draw the means, the min-max ranges as error bars, the ratios of the means.

usage: python3 plots/fig17b_ratio.py INPUT [--out PREFIX]
  INPUT   ratio/ratio.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig17b_ratio)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "ratio"


def draw(s, title="throughput at the 1 : 8 GPU : host memory ratio"):
    """Bars of s's systems under "Fig. 17: TITLE, GPU KV budget G GB" (fig17c_long too)."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not figlib.empty(ax, s):
        figlib.throughput_bars(ax, s, "vanilla")
    kv = s.get("grid", {}).get("base", {}).get("--kv-budget-gb")
    kv = f", GPU KV budget {kv:g} GB" if isinstance(kv, (int, float)) else ""
    return figlib.finish(fig, s, f"Fig. 17: {title}{kv}")


if __name__ == "__main__":
    figlib.main(__name__)
