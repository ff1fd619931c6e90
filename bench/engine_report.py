#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/ENGINE.md from the runs bench/engine_run.py wrote
(bench/out/engine-<engine>-s<sigma>....json), and one SVG per run (running
sequences over time for the last batch of the first repetition, one panel
per mode) in bench/plots/. Each run's summary, its JSON without the plot's
traces, is kept in bench/results/engine/ (committed), and the page is made
from those: a run made elsewhere keeps its section as long as its summary
is there, and rerunning this script with no bench/out rewrites the page
(not the plots) from them. Ratios are per repetition (each mode against
fixed k=4 and GRPO G=16 of the same repetition), then the median and the
range."""
import glob
import json
import os
import sys
from xml.sax.saxutils import escape

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT, BASE, GRPO = "v05-eb default", "fixed k=4", "GRPO G=16"
EARLY, BARRIER = "v05-eb early start", "v05-eb barrier"
DOORBELL = "v05-eb doorbell wait"


def per_rep(rows, mode):
    """rep -> the mode's batches summed (wall, tokens, ...)."""
    out = {}
    for r in rows:
        if r["mode"] != mode:
            continue
        s = out.setdefault(r["rep"], {"wall_s": 0.0, "tokens": 0,
                                      "wasted_tokens": 0, "samples": 0,
                                      "aborted": 0, "padded": None,
                                      "busy_area": 0.0, "overhead_s": 0.0,
                                      "handoff_s": 0.0, "cpu_s": None,
                                      "p50": [], "p99": [], "mse": []})
        s["wall_s"] += r["wall_s"]
        s["tokens"] += r["tokens"]
        s["wasted_tokens"] += r["wasted_tokens"]
        s["samples"] += r["samples"]
        s["aborted"] += r.get("aborted", 0)
        if "padded" in r:  # recorded since commit a085fe5
            s["padded"] = (s["padded"] or 0) + r["padded"]
        s["busy_area"] += r["busy"] * r["wall_s"]
        s["overhead_s"] += r["overhead_s"]
        s["handoff_s"] += r.get("handoff_s", 0.0)
        if "overhead_cpu_s" in r:  # recorded since the overhead was CPU time
            # Less what the bench's own clock reads counted (measured
            # beside every timed call: bench/engine_run.py, timer_cost).
            s["cpu_s"] = (s["cpu_s"] or 0.0) + r["overhead_cpu_s"] + \
                r["wait_cpu_s"] - r.get("timer_cpu_s", 0.0)
            s["handoff_s"] -= r.get("handoff_timer_s", 0.0)
        s["p50"].append(r["lat_p50_s"])
        s["p99"].append(r["lat_p99_s"])
        s["mse"].append(r["mse"])
    for s in out.values():
        s["busy"] = s["busy_area"] / s["wall_s"]
        s["wpt"] = s["wall_s"] / s["tokens"]
    return out


def overhead(S):
    """The decision path's share of wall: CPU time in plugin calls, in
    arming the driver's wait, and in the reward hand-off (pool threads).
    Runs before CPU time was recorded give the calls' wall-clock time."""
    calls = S["cpu_s"] if S["cpu_s"] is not None else S["overhead_s"]
    return (calls + S["handoff_s"]) / S["wall_s"]


