#!/usr/bin/env python3
"""IOAA's step model against `pulse run` results, offline (reads results only).

usage: ioaa_refit_check.py PROFILE.json[.gz] RUN.json...

For each pulseinfer run: its steady steps (the step after a batch change left out), grouped by
composition (normal, offloaded), the measured mean step against
  profile  the model with the recall and the compute each at its own rate (no interference)
  beside   the model as the run has it (ioaa_profile.h's ioaa_overlap): the prefetch at the
           recall's rate beside compute of its round size while the layer computes
           (recall.beside_compute: a number or a table; default 0.5), the compute
           recall.compute_beside times as long beside the recall (default 1; a table: at the
           prefetch round's size, its largest for IRQ's normal layers), with a normal
           batch the normal layers as long again beside the offload batch's recall
  refit    beside, refitted online as ioaa_refit.h does (EWMA 0.2 of the recall factor that makes
           each steady step the measured one), each step predicted before it is observed; the
           mean over a composition's steps and the prediction at its first step (what the
           admission decision that made it would have used)
The bytes per request and layer are the run's: its source's fold, or the profile's
recall.by_context at its last decision's context when it used them.
The runs' own IOAA profile is not stored with them: PROFILE stands in (same machine kind), so
the `profile` column is checked against the run's own prediction (counters.pulseinfer).
"""
import gzip
import json
import sys

ALPHA, KMIN, KMAX, BESIDE_DEFAULT = 0.2, 0.25, 8.0, 0.5


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def runmax(v):
    out, m = [], float("-inf")
    for x in v:
        m = max(m, x)
        out.append(m)
    return out


def interp1(x, y, v):
    if len(x) == 1 or v <= x[0]:
        return y[0]
    for i in range(1, len(x)):
        if v <= x[i]:
            return y[i - 1] + (y[i] - y[i - 1]) * (v - x[i - 1]) / (x[i] - x[i - 1])
    return y[-1] + (y[-1] - y[-2]) * (v - x[-1]) / (x[-1] - x[-2])


class Profile:
    def __init__(self, j):
        self.L = j["n_layers"]
        n = j["normal"]
        self.tb, self.tc = n["batch"], n["context"]
        rows = [list(r) for r in n["layer_s"]]
        for i in range(len(rows)):  # the reader's running maximum over b and c
            for k in range(len(rows[i])):
                m = rows[i][k]
                if i:
                    m = max(m, rows[i - 1][k])
                if k:
                    m = max(m, rows[i][k - 1])
                rows[i][k] = m
        self.tn = rows
        self.ob, self.ot = j["offload"]["batch"], runmax(j["offload"]["layer_s"])
        self.rx, self.rt = j["recall"]["bytes"], runmax(j["recall"]["round_s"])
        b = j["recall"].get("beside_compute", BESIDE_DEFAULT)
        self.fx, self.ff = (b["bytes"], b["factor"]) if isinstance(b, dict) else ([1.0], [b])
        g = j["recall"].get("compute_beside", 1.0)  # a number, or a table per round size
        self.gx, self.gg = (g["bytes"], g["factor"]) if isinstance(g, dict) else ([1.0], [g])
        self.g = max(self.gg)  # IRQ's normal layers: the largest

    def slow(self, x):
        """the compute's slowdown beside rounds of x bytes (the end values outside)"""
        if len(self.gx) == 1 or x <= self.gx[0]:
            return self.gg[0]
        return interp1(self.gx, self.gg, min(x, self.gx[-1]))

    def rate(self, x):
        """the recall's rate beside compute at a round of x bytes (the end values outside)"""
        if len(self.fx) == 1 or x <= self.fx[0]:
            return self.ff[0]
        return interp1(self.fx, self.ff, min(x, self.fx[-1]))

    def t_n(self, b, c):
        if b <= 0:
            return 0.0
        c = min(max(c, self.tc[0]), self.tc[-1])
        col = [interp1(self.tc, row, c) for row in self.tn]
        return interp1(self.tb, col, b)

    def t_o(self, b):
        return interp1(self.ob, self.ot, b) if b > 0 else 0.0

    def t_r(self, x):
        return interp1(self.rx, self.rt, x) if x > 0 else 0.0


def overlap(compute, recall, rate, slow):
    """ioaa_overlap: both started together, each slowed while the other runs"""
    if recall <= 0:
        return compute
    if compute <= 0:
        return recall
    rb, cs = recall / rate, slow * compute
    return compute + rb * (1 - 1 / slow) if cs >= rb else recall + cs * (1 - rate)


def terms(p, bn, c, bo, run, beside):
    """t_N, t_O, the exact round, the prefetch alone, its rate beside compute, the corrections,
    g (IRQ's normal layers'), and g beside the prefetch round (rates and g 1 without
    interference)"""
    tn, to = p.t_n(bn, c), p.t_o(bo)
    g = p.g if beside else 1.0
    if run["spec"]:
        f = p.rate(bo * run["P"]) if beside else 1.0
        gp = p.slow(bo * run["P"]) if beside else 1.0
        return tn, to, 0.0, p.t_r(bo * run["P"]), f, p.t_r(bo * run["C"]), g, gp
    return tn, to, p.t_r(bo * run["r"]), 0.0, 1.0, 0.0, g, g


