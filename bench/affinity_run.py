#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Prefix-cache hits of second-wave samples with and without affinity:
`vllm serve` with v05's plugin and two data-parallel ranks
(`--data-parallel-size 2`, on this CPU build: two engine cores, two API
servers), once with the plugin pinning each group to the rank its uid
hashes to and once with that off (vLLM's own balancer places each request),
the same groups in the same order, one run. Run in the engine environment:

    build-venv/engine/bin/python bench/affinity_run.py [--groups 24]

Each group goes through the group route (/v05/group) with a prompt of
heavy-tailed length (lognormal token count: several 128-token KV blocks,
the CPU build's block size, with a long tail) and rewards that disagree
with its prior often enough for v05 to ask for second waves. Counted from
the engine:
- per request, its cached prompt tokens (RequestOutput.num_cached_tokens,
  the `cached_tokens` of each sample record), for every sample;
- the engine's counters vllm:prefix_cache_queries / _hits (tokens, per
  rank): read when a group's first wave is back and its rewards not yet
  posted, and again at its final record; groups run one at a time, so the
  difference is its second waves' queries and hits and nothing else's.
Writes bench/results/affinity/affinity-<UTC time it ended>-<commit>.json
(every group's row); bench/affinity_report.py writes bench/ENGINE.md's
section from it.
"""
import argparse
import asyncio
import datetime
import json
import os
import re
import subprocess
import sys
import time

import httpx
import numpy as np

from v05.demos import tiny
from v05.servers.client import V05Client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "servers"))
from server_proc import Server, free_port  # noqa: E402

CONTEXT = 2048
PLUGIN = {"mode": "v05", "pad_multiple": 1, "cost": 0.0039, "k_step": 2,
          "k_max": 16}


def groups(a):
    """(uid, prompt ids, prior, p, max_tokens) per group, seeded: the same
    in both arms."""
    out = []
    for g in range(a.groups):
        rs = np.random.default_rng([a.seed, g])
        n = int(np.clip(round(a.prompt_median * np.exp(
            a.prompt_sigma * rs.standard_normal())), 130, a.prompt_cap))
        ids = [int(x) for x in rs.integers(3, tiny.VOCAB, n)]
        m = int(np.clip(round(a.out_median * np.exp(rs.standard_normal())),
                        1, CONTEXT - a.prompt_cap - 8))
        p = float(rs.uniform(0.2, 0.8))
        out.append((f"aff{a.seed}-{g}", ids, 0.9, p, m))
    return out


def prefix_counters(url):
    """(queries, hits) in tokens, summed over the ranks."""
    text = httpx.get(url + "/metrics", timeout=30).text

    def total(name):
        return sum(float(v) for v in re.findall(
            rf"^{name}{{[^}}]*}} ([0-9.eE+-]+)$", text, re.M))
    return total("vllm:prefix_cache_queries_total"), \
        total("vllm:prefix_cache_hits_total")


async def one_group(url, g):
    uid, ids, prior, p, m = g
    row = {"uid": uid, "prompt_tokens": len(ids), "max_tokens": m}
    samples, final = [], None
    async with V05Client(url, timeout=900) as c:
        first = []
        async for rec in c.group(uid, prompt_ids=ids, prior=prior,
                                 sampling={"max_tokens": m,
                                           "ignore_eos": True}):
            if rec["type"] != "sample":
                final = rec
                break
            samples.append({"sample": rec["sample"],
                            "cached_tokens": rec["cached_tokens"],
                            "prompt_tokens": rec["prompt_tokens"]})
            # Seeded by (group, sample): the same rewards in both arms.
            hit = np.random.default_rng([int(uid.rsplit("-", 1)[1]),
                                         rec["sample"]]).random() < p
            r = 1.0 if hit else -1.0
            if rec["sample"] >= 4:
                await c.reward(rec, r)
                continue
            first.append((rec, r))
            if len(first) == 4:
                row["before_extras"] = await asyncio.to_thread(
                    prefix_counters, url)
                await c.rewards(first)
    if final is None or final["type"] != "final":
        raise RuntimeError(f"group {uid} ended {final}")
    row["after"] = await asyncio.to_thread(prefix_counters, url)
    row["k"] = final["k"]
    row["samples"] = samples
    return row


def start(a, affinity, log_dir):
    port = free_port()
    prefix = f"baff{os.getpid()}{int(affinity)}"
    cfg = {"segment": prefix, "plugin": PLUGIN, "affinity": affinity}
    exe = os.path.join(os.path.dirname(sys.executable), "v05-vllm")
    env = dict(os.environ, VLLM_PLUGINS="v05", V05_SERVER=json.dumps(cfg),
               VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    for k in ("PYTHONPATH", "V05_LIB"):
        env.pop(k, None)
    argv = [exe, "serve", a.model, "--host", "127.0.0.1", "--port",
            str(port), "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(CONTEXT), "--max-num-seqs", "32",
            "--data-parallel-size", "2"]
    s = Server(argv, env, os.path.join(log_dir, f"{prefix}.log"), prefix)
    s.port = port
    return s


def run_arm(a, affinity, gs, log_dir):
    s = start(a, affinity, log_dir)
    try:
        s.wait_ready()
        print(f"affinity={affinity}: server ready after "
              f"{s.ready_after:.0f} s", file=sys.stderr)
        rows = []
        t0 = time.monotonic()
        for i, g in enumerate(gs):
            rows.append(asyncio.run(one_group(s.url, g)))
            print(f"  group {i + 1}/{len(gs)}: prompt "
                  f"{rows[-1]['prompt_tokens']}, k {rows[-1]['k']}",
                  file=sys.stderr)
        return {"affinity": affinity, "rows": rows,
                "ready_s": s.ready_after, "wall_s": time.monotonic() - t0}
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-median", type=float, default=512)
    ap.add_argument("--prompt-sigma", type=float, default=0.6)
    ap.add_argument("--prompt-cap", type=int, default=1664)
    ap.add_argument("--out-median", type=float, default=16)
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.model is None:
        a.model = tiny.make_model(os.path.join(
            ROOT, "build-venv", "models", "tiny-llama-2k"),
            max_positions=CONTEXT)
    gs = groups(a)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short",
                             "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                                 "--untracked-files=no"],
                                capture_output=True, text=True).stdout)
    log_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(log_dir, exist_ok=True)
    load = os.getloadavg()
    arms = [run_arm(a, aff, gs, log_dir) for aff in (True, False)]
    now = datetime.datetime.now(datetime.timezone.utc)
    date = now.date().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", "affinity",
                                f"affinity-{now:%Y-%m-%dT%H%M}-{commit}"
                                ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": date, "commit": commit, "dirty": dirty,
                   "args": {k: v for k, v in vars(a).items()
                            if k not in ("model", "out")},
                   "loadavg_start": load, "loadavg_end": os.getloadavg(),
                   "cores": os.cpu_count(), "arms": arms}, f, indent=1)
        f.write("\n")
    print(out)


if __name__ == "__main__":
    main()
