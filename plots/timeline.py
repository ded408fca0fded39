#!/usr/bin/env python3
"""The schedule picture from a trace that timeline_write wrote (runtime/sched/timeline.h; reads only
it): one row per track (normal batch, offload batch, recall I/O), each span a bar coloured by
its batch (or its track), the layer number on bars wide enough to hold it, nested spans drawn
thinner inside their parent, host-clock spans hatched. PulseInfer's interruptible layer-wise
schedule shows as normal-batch layers filling the offload batch's recall waits. The title gives
the device busy fraction of the whole trace (otherData). Writes a PNG and a PDF.

--chain prints instead what the recall I/O track did within each offload-batch step (the
steps from --from-step on, default 2, past the warm-up): per step on average the step's length,
the time each kind of I/O span (prefetch, gather) kept the link busy, the idle gaps between
consecutive I/O spans by their kinds (e.g. prefetch -> gather: the link waiting for the
compute between a layer's prefetch and its correction), and the time from the step's start to
its first I/O span and from its last to the step's end; --chain-json FILE writes the same."""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import figlib  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

TRACKS = {0: "normal batch", 1: "offload batch", 2: "recall I/O"}
TRACK_COLORS = {0: "#1f77b4", 1: "#ff7f0e", 2: "#2ca02c"}