def per_prompt_us(rows, mode, prompts):
    """CPU microseconds per prompt of each part of the decision path,
    every batch of the mode together, the clocks' own cost taken out
    (a call's share of it: the timers are read once per call)."""
    mine = [r for r in rows if r["mode"] == mode]
    if not mine or "wait_calls" not in mine[0]:
        return None
    n = sum(r.get("prompts", prompts) for r in mine)
    calls, cpu = {}, {}
    for r in mine:
        for name, (c, s) in r["calls"].items():
            calls[name] = calls.get(name, 0) + c
            cpu[name] = cpu.get(name, 0.0) + s
    ncalls = sum(calls.values()) + sum(r["wait_calls"] for r in mine)
    timer = sum(r["timer_cpu_s"] for r in mine) / max(ncalls, 1)
    out = {name: 1e6 * (cpu[name] - timer * calls[name]) / n
           for name in ("poll", "group", "release", "submit") if name in cpu}
    out["wait"] = 1e6 * sum(r["wait_cpu_s"] - timer * r["wait_calls"]
                            for r in mine) / n
    out["hand-off"] = 1e6 * sum(r["handoff_s"] - r.get("handoff_timer_s", 0)
                                for r in mine) / n
    out["polls"] = calls.get("poll", 0) / n
    if all("loop_cpu_s" in r for r in mine):
        out["loop"] = 1e6 * sum(r["loop_cpu_s"] for r in mine) / n
        out["process"] = 1e6 * sum(r["proc_cpu_s"] for r in mine) / n
    return out


def padded(R, ks):
    """Median padding samples, or "-" for a run that did not record them."""
    xs = [R[k]["padded"] for k in ks if R[k]["padded"] is not None]
    return f"{med(xs):.0f}" if xs else "-"


def calls_cell(R, ks):
    """Plugin calls (with the wait's arming) as % of wall: CPU time, then
    the calls' wall-clock time; only the latter before CPU was recorded."""
    wall = 100 * med([R[k]["overhead_s"] / R[k]["wall_s"] for k in ks])
    if any(R[k]["cpu_s"] is None for k in ks):
        return f"{wall:.2f}"
    cpu = 100 * med([R[k]["cpu_s"] / R[k]["wall_s"] for k in ks])
    return f"{cpu:.2f}; {wall:.2f}"


def med(xs):
    return float(np.median(xs))


def spread(xs, fmt="%.3f"):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (np.median(xs), min(xs),
                                                   max(xs))


def ratios(reps, other, key):
    return [reps[r][key] / other[r][key] for r in reps if r in other]


