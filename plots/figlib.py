"""Shared helpers of the figure scripts that draw the summaries of `pulse reproduce`.

A summary is RESULTS/<experiment>/<experiment>.json: {"name", "scale", "tool", "env", "date",
"grid", "repeat", "points": [{"name", "variant", "status", "result"}]}; the recall experiment's
file is a `pulse recall-bench` result instead. Each figure script defines EXPERIMENT (the summary
it reads) and draw(summary) -> matplotlib figure, and calls main(); plots/figures.py draws them all.

With `pulse reproduce --repeat N` ("repeat": N) every point of the grid ran N times, each its own
entry in "points" named '<point>,seed=K'. grouped() gathers a point's repetitions, aggregate() and
series() give a value's Stat over them (mean, min, max), and the drawing helpers draw the mean
with its min-max range as error bars; a point of one run gets no error bar, so a summary without
repetitions draws as it always did. finish() notes the repetitions in the title.
"""
import argparse
import gzip
import json
import os
import re
import sys
from collections import namedtuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"font.size": 9, "axes.titlesize": 9, "axes.grid": True, "grid.alpha": 0.3,
                     "legend.fontsize": 8, "legend.framealpha": 0.8,
                     "axes.spines.top": False, "axes.spines.right": False})

# The systems keep one color and marker in every figure; a baseline's engine-matched tier
# (DESIGN section 11: its schedule with PulseInfer's selection and engines) keeps its hue, drawn
# dashed (lines) or hatched (bars).
STYLE = {"vanilla": ("#7f7f7f", "s"), "arkvale": ("#1f77b4", "^"),
         "infinigen": ("#2ca02c", "v"), "pulseinfer": ("#d62728", "o"),
         "pulseinfer-zc": ("#ff7f0e", "D"),
         "pulseinfer-spec": ("#d62728", "P"), "pulseinfer-spec-zc": ("#ff7f0e", "X"),
         "pulseinfer-spec-hits-zc": ("#ff7f0e", "*"),
         "pulseinfer-spec-m25-zc": ("#ff7f0e", "h"),
         "arkvale+solohead+gs": ("#1f77b4", ">"), "arkvale+solohead+zc": ("#6baed6", ">"),
         "infinigen+solohead+gs": ("#2ca02c", "<"), "infinigen+solohead+zc": ("#74c476", "<")}
BASELINES = ("arkvale", "infinigen")
OTHER = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#1f77b4", "#2ca02c",
         "#d62728", "#ff7f0e", "#7f7f7f"]


class InputError(Exception):
    """The input is missing, unreadable or not the expected summary."""


# ------------------------------------------------------------------ reading

def load_json(path):
    """The JSON document in file `path`, gunzipped when its name ends in .gz."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def locate(path, experiment):
    """The summary file of `experiment` at `path`: the file itself, or under a results folder
    (path/<experiment>/<experiment>.json) or an experiment folder (path/<experiment>.json); each
    also gzipped (.json.gz, as the large files under experiments/results are kept)."""
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        for cand in (os.path.join(path, experiment, experiment + ".json"),
                     os.path.join(path, experiment + ".json")):
            for c in (cand, cand + ".gz"):
                if os.path.isfile(c):
                    return c
        raise InputError(f"{path}: no {experiment} summary in it")
    raise InputError(f"{path}: no such file or directory")


def kind(s):
    """The experiment a loaded file is: a reproduce summary's name, or 'recall'."""
    if s.get("experiment") == "recall-bench":
        return "recall"
    return s.get("name") if s.get("experiment") == "reproduce" else None


def load(path, experiment):
    """The summary of `experiment` at `path` (see locate), checked to be one."""
    path = locate(path, experiment)
    try:
        s = load_json(path)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if not isinstance(s, dict) or kind(s) != experiment:
        got = kind(s) if isinstance(s, dict) else None
        raise InputError(f"{path}: {'the ' + got if got else 'not a'} summary, not {experiment}'s")
    return s


def variants(s):
    """The variants' names in the grid's order (those of the points when the grid has none)."""
    names = [v["name"] for v in s.get("grid", {}).get("variants", []) if "name" in v]
    for p in s.get("points", []):
        if p.get("variant") and p["variant"] not in names:
            names.append(p["variant"])
    return names


