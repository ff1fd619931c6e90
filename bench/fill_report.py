#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/ENGINE.md's "Full batches of informative groups" sections from
the runs' summaries in bench/results/engine/fill-*.json (committed; each
written here from the bench/out/fill-*.json bench/fill_run.py wrote, less
the per-request traces): per strategy,
per informative group, wall, tokens (aborted ones included), rollouts and
the engine's busy fraction; per repetition, each strategy against verl's
DAPO recipe and the best streaming refill of the same repetition; the
issue's goals. Sections of runs with no summary are kept as they are;
bench/engine_report.py, which writes the page anew, calls this last."""
import glob
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAD = "## Full batches of informative groups"
RECIPE, GRPO = "verl DAPO recipe", "GRPO G=16"
STREAMING = ("OpenRLHF per-group", "slime over-request")


def spread(xs, fmt="%.3f"):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (np.median(xs), min(xs),
                                                   max(xs))


def per_rep(rows, name):
    """rep -> the strategy's steps summed."""
    out = {}
    for r in rows:
        if r["strategy"] != name:
            continue
        s = out.setdefault(r["rep"], dict(wall=0.0, tokens=0, close=0,
                                          samples=0, groups=0, area=0.0,
                                          dropped=0, surplus=0, aborted=0,
                                          skipped=0, lost=0.0, cut=0,
                                          rounds=0, load=[]))
        s["wall"] += r["wall_s"]
        s["tokens"] += r["tokens"] + r["aborted_tokens"]
        s["cut"] += r["aborted_tokens"]
        s["close"] += r.get("close_tokens", 0)
        s["samples"] += r["samples"]
        s["groups"] += r["groups"]
        s["area"] += r["busy"] * r["wall_s"]
        for k in ("dropped", "surplus", "aborted", "skipped", "rounds"):
            s[k] += r[k]
        s["lost"] += r.get("skipped_informative", 0.0)
        s["load"].append(r.get("load1", float("nan")))
    for s in out.values():
        s["busy"] = s["area"] / s["wall"]
        # What the run's last step carried and close() aborted is counted
        # with the run: over a long run it is one step's in a hundred.
        s["all_tokens"] = s["tokens"] + s["close"]
        g = max(s["groups"], 1)
        s["wpg"] = s["wall"] / g
        s["tpg"] = s["all_tokens"] / g
        s["rpg"] = s["samples"] / g
    return out


