#!/usr/bin/env python3
"""Fig. 8: the recall engines' bandwidth against chunk size (and chunk count), against the PCIe
peak, from the recall experiment of `pulse reproduce` (a `pulse recall-bench` result); the panels
are recall_bandwidth.py's.

usage: python3 plots/fig8_recall.py INPUT [--out PREFIX]
  INPUT   recall/recall.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig8_recall)
"""
import matplotlib.pyplot as plt

import figlib
import recall_bandwidth

EXPERIMENT = "recall"


def draw(r):
    if recall_bandwidth.ok_points(r):
        fig = recall_bandwidth.draw(r)
    else:
        fig, ax = plt.subplots(figsize=(7, 3))
        figlib.placeholder(ax, "no successful sweep points")
    return figlib.finish(fig, r, "Fig. 8: recall bandwidth against chunk size and count "
                         "(scattered host-pool chunks into scattered GPU slots)")


if __name__ == "__main__":
    figlib.main(__name__)
