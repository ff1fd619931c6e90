# SPDX-License-Identifier: MIT
"""bench/train/report.py RESULTS_JSON...: a page (Markdown), its plots
(SVG) and its summary, every number computed from the runs (summary.py,
analysis.py, pages.py, plots.py do the work).

    report.py [--target ACC] [RESULTS.json...] [DEST.md]
    report.py --from bench/results/train/<page>.json [--target ACC] [DEST.md]

The first writes DEST (default RESULTS.md) and its plots, and, for a page
in bench/train, its summary bench/results/train/<page>.json (committed:
every figure the page shows and each run's held-out curve, not the step
logs). The second rewrites the page (not the plots) from a summary,
recomputing each endpoint from the curves where the summary has them.
--target: the accuracy the rollouts-to-target endpoint counts to
(default: grpo-16's final accuracy in each seed, when the page has it).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pages import FILL, eval_grid, render, target_rows  # noqa: E402
from plots import plots  # noqa: E402
from summary import by_mode, from_summary, summarize  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench",
                       "results", "train")
# Run settings a merged page needs to share (older results: the default).
SAME = {"steps": None, "budget_per_step": None, "warmup": None, "lr": None,
        "heldout": None, "regime": "today", "sigma": "rms"}


def git_rev():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def merge(paths):
    """Several invocations (e.g. more seeds added later) as one result:
    the same steps, budget, learning rate, regime and normaliser required;
    runs, seeds and times add up."""
    parts = []
    for p in paths:
        with open(p) as f:
            q = json.load(f)
        if not q.get("complete", True):
            # An interrupted run (main.py saves after every run): its
            # seeds are those it finished.
            q["seeds"] = sorted({r["seed"] for r in q["runs"]})
            print(f"report: {p} is an interrupted run ({len(q['runs'])} "
                  f"runs, seeds {q['seeds']})", file=sys.stderr)
        parts.append(q)
    R = dict(parts[0])
    for q in parts[1:]:
        for k, default in SAME.items():
            if q.get(k, default) != R.get(k, default):
                raise SystemExit(f"report: {k} differs between the runs "
                                 f"merged ({R.get(k, default)} and "
                                 f"{q.get(k, default)})")
        R["runs"] = R["runs"] + q["runs"]
        R["seeds"] = sorted(set(R["seeds"]) | set(q["seeds"]))
        R["wall"] += q["wall"]
        R["warmup_seconds"] += q["warmup_seconds"]
        R["skipped"] = {**R["skipped"], **q["skipped"]}
        # A mode one invocation skipped and a later one ran is not skipped.
        ran = {r["mode"] for r in R["runs"]}
        R["skipped"] = {m: e for m, e in R["skipped"].items() if m not in ran}
        R["default_mode"] = R.get("default_mode") or q.get("default_mode")
    R["command"] = "` + `".join(q["command"] for q in parts)
    R["commit"] = " + ".join(dict.fromkeys(q.get("commit", "?") for q in parts))
    R["walls"] = [q["wall"] for q in parts]
    return R


def from_file(path, dest=None, target=None):
    """The page from a committed summary."""
    with open(path) as f:
        ctx = json.load(f)
    budget = ctx["steps"] * ctx["budget_per_step"]
    ctx["summary"] = {m: from_summary(x, budget)
                      for m, x in ctx["summary"].items()}
    if target is not None:
        ctx["target_acc"] = target
    render(ctx, dest or os.path.join(HERE, ctx["page"] + ".md"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/train/report.py",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="from_", metavar="SUMMARY", default=None)
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv if argv is not None else sys.argv[1:])
    dests = [a for a in args.files if a.endswith(".md")]
    if args.from_:
        return from_file(args.from_, dests[0] if dests else None, args.target)
    paths = [a for a in args.files if not a.endswith(".md")] or \
        [os.path.join(HERE, "out", "results.json")]
    dest = dests[0] if dests else os.path.join(HERE, "RESULTS.md")
    R = merge(paths)
    mruns = by_mode(R["runs"])
    budget = R["steps"] * R["budget_per_step"]
    s = summarize(mruns, budget)
    # A report other than RESULTS.md (RULES.md) names its plots after
    # itself, so the main report's stay.
    stem = os.path.splitext(os.path.basename(dest))[0]
    files = plots(mruns, s, budget,
                  os.path.join(os.path.dirname(os.path.abspath(dest)), "plots"),
                  "" if stem == "RESULTS" else stem.lower() + "-")
    # FILL.md's rollouts to grpo-16's accuracy, against v05-eb.
    T, trows = target_rows(s, mruns, budget) if any(m in FILL for m in s) \
        else (None, [])
    target = {"T": T, "rows": trows,
              "grid": eval_grid(R["runs"]) if T is not None else None}
    tt = {}
    for r in R["runs"]:
        for k, v in r["times"].items():
            tt[k] = tt.get(k, 0.0) + v
    ctx = {"page": stem, "files": files, "summary": s, "times": tt,
           "target": target, "target_acc": args.target,
           "wall_in_runs": sum(r["wall"] for r in R["runs"]),
           "n_runs": len(R["runs"]), "report_commit": git_rev(),
           "inputs": [os.path.relpath(os.path.abspath(p), os.path.dirname(
               os.path.dirname(HERE))) for p in paths],
           **{k: R.get(k) for k in ("command", "commit", "walls", "wall",
                                    "warmup_seconds", "steps",
                                    "budget_per_step", "seeds", "params",
                                    "lr", "heldout", "skipped", "regime",
                                    "sigma", "eval_rollouts",
                                    "default_mode")}}
    # The committed pages' summaries only (not --quick's, next to its JSON).
    if os.path.dirname(os.path.abspath(dest)) == HERE:
        os.makedirs(RESULTS, exist_ok=True)
        # Without the per-sample arrays only the plots read (tp, bl, pr:
        # megabytes over a full run): --from rewrites the page, not them.
        small = {**ctx, "summary": {
            m: {k: v for k, v in x.items() if k not in ("tp", "bl", "pr")}
            for m, x in s.items()}}
        with open(os.path.join(RESULTS, stem + ".json"), "w") as f:
            json.dump(small, f, indent=1,
                      default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
            f.write("\n")
    render(ctx, dest)


if __name__ == "__main__":
    main()
