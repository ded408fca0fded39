#!/usr/bin/env python3
"""Fig. 8: the recall engines' bandwidth against chunk size (and chunk count), against the PCIe
peak, and the zero-copy gather beside compute: its GB/s alone and beside each compute kernel and
the kernels' slowdown against its grid, with the goals (0.80 of alone, at most 1.15x); from the
recall experiment of `pulse reproduce` (a `pulse recall-bench` result). The panels are
recall_bandwidth.py's; a run without the runs beside compute (the CPU backend,
--no-interference) says so in their place.

usage: python3 plots/fig8_recall.py INPUT [--out PREFIX]
  INPUT   recall/recall.json (or .json.gz), its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig8_recall)
"""
import figlib
import recall_bandwidth

EXPERIMENT = "recall"


def draw(r):
    return figlib.finish(recall_bandwidth.draw(r), r,
                         "Fig. 8: recall bandwidth against chunk size and count (scattered "
                         "host-pool chunks into scattered GPU slots) and beside compute")


if __name__ == "__main__":
    figlib.main(__name__)
