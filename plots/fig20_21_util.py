#!/usr/bin/env python3
"""Figs. 20 and 21: GPU busy fraction over time per system, from CUPTI (result.metrics.
gpu_activity.over_time): a panel per system with all kernels (solid) and the compute kernels
alone (dashed) per time bin, the run's mean fractions in the legend; from the util summary of
`pulse reproduce`. Runs without CUPTI data (the cpu backend) get a note instead. Repeated points
(--repeat) draw every repetition's lines in the panel, thin and semi-transparent, and the legend
gives the mean of the runs' mean fractions with their min-max range.

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


def mean(acts, key):
    """The runs' mean fraction of key, with its min-max range when there are several."""
    st = figlib.stat(a.get(key) if isinstance(a.get(key), (int, float)) else None for a in acts)
    if st is None:
        return "?"
    return f"{st.mean:.2f}" + (f" ({st.lo:.2f}-{st.hi:.2f})" if st.n > 1 else "")


def binned(a):
    return bool(a.get("over_time", {}).get("t_s"))


def draw(s):
    acts = [(v, [r["metrics"].get("gpu_activity") or {} for _, r in runs])
            for v, runs in figlib.grouped(s)]
    runs = [(v, [a for a in reps if binned(a)]) for v, reps in acts]
    runs = [(v, reps) for v, reps in runs if reps]
    n = figlib.repeat(s)
    note = f"{n} runs per system, each drawn thin; legend: mean (min-max) of the runs' means"
    if not runs:
        fig, ax = plt.subplots(figsize=(7, 3))
        if not figlib.empty(ax, s):
            backend = s.get("grid", {}).get("base", {}).get("--backend", "?")
            figlib.placeholder(ax, f"no CUPTI data ({backend} backend)")
        return figlib.finish(fig, s, HEADING, f"{n} runs per system")
    without = [v for v, reps in acts if not any(binned(a) for a in reps)]
    heading = HEADING + (f" (no CUPTI data: {', '.join(without)})" if without else "")
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.2 + 1.8 * len(runs)), sharex=True,
                             sharey=True, squeeze=False)
    cols = figlib.colors(figlib.variants(s))
    for ax, (v, reps) in zip(axes[:, 0], runs):
        thin = len(reps) > 1
        for i, a in enumerate(reps):
            t, first = a["over_time"], i == 0
            ax.plot(t["t_s"], values(t.get("busy", [])), color=cols[v], lw=0.8 if thin else 1,
                    alpha=0.6 if thin else None,
                    label=f"all kernels, mean {mean(reps, 'busy_fraction')}" if first else None)
            if t.get("compute_busy"):
                ax.plot(t["t_s"], values(t["compute_busy"]), "--", color=cols[v],
                        lw=0.8 if thin else 1, alpha=0.4 if thin else 0.7,
                        label=(f"compute kernels, mean {mean(reps, 'compute_busy_fraction')}"
                               if first else None))
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("busy fraction")
        bin_s = reps[0]["over_time"].get("bin_s", 0)
        ax.set_title(f"{v} ({bin_s * 1e3:g} ms bins)" + (f", {len(reps)} runs" if thin else ""),
                     loc="left")
        ax.legend(loc="lower right")
    axes[-1, 0].set_xlabel("time since the first GPU activity (s)")
    return figlib.finish(fig, s, heading, note)


if __name__ == "__main__":
    figlib.main(__name__)
