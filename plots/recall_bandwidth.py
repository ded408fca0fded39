#!/usr/bin/env python3
"""Recall I/O figure (the paper's figure 8) from the JSON of `pulse recall-bench` (reads only it):
bandwidth vs chunk size per engine at one chunk count, bandwidth vs chunk count per engine at one
chunk size, both against the single-copy PCIe peak measured in the same run; and below them the
cost of zero-copy to the compute beside it: the zero-copy gather's GB/s alone and beside each
compute kernel (goal: at least 0.80 of alone) and the kernels' slowdown (goal: at most 1.15x),
both against the gather's grid size, or a placeholder saying why the run has none (skipped on
the CPU backend and with --no-interference). Writes a PNG and a PDF."""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import figlib  # noqa: E402

COLORS = {"per-block": "#7f7f7f", "gather-scatter": "#1f77b4", "zero-copy": "#d62728",
          "batch": "#2ca02c"}


def human(b):
    return f"{b // (1 << 20)}M" if b >= 1 << 20 else f"{b // 1024}K" if b >= 1024 else f"{b}"


def ok_points(r):
    return [p for p in r.get("sweep", []) if p.get("status") == "ok"]


def pick(values, want):
    """want if present, else the value closest to it (log scale)."""
    import math
    return min(values, key=lambda v: abs(math.log(v / want)))


