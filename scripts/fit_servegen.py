#!/usr/bin/env python3
"""The fit behind workloads/workload.c's SG_MIX (servegen-mix) and servegen's log-normal.

Reads a ServeGen checkout's data/language/m-large (alibaba/ServeGen: chunk-{client}-trace.csv,
10-minute windows of rate; chunk-{client}-dataset.json, 6-hour tables {length: probability}),
weights every window's table by rate x 600 s as its clientpool.py pairs them (the latest table
whose start is <= the window's), and fits by weighted maximum likelihood a mixture
w Pareto(xm, alpha) truncated at the longest length + (1 - w) LogNormal(mu, sigma).
Prints the statistics, the fit and both models' Kolmogorov-Smirnov distances to the data.
Needs numpy and scipy. Usage: scripts/fit_servegen.py SERVEGEN/data/language/m-large
"""
import ast
import csv
import glob
import json
import os
import sys

import numpy as np
from scipy import optimize, stats


def aggregate(root):
    hist, clients, requests = {}, 0, 0.0
    for ds in sorted(glob.glob(os.path.join(root, "chunk-*-dataset.json"))):
        cid = os.path.basename(ds).split("-")[1]
        tr = os.path.join(root, f"chunk-{cid}-trace.csv")
        if not os.path.exists(tr):
            continue
        d = json.load(open(ds))
        starts = sorted(d, key=float)
        tables = [ast.literal_eval(d[s]["input_tokens"]) for s in starts]
        st = np.array([float(s) for s in starts])
        clients += 1
        for row in csv.reader(open(tr)):
            t, rate = float(row[0]), float(row[1])
            i = np.searchsorted(st, t, side="right") - 1
            if rate <= 0 or i < 0:
                continue
            requests += rate * 600.0
            for k, v in tables[i].items():
                hist[k] = hist.get(k, 0.0) + rate * 600.0 * v
    x = np.array(sorted(hist), dtype=float)
    w = np.array([hist[k] for k in sorted(hist)])
    return x, w / w.sum(), clients, requests


def main():
    x, w, clients, requests = aggregate(sys.argv[1])
    c = np.cumsum(w)
    q = lambda cdf, p: int(x[min(np.searchsorted(cdf, p), len(x) - 1)])
    print(f"{clients} clients, {requests:.3g} requests: mean {(x * w).sum():.1f}, p50 {q(c, .5)}, "
          f"p90 {q(c, .9)}, p99 {q(c, .99)}, max {int(x.max())}")
    lx, top = np.log(x), x.max()

    def parts(p):
        wp, xm, al, mu, s = 1 / (1 + np.exp(-p[0])), np.exp(p[1]), np.exp(p[2]), p[3], abs(p[4])
        z = 1 - (xm / top) ** al
        par = np.where(x >= xm, al * xm**al / x ** (al + 1) / z, 0.0)
        return wp, xm, al, mu, s, z, par

    def nll(p):
        wp, xm, al, mu, s, z, par = parts(p)
        return -(w * np.log(wp * par + (1 - wp) * stats.norm.pdf(lx, mu, s) / x + 1e-300)).sum()

    best = min((optimize.minimize(nll, [w0, np.log(x0), np.log(a0), 5.0, 0.7], method="Nelder-Mead",
                                  options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 30000,
                                           "maxfev": 30000})
                for x0 in (200, 400, 600, 1000) for w0 in (-1, 0, 1) for a0 in (0.8, 1.3, 2.0)),
               key=lambda r: r.fun)
    wp, xm, al, mu, s, z, _ = parts(best.x)
    cdf = wp * np.clip((1 - (xm / x) ** al) / z, 0, 1) * (x >= xm) + (1 - wp) * stats.norm.cdf((lx - mu) / s)
    mean = wp * al * xm**al / (al - 1) * (xm ** (1 - al) - top ** (1 - al)) / z + (1 - wp) * np.exp(mu + s * s / 2)
    print(f"mixture: {wp:.4f} x Pareto({xm:.2f}, {al:.4f}) on [{xm:.2f}, {int(top)}] + {1 - wp:.4f} x "
          f"LogNormal({mu:.4f}, {s:.4f}); mean {mean:.1f}; KS {np.abs(cdf - c).max():.4f}; "
          f"p50 {q(cdf, .5)}, p90 {q(cdf, .9)}, p99 {q(cdf, .99)}")
    p50, p90 = q(c, .5), q(c, .9)
    sig = np.log(p90 / p50) / stats.norm.ppf(0.9)
    ln = stats.norm.cdf((lx - np.log(p50)) / sig)
    print(f"servegen's quantile-matched log-normal: sigma {sig:.4f}, KS {np.abs(ln - c).max():.4f}")


if __name__ == "__main__":
    main()
