# SPDX-License-Identifier: MIT
"""bench/train/pair.py [--target T.json] [--common-seeds]
                       [--md DEST.md [--append | --title T]]
                       A.json MODE B.json MODES [C.json MODES ...]

One mode of a committed summary against modes of other summaries (MODES:
comma-separated), paired by seed: runs that cannot share a page (the same
regime and seeds, recorded under different settings, e.g. LEADERS.json's
runs from before the normaliser was recorded per mode, or runs added
later). Mean AUC and final-accuracy differences, 95% paired t-intervals,
Holm's correction over the modes compared, seeds ahead.

--target T.json: also the rollouts to reach T, grpo-16's final held-out
accuracy in the same seed, taken from T.json's grpo-16 (issue 43's
target; a run that never reaches it counts as the budget, a lower bound):
the share of runs that reach it, MODE's rollouts minus the other's
(paired, Holm over the modes compared) and the ratio MODE / other, the
geometric mean of the per-seed ratios with the t-interval of the log
ratios (and the ratio of the means beside it). The best fixed k is the
fixed-* mode against which that ratio is highest (the hardest); the bars
(issue 43): MODE / best fixed k at most 0.85, MODE / grpo-16 at most 0.5.

--common-seeds: a mode that ran fewer seeds (an unfinished set) is
paired on the seeds both ran, its count marked when below 10; without
it, other seeds are refused.

--md DEST.md: the same as a Markdown section of a page (its command, the
summaries' commits and the machine stated), written to DEST (--append:
added at its end; else --title TEXT: the page's title first)."""

import argparse
import json
import math
import os
import shlex
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import analysis  # noqa: E402
from analysis import holm, paired  # noqa: E402
from summary import from_summary  # noqa: E402

# Settings two summaries must share to be paired.
SAME = ("regime", "steps", "budget_per_step", "lr", "heldout")
# The bars on the rollouts to T: MODE / best fixed k, MODE / grpo-16.
BARS = (("best fixed k", 0.85), ("grpo-16", 0.5))


def load(path):
    with open(path) as f:
        d = json.load(f)
    d["path"] = path
    budget = d["steps"] * d["budget_per_step"]
    d["summary"] = {m: from_summary(x, budget) for m, x in d["summary"].items()}
    return d


def check(A, B):
    for k in SAME + (("eval_rollouts",) if "eval_rollouts" in A else ()):
        if A.get(k) != B.get(k):
            raise SystemExit(f"pair: {k} differs ({A.get(k)} in {A['path']}, "
                             f"{B.get(k)} in {B['path']})")


def targets(T, seeds):
    """Per seed: grpo-16's final accuracy in T's summary."""
    g = T["summary"].get("grpo-16")
    if g is None:
        raise SystemExit(f"pair: {T['path']} has no grpo-16 (the target)")
    t = dict(zip(g["seeds"], g["final"]))
    missing = [sd for sd in seeds if sd not in t]
    if missing:
        raise SystemExit(f"pair: {T['path']}'s grpo-16 ran no seed {missing}")
    return {sd: float(t[sd]) for sd in seeds}


def on_seeds(x, seeds):
    """A mode's per-seed figures on `seeds` alone, in that order."""
    i = [list(x["seeds"]).index(sd) for sd in seeds]
    return dict(x, seeds=list(seeds), auc=x["auc"][i], final=x["final"][i],
                curves=[x["curves"][j] for j in i] if x.get("curves") else None)


