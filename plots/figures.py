#!/usr/bin/env python3
"""Draws every figure of `pulse reproduce` whose summary exists under RESULTS_DIR (the --out-dir
of pulse reproduce): one line per figure written (its PNG and PDF) and one per figure skipped
(why).

usage: python3 plots/figures.py RESULTS_DIR [--out DIR] [--only LIST]
  --out DIR    where the figures go (default RESULTS_DIR/figures); each as NAME.png and NAME.pdf
  --only LIST  figures, comma separated, by short name (fig17) or script name
               (fig17_throughput); default all
exit: 0 every selected figure drawn or skipped for want of its summary, 1 a figure failed,
2 bad usage
"""
import argparse
import importlib
import os
import sys

import figlib

FIGURES = ["fig8_recall", "fig17_throughput", "fig17b_ratio", "fig17c_long", "fig18_tpot",
           "fig20_21_util", "fig22_batches", "fig23_ablation", "fig24_admission",
           "fig25_capacity", "fig26_bandwidth"]


def short(name):
    """fig17b_ratio -> fig17b, fig20_21_util -> fig20_21."""
    return name.rsplit("_", 1)[0]


def selected(ap, only):
    """The figures of --only, in FIGURES' order; a usage error for an unknown one."""
    if not only:
        return FIGURES
    want = [w.strip() for w in only.split(",") if w.strip()]
    unknown = [w for w in want if w not in FIGURES and w not in map(short, FIGURES)]
    if unknown:
        ap.error(f"unknown figure {', '.join(unknown)} (known: {', '.join(map(short, FIGURES))})")
    return [f for f in FIGURES if f in want or short(f) in want]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="the --out-dir of pulse reproduce")
    ap.add_argument("--out", help="output folder (default RESULTS_DIR/figures)")
    ap.add_argument("--only", help="figures, comma separated (fig17,fig23)")
    a = ap.parse_args()
    names = selected(ap, a.only)
    if not os.path.isdir(a.results):
        ap.error(f"{a.results}: not a directory")
    out = a.out or os.path.join(a.results, "figures")
    failed = 0
    for name in names:
        module = importlib.import_module(name)
        try:
            summary = figlib.locate(a.results, module.EXPERIMENT)
            paths = figlib.render(module, summary, os.path.join(out, name))
            print(f"wrote {name}: {' '.join(paths)}")
        except figlib.InputError as e:
            print(f"skipped {name}: {e}")
        except Exception as e:  # a figure that cannot be drawn does not stop the others
            print(f"failed {name}: {type(e).__name__}: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
