#!/usr/bin/env python3
"""Fig. 26: mean TPOT and output throughput against the PCIe bandwidth left to recall (the
recall cap, a fraction of the peak), each normalised to its system's point at the full link
(the cap at fraction 1), from the bandwidth summary of `pulse reproduce`. That point is capped
too: where the engine never reaches the peak the cap never waits, but a capped zero-copy runs
host-planned (its pacing is the engine's, which the device-planned gather does not go through),
so pulseinfer-zc's reference is slower than its uncapped runs elsewhere (fig. 17). IOAA knows
the cap, so pulseinfer's batches differ between points (fewer offloaded at a lower cap): its
TPOT can fall where its throughput holds, which the second panel shows. A system without a
point at fraction 1 is left out. Repeated points (--repeat) draw the mean over that point's
mean, the min-max ranges (over the same) as error bars.

usage: python3 plots/fig26_bandwidth.py INPUT [--out PREFIX]
  INPUT   bandwidth/bandwidth.json, its folder, or the --out-dir of pulse reproduce
  --out   writes PREFIX.png and PREFIX.pdf (default fig26_bandwidth)
"""
import matplotlib.pyplot as plt

import figlib

EXPERIMENT = "bandwidth"


def fraction(r, p):
    """A point's cap fraction: its config's, else its name's."""
    f = r.get("config", {}).get("recall_cap_fraction")
    if f is None:
        f = figlib.name_value(p, "recall-cap-fraction")
    try:
        return float(f)
    except (TypeError, ValueError):
        return None


PANELS = [("mean_tpot_ms", "mean TPOT / mean TPOT at the cap 1.0"),
          ("output_throughput", "throughput / throughput at the cap 1.0")]


def panel(ax, s, key, ylabel):
    raw = {}
    for v, p, r, t in figlib.aggregate(s, lambda r: figlib.metric(r, key)):
        f = fraction(r, p)
        if f is not None:
            raw.setdefault(v, []).append((f, t))
    data, missing = {}, []
    for v in figlib.variants(s):
        full = dict(raw.get(v, [])).get(1.0)
        if full and full.mean:
            data[v] = sorted((f, t.scaled(1 / full.mean)) for f, t in raw[v])
        elif v in raw:
            missing.append(v)
    figlib.plot_lines(ax, s, data, "recall bandwidth cap (fraction of the PCIe peak)", ylabel)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(sorted({f for pts in data.values() for f, _ in pts}))
    if data:
        ax.legend()
    if missing:
        ax.set_title(f"no point at the cap 1.0: {', '.join(missing)}", fontsize=8)


def draw(s):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if figlib.empty(axes[0], s):
        return figlib.finish(fig, s, "Fig. 26: TPOT and throughput against the recall bandwidth")
    for ax, (key, ylabel) in zip(axes, PANELS):
        panel(ax, s, key, ylabel)
    return figlib.finish(fig, s, "Fig. 26: TPOT and throughput against the recall bandwidth")


if __name__ == "__main__":
    figlib.main(__name__)
