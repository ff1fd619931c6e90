#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/ENGINE.md's "group route" sections from the runs of
bench/server_run.py: each bench/out/server-*.json is kept (compact) in
bench/results/engine/ (committed), and every run there gets its section;
the page's other sections are kept as they are (bench/engine_report.py,
which writes the page anew, calls this after the fill sections).

Statistics: per repetition, each arm's wall per generated token against
the others' of the same repetition; the interval is the t-interval of the
mean log ratio (the geometric mean ratio's), with the paired t-test's p
against 1 adjusted by Holm over the three comparisons. Round trips are
pooled over repetitions; a percentile's interval is the distribution-free
one from the order statistics (binomial, 95%)."""
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
from analysis import betainc, holm, paired  # noqa: E402 (bench/train)
sys.path.insert(0, os.path.join(ROOT, "bench"))
from fill_report import kept_runs, put_sections  # noqa: E402 (this folder)

HEAD = "## The group route behind `vllm serve` against the in-process driver"
BATCH, ROUTE, ONE = ("in-process batch", "group route",
                     "in-process one at a time")
TARGET_WPT, TARGET_OVERHEAD = 1.05, 0.01
# The title's tail by how the client gathered rewards (V05Client's
# batch_rewards; None: a run from before it gathered them).
GATHERED = {"origin": ", rewards gathered per front end (the default)",
            "server": ", rewards gathered per server",
            "group": ", rewards gathered per group",
            "off": ", a POST per reward",
            None: ", a POST per reward (before the client gathered them)"}
TARGET_P50, TARGET_P99 = 2e-3, 10e-3


def overhead(r):
    """v05's decision time in a row, seconds of CPU: the plugin calls
    (submit, poll, release, group), the wait's arming and the reward
    hand-off, less the clocks' own cost measured beside them."""
    calls = sum(c for _, c in r["calls"].values())
    return calls + r["wait_cpu_s"] - r["timer_cpu_s"] + \
        r["handoff_s"] - r["handoff_timer_s"]


def by_rep(run, arm):
    return {r["rep"]: r for r in run["rows"] if r["arm"] == arm}


def spread(xs, fmt="%.3f"):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (np.median(xs), min(xs),
                                                   max(xs))


def ratio_ci(xs):
    """Geometric mean of per-repetition ratios, its 95% t-interval, p."""
    s = paired([math.log(x) for x in xs])
    return math.exp(s["mean"]), math.exp(s["lo"]), math.exp(s["hi"]), s["p"]


def binom_cdf(k, n, q):
    """P(X <= k), X ~ Binomial(n, q)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return betainc(n - k, k + 1, 1.0 - q)


def quantile_ci(xs, q, level=0.95):
    """(estimate, lower, upper) of the q-quantile of xs; the bounds are
    order statistics x_(l) <= x_(u) with P(l <= X < u) >= level for X ~
    Binomial(n, q); an upper rank past n is reported as inf."""
    x = np.sort(np.asarray(xs, dtype=float))
    n = len(x)
    a = (1 - level) / 2
    lo = 0
    while lo + 1 <= n and binom_cdf(lo, n, q) <= a:
        lo += 1      # x_(lo) 1-indexed: F(lo - 1) <= a
    up = lo
    while up <= n and binom_cdf(up - 1, n, q) < 1 - a:
        up += 1
    lower = x[lo - 1] if lo >= 1 else -math.inf
    upper = x[up - 1] if up <= n else math.inf
    return float(np.quantile(x, q)), float(lower), float(upper)


def ms(x):
    return "inf" if math.isinf(x) else f"{1e3 * x:.2f}"


def pct_cell(xs, q):
    est, lo, hi = quantile_ci(xs, q)
    return f"{ms(est)} ({ms(lo)}-{ms(hi)})"


def pooled(run, arm, key):
    out = []
    for r in run["rows"]:
        if r["arm"] == arm and key in r:
            out += r[key]
    return out


def verdict(lo, hi, bound):
    """Met when the interval lies within the bound, NOT met when it lies
    beyond it, else undecided."""
    if hi <= bound:
        return "met"
    if lo > bound:
        return "NOT met"
    return "undecided (the interval spans the bound)"


def arm_table(run, arms):
    lines = ["| arm | wall s | tokens | samples | wall per token us | "
             "decision overhead % of wall | decision CPU per prompt us | "
             "rewards per s | CPU of the driver's thread % of wall | "
             "load (1 min) |",
             "|---|---|---:|---:|---|---|---|---:|---|---|"]
    for arm in arms:
        R = by_rep(run, arm)
        ks = sorted(R)
        wall = [R[k]["wall_s"] for k in ks]
        lines.append(
            f"| {arm} | {spread(wall, '%.2f')} | "
            f"{np.median([R[k]['tokens'] for k in ks]):.0f} | "
            f"{np.median([R[k]['samples'] for k in ks]):.0f} | "
            f"{spread([1e6 * R[k]['wall_s'] / R[k]['tokens'] for k in ks], '%.1f')} | "
            f"{spread([100 * overhead(R[k]) / R[k]['wall_s'] for k in ks], '%.2f')} | "
            f"{spread([1e6 * overhead(R[k]) / R[k]['prompts'] for k in ks], '%.0f')} | "
            f"{np.median([R[k]['rewards'] / R[k]['wall_s'] for k in ks]):.0f} | "
            f"{spread([100 * R[k]['loop_cpu_s'] / R[k]['wall_s'] for k in ks], '%.1f')} | "
            f"{spread([R[k]['load1'] for k in ks], '%.1f')} |")
    return lines


def ratio_rows(run):
    pairs = [(ROUTE, BATCH), (ROUTE, ONE), (ONE, BATCH)]
    got = []
    for num, den in pairs:
        N, D = by_rep(run, num), by_rep(run, den)
        ks = [k for k in sorted(N) if k in D]
        xs = [(N[k]["wall_s"] / N[k]["tokens"]) /
              (D[k]["wall_s"] / D[k]["tokens"]) for k in ks]
        got.append((num, den, xs) + ratio_ci(xs))
    adj = holm([g[6] for g in got])
    lines = ["| wall per token | per repetition: median (range) | geometric "
             "mean (95% interval) | p against 1 (Holm) |",
             "|---|---|---|---:|"]
    for (num, den, xs, g, lo, hi, _), p in zip(got, adj):
        lines.append(f"| {num} / {den} | {spread(xs)} | {g:.3f} "
                     f"({lo:.3f}-{hi:.3f}) | {p:.2g} |")
    return lines, {(g[0], g[1]): g[3:6] for g in got}


def rtt_rows(run):
    http = pooled(run, ROUTE, "rtt_http_s")
    rows = [
        ("HTTP: the POST of a group's last reward starts -> its final "
         "record read from the stream (group route)", http),
        ("HTTP: a reward POST starts -> its answer read (every reward)",
         pooled(run, ROUTE, "post_s")),
        ("HTTP floor: GET /v05/stats on the idle server, 20 before each "
         "group route arm", pooled(run, ROUTE, "idle_get_s")),
        ("lanes, a reward worker: a scoring thread starts pushing a group's "
         "last reward into its lane -> the poll that hands out the final "
         "(in-process one at a time)", pooled(run, ONE, "rtt_lanes_s")),
        ("lanes, the driver's own: the loop publishes a group's last reward "
         "-> the poll that hands out the final (in-process batch)",
         pooled(run, BATCH, "rtt_lanes_s")),
    ]
    lines = ["| round trip | n | p50 ms (95% interval) | p99 ms (95% "
             "interval) |", "|---|---:|---|---|"]
    for name, xs in rows:
        if xs:
            lines.append(f"| {name} | {len(xs)} | {pct_cell(xs, 0.5)} | "
                         f"{pct_cell(xs, 0.99)} |")
    split = np.array(pooled(run, ROUTE, "rtt_split_s"))
    parts = ["the POST starts -> the route hands the reward to the service "
             "(HTTP in, the body parsed and checked)",
             "-> the pusher thread starts the push (the thread hop)",
             "-> the poll hands out the final (lane, doorbell, poll)",
             "-> the final record read here (the run ends, the stream's "
             "record written and read)"]
    sp = ["", "The HTTP round trip in parts (the server's instants from "
          "bench/server_hooks.py, on the clock all processes of the host "
          "share), over the groups whose four instants were all "
          "recorded:", "",
          "| part | p50 ms | p99 ms |", "|---|---:|---:|"]
    if len(split):
        for i, name in enumerate(parts):
            col = split[:, i]
            sp.append(f"| {name} | {ms(np.quantile(col, 0.5))} | "
                      f"{ms(np.quantile(col, 0.99))} |")
    return lines + sp, http


def section(run):
    a = run["args"]
    R = by_rep(run, ROUTE)
    lines = [f"{HEAD}: {run['engine']}, per-sample sigma {a['sigma']:g}"
             f"{GATHERED[a.get('batch_rewards')]}", ""]
    loads = [r["load1"] for r in run["rows"]]
    reps = len({r["rep"] for r in run["rows"]})
    lines.append(
        f"{run['date']}, commit {run['commit']}, v05 {run['v05']}, "
        f"{run['cpus']} cores, shared (load average {run['load_start'][0]:.1f}"
        f" at the start, {run['load_end'][0]:.1f} at the end; per arm "
        f"{min(loads):.1f} to {max(loads):.1f}); run time "
        f"{run['run_s'] / 60:.1f} min, the server ready after "
        f"{run['server_ready_s']:.0f} s. {a['prompts']} prompts per arm and "
        f"repetition, {reps} repetition{'s' if reps != 1 else ''}"
        + ("" if run.get("complete", True) else
           f" (the run was cut short: {a['reps']} were asked for)")
        + ", the arms' order rotated; "
        f"lengths lognormal: median {a['median']:g}, per-sample sigma "
        f"{a['sigma']:g}, per-prompt sigma {a['prompt_sigma']:g}, cap "
        f"{a['cap']}, the same draw per (prompt, sample) in every arm "
        "(bench/server_lengths.py); rewards drawn per (prompt, sample) from "
        "the tiny model's success probabilities; plugin "
        f"`{json.dumps(run['plugin'], sort_keys=True)}` in every arm; "
        f"max_num_seqs {a['max_seqs']}. Rerun: `bench/engine --server"
        + (f" --reps {a['reps']}" if a["reps"] != 6 else "")
        + (f" --prompts {a['prompts']}" if a["prompts"] != 96 else "")
        + (f" --sigma {a['sigma']:g}" if a["sigma"] != 1.0 else "") + "`.")
    lines += ["", "The server: `VLLM_PLUGINS=v05 V05_SERVER='{...}' " +
              " ".join(run["server_argv"]).replace(" --port 0", "") +
              "` (through bench/server_hooks.py, which times v05's calls "
              "in it); the in-process engine: `tiny.vllm_engine` with the "
              "same arguments.", ""]
    lines += arm_table(run, run["arms"])
    lines += ["", "Medians over repetitions (range). *wall*: the arm's "
              "prompts from the first request to the last final, at the "
              "client; *tokens* the samples' generated tokens (each sample "
              "exactly its drawn length: checked per group, "
              f"{sum(r['length_mismatch'] for r in run['rows'])} mismatches); "
              "*decision overhead*: v05's decision time, the CPU time "
              "(time.thread_time of the calling thread) inside Plugin.submit"
              ", poll, release and group and in arming the wait, plus the "
              "reward hand-off (RewardWriter.push in the thread that pushes,"
              " or the driver's staging and publishing), less the clocks' "
              "own cost measured beside each call, against the wall: for "
              "the group route all of it is the server's (its API-server "
              "process, bench/server_hooks.py), for the in-process arms the "
              "bench's process (bench/engine_run.py's Meter); *CPU of the "
              "driver's thread*: the event loop thread's CPU time (the "
              "client's for the group route; the server's loop spent "
              f"{spread([100 * R[k]['server_loop_cpu_s'] / R[k]['wall_s'] for k in sorted(R)], '%.1f')}"
              " % of wall, its whole process "
              f"{spread([100 * R[k]['server_proc_cpu_s'] / R[k]['wall_s'] for k in sorted(R)], '%.1f')}"
              " %).", ""]
    ratios, est = ratio_rows(run)
    lines += ["Wall per generated token, per repetition (each arm against "
              "the others of the same repetition):", ""] + ratios
    rtt, http = rtt_rows(run)
    # A list of the errors (runs whose bench sent again itself) or
    # V05Client's count (it sends again itself).
    retried = sum(len(x) if isinstance(x, list) else x for x in
                  (R[k].get("post_retries", 0) for k in R))
    lines += ["", "Reward round trip (push to the decision it causes, seen "
              "by whoever waits for it), every group of every repetition:",
              ""] + rtt + [
        ""]
    rewards = sum(len(R[k]["post_s"]) for k in R)
    if all("reward_posts" in R[k] for k in R):
        posts = sum(R[k]["reward_posts"] for k in R)
        lines += [f"Rewards gathered into POSTs by V05Client (batch_rewards="
                  f"\"{run['args'].get('batch_rewards')}\"): {rewards} "
                  f"rewards in {posts} POSTs ({rewards / posts:.2f} a POST).",
                  ""]
    else:
        posts = rewards  # a run before V05Client gathered rewards
    lines += [
        f"Reward POSTs sent again after a transport error: {retried} "
        f"of {posts} (a POST on a kept-alive "
        "connection the server was closing: V05Client sends it again, the "
        "reward route being idempotent; the round trip is kept from the "
        "first send)."]
    g, lo, hi = est[(ROUTE, BATCH)]
    ov = {}
    for arm in run["arms"]:
        A = by_rep(run, arm)
        s = paired([overhead(A[k]) / A[k]["wall_s"] for k in sorted(A)])
        ov[arm] = (s["mean"], s["lo"], s["hi"])
    p50, p50lo, p50hi = quantile_ci(http, 0.5)
    p99, p99lo, p99hi = quantile_ci(http, 0.99)
    lines += ["", "The issue's targets on this machine:", "",
              "| target | measured | |", "|---|---|---|",
              f"| the group route's wall per token at most "
              f"{TARGET_WPT:g}x the in-process driver's | {g:.3f} "
              f"({lo:.3f}-{hi:.3f}) | {verdict(lo, hi, TARGET_WPT)} |",
              f"| decision overhead under 1% of wall (the group route: the "
              f"server's) | {pct(ov[ROUTE])} % | "
              f"{verdict(ov[ROUTE][1], ov[ROUTE][2], TARGET_OVERHEAD)} |",
              f"| HTTP reward round trip p50 at most {ms(TARGET_P50)} ms | "
              f"{ms(p50)} ({ms(p50lo)}-{ms(p50hi)}) ms | "
              f"{verdict(p50lo, p50hi, TARGET_P50)} |",
              f"| HTTP reward round trip p99 at most {ms(TARGET_P99)} ms | "
              f"{ms(p99)} ({ms(p99lo)}-{ms(p99hi)}) ms | "
              f"{verdict(p99lo, p99hi, TARGET_P99)} |"]
    lines += ["", "Intervals: the wall ratio's and the decision overhead's "
              "are 95% t-intervals over repetitions (the ratio's of the "
              "mean log ratio); the percentiles' are distribution-free. "
              "Met: the whole interval within the bound. The in-process "
              "arms' decision overhead, for comparison: " + "; ".join(
                  f"{arm} {pct(ov[arm])} %" for arm in run["arms"]
                  if arm != ROUTE) + "."]
    return lines


def pct(m):
    """(mean, lo, hi) of a share as percent."""
    return f"{100 * m[0]:.2f} ({100 * m[1]:.2f}-{100 * m[2]:.2f})"


def main():
    put_sections([section(r) for r in kept_runs("server")])


if __name__ == "__main__":
    main()