def svg(run, path):
    panels = [r for r in run["rows"] if "trace" in r]
    if not panels:
        return False
    w, h, pad = 640, 90, 28
    t_max = max(r["trace"][-1][0] for r in panels) or 1.0
    cap = run["args"]["max_seqs"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" '
           f'height="{len(panels) * (h + pad) + pad}" font-family="sans-serif" '
           'font-size="11">']
    for i, r in enumerate(panels):
        y0 = pad + i * (h + pad)
        # A step line, one column per half pixel: the level coming in,
        # the lowest and highest within, the level going out (the picture
        # is the same as with every event; the file is not 100 times it).
        cols, prev = {}, 0
        for t, n in r["trace"]:
            x = round(2 * (w - 60) * t / t_max)
            c = cols.setdefault(x, [prev, n, n, n])
            c[1], c[2], c[3] = min(c[1], n), max(c[2], n), n
            prev = n
        xy = []
        for x, (enter, lo, hi, leave) in sorted(cols.items()):
            for n in (enter, lo, hi, leave):
                p = (f"{50 + x / 2:.1f}", f"{y0 + h - h * n / cap:.1f}")
                # A point inside a flat run adds nothing: drop it.
                if len(xy) >= 2 and xy[-1][1] == xy[-2][1] == p[1]:
                    xy[-1] = p
                elif not xy or xy[-1] != p:
                    xy.append(p)
        pts = [f"{x},{y}" for x, y in xy]
        out.append(f'<text x="50" y="{y0 - 6}">{escape(r["mode"])}: '
                   f'{r["wall_s"]:.2f} s, busy {r["busy"]:.2f}</text>')
        out.append(f'<rect x="50" y="{y0}" width="{w - 60}" height="{h}" '
                   'fill="none" stroke="#bbb"/>')
        out.append(f'<text x="4" y="{y0 + 10}">{cap}</text>'
                   f'<text x="4" y="{y0 + h}">0</text>')
        out.append(f'<polyline fill="none" stroke="#1f5fa8" '
                   f'points="{" ".join(pts)}"/>')
    out.append(f'<text x="50" y="{len(panels) * (h + pad) + pad - 4}">'
               f'running sequences over time (0 to {t_max:.1f} s, the same '
               'scale in every panel)</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out))
    return True


# bench/engine_run.py's defaults for the priors and the early start.
PRIORS = (0.2, 0.05)
EB_EARLY = 0.05


def engine_of(run):
    """"vLLM 0.32.0" -> "vllm": the --engine that made the run."""
    return run["engine"].split()[0].lower()


def tag_of(engine, a):
    """A run's file and picture name (engine_run.py writes it, this reads
    it): engine and tail, and the priors when they are not the default."""
    tag = f"engine-{engine}-s{a['sigma']:g}"
    if (a["noise"], a["hallucination"]) != PRIORS:
        tag += f"-n{a['noise']:g}-h{a['hallucination']:g}"
    return tag


def rerun(run):
    """The command that makes this run again."""
    a = run["args"]
    cmd = f"bench/engine --engine {engine_of(run)} --sigma {a['sigma']:g}"
    if (a["noise"], a["hallucination"]) != PRIORS:
        cmd += f" --noise {a['noise']:g} --hallucination {a['hallucination']:g}"
    if a.get("eb_early", EB_EARLY) != EB_EARLY:
        cmd += f" --eb-early {a['eb_early']:g}"
    if a["reps"] != 5:
        cmd += f" --reps {a['reps']}"
    return cmd


def comparisons(run, rows, reps):
    """A run's section, after the goals: early start, no barrier and the
    doorbell wait, each against the default, where the run has them."""
    lines = []
    if EARLY in reps and DEFAULT in reps:
        E, D = reps[EARLY], reps[DEFAULT]
        wall = ratios(E, D, "wall_s")
        cost = [(E[k]["tokens"] + E[k]["wasted_tokens"]) / D[k]["tokens"]
                for k in E if k in D]
        ab = [E[k]["aborted"] for k in E]
        lines += ["", f"Early start against the default: wall {spread(wall)}, "
                  f"tokens generated (wasted included, at most) "
                  f"{spread(cost)}; samples started early and aborted per "
                  f"repetition {spread(ab, '%d')}, samples issued "
                  f"{spread([E[k]['samples'] for k in E], '%d')} against "
                  f"the default's {spread([D[k]['samples'] for k in D], '%d')}"
                  ". It would be the default only if it won on wall at a "
                  "small token cost."]
        if all(E[k]["samples"] == D[k]["samples"] and not E[k]["aborted"]
               for k in E if k in D):
            lines[-1] += (" Here no prompt's chance of more samples reached "
                          "the threshold: both rows did the same work, and "
                          "their wall ratio is the run's noise.")
    if BARRIER in reps and DEFAULT in reps:
        wall = ratios(reps[DEFAULT], reps[BARRIER], "wall_s")
        lines += ["", f"No barrier against the barrier: wall {spread(wall)}."]
    if DOORBELL in reps and DEFAULT in reps:
        D, B = reps[DEFAULT], reps[DOORBELL]
        ks = [k for k in D if k in B]
        lines += ["", "The driver's two waits, side by side: the default "
                  "waits for its own scores (v05.engines.driver), the "
                  f"`{DOORBELL}` row pushes each reward from a scoring "
                  "thread and waits on the plugin's doorbell. Decision "
                  f"overhead {spread([100 * overhead(D[k]) for k in ks], '%.2f')}"
                  f" % against {spread([100 * overhead(B[k]) for k in ks], '%.2f')}"
                  " %, per repetition "
                  f"{spread([overhead(D[k]) / overhead(B[k]) for k in ks])}"
                  " times."]
        cpu = {}
        for r in rows:
            if r["mode"] in (DEFAULT, DOORBELL) and "loop_cpu_s" in r:
                c = cpu.setdefault((r["mode"], r["rep"]), [0.0, 0.0])
                c[0] += r["loop_cpu_s"]
                c[1] += r["proc_cpu_s"]
        both = [k for k in ks if (DEFAULT, k) in cpu and (DOORBELL, k) in cpu]
        if both:
            def vs(i):
                q = [cpu[(DEFAULT, k)][i] / cpu[(DOORBELL, k)][i] for k in both]
                return (f"{spread(q)} ({sum(x < 1 for x in q)} of {len(q)} "
                        "repetitions lower)")
            wall = [D[k]["wall_s"] / B[k]["wall_s"] for k in both]
            lines[-1] += (
                " The timed calls cost about the same; the loop's work "
                "around them, which they do not count, differs: all the CPU "
                "the driver's thread spent, the default against the "
                f"doorbell wait, {vs(0)}; the whole process's {vs(1)}; "
                f"wall {spread(wall)}. (Not attributed call by call; the "
                "doorbell wait has, per wait, a reader added to and removed "
                "from the loop and a wake-up through the doorbell beside the "
                "scoring pool's own, and a task step per sample.)")
        parts = [(m, per_prompt_us(rows, m, run["args"]["prompts"]))
                 for m in (BASE, DEFAULT, DOORBELL) if m in reps]
        if all(x is not None for _, x in parts):
            names = ["poll", "group", "release", "wait", "hand-off"]
            lines += ["", "Where it goes, CPU microseconds per prompt (every "
                      "batch; the clocks' own cost taken out). *loop* and "
                      "*process*: all the CPU the driver's thread and its "
                      "process (not the engine's own processes) spent per "
                      "prompt, vLLM's output handling included: a check that "
                      "does not depend on what is timed.", "",
                      "| mode | polls per prompt | " + " | ".join(names) +
                      " | sum | loop | process |",
                      "|---|---:|" + "---:|" * (len(names) + 3)]
            for m, x in parts:
                total = sum(x[n] for n in names if n in x)
                lines.append(
                    f"| {m} | {x['polls']:.2f} | " +
                    " | ".join(f"{x.get(n, 0):.1f}" for n in names) +
                    f" | {total:.1f} | "
                    f"{x['loop']:.0f} | {x['process']:.0f} |"
                    if "loop" in x else
                    f"| {m} | {x['polls']:.2f} | " +
                    " | ".join(f"{x.get(n, 0):.1f}" for n in names) +
                    f" | {total:.1f} | - | - |")
    return lines


def section(run, svg_rel):
    a = run["args"]
    rows = run["rows"]
    modes = run["modes"]
    reps = {m: per_rep(rows, m) for m in modes}
    lines = [
        f"## {run['engine']}, per-sample sigma {a['sigma']:g}" +
        (f", priors noise {a['noise']:g} with {a['hallucination']:g} random"
         if (a["noise"], a["hallucination"]) != PRIORS else ""),
        "",
        f"{run['date']}, commit {run['commit']}, v05 {run['v05']}, "
        f"{run['cpus']} cores; run time {run['run_s'] / 60:.1f} min. "
        f"{a['prompts']} prompts per batch, {a['batches']} batches per mode "
        f"and repetition, {a['reps']} repetitions interleaved (order rotated); "
        f"lengths lognormal: median {a['median']:g}, per-sample sigma "
        f"{a['sigma']:g}, per-prompt sigma {a['prompt_sigma']:g}, cap "
        f"{a['cap']}; max_num_seqs {a['max_seqs']}; priors: noise "
        f"{a['noise']:g}, {a['hallucination']:g} of them random; early "
        f"start at {a.get('eb_early', EB_EARLY):g}. Rerun: `{rerun(run)}`.",
        "",
        "| mode | wall s | tokens | wasted tokens (at most) | samples | "
        "of them padding | busy | "
        "first request to final p50 / p99 s | plugin calls % of wall "
        "(CPU time; wall-clock) | reward hand-off % of wall (CPU time) | "
        "baseline MSE |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    if not any("padded" in r for r in rows):
        lines[2] += (" This run predates commit a085fe5, where v05-eb's "
                     "stream deadline stopped padding its releases; its "
                     "padding samples were not recorded.")
    for m in modes:
        R = reps[m]
        ks = sorted(R)
        lines.append(
            f"| {m} | {spread([R[k]['wall_s'] for k in ks], '%.2f')} | "
            f"{med([R[k]['tokens'] for k in ks]):.0f} | "
            f"{med([R[k]['wasted_tokens'] for k in ks]):.0f} | "
            f"{med([R[k]['samples'] for k in ks]):.0f} | "
            f"{padded(R, ks)} | "
            f"{spread([R[k]['busy'] for k in ks], '%.2f')} | "
            f"{med([np.mean(R[k]['p50']) for k in ks]):.2f} / "
            f"{med([np.mean(R[k]['p99']) for k in ks]):.2f} | "
            f"{calls_cell(R, ks)} | "
            f"{100 * med([R[k]['handoff_s'] / R[k]['wall_s'] for k in ks]):.2f} | "
            f"{med([np.mean(R[k]['mse']) for k in ks]):.4f} |")
    lines += ["", "Per repetition, against fixed k=4 and GRPO G=16 of the "
              "same repetition (median, range):", "",
              "| mode | wall vs fixed k=4 | tokens vs fixed k=4 | "
              "wall per token vs fixed k=4 | wall per token vs GRPO G=16 | "
              "busy minus fixed k=4's |",
              "|---|---|---|---|---|---|"]
    base = reps.get(BASE, {})
    grpo = reps.get(GRPO, {})
    for m in modes:
        R = reps[m]
        cells = [m]
        for key, other in (("wall_s", base), ("tokens", base),
                           ("wpt", base), ("wpt", grpo)):
            q = ratios(R, other, key)
            cells.append(spread(q) if q else "-")
        d = [R[k]["busy"] - base[k]["busy"] for k in R if k in base]
        cells.append(spread(d, "%+.3f") if d else "-")
        lines.append("| " + " | ".join(cells) + " |")
    goals = []
    if DEFAULT in reps and BASE in reps:
        D = reps[DEFAULT]
        wpt = ratios(D, base, "wpt")
        smp = ratios(D, base, "samples")
        wall = ratios(D, base, "wall_s")
        busy = [D[k]["busy"] - base[k]["busy"] for k in D if k in base]
        over = [overhead(D[k]) for k in D]
        busier = " (above: the engine was busier than under fixed k=4)" \
            if med(busy) > 0.05 else ""
        goals = [
            ("wall per generated token within 1.10x fixed k=4's",
             spread(wpt), med(wpt) <= 1.10, ""),
            ("where samples <= 1.05x fixed k=4's, wall <= 1.10x "
             f"(samples {spread(smp)})", spread(wall),
             med(smp) > 1.05 or med(wall) <= 1.10, ""),
            ("busy fraction within 5 points of fixed k=4's",
             spread(busy, "%+.3f"), abs(med(busy)) <= 0.05, busier),
            ("decision overhead (CPU time in plugin calls, the driver's "
             "wait arming and the reward hand-off) under 1% "
             "of wall" if all(D[k]["cpu_s"] is not None for k in D) else
             "decision overhead (wall-clock time in plugin calls, CPU time "
             "of the reward hand-off) under 1% of wall",
             spread([100 * x for x in over], "%.2f") + " %",
             med(over) < 0.01, ""),
        ]
        lines += ["", "Goals for the default (issue 26), medians of "
                  "per-repetition ratios:", "",
                  "| goal | measured | |", "|---|---|---|"]
        for g, v, ok, why in goals:
            lines.append(f"| {g} | {v} | {'met' if ok else 'NOT met' + why} |")
    lines += comparisons(run, rows, reps)
    if svg_rel:
        lines += ["", f"![running sequences]({svg_rel})", "",
                  f"Running sequences over time, the last batch of the first "
                  f"repetition of each mode: `{svg_rel}`."]
    lines.append("")
    return lines


RESULTS = os.path.join(ROOT, "bench", "results", "engine")


def summarise(run):
    """A run's summary: everything but the plot's traces."""
    return dict(run, rows=[{k: v for k, v in r.items() if k != "trace"}
                           for r in run["rows"]])


def main():
    fresh = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "out",
                                              "engine-*.json"))):
        with open(path) as f:
            run = json.load(f)
        fresh[tag_of(engine_of(run), run["args"])] = run
    os.makedirs(RESULTS, exist_ok=True)
    for tag, run in fresh.items():
        with open(os.path.join(RESULTS, tag + ".json"), "w") as f:
            json.dump(summarise(run), f, sort_keys=True,
                      separators=(",", ":"))
            f.write("\n")
    runs = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "engine-*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        sys.exit("bench/engine_report.py: no run in bench/out or "
                 "bench/results/engine; run bench/engine first")
    os.makedirs(os.path.join(ROOT, "bench", "plots"), exist_ok=True)
    lines = [
        "# v05 on real engines: what long-tailed rollouts cost in wall time",
        "",
        "Written by `bench/engine_report.py` from the runs of "
        "`bench/engine` (bench/engine_run.py) listed below, on this 2-core "
        "Debian 12 VM (shared and noisy: compare the per-repetition ratios, "
        "not the absolute seconds), each from its summary in "
        "`bench/results/engine/` (committed; `python3 bench/engine_report.py` "
        "rewrites this page from them). Columns: *wall* "
        "is the engine time of "
        "the mode's batches summed; *tokens* the tokens of finished "
        "samples, *wasted* those of samples aborted; *busy* the mean of "
        "min(requests in flight, max_num_seqs) / max_num_seqs over the "
        "wall, integrated at every request's start and end; *first request "
        "to final* the time from a prompt's first request to its final "
        "decision (mean over batches of the batch's p50 and p99); "
        "*plugin calls* the CPU time inside submit, poll, release and "
        "group and in arming the driver's wait (Plugin.wait), then their "
        "wall-clock time (which also counts the engine's processes taking "
        "the CPU from the loop mid-call on this 2-core VM; runs before "
        "CPU time was recorded give only that); *reward hand-off* the CPU "
        "time pushing rewards took (RewardWriter.push on the driver's pool "
        "threads; the score itself is the user's), both against the wall, "
        "less the CPU time the bench's own clock reads count (measured "
        "beside every timed call, about 0.03% of wall); "
        "*decision overhead* in the goals is their sum; *baseline MSE* "
        "against the tiny model's exact success probability.",
        "",
    ]
    for run in runs:
        tag = tag_of(engine_of(run), run["args"])
        rel = f"plots/{tag}.svg"
        # The plot needs the traces: drawn from a run in bench/out, kept
        # as it is otherwise.
        ok = svg(fresh[tag], os.path.join(ROOT, "bench", rel)) \
            if tag in fresh else \
            os.path.exists(os.path.join(ROOT, "bench", rel))
        lines += section(run, rel if ok else None)
    md = os.path.join(ROOT, "bench", "ENGINE.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    # The fill runs' sections (bench/fill_report.py), from their summaries
    # beside these.
    if glob.glob(os.path.join(RESULTS, "fill-*.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import fill_report
        fill_report.main()
    # The affinity section (bench/affinity_report.py), from its runs.
    if glob.glob(os.path.join(ROOT, "bench", "results", "affinity",
                              "affinity-*.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import affinity_report
        affinity_report.main()
    # The group route's sections (bench/server_report.py), from theirs.
    if glob.glob(os.path.join(RESULTS, "server-*.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import server_report
        server_report.main()


if __name__ == "__main__":
    main()
