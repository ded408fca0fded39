#!/usr/bin/env python3
"""One line per `pulse run` result: policy, selection, engine, throughput, the mean step
against its floors, host synchronisations inside steps, and the set-up phases; then, per run
with a recall engine, where the recall's time went: the planner thread's phases per step and
the engine's per recall (queued, issuing, draining), with its knobs."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_json import get  # noqa: E402


def main(paths):
    cols = ("policy", "sel", "engine", "status", "tok/s", "step ms", "hbm ms", "pcie ms",
            "floor ms", "ratio", "syncs", "recall GB/step", "setup")
    print("%-9s %-8s %-14s %-6s %7s %8s %7s %7s %8s %6s %5s %8s  %s" % cols)
    for p in paths:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            print("%s: %s" % (p, e))
            continue
        c = r.get("config", {})
        off = c.get("offload", {})
        st = get(r, "metrics", "step", default={})
        f = st.get("mean_step_floor", {})
        setup = get(r, "counters", "offload", "setup", default={})
        setup_s = " ".join("%s %.1f" % (k, v) for k, v in setup.items()
                           if isinstance(v, (int, float)) and k.endswith("_s"))
        print("%-9s %-8s %-14s %-6s %7.1f %8.2f %7.2f %7.2f %8.2f %6.2f %5s %8.3f  %s" % (
            c.get("policy", "?"), off.get("selection", "-"), off.get("recall_engine", "-"),
            r.get("status", "?"), get(r, "metrics", "output_throughput", default=0) or 0,
            st.get("mean_step_ms", 0) or 0, f.get("hbm_floor_ms", 0) or 0,
            f.get("pcie_floor_ms", 0) or 0, f.get("floor_ms", 0) or 0,
            st.get("ratio_to_floor", 0) or 0, get(r, "counters", "step_host_syncs", default="?"),
            (f.get("recall_bytes", 0) or 0) / 1e9, setup_s))
    print()
    print("%-44s %5s %5s %5s %5s %6s | %8s %8s %8s %8s | %7s %7s %7s %6s" % (
        "run (ms/step: planner phases; us/recall: engine)", "blk", "thr", "spin", "lists",
        "plan", "recall", "meter", "q-host", "post", "queued", "issuing", "drain", "GB/s"))
    for p in paths:
        try:
            r = json.load(open(p))
        except (OSError, ValueError):
            continue
        off = get(r, "counters", "offload", default={})
        eng = off.get("recall_engine") or {}
        steps = off.get("steps") or 0
        n = eng.get("recalls") or 0
        if not steps or not isinstance(eng, dict):
            continue
        ps = off.get("planner_s", {}) or {}
        hq = off.get("host_queue_s", {}) or {}
        q_host = sum(v for v in hq.values() if isinstance(v, (int, float)))

        def us(k):
            return 1e6 * (eng.get(k, 0) or 0) / n if n else 0

        busy = eng.get("busy_s", 0) or 0
        print("%-44s %5s %5s %5s %5.2f %6.2f | %8.2f %8.2f %8.2f %8.2f | %7.1f %7.1f %7.1f %6.1f" % (
            os.path.basename(p)[:44], eng.get("zc_blocks", "-"), eng.get("gather_threads", "-"),
            eng.get("spin_us", "-"), 1e3 * ps.get("lists_wait", 0) / steps,
            1e3 * ps.get("plan", 0) / steps, 1e3 * ps.get("recall", 0) / steps,
            1e3 * ps.get("meter", 0) / steps, 1e3 * q_host / steps,
            1e3 * hq.get("post", 0) / steps, us("queued_s"), us("issuing_s"), us("draining_s"),
            (eng.get("bytes", 0) or 0) / busy / 1e9 if busy else 0))


if __name__ == "__main__":
    main(sys.argv[1:])
