#!/usr/bin/env python3
"""Figs. 20 and 21: GPU busy fraction over time per system, from CUPTI (result.metrics.
gpu_activity.over_time): a panel per system with all kernels (solid) and the compute kernels
alone (dashed) per time bin, the run's mean fractions in the legend; from the util summary of
`pulse reproduce`. Runs without CUPTI data (the cpu backend) get a note instead.

usage: python3 plots/fig20_21_util.py INPUT [--out PREFIX]
  INPUT   util/util.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig20_21_util)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "util"
HEADING = "Figs. 20, 21: GPU busy over time"


def values(xs):
    return [float("nan") if x is None else x for x in xs]


def mean(a, key):
    v = a.get(key)
    return f"{v:.2f}" if isinstance(v, (int, float)) else "?"


def binned(a):
    return bool(a.get("over_time", {}).get("t_s"))


def draw(s):
    acts = [(v, r["metrics"].get("gpu_activity") or {}) for v, _, r in figlib.ok_points(s)]
    runs = [(v, a) for v, a in acts if binned(a)]
    if not runs:
        fig, ax = plt.subplots(figsize=(7, 3))
        if not figlib.empty(ax, s):
            backend = s.get("grid", {}).get("base", {}).get("--backend", "?")
            figlib.placeholder(ax, f"no CUPTI data ({backend} backend)")
        return figlib.finish(fig, s, HEADING)
    without = [v for v, a in acts if not binned(a)]
    heading = HEADING + (f" (no CUPTI data: {', '.join(without)})" if without else "")
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.2 + 1.8 * len(runs)), sharex=True,
                             sharey=True, squeeze=False)
    cols = figlib.colors(figlib.variants(s))
    for ax, (v, a) in zip(axes[:, 0], runs):
        t = a["over_time"]
        ax.plot(t["t_s"], values(t.get("busy", [])), color=cols[v], lw=1,
                label=f"all kernels, mean {mean(a, 'busy_fraction')}")
        if t.get("compute_busy"):
            ax.plot(t["t_s"], values(t["compute_busy"]), "--", color=cols[v], lw=1, alpha=0.7,
                    label=f"compute kernels, mean {mean(a, 'compute_busy_fraction')}")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("busy fraction")
        ax.set_title(f"{v} ({t.get('bin_s', 0) * 1e3:g} ms bins)", loc="left")
        ax.legend(loc="lower right")
    axes[-1, 0].set_xlabel("time since the first GPU activity (s)")
    return figlib.finish(fig, s, heading)


if __name__ == "__main__":
    figlib.main(__name__)