def ok_points(s):
    """(variant, point, result) of every point that ran and has a result."""
    for p in s.get("points", []):
        r = p.get("result")
        if p.get("status") == "ok" and isinstance(r, dict) and isinstance(r.get("metrics"), dict):
            yield p.get("variant", p.get("name", "?")), p, r


def left_out(s):
    """'name (status)' of every point that gave no result."""
    return [f"{p.get('name', '?')} ({p.get('status', '?')})" for p in s.get("points", [])
            if p.get("status") != "ok" or not isinstance(p.get("result"), dict)]


def metric(r, key):
    v = r.get("metrics", {}).get(key)
    return v if isinstance(v, (int, float)) else None


def input_len(r):
    """A point's mean prompt length in tokens; None for a trace's point (its lengths are the
    trace's mix, not a point on a length axis: its numbers are in its JSON)."""
    w = r.get("workload", {})
    if str(w.get("spec", "")).startswith("trace:"):
        return None
    return w["prompt_tokens_total"] / w["requests"] if w.get("requests") else None


def batch_mean(r, i):
    """The mean size of batch i (0: normal, 1: offload) over the run's steps."""
    b = r.get("counters", {}).get("schedule", {}).get("batch_mean") or []
    return b[i] if len(b) > i else None


def sanitize(text):
    """A value as it appears in a point's name (pulse sweep's rule)."""
    ok = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._=,+-")
    return "".join(c if c in ok else "_" for c in str(text))


def name_value(point, key):
    """The text after '<key>=' in a point's name ('servegen,admission=ioaa' -> 'ioaa')."""
    for part in point.get("name", "").split(",")[1:]:
        k, _, v = part.partition("=")
        if k == key:
            return v
    return None


# ------------------------------------------------------------------ repetitions

def repeat(s):
    """How many times each point ran (pulse reproduce --repeat); 1 when the summary does not say."""
    n = s.get("repeat")
    return n if isinstance(n, int) and n > 1 else 1


def seedless(point):
    """A point's name without its ',seed=K' part: the name its repetitions share."""
    return re.sub(r",seed=\d+$", "", point.get("name", ""))


class Stat(namedtuple("Stat", "mean lo hi n")):
    """A value's mean, min and max over the n repetitions of a point."""

    def scaled(self, k):
        return Stat(self.mean * k, self.lo * k, self.hi * k, self.n)


def stat(values):
    """The Stat of values (None left out); None when there is none."""
    vals = [v for v in values if v is not None]
    return Stat(sum(vals) / len(vals), min(vals), max(vals), len(vals)) if vals else None


def grouped(s):
    """[(variant, [(point, result), ...])]: the ok points gathered by variant and seedless name,
    one entry per point of the grid with its repetitions, in the points' order."""
    out = {}
    for v, p, r in ok_points(s):
        out.setdefault((v, seedless(p)), []).append((p, r))
    return [(v, runs) for (v, _), runs in out.items()]


def aggregate(s, f):
    """(variant, point, result, stat) per point of the grid: its first repetition's point and
    result, and the Stat of f(result) over its repetitions; points where f is always None are
    left out."""
    for v, runs in grouped(s):
        st = stat(f(r) for _, r in runs)
        if st:
            yield v, runs[0][0], runs[0][1], st


def series(s, x, y):
    """{variant: [(x, Stat of y), ...] sorted by x} per point of the grid, x and y functions of a
    result, x the mean over the repetitions; repetitions where either is None are left out."""
    out = {}
    for v, runs in grouped(s):
        xy = [(x(r), y(r)) for _, r in runs]
        xy = [(a, b) for a, b in xy if a is not None and b is not None]
        if xy:
            out.setdefault(v, []).append((stat(a for a, _ in xy).mean, stat(b for _, b in xy)))
    return {v: sorted(out[v]) for v in variants(s) if v in out}


# ------------------------------------------------------------------ drawing

def system(name):
    """The system a variant name stands for: an ablation's '1-arkvale' is 'arkvale'."""
    return name.split("-", 1)[1] if name[:1].isdigit() and "-" in name else name


