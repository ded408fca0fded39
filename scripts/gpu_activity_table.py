#!/usr/bin/env python3
"""What the GPU ran in each `pulse run --cupti` result (metrics.gpu_activity): the busy fraction
from the union of kernels, the copies per direction, and the kernels by total time, each as
milliseconds per decode step (the run's total over its steps)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_json import get  # noqa: E402


def table(path, top):
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print("%s: %s" % (path, e))
        return
    a = get(r, "metrics", "gpu_activity", default=None)
    if not a:
        return
    steps = max(1, get(r, "counters", "steps", default=1))
    step_ms = get(r, "metrics", "step", "mean_step_ms", default=0.0)
    print("== %s: %d steps, mean step %.2f ms, window %.3f s, kernel busy %.3f s (%.1f%%), "
          "copies busy %.3f s" % (os.path.basename(path), steps, step_ms, a["window_s"],
                                   a["kernel_busy_s"], 100 * a["busy_fraction"],
                                   a["copy_busy_s"]))
    if "compute_busy_fraction" in a:
        print("   compute kernels busy %.1f%% of the window (%.2f ms/step), recall kernels %.2f "
              "ms/step" % (100 * a["compute_busy_fraction"], 1e3 * a["compute_kernel_busy_s"] / steps,
                           1e3 * a["recall_kernel_busy_s"] / steps))
    for d, c in a["copies"].items():
        if isinstance(c, dict) and c["count"]:
            print("   %-5s %7d copies %10.1f MB/step %8.3f ms/step  %6.1f GB/s" % (
                d, c["count"], c["bytes"] / steps / 1e6, 1e3 * c["time_s"] / steps, c["GBps"]))
    dropped = a["records_dropped_by_cupti"] + a["records_over_capacity"]
    if dropped:
        print("   records lost: %d (dropped by CUPTI %d, over capacity %d)" % (
            dropped, a["records_dropped_by_cupti"], a["records_over_capacity"]))
    print("   %-44s %8s %10s %9s %6s" % ("kernel", "count", "ms/step", "mean us", "busy%"))
    for k in a["top_kernels"][:top]:
        print("   %-44s %8d %10.3f %9.2f %6.1f" % (k["name"][:44], k["count"],
                                                  1e3 * k["total_s"] / steps, k["mean_us"],
                                                  100 * k["share_of_busy"]))
    g = a.get("idle_gaps")
    if g:
        sizes = ", ".join("%s%s: %d (%.3f ms/step)" % (
            "<" if b["below_us"] is not None else ">=",
            "%g us" % (b["below_us"] if b["below_us"] is not None else 200), b["count"],
            1e3 * b["total_s"] / steps) for b in g["by_size"] if b["count"])
        print("   nothing running: %.3f ms/step in %d gaps (%s)" % (
            1e3 * g["total_s"] / steps, g["count"], sizes))
        print("   %-44s %8s %10s %9s" % ("idle after", "gaps", "ms/step", "mean us"))
        for e in g["after"][:12]:
            print("   %-44s %8d %10.3f %9.2f" % (e["name"][:44], e["count"],
                                                 1e3 * e["total_s"] / steps, e["mean_us"]))


def main(argv):
    top = 25
    for p in argv:
        table(p, top)


if __name__ == "__main__":
    main(sys.argv[1:])
