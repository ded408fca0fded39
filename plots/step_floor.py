#!/usr/bin/env python3
"""Decode steps against their speed-of-light floor, from the JSON of `pulse run` (reads only it):
per run, each step's wall time beside its HBM floor, PCIe floor and floor (metrics.step.per_step),
and a bar per run of the mean step over its mean floor. Writes a PNG and a PDF."""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import figlib  # noqa: E402


def label(r):
    c = r.get("config", {})
    off = c.get("offload", {})
    parts = [c.get("policy", "?")]
    if off:
        parts += [off.get("selection", ""), off.get("recall_engine", "")]
    return " ".join(p for p in parts if p)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", help="pulse run result JSON files")
    ap.add_argument("--out", default="step_floor.png")
    a = ap.parse_args()
    runs = []
    for path in a.runs:
        r = figlib.load_json(path)
        st = r.get("metrics", {}).get("step")
        if r.get("status") == "ok" and st and st.get("per_step", {}).get("step_ms"):
            runs.append((label(r), st))
        else:
            print(f"{path}: no steps (status {r.get('status')}), left out")
    if not runs:
        raise SystemExit("no run with steps")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (name, st) in enumerate(runs):
        ps = st["per_step"]
        color = f"C{i}"
        axes[0].plot(ps["step_ms"], color=color, label=f"{name}: step")
        axes[0].plot(ps["floor_ms"], color=color, ls="--", label=f"{name}: floor")
    axes[0].set_xlabel("decode step")
    axes[0].set_ylabel("ms")
    axes[0].set_title("each step against its floor")
    axes[0].legend(fontsize=7)
    names = [n for n, _ in runs]
    ratios = [st.get("ratio_to_floor") or 0 for _, st in runs]
    axes[1].bar(range(len(runs)), ratios, color=[f"C{i}" for i in range(len(runs))])
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_xticks(range(len(runs)))
    axes[1].set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    axes[1].set_ylabel("mean step / mean floor")
    bw = runs[0][1]
    axes[1].set_title("HBM copy %.0f GB/s, H2D peak %.1f GB/s (first run)"
                      % (bw.get("hbm_copy_GBps") or 0, bw.get("h2d_peak_GBps") or 0), fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=130)
    fig.savefig(os.path.splitext(a.out)[0] + ".pdf")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