def colors(names):
    """{name: color}: the systems' own colors, the others from OTHER in order."""
    own = {n: STYLE[system(n)][0] for n in names if system(n) in STYLE}
    spare = iter(c for c in OTHER if c not in own.values())
    return {n: own[n] if n in own else next(spare, "#333333") for n in names}


def marker(name):
    return STYLE.get(system(name), (None, "o"))[1]


def tier(name):
    """'published' for a baseline as its paper's code builds it (the policies arkvale and
    infinigen, under any variant name that is just the policy's: 'arkvale', '1-arkvale'),
    'engine-matched' for a baseline's schedule with PulseInfer's selection and engines
    ('infinigen+solohead+zc'), None for the others."""
    base = system(name)
    if base in BASELINES:
        return "published"
    if base.split("+", 1)[0] in BASELINES and "+" in base:
        return "engine-matched"
    return None


def label(name):
    """A system's legend label, its tier named."""
    t = tier(name)
    return f"{name} ({t})" if t else name


def tokens(n):
    """16384 -> '16K', 1536 -> '1.5K', 503.0 -> '503'."""
    if n >= 1024:
        k = n / 1024
        return f"{k:.0f}K" if abs(k - round(k)) < 0.05 else f"{k:.1f}K"
    return f"{n:.0f}"


def yerr(stats):
    """The min-max error bars of stats in matplotlib's form, None when none is of several runs;
    a point of one run gets none (nan)."""
    if all(st.n < 2 for st in stats):
        return None
    return [[st.mean - st.lo if st.n > 1 else float("nan") for st in stats],
            [st.hi - st.mean if st.n > 1 else float("nan") for st in stats]]


def bar(ax, xs, stats, width=0.8, **kw):
    """ax.bar of stats' means with their min-max ranges (see yerr); the bars."""
    return ax.bar(xs, [st.mean for st in stats], width, yerr=yerr(stats), capsize=3,
                  error_kw={"elinewidth": 0.8, "ecolor": "#333333", "zorder": 3}, **kw)


def plot_lines(ax, s, data, xlabel, ylabel):
    """One line per variant of data (from series) through the means, in the variants' colors,
    with the min-max ranges of repeated points as error bars."""
    cols = colors(variants(s))
    for v, pts in data.items():
        xs, stats = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, [st.mean for st in stats], marker=marker(v), color=cols[v], label=label(v),
                linestyle="--" if tier(v) == "engine-matched" else "-")
        err = yerr(stats)
        if err:
            ax.errorbar(xs, [st.mean for st in stats], yerr=err, fmt="none", ecolor=cols[v],
                        elinewidth=1, capsize=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)


def length_ticks(ax, data):
    """Ticks at every input length of data, written as tokens."""
    xs = sorted({p[0] for pts in data.values() for p in pts})
    ax.set_xticks(xs, [tokens(x) for x in xs])
    ax.minorticks_off()


def bar_axes(ax, ticks, ylabel, xlabel=None):
    """A bar chart's axes: a tick per group (slanted when many), room above for labels."""
    many = len(ticks) > 4
    ax.set_xticks(range(len(ticks)), ticks, rotation=20 if many else 0,
                  ha="right" if many else "center")
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.margins(y=0.15)
    ax.grid(axis="x", visible=False)


def group_x(groups, i, n):
    """The x of bar i of n in each of groups (0, 1, ...) and the bars' width."""
    w = 0.8 / max(1, n)
    return [g - 0.4 + (i + 0.5) * w for g in groups], w


def bars(ax, labels, stats, cols, texts, ylabel):
    """A bar per label (the mean of its Stat, with its range) with texts written on them; the
    engine-matched tier's bars hatched, the published baselines' named so."""
    b = bar(ax, range(len(labels)), stats, color=cols)
    for rect, name in zip(b, labels):
        if tier(name) == "engine-matched":
            rect.set_hatch("//")
            rect.set_edgecolor("white")
    ax.bar_label(b, labels=texts, padding=2, fontsize=8)
    bar_axes(ax, [label(n) for n in labels], ylabel)


