#!/usr/bin/env python3
"""Fig. 17 at 128K prompts: the bars of fig17b_ratio (throughput per system, labelled with its
ratio to vanilla's) from the long summary of `pulse reproduce` (8 x 128K with one request's KV
of GPU memory at full scale).

usage: python3 plots/fig17c_long.py INPUT [--out PREFIX]
  INPUT   long/long.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig17c_long)
"""
import fig17b_ratio
import figlib

EXPERIMENT = "long"


def draw(s):
    wl = s.get("grid", {}).get("base", {}).get("--workload", "")
    return fig17b_ratio.draw(s, f"throughput at long prompts ({wl})")


if __name__ == "__main__":
    figlib.main(__name__)