def rows_of(a0, others, budget, target, common=False):
    """Per other mode: its paired statistics against `a0` (common: on
    the seeds both ran, else both must have run the same seeds)."""
    rows = []
    for m, b in others:
        a = a0
        if list(a["seeds"]) != list(b["seeds"]):
            if not common:
                raise SystemExit(f"pair: {a['name']} and {m} ran other seeds")
            both = [sd for sd in a["seeds"] if sd in set(b["seeds"])]
            if len(both) < 2:
                raise SystemExit(f"pair: {a['name']} and {m} share "
                                 f"{len(both)} seed(s)")
            a, b = on_seeds(a, both), on_seeds(b, both)
        d = a["auc"] - b["auc"]
        r = dict(mode=m, auc=paired(d), ahead=int((d > 0).sum()),
                 final=float(np.mean(a["final"] - b["final"])))
        if target is not None:
            ra, _ = reach(a, target, budget)
            rb, got = reach(b, target, budget)
            # a run that starts at T: one rollout, so a ratio is defined
            lr = paired(np.log(np.maximum(ra, 1.0) / np.maximum(rb, 1.0)))
            r.update(reach=paired(ra - rb), share=float(got.mean()),
                     mean=float(rb.mean()), faster=int((ra < rb).sum()),
                     ratio=math.exp(lr["mean"]), ratio_lo=math.exp(lr["lo"]),
                     ratio_hi=math.exp(lr["hi"]),
                     ratio_of_means=float(ra.mean() / rb.mean()))
            # Seeds whose T is at or below the start (every mode of a seed
            # starts from the same weights: all reach T at 0, ratio 1).
            live = np.array([target[sd] > c[0][1]
                             for sd, c in zip(a["seeds"], a["curves"])])
            if 2 <= live.sum() < len(live):
                lv = paired(np.log(np.maximum(ra[live], 1.0) /
                                   np.maximum(rb[live], 1.0)))
                r["live"] = (int(live.sum()), math.exp(lv["mean"]),
                             math.exp(lv["lo"]), math.exp(lv["hi"]))
        rows.append(r)
    for key in ("auc",) + (("reach",) if target is not None else ()):
        for r, h in zip(rows, holm([r[key]["p"] for r in rows])):
            r[key]["p_holm"] = h
    return rows


def reach(x, target, budget):
    """Rollouts to the seed's target (a miss: the budget) and whether it
    was reached."""
    return analysis.reach({"x": x}, "x", target, budget)


def bars(name, rows):
    """(bar, compared mode, ratio row, limit) for the issue's two bars,
    where the modes compared include them."""
    fixed = [r for r in rows if r["mode"].startswith("fixed-")]
    out = []
    for what, limit in BARS:
        if what == "grpo-16":
            r = next((r for r in rows if r["mode"] == "grpo-16"), None)
        else:
            # the fixed k the candidate's ratio is highest against: the
            # bar's hardest (a ratio is paired by seed, so a mode that ran
            # fewer seeds compares too)
            r = max(fixed, key=lambda r: r["ratio"]) if fixed else None
        if r is not None:
            out.append((what, r, limit))
    return out


def table(name, a, rows, budget, target):
    L = []
    head = "| mode | seeds | AUC diff | p (Holm) | ahead | final diff |"
    sep = "|---|---|---|---|---|---|"
    if target is not None:
        head += (" reached T | rollouts to T | ratio: geometric mean "
                 "[95%] | ratio of means | rollouts diff | p (Holm) | "
                 f"{name} faster |")
        sep += "---|---|---|---|---|---|---|"
        ra, got = reach(a, target, budget)
        low = [sd for sd, c in zip(a["seeds"], a["curves"])
               if target[sd] <= c[0][1]]
        L.append(f"{name}: reached T in {got.mean():.0%} of its runs, "
                 f"rollouts to T {ra.mean():.0f} on average." + (
                     f" T is at or below the start accuracy in seed(s) "
                     f"{', '.join(map(str, low))} (grpo-16 ended no higher "
                     "than it started): every mode reaches it at 0 "
                     "rollouts there, a ratio of 1." if low else "") + "\n")
    L += [head, sep]
    for r in rows:
        t, n = r["auc"], r["auc"]["n"]
        cells = [r["mode"], f"{n}" + (" (< 10)" if n < 10 else ""),
                 f"{t['mean']:+.4f} [{t['lo']:+.4f}, {t['hi']:+.4f}]",
                 f"{t['p']:.3g} ({t['p_holm']:.3g})", f"{r['ahead']}/{n}",
                 f"{r['final']:+.4f}"]
        if target is not None:
            u = r["reach"]
            cells += [f"{r['share']:.0%}", f"{r['mean']:.0f}",
                      f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, "
                      f"{r['ratio_hi']:.2f}]", f"{r['ratio_of_means']:.2f}",
                      f"{u['mean']:+.0f} [{u['lo']:+.0f}, {u['hi']:+.0f}]",
                      f"{u['p']:.3g} ({u['p_holm']:.3g})",
                      f"{r['faster']}/{n}"]
        L.append("| " + " | ".join(cells) + " |")
    if target is not None:
        L.append("")
        for what, r, limit in bars(name, rows):
            verdict = ("met, interval included" if r["ratio_hi"] <= limit
                       else "met by the point estimate, not by the interval"
                       if r["ratio"] <= limit else "not met")
            L.append(f"- rollouts to T, {name} / {what} ({r['mode']}): "
                     f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, "
                     f"{r['ratio_hi']:.2f}] (ratio of means "
                     f"{r['ratio_of_means']:.2f}); the bar {limit}: "
                     f"{verdict}" + (
                         "; on the {} seeds whose T is above the start "
                         "accuracy: {:.2f} [{:.2f}, {:.2f}]".format(*r["live"])
                         if "live" in r else "") + ".")
    return L


