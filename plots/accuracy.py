#!/usr/bin/env python3
"""Accuracy figure (the paper's table 1 as a plot) from the JSON of `pulse accuracy` (reads only
it): per context length, the average score over tasks relative to full attention, for every
policy against the token budget; and, beside it, the MAM table of each task (global layers x
query heads), so that head roles can be compared across tasks. Writes a PNG and a PDF."""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import figlib  # noqa: E402

COLORS = {"solohead": "#d62728", "solohead-q": "#ff7f0e", "reversed": "#7f7f7f",
          "reversed-q": "#bcbd22", "headwise": "#1f77b4", "queryhead": "#9467bd",
          "infinigen": "#2ca02c"}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("result", help="JSON written by pulse accuracy --out")
    ap.add_argument("--out", default="accuracy.png", help="PNG path (a PDF is written beside it)")
    a = ap.parse_args()
    r = figlib.load_json(a.result)
    rows = [t for t in r["table"] if t["task"] == "average"]
    lengths = sorted({t["length"] for t in rows})
    policies = [p for p in r["config"]["policies"] if p != "full"]
    mam = r["mam"]["per_task"]
    ncols = len(lengths) + len(mam)
    fig, axes = plt.subplots(1, ncols, figsize=(3.6 * ncols, 3.4), squeeze=False)
    for i, length in enumerate(lengths):
        ax = axes[0][i]
        for p in policies:
            pts = sorted((t["budget"], t["relative_to_full"]) for t in rows
                         if t["length"] == length and t["policy"] == p
                         and t["relative_to_full"] is not None)
            if pts:
                ax.plot([b for b, _ in pts], [100 * v for _, v in pts], "o-", label=p,
                        color=COLORS.get(p))
        full = next((t["score"] for t in rows if t["length"] == length and t["policy"] == "full"),
                    None)
        ax.axhline(100, color="k", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("token budget")
        ax.set_ylabel("% of full attention's score")
        ax.set_title(f"{length // 1024}K tokens (full: {full:.1f})" if full is not None
                     else f"{length} tokens")
        if i == 0:
            ax.legend(fontsize=7)
    layers = r["mam"]["global_layers"]
    for j, (task, m) in enumerate(sorted(mam.items())):
        ax = axes[0][len(lengths) + j]
        im = ax.imshow(m["mam"], vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(layers)), [f"L{l}" for l in layers])
        ax.set_xlabel("query head")
        ax.set_title(f"MAM, {task}")
        for y, row in enumerate(m["mam"]):
            for x, v in enumerate(row):
                ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w")
    fig.colorbar(im, ax=axes[0][-1], fraction=0.05)
    env = r.get("env", {})
    fig.suptitle(f"{r['config']['model'].split('/')[-1]} on {env.get('gpu', r['config']['backend'])}"
                 f", budget of MAM {r['mam']['budget_tokens']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=150)
    fig.savefig(os.path.splitext(a.out)[0] + ".pdf")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
