#!/usr/bin/env python3
"""Recall I/O figure (the paper's figure 8) from the JSON of `pulse recall-bench` (reads only it):
bandwidth vs chunk size per engine at one chunk count, bandwidth vs chunk count per engine at one
chunk size, both against the single-copy PCIe peak measured in the same run; and, when the run has
them, the cost of zero-copy to the compute beside it (slowdown and zero-copy GB/s vs grid size).
Writes a PNG and a PDF."""
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


def plot_interference(ax, r, peak):
    kernels = r["interference"]["kernels"]
    ax2 = ax.twinx()
    for k, style in zip(kernels, ["o-", "s-"]):
        g = k["grids"]
        name = k["kernel"].split()[0]
        ax.plot([x["zc_blocks"] for x in g], [x["slowdown"] for x in g], style, color="#9467bd",
                label=f"{name} slowdown")
        ax2.plot([x["zc_blocks"] for x in g], [x["zc_GBps_beside"] for x in g], style + "-",
                 color="#d62728", alpha=0.6, label=f"zero-copy GB/s beside {name}")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    grids = sorted({x["zc_blocks"] for k in kernels for x in k["grids"]})
    ax.set_xticks(grids, [str(g) for g in grids])
    ax.minorticks_off()
    ax.set_xlabel("zero-copy grid (blocks of %d threads)" % r["interference"]["zc_threads"])
    ax.set_ylabel("compute time with / without zero-copy")
    ax2.set_ylabel("zero-copy GB/s", color="#d62728")
    top = max(x["zc_GBps_beside"] for k in kernels for x in k["grids"])
    ax2.set_ylim(0, max(peak, top) * 1.1)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


def draw(r, count=1024, chunk=8192):
    """The figure of recall-bench result r: the size panel at the chunk count nearest count,
    the count panel at the chunk size nearest chunk, the interference panel when r has it."""
    pts = ok_points(r)
    if not pts:
        raise ValueError("no successful sweep points")
    peak = r["peak"]["GBps"]
    engines = [e for e in r["config"]["engines"] if any(p["engine"] == e for p in pts)]
    count = pick(sorted({p["chunks"] for p in pts}), count)
    chunk = pick(sorted({p["chunk_bytes"] for p in pts}), chunk)
    interf = "kernels" in r.get("interference", {})
    fig, axes = plt.subplots(1, 3 if interf else 2, figsize=(15 if interf else 10, 4))
    plot_vs(axes[0], pts, engines, "chunk_bytes", "chunks", count, peak,
            f"chunk size (bytes), {count} chunks per recall")
    axes[0].legend(fontsize=8)
    plot_vs(axes[1], pts, engines, "chunks", "chunk_bytes", chunk, peak,
            f"chunks per recall, {human(chunk)}B chunks")
    if interf:
        plot_interference(axes[2], r, peak)
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
    try:
        fig = draw(r, a.count, a.chunk)
    except ValueError as e:
        raise SystemExit(f"{a.result}: {e}")
    stem, ext = os.path.splitext(a.out)
    for path in {a.out, stem + (".pdf" if ext.lower() != ".pdf" else ".png")}:
        fig.savefig(path, dpi=150)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