def window_arg(s):
    try:
        a, b = (float(x) for x in s.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--window {s!r}: expected START:END in ms, e.g. 0:25")
    if not b > a:
        raise argparse.ArgumentTypeError(f"--window {s!r}: END must be greater than START")
    return a, b


def load(path):
    tr = figlib.load_json(path)
    if not isinstance(tr.get("traceEvents"), list):
        raise SystemExit(f"{path}: no traceEvents array (not a trace from timeline_write)")
    names = dict(TRACKS)
    spans = []
    for e in tr["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e.get("tid", 0)] = e.get("args", {}).get("name", "?")
        elif e.get("ph") == "X":
            a = e.get("args", {})
            spans.append({"t0": e["ts"] / 1e3, "t1": (e["ts"] + e["dur"]) / 1e3,
                          "tid": e.get("tid", 0), "name": e.get("name", ""),
                          "batch": a.get("batch", -1), "layer": a.get("layer", -1),
                          "step": a.get("step", -1), "host": a.get("clock") == "host"})
    return tr, names, spans


def nest_depths(spans):
    """Depth of each span within its track: 0 at the top level, 1 inside one, ..."""
    for tid in {s["tid"] for s in spans}:
        open_ends = []
        for s in sorted((s for s in spans if s["tid"] == tid), key=lambda s: (s["t0"], -s["t1"])):
            while open_ends and open_ends[-1] <= s["t0"]:
                open_ends.pop()
            s["depth"] = len(open_ends)
            open_ends.append(s["t1"])


def chain(spans, from_step):
    """The recall I/O track's work within each offload-batch step (track 1's "step" spans, by
    batch and step), averaged over the steps >= from_step that hold I/O spans."""
    steps = {(s["batch"], s["step"]): s for s in spans
             if s["tid"] == 1 and s["name"] == "step" and s["step"] >= from_step}
    io = {}
    for s in spans:
        if s["tid"] == 2 and (s["batch"], s["step"]) in steps:
            io.setdefault((s["batch"], s["step"]), []).append(s)
    if not io:
        return None
    busy, gaps, n = {}, {}, len(io)
    step_ms = lead = tail = 0.0
    for key, ios in io.items():
        st = steps[key]
        ios.sort(key=lambda s: s["t0"])
        step_ms += st["t1"] - st["t0"]
        lead += ios[0]["t0"] - st["t0"]
        tail += st["t1"] - max(s["t1"] for s in ios)
        for s in ios:
            busy[s["name"]] = busy.get(s["name"], 0.0) + s["t1"] - s["t0"]
        end = ios[0]["t1"]
        for a, b in zip(ios, ios[1:]):
            k = f"{a['name']} -> {b['name']}"
            gaps[k] = gaps.get(k, 0.0) + max(0.0, b["t0"] - end)
            end = max(end, b["t1"])
    return {"steps": n, "from_step": from_step, "step_ms": step_ms / n,
            "io_spans_per_step": sum(len(v) for v in io.values()) / n,
            "busy_ms": {k: v / n for k, v in sorted(busy.items())},
            "idle_ms": {k: v / n for k, v in sorted(gaps.items())},
            "before_first_io_ms": lead / n, "after_last_io_ms": tail / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace", help="trace JSON written by timeline_write")
    ap.add_argument("--window", type=window_arg, metavar="START:END",
                    help="the time range to draw, ms from the trace's start")
    ap.add_argument("--step", type=int, help="only the spans of this decode step")
    ap.add_argument("--color-by", choices=["batch", "track"], default="batch")
    ap.add_argument("--out", default="timeline.png")
    ap.add_argument("--chain", action="store_true",
                    help="print the recall I/O track's work per offload-batch step, no picture")
    ap.add_argument("--from-step", type=int, default=2, help="--chain: the first step counted")
    ap.add_argument("--chain-json", help="--chain: also write it to this JSON file")
    a = ap.parse_args()
    tr, names, spans = load(a.trace)
    if a.chain:
        c = chain(spans, a.from_step)
        if c is None:
            raise SystemExit(f"{a.trace}: no offload-batch step from step {a.from_step} with "
                             "recall I/O spans")
        print(f"{c['steps']} steps from {c['from_step']}: step {c['step_ms']:.3f} ms, "
              f"{c['io_spans_per_step']:.1f} I/O spans a step")
        for k, v in c["busy_ms"].items():
            print(f"  busy  {k:<24} {v:8.3f} ms a step")
        for k, v in c["idle_ms"].items():
            print(f"  idle  {k:<24} {v:8.3f} ms a step")
        print(f"  before the first I/O {c['before_first_io_ms']:.3f} ms, after the last "
              f"{c['after_last_io_ms']:.3f} ms")
        if a.chain_json:
            with open(a.chain_json, "w") as f:
                json.dump(c, f, indent=1)
        return
    if a.step is not None:
        spans = [s for s in spans if s["step"] == a.step]
    nest_depths(spans)
    if a.window:
        lo, hi = a.window
        spans = [s for s in spans if s["t1"] > lo and s["t0"] < hi]
    if not spans:
        raise SystemExit(f"{a.trace}: no spans to draw (window {a.window}, step {a.step})")
    if not a.window:
        lo, hi = min(s["t0"] for s in spans), max(s["t1"] for s in spans)
        pad = 0.01 * (hi - lo or 1.0)
        lo, hi = lo - pad, hi + pad
    tids = sorted(set(names) | {s["tid"] for s in spans})
    row = {tid: len(tids) - 1 - k for k, tid in enumerate(tids)}  # the first track on top

    od = tr.get("otherData", {})
    frac, win = od.get("device_busy_fraction"), od.get("window_s")
    title = os.path.basename(a.trace)
    if frac is not None and win is not None:
        title += f": device busy {frac:.1%} of {win * 1e3:.2f} ms"
    title += f", {od.get('spans', len(spans))} spans"
    if od.get("dropped"):
        title += f", {od['dropped']} dropped"
    if od.get("backend"):
        title += f" ({od['backend']})"

    fig, ax = plt.subplots(figsize=(13, 1.0 + 0.9 * len(tids)))
    ax.set_xlim(lo, hi)
    ax.set_yticks([row[t] for t in tids])
    ax.set_yticklabels([names.get(t, f"track {t}") for t in tids])
    ax.set_ylim(-0.6, len(tids) - 0.4)
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", lw=0.3, alpha=0.5)
    fig.tight_layout()
    fig.canvas.draw()
    px_per_ms = ax.get_window_extent().width / (hi - lo)  # to tell which bars hold a label
    batches = sorted({s["batch"] for s in spans})
    for s in spans:
        color = (TRACK_COLORS.get(s["tid"], "0.5") if a.color_by == "track"
                 else f"C{batches.index(s['batch']) % 10}")
        h = 0.8 * 0.6 ** s["depth"]
        ax.barh(row[s["tid"]], s["t1"] - s["t0"], left=s["t0"], height=h, color=color,
                edgecolor="k", linewidth=0.3, hatch="///" if s["host"] else None,
                alpha=0.6 if s["host"] else 0.9)
        text = str(s["layer"]) if s["layer"] >= 0 else s["name"]
        x0, x1 = max(s["t0"], lo), min(s["t1"], hi)
        if (x1 - x0) * px_per_ms > 6.5 * len(text) + 4 and s["depth"] == 0:
            ax.text((x0 + x1) / 2, row[s["tid"]], text, ha="center", va="center", fontsize=7,
                    clip_on=True)
    if a.color_by == "batch":
        handles = [Patch(color=f"C{k % 10}", label=f"batch {b}") for k, b in enumerate(batches)]
    else:
        handles = [Patch(color=TRACK_COLORS.get(t, "0.5"), label=names.get(t, "?")) for t in tids]
    if any(s["host"] for s in spans):
        handles.append(Patch(facecolor="white", edgecolor="k", hatch="///", label="host clock"))
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=len(handles))
    fig.tight_layout()
    fig.savefig(a.out, dpi=150)
    fig.savefig(os.path.splitext(a.out)[0] + ".pdf")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