def throughput_bars(ax, s, ref, ratio="ratio to"):
    """Output throughput per variant as bars in the grid's order, each labelled with its tok/s
    and its ratio to variant ref's (when ref has a result), both of the means."""
    tput = {v: st for v, _, _, st in aggregate(s, lambda r: metric(r, "output_throughput"))}
    names = [v for v in variants(s) if v in tput]
    base = tput[ref].mean if ref in tput else None
    cols = colors(variants(s))
    texts = [f"{tput[v].mean:.0f}" + (f"\n{tput[v].mean / base:.2f}x" if base else "")
             for v in names]
    bars(ax, names, [tput[v] for v in names], [cols[v] for v in names], texts,
         "output throughput (tok/s)")
    ax.set_title(f"labels: tok/s and {ratio} {ref}" if base else f"{ref}: no result")


def placeholder(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11,
            color="#666666")
    ax.set_axis_off()


def empty(ax, s):
    """The placeholder of a figure without any result; True when it was drawn."""
    if any(True for _ in ok_points(s)):
        return False
    placeholder(ax, "no successful points")
    return True


def provenance(s):
    """'e2e (quick scale, 1a2b3c4, 2026-12-01) on NVIDIA H200': the builds and dates of the
    points where the summary names them (a resumed run: '1a2b3c4 + 5d6e7f8, 2026-12-01 to
    2026-12-02'), else the summary's own."""
    tool = s.get("tool", {})
    commit = (tool.get("git_commit") or "?")[:7] + ("-dirty" if tool.get("git_dirty") else "")
    date = (s.get("date") or "?")[:10]
    if s.get("point_commits"):
        commit = " + ".join(s["point_commits"])
    first, last = (list(s.get("point_dates") or []) + [None, None])[:2]
    if first and last:
        date = first[:10] if first[:10] == last[:10] else f"{first[:10]} to {last[:10]}"
    parts = [f"{s['scale']} scale"] if s.get("scale") else []
    parts += [commit, date]
    env = s.get("env", {})
    device = env.get("gpu") or env.get("device") or s.get("grid", {}).get("base", {}).get(
        "--backend")
    return f"{kind(s)} ({', '.join(parts)})" + (f" on {device}" if device else "")


def finish(fig, s, heading, note=None):
    """The title (heading, provenance and, when the points were repeated, note: by default
    'mean of N runs, error bars: min-max') and a footnote naming the points left out."""
    title = f"{heading}\n{provenance(s)}"
    if repeat(s) > 1:
        title += f"\n{note or f'mean of {repeat(s)} runs, error bars: min-max'}"
    fig.suptitle(title, fontsize=10)
    gone = left_out(s)
    lines = [", ".join(gone[i:i + 2]) for i in range(0, min(len(gone), 6), 2)]
    if len(gone) > 6:
        lines[-1] += f" and {len(gone) - 6} more"
    if lines:
        lines[0] = "left out: " + lines[0]
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="#aa0000", va="bottom")
    bottom = (0.15 * len(lines) + 0.05) / fig.get_figheight() if lines else 0
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def save(fig, prefix):
    """PREFIX.png and PREFIX.pdf (a .png or .pdf ending of prefix is dropped); their paths."""
    stem, ext = os.path.splitext(prefix)
    if ext.lower() in (".png", ".pdf"):
        prefix = stem
    if os.path.dirname(prefix):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
    paths = [prefix + ".png", prefix + ".pdf"]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


def render(module, path, prefix):
    """Draws a figure script's figure from the summary at path; the files written."""
    return save(module.draw(load(path, module.EXPERIMENT)), prefix)


def main(module_name):
    """The command line of a figure script: INPUT [--out PREFIX]."""
    module = sys.modules[module_name]
    stem = os.path.splitext(os.path.basename(module.__file__))[0]
    ap = argparse.ArgumentParser(description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help=f"the {module.EXPERIMENT} summary, its folder, or the folder "
                    "of pulse reproduce --out-dir")
    ap.add_argument("--out", default=stem,
                    help=f"output prefix: writes PREFIX.png and PREFIX.pdf (default {stem})")
    a = ap.parse_args()
    try:
        for p in render(module, a.input, a.out):
            print(f"wrote {p}")
    except InputError as e:
        sys.exit(f"{stem}: {e}")
