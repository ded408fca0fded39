#!/usr/bin/env python3
"""Fig. 17 at 128K prompts: output throughput per system as bars, each labelled with its ratio to
vanilla's, from the long summary of `pulse reproduce` (8 x 128K with one request's KV of GPU
memory at full scale). Repeated points (--repeat) draw the means and the min-max ranges.

usage: python3 plots/fig17c_long.py INPUT [--out PREFIX]
  INPUT   long/long.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig17c_long)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "long"


def draw(s):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not figlib.empty(ax, s):
        figlib.throughput_bars(ax, s, "vanilla")
    base = s.get("grid", {}).get("base", {})
    kv, wl = base.get("--kv-budget-gb"), base.get("--workload", "")
    kv = f", GPU KV budget {kv:g} GB" if isinstance(kv, (int, float)) else ""
    return figlib.finish(fig, s, f"Fig. 17: throughput at long prompts ({wl}){kv}")


if __name__ == "__main__":
    figlib.main(__name__)
