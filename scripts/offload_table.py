#!/usr/bin/env python3
"""One line per `pulse run` result: policy, selection, engine, throughput, the mean step
against its floors, host synchronisations inside steps, and the set-up phases."""
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


if __name__ == "__main__":
    main(sys.argv[1:])