def prefetch(t, kr):
    return overlap(t[1], kr * t[3], t[4], t[7]) - t[1]


def recall(t, kr, kc, spec):
    if not spec:
        return kr * t[2]
    return kc * t[5] + prefetch(t, kr)


def step(p, t, bn, bo, x, irq=True):
    tn, to, g = t[0], t[1], t[6]
    if bn > 0 and bo > 0 and irq:
        tk = tn + (1 - 1 / g) * x
        return p.L * (tk + to + max(0.0, x - tk))
    return p.L * tn + p.L * (to + x)


def observe(p, t, bn, bo, m, k, spec):
    """One steady step into the factors (ioaa_refit_observe)."""
    tn, to, rr, pp, f, cc, g, gp = t
    kr, kc = k
    pl = m / p.L
    if bn > 0 and bo > 0:
        xnow = recall(t, kr, kc, spec)
        kk = 1 - 1 / g
        if pl - to >= g * tn:
            x = pl - to
        elif kk > 0 and pl > tn + to:
            x = (pl - to - tn) / kk
        else:
            x = g * tn if xnow > g * tn else -1
    else:
        x = pl - tn - to
    if x <= 0:
        return k
    nr, nc = kr, kc
    if not spec:
        nr = x / rr
    else:
        q = x - kc * cc + to - gp * to * (1 - f)
        binds = pp > 0 and (kr * pp / f > gp * to or not cc > 0)
        if binds and q / f >= gp * to:
            nr = q / pp
        elif cc > 0:
            nc = (x - prefetch(t, kr)) / cc
        elif gp > 1:
            nr = x * f / (pp * (1 - 1 / gp))
    cl = lambda v: min(KMAX, max(KMIN, v))
    return ((1 - ALPHA) * kr + ALPHA * cl(nr), (1 - ALPHA) * kc + ALPHA * cl(nc))


def check(p, path):
    j = load(path)
    pi = j["counters"].get("pulseinfer", {})
    if "ioaa_predicted_step_ms" not in pi:
        return None
    sp = pi.get("ioaa_speculation")
    run = {"spec": sp is not None, "r": pi["ioaa_recall_bytes_per_request_layer"]}
    if sp:
        run["P"], run["C"] = sp["prefetch_bytes_per_request_layer"], sp[
            "correction_bytes_per_request_layer"]
    bc = pi.get("ioaa_bytes_by_context")
    if bc and bc.get("used") and bc.get("last_decision"):  # the profile's bytes by context
        at = bc["last_decision"]
        run["r"] = at["bytes"]
        if run["spec"]:
            run["P"], run["C"] = at["prefetch"], at["after_selection"]
    st = j["metrics"]["step"]["per_step"]
    ctx = sum(r["prompt_len"] for r in j["requests"]) / len(j["requests"])
    k, groups, prev = (1.0, 1.0), {}, None
    for i, (comp, ms) in enumerate(zip(st["batches"], st["step_ms"])):
        bn, bo = comp[0], comp[1]
        cold = prev != (bn, bo)
        prev = (bn, bo)
        if cold or bo == 0:
            continue
        tb = terms(p, bn, ctx, bo, run, True)
        ta = terms(p, bn, ctx, bo, run, False)
        g = groups.setdefault((bn, bo), {"n": 0, "m": 0, "a": 0, "b": 0, "f": 0, "first": None})
        pred_f = step(p, tb, bn, bo, recall(tb, k[0], k[1], run["spec"]))
        if g["first"] is None:
            g["first"] = pred_f
        g["n"] += 1
        g["m"] += ms / 1e3
        g["a"] += step(p, ta, bn, bo, recall(ta, 1, 1, run["spec"]))
        g["b"] += step(p, tb, bn, bo, recall(tb, 1, 1, run["spec"]))
        g["f"] += pred_f
        k = observe(p, tb, bn, bo, ms / 1e3, k, run["spec"])
    name = path.split("/")[-1]
    print(f"{name}: run's own prediction {pi['ioaa_predicted_steady_step_ms']:.2f} ms, measured "
          f"{pi['ioaa_measured_steady_step_ms']:.2f}; factors at the end k_R {k[0]:.3f} k_C "
          f"{k[1]:.3f}")
    ok = True
    for (bn, bo), g in sorted(groups.items()):
        n = g["n"]
        m, a, b, f = (g[x] / n * 1e3 for x in "mabf")
        first = g["first"] * 1e3
        err = lambda v: (v / m - 1) * 100
        ok &= abs(err(f)) <= 15 and abs(err(first)) <= 15
        print(f"  {bn:2d} + {bo:2d} ({n:3d} steps): measured {m:6.2f}  profile {a:6.2f} "
              f"({err(a):+5.1f}%)  beside {b:6.2f} ({err(b):+5.1f}%)  refit {f:6.2f} "
              f"({err(f):+5.1f}%), at its first step {first:6.2f} ({err(first):+5.1f}%)")
    return ok


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    p = Profile(load(sys.argv[1]))
    res = [check(p, f) for f in sys.argv[2:]]
    res = [r for r in res if r is not None]
    print(f"{sum(res)} of {len(res)} runs within 15% with the refit (every composition, its mean "
          "and its first step)")


if __name__ == "__main__":
    main()
