#!/usr/bin/env python3
"""Decode-step benchmark figure: ms/step per (batch, context) point for pulse's vanilla step, the
PyTorch peer and the memory floor, from the JSON of `pulse bench decode-step` (reads only it)."""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import figlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("result", help="bench_decode.json")
    ap.add_argument("--out", default="decode_step.png", help="image to write (png or pdf)")
    a = ap.parse_args()
    r = figlib.load_json(a.result)
    pts = [p for p in r["points"] if p.get("status") == "ok"]
    if not pts:
        raise SystemExit(f"{a.result}: no successful points")
    labels = [f"{p['batch']}x{p['context'] // 1024}K" for p in pts]
    x = range(len(pts))
    w = 0.27
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([i - w for i in x], [p["floor_ms"] for p in pts], w, label="memory floor", color="#bbbbbb")
    ax.bar(list(x), [p["ms_per_step_median"] for p in pts], w, label="pulse vanilla", color="#1f77b4")
    if any("peer_ms_per_step" in p for p in pts):
        ax.bar([i + w for i in x], [p.get("peer_ms_per_step", float("nan")) for p in pts], w,
               label="PyTorch peer", color="#ff7f0e")
    for i, p in enumerate(pts):
        ax.annotate(f"{p['ratio_to_floor']:.2f}x", (i, p["ms_per_step_median"]), ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("batch x context")
    ax.set_ylabel("ms per decode step")
    env = r.get("env", {})
    ax.set_title(f"{r['config']['model']} decode step on {env.get('gpu', env.get('device', '?'))} "
                 f"({r.get('date', '')[:10]}); copy BW {r['copy_bandwidth_GBps']:.0f} GB/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=150)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
