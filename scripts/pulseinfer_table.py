#!/usr/bin/env python3
"""The end-to-end comparison from `pulse run` results (gpu-suite.sh's pulseinfer stage): one
block per point (GPU KV budget, workload), one line per policy with throughput, TPOT mean and
p99, the ratio to vanilla and to the best baseline at that point (arkvale and infinigen in any
configuration), the mean step against its floor, the recall a mean step moved (MB) and its rate
over the mean step (GB/s); and for pulseinfer its batches, IRQ's hidden rounds, IOAA's nodes per
decision and predicted against measured step time, with --speculate (a line of its own) its
prefetched and corrected chunks and the prediction's hit rate, and the device busy fraction of
its trace when it has one."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_json import get  # noqa: E402


def label(r):
    pol = get(r, "config", "policy", default="?")
    if pol == "vanilla":
        return pol
    off = get(r, "config", "offload", default={})
    spec = " speculate" if off.get("schedule") == "speculate-exact" else ""
    if spec and off.get("spec_from", "input") != "input":
        spec += "@" + off["spec_from"]
    if spec and off.get("spec_margin"):
        spec += "+%g" % off["spec_margin"]
    si = get(r, "counters", "pulseinfer", "self_interleave", "mode", default="off")
    if si != "off":
        spec += " selfint" + ("" if si == "on" else "=" + si)
    bud = off.get("budget_tokens")
    return "%s%s %s %s%s" % (pol, spec, off.get("selection", "?"),
                             get(off, "recall_engine", default="?"),
                             " @%d" % bud if bud and bud != 2048 else "")


def point(r):
    return "%.0f GB GPU KV, %s" % (get(r, "config", "kv_budget_gb", default=0),
                                   get(r, "workload", "spec", default="?"))


def main(paths):
    runs = {}
    for p in paths:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            print("%s: %s" % (p, e))
            continue
        runs.setdefault(point(r), []).append(r)
    for pt, rs in sorted(runs.items()):
        print("== " + pt)
        ok = [r for r in rs if r.get("status") == "ok"]
        tput = {label(r): get(r, "metrics", "output_throughput", default=0) for r in ok}
        van = next((v for k, v in tput.items() if k == "vanilla"), None)
        base = [v for k, v in tput.items() if k.startswith(("arkvale", "infinigen"))]
        best = max(base) if base else None
        print("%-46s %-6s %8s %9s %9s %7s %7s %6s %8s %6s  %s" %
              ("policy", "status", "tok/s", "TPOT ms", "p99 ms", "/van", "/best", "/floor",
               "MB/step", "GB/s", "pulseinfer"))
        for r in sorted(rs, key=label):
            m = r.get("metrics", {})
            t = m.get("output_throughput", 0) or 0
            extra = ""
            if get(r, "config", "policy") == "pulseinfer":
                s = get(r, "counters", "schedule", default={})
                pi = get(r, "counters", "pulseinfer", default={})
                bm = s.get("batch_mean", [0, 0])
                extra = ("batches %.1f+%.1f, hidden %s/exposed %s, IOAA %.2f nodes x %s "
                         "decisions, predicted %.1f vs %.1f ms" %
                         (bm[0], bm[1], s.get("recalls_hidden"), s.get("recalls_exposed"),
                          s.get("ioaa_nodes_mean", 0), s.get("ioaa_decisions", 0),
                          pi.get("ioaa_predicted_step_ms", 0) or 0,
                          pi.get("ioaa_measured_step_ms", 0) or 0))
                sp = get(r, "counters", "offload", "speculation")
                if sp:
                    extra += (", prefetched %s chunks, corrected %s, hit rate %s" %
                              (sp.get("recall_chunks"), sp.get("corrections"),
                               "%.3f" % sp["hit_rate"] if sp.get("hit_rate") is not None
                               else "-"))
                busy = get(pi, "trace", "device_busy_fraction")
                if busy is not None:
                    extra += ", busy %.3f" % busy
            # the recall a mean step moved, and at what rate over the mean step's time
            rb = get(r, "metrics", "step", "mean_step_floor", "recall_bytes")
            ms = get(r, "metrics", "step", "mean_step_ms")
            print("%-46s %-6s %8.1f %9.2f %9.2f %7s %7s %6.2f %8s %6s  %s" %
                  (label(r), r.get("status", "?"), t, m.get("mean_tpot_ms", 0) or 0,
                   m.get("p99_tpot_ms", 0) or 0,
                   "%.2f" % (t / van) if van else "-",
                   "%.2f" % (t / best) if best else "-",
                   get(r, "metrics", "step", "ratio_to_floor", default=0) or 0,
                   "%.0f" % (rb / 1e6) if rb else "-",
                   "%.1f" % (rb / ms / 1e6) if rb and ms else "-", extra))


if __name__ == "__main__":
    main(sys.argv[1:])