def plot_vs(ax, pts, engines, key, fixed_key, fixed, peak, xlabel):
    for e in engines:
        sel = sorted((p for p in pts if p["engine"] == e and p[fixed_key] == fixed),
                     key=lambda p: p[key])
        if sel:
            ax.plot([p[key] for p in sel], [p["GBps"] for p in sel], "o-", label=e,
                    color=COLORS.get(e))
    ax.axhline(peak, ls="--", color="black", lw=1, label=f"PCIe peak {peak:.1f} GB/s")
    ax.set_xscale("log", base=2)
    xs = sorted({p[key] for p in pts if p[fixed_key] == fixed})
    ax.set_xticks(xs, [human(x) if key == "chunk_bytes" else str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("recall bandwidth (GB/s)")
    ax.set_ylim(0, max([peak] + [p["GBps"] for p in pts if p[fixed_key] == fixed]) * 1.1)
    ax.grid(alpha=0.3)


# The goals of zero-copy beside compute: the gather keeps at least GOAL_KEEP of its bandwidth
# alone, and the compute beside it slows by at most GOAL_SLOWDOWN.
GOAL_KEEP = 0.80
GOAL_SLOWDOWN = 1.15
KERNEL_STYLE = [("#9467bd", "s"), ("#8c564b", "^"), ("#e377c2", "v"), ("#17becf", "D")]


def interference(r):
    """(kernels, None): the compute kernels of r's runs beside zero-copy, each with its grids in
    order; or (None, why) when r has none (skipped, out of memory, an older result)."""
    i = r.get("interference")
    if not isinstance(i, dict):
        return None, "no runs beside compute in this result"
    if "skipped" in i:
        return None, f"runs beside compute skipped: {i['skipped']}"
    ks = [dict(k, grids=sorted(k["grids"], key=lambda g: g["zc_blocks"]))
          for k in i.get("kernels") or [] if k.get("grids")]
    if not ks:
        return None, f"no runs beside compute ({i.get('status', 'no kernels')})"
    return ks, None


def short(kernel):
    """'gemm_bf16 8192x8192x8192' -> 'gemm_bf16'."""
    return kernel["kernel"].split()[0]


def goals_met(kernel):
    """The grids (zc_blocks) where both goals hold beside kernel."""
    return [g["zc_blocks"] for g in kernel["grids"]
            if g["zc_GBps_beside"] >= GOAL_KEEP * g["zc_GBps_alone"]
            and g["slowdown"] <= GOAL_SLOWDOWN]


def minmax(centers, samples):
    """Error bars from each center to the min and max of its samples; None without samples."""
    if not all(samples):
        return None
    return [[c - min(s) for c, s in zip(centers, samples)],
            [max(s) - c for c, s in zip(centers, samples)]]


def grid_axis(ax, r, kernels):
    ax.set_xscale("log", base=2)
    grids = sorted({g["zc_blocks"] for k in kernels for g in k["grids"]})
    ax.set_xticks(grids, [str(g) for g in grids])
    ax.minorticks_off()
    threads = r["interference"].get("zc_threads")
    ax.set_xlabel("zero-copy grid (blocks" + (f" of {threads} threads)" if threads else ")"))


def plot_beside(ax, r, kernels, peak):
    """The zero-copy gather's GB/s alone (the mean of its runs before each kernel) and beside
    each kernel against its grid, with the goal (GOAL_KEEP of alone) and the PCIe peak; the
    right axis in fractions of the peak; error bars: min-max of the runs beside."""
    i = r["interference"]
    grids = sorted({g["zc_blocks"] for k in kernels for g in k["grids"]})
    alone = [sum(g["zc_GBps_alone"] for k in kernels for g in k["grids"] if g["zc_blocks"] == x) /
             sum(1 for k in kernels for g in k["grids"] if g["zc_blocks"] == x) for x in grids]
    ax.plot(grids, alone, "o-", color=COLORS["zero-copy"], lw=2.5, alpha=0.6,
            label="zero-copy alone")
    ax.plot(grids, [GOAL_KEEP * a for a in alone], ":", color=COLORS["zero-copy"],
            label=f"goal: {GOAL_KEEP:.2f} x alone")
    for k, (color, mark) in zip(kernels, KERNEL_STYLE):
        xs = [g["zc_blocks"] for g in k["grids"]]
        ys = [g["zc_GBps_beside"] for g in k["grids"]]
        ax.errorbar(xs, ys, yerr=minmax(ys, [g.get("zc_GBps_beside_samples") for g in k["grids"]]),
                    fmt=mark + "-", color=color, capsize=3, elinewidth=0.8,
                    label=f"beside {short(k)}")
    ax.axhline(peak, ls="--", color="black", lw=1, label=f"PCIe peak {peak:.1f} GB/s")
    grid_axis(ax, r, kernels)
    ax.set_ylabel("zero-copy recall bandwidth (GB/s)")
    top = max([peak] + alone + [max(g.get("zc_GBps_beside_samples") or [g["zc_GBps_beside"]])
                                for k in kernels for g in k["grids"]])
    ax.set_ylim(0, top * 1.1)
    sec = ax.secondary_yaxis("right", functions=(lambda v: v / peak, lambda f: f * peak))
    sec.set_ylabel("fraction of the PCIe peak")
    chunk = i.get("zc_chunk_bytes")
    ax.set_title("zero-copy beside compute" + (f"\n{i.get('zc_chunks')} x {human(chunk)}B "
                                               "recalls, two deep" if chunk else ""))
    ax.legend(fontsize=7, loc="lower left")


def plot_slowdown(ax, r, kernels):
    """Each kernel's time beside zero-copy over its time alone against the grid, with the goal
    (GOAL_SLOWDOWN); error bars: min-max of the runs beside over the median alone."""
    samples_all, ys_all = [], []
    for k, (color, mark) in zip(kernels, KERNEL_STYLE):
        xs = [g["zc_blocks"] for g in k["grids"]]
        ys = [g["slowdown"] for g in k["grids"]]
        samples = [[s / k["alone_ms"] for s in g.get("beside_ms_samples") or []]
                   for g in k["grids"]]
        samples_all += samples
        ys_all += ys
        ax.errorbar(xs, ys, yerr=minmax(ys, samples), fmt=mark + "-", color=color, capsize=3,
                    elinewidth=0.8, label=f"{k['kernel']} ({k['alone_ms']:.1f} ms alone)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(GOAL_SLOWDOWN, ls=":", color="black", lw=1,
               label=f"goal: at most {GOAL_SLOWDOWN:.2f}x")
    grid_axis(ax, r, kernels)
    ax.set_ylabel("compute time beside zero-copy / alone (log)")
    ax.set_yscale("log")
    top = max(max(s) if s else y for s, y in zip(samples_all, ys_all))
    low = min(min(s) if s else y for s, y in zip(samples_all, ys_all))
    ticks = [t for t in (1, GOAL_SLOWDOWN, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32) if t <= top * 1.1]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(min(0.95, low * 0.97), max(top * 1.15, 1.3))
    met = ", ".join(f"{short(k)}: " + (", ".join(map(str, goals_met(k))) + " blocks"
                                       if goals_met(k) else "none") for k in kernels)
    ax.set_title(f"compute beside zero-copy\nboth goals met: {met}")
    ax.legend(fontsize=7, loc="upper left")


def draw(r, count=1024, chunk=8192):
    """The figure of recall-bench result r: the size panel at the chunk count nearest count and
    the count panel at the chunk size nearest chunk (one placeholder when the sweep has no
    successful point); below them the zero-copy gather beside compute and the compute's
    slowdown against the gather's grid, or a placeholder saying why r has no such runs."""
    pts = ok_points(r)
    kernels, why = interference(r)
    top = ["size", "count"] if pts else ["sweep", "sweep"]
    if kernels:
        fig, ax = plt.subplot_mosaic([top, ["beside", "slowdown"]], figsize=(11, 8))
    else:
        fig, ax = plt.subplot_mosaic([top, ["interference", "interference"]], figsize=(11, 5.5),
                                     gridspec_kw={"height_ratios": [4, 1]})
    for name, a in ax.items():
        a.set_label(name)
    peak = r["peak"]["GBps"]
    if pts:
        engines = [e for e in r["config"]["engines"] if any(p["engine"] == e for p in pts)]
        count = pick(sorted({p["chunks"] for p in pts}), count)
        chunk = pick(sorted({p["chunk_bytes"] for p in pts}), chunk)
        plot_vs(ax["size"], pts, engines, "chunk_bytes", "chunks", count, peak,
                f"chunk size (bytes), {count} chunks per recall")
        ax["size"].legend(fontsize=8)
        plot_vs(ax["count"], pts, engines, "chunks", "chunk_bytes", chunk, peak,
                f"chunks per recall, {human(chunk)}B chunks")
    else:
        figlib.placeholder(ax["sweep"], "no successful sweep points")
    if kernels:
        plot_beside(ax["beside"], r, kernels, peak)
        plot_slowdown(ax["slowdown"], r, kernels)
    else:
        figlib.placeholder(ax["interference"], why)
    env = r.get("env", {})
    fig.suptitle(f"recall engines on {env.get('gpu', env.get('device', '?'))} "
                 f"({r.get('date', '')[:10]}): scattered host-pool chunks into scattered GPU slots")
    fig.tight_layout()
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("result", help="recall_bench.json")
    ap.add_argument("--out", default="recall_bandwidth.png",
                    help="image to write; a .pdf (or .png) with the same stem is written too")
    ap.add_argument("--count", type=int, default=1024, help="chunk count of the size panel")
    ap.add_argument("--chunk", type=int, default=8192, help="chunk bytes of the count panel")
    a = ap.parse_args()
    r = figlib.load_json(a.result)
    if not ok_points(r):
        raise SystemExit(f"{a.result}: no successful sweep points")
    fig = draw(r, a.count, a.chunk)
    stem, ext = os.path.splitext(a.out)
    for path in {a.out, stem + (".pdf" if ext.lower() != ".pdf" else ".png")}:
        fig.savefig(path, dpi=150)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