def section(run):
    a = run["args"]
    names = run["strategies"]
    rows = run["rows"]
    reps = {n: per_rep(rows, n) for n in names}
    eng = run["engine"]
    title = (f"{HEAD}: {eng}, B = {a['target']}, G = 16, p ~ "
             f"{a['p_dist']}, per-sample sigma {a['sigma']:g}")
    load = run.get("load")
    per = [r["load1"] for r in rows if "load1" in r]
    per = (f"; per strategy {min(per):.1f} to {max(per):.1f}" if per
           else "")
    cmd = (f"bench/engine --fill --engine {a['engine']} --reps {a['reps']} "
           f"--target {a['target']} --steps {a['steps']} --p-dist "
           f"{a['p_dist']} --sigma {a['sigma']:g}")
    lines = [title, "",
             f"{run['date']}, commit {run['commit']}, v05 {run['v05']}, "
             f"{run['cpus']} cores, shared (load average "
             f"{load[0][0]:.1f} at the start, "
             f"{load[1][0]:.1f} at the end{per}); run time "
             f"{run['run_s'] / 60:.1f} min. {a['steps']} steps of B = "
             f"{a['target']} informative groups per strategy and "
             f"repetition, {a['reps']} repetitions interleaved (order "
             f"rotated), every strategy on the same prompts in the same "
             f"order; lengths lognormal: median {a['median']:g}, per-sample "
             f"sigma {a['sigma']:g}, per-prompt sigma {a['prompt_sigma']:g}, "
             f"cap {a['cap']}; max_num_seqs {a['max_seqs']}; success "
             f"probabilities {a['p_dist']} (informative share of a group of "
             f"16: {run['share']:.3f}); priors: noise {a['noise']:g}, "
             f"{a['hallucination']:g} of them random. Rerun: `{cmd}`.",
             "",
             "| strategy | wall s per informative group | tokens per informative group (aborted included) | rollouts per informative group | busy | rounds | dropped | surplus | aborted | skipped (informative among them, expected) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        R = reps[n]
        ks = sorted(R)
        med = lambda key: float(np.median([R[k][key] for k in ks]))  # noqa
        lines.append(
            f"| {n} | {1000 * med('wpg'):.1f} ms | {med('tpg'):.0f} | "
            f"{med('rpg'):.2f} | {med('busy'):.2f} | {med('rounds'):.0f} | "
            f"{med('dropped'):.0f} | {med('surplus'):.0f} | "
            f"{med('aborted'):.0f} | {med('skipped'):.0f} "
            f"({med('lost'):.1f}) |")
    lines += ["", "Medians over repetitions, all steps of a repetition "
              "summed. *tokens* count the finished samples' tokens and "
              "those an aborted request had generated (vLLM and sglang "
              "hand back an aborted request's partial output), and for a "
              "carrying fill what its last step carried and close() "
              "aborted; *rollouts* are the samples started; *busy* the mean "
              "of min(requests in flight, max_num_seqs) / max_num_seqs; "
              "*dropped* the groups not informative, *surplus* the "
              "informative ones beyond B (discarded, or carried), "
              "*aborted* the prompts in flight aborted at B.", ""]
    if RECIPE in reps:
        lines += ["Per repetition, against verl's DAPO recipe and the best "
                  "streaming refill (per-group replacement or over-request "
                  "with abort, whichever is lower in that repetition) of "
                  "the same repetition (median, range):", "",
                  "| strategy | wall vs DAPO recipe | tokens vs DAPO recipe "
                  "| wall vs best streaming | tokens vs best streaming | "
                  "busy minus GRPO G=16's |",
                  "|---|---|---|---|---|---|"]
        D = reps[RECIPE]
        S = [reps[n] for n in STREAMING if n in reps]
        Gr = reps.get(GRPO, {})
        goals = []
        for n in names:
            R = reps[n]
            ks = [k for k in R if k in D]
            wr = [R[k]["wpg"] / D[k]["wpg"] for k in ks]
            tr = [R[k]["tpg"] / D[k]["tpg"] for k in ks]
            cells = [spread(wr), spread(tr)]
            ws = tsb = None
            if S:
                kk = [k for k in ks if all(k in s for s in S)]
                ws = [R[k]["wpg"] / min(s[k]["wpg"] for s in S) for k in kk]
                tsb = [R[k]["tpg"] / min(s[k]["tpg"] for s in S) for k in kk]
                cells += [spread(ws), spread(tsb)]
            else:
                cells += ["-", "-"]
            bz = [R[k]["busy"] - Gr[k]["busy"] for k in R if k in Gr]
            cells.append(spread(bz, "%+.3f") if bz else "-")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
            if n.startswith("v05"):
                goals.append((n, wr, tr, ws, tsb, bz))
        lines += ["", "The issue's goals for v05's fill (medians of the "
                  "per-repetition ratios; met when the median is within "
                  "the bound):", "",
                  "| fill | wall <= 0.8x the recipe's | tokens <= 0.8x the "
                  "recipe's | wall <= the best streaming refill's | tokens "
                  "<= the best streaming refill's | busy >= GRPO G=16's - "
                  "0.05 |", "|---|---|---|---|---|---|"]
        for n, wr, tr, ws, tsb, bz in goals:
            def ok(xs, bound, le=True):
                if not xs:
                    return "-"
                m = float(np.median(xs))
                good = m <= bound if le else m >= bound
                return f"{m:.3f} {'met' if good else 'NOT met'}"
            lines.append(f"| {n} | {ok(wr, 0.8)} | {ok(tr, 0.8)} | "
                         f"{ok(ws, 1.0)} | {ok(tsb, 1.0)} | "
                         f"{ok(bz, -0.05, le=False)} |")
    lines.append("")
    return lines


RESULTS = os.path.join(ROOT, "bench", "results", "engine")


def main():
    def untraced(run):
        run["rows"] = [{k: v for k, v in r.items() if k != "trace"}
                       for r in run["rows"]]
        return run
    runs = kept_runs("fill", untraced)
    put_sections([section(r) for r in runs])


def kept_runs(kind, clean=None):
    """Each bench/out/<kind>-*.json kept (through clean, compact) in
    bench/results/engine/; then every run kept there, by name. Exits
    naming the command to run when there is none."""
    os.makedirs(RESULTS, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "out",
                                              f"{kind}-*.json"))):
        with open(path) as f:
            run = json.load(f)
        if clean is not None:
            run = clean(run)
        with open(os.path.join(RESULTS, os.path.basename(path)), "w") as f:
            json.dump(run, f, sort_keys=True, separators=(",", ":"))
            f.write("\n")
    runs = []
    for path in sorted(glob.glob(os.path.join(RESULTS, f"{kind}-*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        sys.exit(f"bench/{kind}_report.py: no bench/out/{kind}-*.json nor "
                 f"bench/results/engine/{kind}-*.json; run "
                 f"bench/engine --{kind} first")
    return runs


def put_sections(fresh):
    """Each of `fresh` (a section's lines, its "## " title first) into
    bench/ENGINE.md, in place of the section of that title or after the
    others; every other section is kept as it is. Printed too."""
    md = os.path.join(ROOT, "bench", "ENGINE.md")
    with open(md) as f:
        text = f.read()
    parts = text.split("\n## ")
    head, secs = parts[0], ["## " + p for p in parts[1:]]
    titles = {s[0] for s in fresh}
    kept = [s.rstrip("\n") for s in secs
            if s.split("\n", 1)[0] not in titles]
    out = head.rstrip("\n") + "\n\n" + "\n\n".join(
        kept + ["\n".join(s).rstrip("\n") for s in fresh]) + "\n"
    with open(md, "w") as f:
        f.write(out)
    for s in fresh:
        print("\n".join(s))


if __name__ == "__main__":
    main()