def git_rev():
    r = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "?"


def section(argv, name, A, groups, T, target, lines):
    seeds = A["summary"][name]["seeds"]
    runs = [(A, name)] + [(B, m) for B, ms in groups for m in ms]
    if T and not any(B is T or B["path"] == T["path"] and m == "grpo-16"
                     for B, m in runs):
        runs.append((T, "grpo-16"))
    L = [f"## Regime {A.get('regime')}: {name} against the others\n",
         "Generated by `bench/train/pair.py " + shlex.join(argv) + "` (at "
         f"commit {git_rev()}) on this project's 2-core Debian 12 VM, "
         "from the committed summaries: " + ", ".join(
             f"`{B['path']}`'s {m} (run at {B.get('commit', '?')})"
             for B, m in runs) + f". Seeds {seeds[0]}-{seeds[-1]}, paired "
         f"by seed; each difference is {name} minus the mode, its 95% "
         "t-interval, the paired t-test's p and in brackets after Holm's "
         "correction over the modes of the table; *ahead*: seeds where "
         f"{name}'s AUC is higher. AUC: mean held-out accuracy over the "
         f"budget ({A['steps'] * A['budget_per_step']} rollouts).\n"]
    if target is not None:
        L.append("T: grpo-16's final held-out accuracy in the same seed, "
                 + ", ".join(f"{target[sd]:.3f}" for sd in seeds) + ". "
                 "*rollouts to T*: where the held-out curve first reaches "
                 "T, linear between evaluations; a run that never does "
                 "counts as the budget (a lower bound); mean over seeds. "
                 f"*ratio*: {name}'s rollouts to T / the mode's, the "
                 "geometric mean of the per-seed ratios with the 95% "
                 "t-interval of their logarithms; *ratio of means*: the "
                 "mean rollouts divided. The best fixed k: the fixed-* "
                 "mode of the table against which the ratio is highest "
                 "(the bar's hardest comparison).\n")
    return L + lines + [""]


def main(argv=None):
    argv = list(argv if argv is not None else sys.argv[1:])
    ap = argparse.ArgumentParser(prog="bench/train/pair.py",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--title", default=None)
    ap.add_argument("--common-seeds", action="store_true")
    ap.add_argument("args", nargs="+")
    o = ap.parse_args(argv)
    if len(o.args) < 4 or len(o.args) % 2:
        raise SystemExit(__doc__)
    A = load(o.args[0])
    name = o.args[1]
    if name not in A["summary"]:
        raise SystemExit(f"pair: {o.args[0]} has no mode {name}")
    groups = []
    for path, modes in zip(o.args[2::2], o.args[3::2]):
        B = load(path)
        check(A, B)
        for m in modes.split(","):
            if m not in B["summary"]:
                raise SystemExit(f"pair: {path} has no mode {m}")
        groups.append((B, modes.split(",")))
    budget = A["steps"] * A["budget_per_step"]
    a = dict(A["summary"][name], name=name)
    T = target = None
    if o.target:
        T = load(o.target)
        check(A, T)
        target = targets(T, a["seeds"])
    others = [(m, B["summary"][m]) for B, ms in groups for m in ms]
    rows = rows_of(a, others, budget, target, o.common_seeds)
    lines = table(name, a, rows, budget, target)
    seeds = a["seeds"]
    print(f"{name} ({o.args[0]}) against " +
          ", ".join(B["path"] for B, _ in groups) +
          f", regime {A.get('regime')}, seeds {seeds[0]}-{seeds[-1]}")
    print("\n".join(lines))
    if o.md:
        L = section(argv, name, A, groups, T, target, lines)
        if o.title and not o.append:
            L = [f"# {o.title}\n"] + L
        with open(o.md, "a" if o.append else "w") as f:
            f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
