#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/engine --server's body, run in the engine environment: v05's group
route behind `vllm serve` against the in-process driver on the same engine
build, side by side in one run, and the reward round trip over HTTP and
over the lanes (issue 44, item 8).

Two engines of one build and one configuration run at once: an AsyncLLM
in this process (as bench/engine_run.py drives it) and `vllm serve` with
v05's endpoint plugin in a child process (bench/server_hooks.py: the
documented server with v05's decision path timed). Per repetition, in a
rotated order, the same prompts go through three arms:
- "in-process batch": the in-process driver (v05.engines.vllm.VLLMRollout,
  its default wait: its own scores), every prompt of the batch in one run;
- "group route": one POST /v05/group per prompt through v05's client
  (V05Client.group, its own connection pools), all of them at once, each
  sample's reward posted (V05Client.reward, POST /v05/reward) as its
  record arrives, as V05Client.run_group does, gathered into POSTs as
  --batch-rewards says (default: the client's own, by the front end
  that sent the sample); the server runs the groups at once
  (v05.servers.groups);
- "in-process one at a time": the in-process driver run on one prompt at a
  time, each reward pushed into the lane by a scoring thread and the
  driver waiting on the doorbell: what the server did behind the route
  until it ran groups at once (one group at a time), without HTTP; kept
  as the reference the first runs were read against.
Every sample's length is drawn as bench/engine draws it (per prompt and per
sample, lognormal, capped) and enforced inside both engines
(bench/server_lengths.py); a sample's reward is drawn per (prompt, sample)
from the prompt's success probability, so every arm sees the same
rewards. Writes bench/out/server-vllm-s<sigma>-<batch_rewards>.json;
bench/server_report.py puts it into bench/ENGINE.md.
"""
import argparse
import asyncio
import datetime
import functools
import json
import os
import sys
import time
import types

import httpx
import numpy as np

import v05
from v05.demos import tiny
from v05.engines.vllm import VLLMRollout
from v05.servers.client import GroupFailed, V05Client

from engine_run import Meter, engine_and_commit, engine_args  # this folder
import server_lengths as sl  # noqa: E402 (this folder)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, os.path.join(ROOT, "tests", "servers"))
from server_proc import Server, free_port  # noqa: E402

ARMS = ["in-process batch", "group route", "in-process one at a time"]
# The default mode (v05-eb), as bench/engine's "v05-eb default", in the
# server's segment and in this process's alike; abort records on, as the
# servers make their segments (v05.servers.config).
# pad_multiple 1: a server runs each group as a batch of one, and the
# library's default (32) would pad every second wave of a group up to
# k_max (the servers' default is 1 now: v05.servers.config; given here for
# the in-process arms' segments too).
PLUGIN = {"mode": "v05-eb", "k_init": 4, "k_step": 2, "k_max": 16,
          "pad_multiple": 1, "lane_capacity": 16384, "abort_records": True}


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def rewards_of(seed, p, n_samples=64):
    """(prompt index, sample) -> +1 with the prompt's probability p."""
    out = []
    for i, pi in enumerate(p):
        u = np.random.default_rng([seed, 44, i]).random(n_samples)
        out.append([1.0 if x < pi else -1.0 for x in u])
    return out


@functools.lru_cache(maxsize=None)
def _draws(seed, median, sigma, prompt_sigma, cap, index):
    return sl.draws(dict(seed=seed, median=median, sigma=sigma,
                         prompt_sigma=prompt_sigma, cap=cap), index)


def drawn(a, index, k):
    """The tokens of prompt `index`'s first k samples."""
    return sum(_draws(a.seed, a.median, a.sigma, a.prompt_sigma, a.cap,
                      index)[:k])


class Arm:
    """One arm's run: its prompts (uid -> index), run id, and the row."""

    def __init__(self, a, label, run, rep, prompts, priors):
        self.a, self.label, self.run, self.rep = a, label, run, rep
        self.items = []
        self.index = {}
        for i, (pr, v) in enumerate(zip(prompts, priors)):
            uid = f"r{run}-q{i}"
            self.index[uid] = i
            self.items.append((uid, sl.encode(pr, run, i), float(v)))
        self.row = {"arm": label, "rep": rep, "run": run,
                    "prompts": len(self.items), "load1": loadavg()[0]}


# No seed, in either path: the tokens are not what is measured (lengths and
# rewards are drawn), and vLLM 0.32's CPU build crashes its engine when it
# chunks the prefill of a seeded request (gpu_model_runner.py
# _bookkeeping_sync rewinds the request's generator: "CPU Generator does
# not use offset"), which a batch of 96 x 4 prompts of 9 tokens makes it do.
def sampling_params(a):
    from vllm import SamplingParams
    return SamplingParams(temperature=1.0, max_tokens=a.cap,
                          stop_token_ids=[sl.STOP], detokenize=False)


async def in_process(arm, engine, plugin, reward, one_at_a_time):
    """The in-process driver on arm's prompts; the row gets wall, tokens,
    the decision path's CPU (Meter, as bench/engine_run.py counts it) and
    each group's reward round trip over the lanes: from the instant its
    last reward went into the lane (published by the loop before a poll,
    or the scoring thread's push started) to the poll that handed out its
    final decision."""
    a = arm.a
    meter = Meter(plugin, a.max_seqs, False)
    into_lane = {}

    class Rollout(VLLMRollout):
        async def _generate_one(self, prompt, uid, sample, batch):
            meter.start(uid)
            n = 0
            try:
                out = await super()._generate_one(prompt, uid, sample, batch)
                n = len(out.outputs[0].token_ids)
                return out
            finally:
                meter.stop(n, n > 0)

    def score(uid, sample, out):
        return reward[arm.index[uid]][sample]

    ro = Rollout(engine, plugin, sampling_params(a), score=score,
                 score_threads=2, release=True,
                 wait_on="doorbell" if one_at_a_time else "auto")
    drv = ro._driver
    drv._arm_scores = meter._cpu(drv._arm_scores)
    for name in ("_push", "_take_scores", "_publish"):
        setattr(drv, name, meter._cpu(getattr(drv, name), True))
    # The round trip's start, outside the meter's clocks.
    staged = set()
    stage, publish, push = drv._stage, drv._publish, drv._push

    def stage_seen(scored):
        staged.update(d.uid for d, _, _ in scored)
        return stage(scored)

    def publish_seen():
        t = time.perf_counter()
        out = publish()
        for uid in staged:
            into_lane[uid] = t
        staged.clear()
        return out

    def push_seen(d, sample, r):
        into_lane[d.uid] = time.perf_counter()
        return push(d, sample, r)
    drv._stage, drv._publish, drv._push = stage_seen, publish_seen, push_seen

    res = {}
    t0 = time.perf_counter()
    c0, p0 = time.thread_time(), time.process_time()
    try:
        if one_at_a_time:
            for item in arm.items:
                res.update(await ro.generate([item]))
        else:
            res = await ro.generate(arm.items)
    finally:
        ro.close()
    wall = time.perf_counter() - t0
    loop_cpu, proc_cpu = time.thread_time() - c0, time.process_time() - p0
    meter.unwrap(plugin)
    bad, ks = 0, []
    for uid, r in res.items():
        k = r.group.k
        ks.append(k)
        got = sum(len(o.outputs[0].token_ids) for o in r.outputs)
        bad += got != drawn(a, arm.index[uid], k)
    arm.row.update({
        "wall_s": wall, "tokens": meter.tokens, "samples": ro.generate_calls,
        "groups": len(res), "k_hist": np.bincount(ks, minlength=17).tolist(),
        "length_mismatch": bad, "busy": meter.area / (wall * a.max_seqs),
        "calls": meter.calls, "wait_cpu_s": meter.wait_cpu_s,
        "wait_calls": meter.wait_calls, "timer_cpu_s": meter.timer_cpu_s,
        "handoff_s": meter.handoff_s,
        "handoff_timer_s": meter.handoff_timer_s,
        "loop_cpu_s": loop_cpu, "proc_cpu_s": proc_cpu,
        "rtt_lanes_s": [round(meter.final[u] - into_lane[u], 7)
                        for u in meter.final if u in into_lane],
        "rewards": sum(ks)})


async def server_bench(url):
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        r = await c.get("/v05/stats")
        r.raise_for_status()
        return r.json()["bench"]


async def group_route(arm, url, reward):
    """Arm's prompts through the group route, all at once. The row gets
    wall and tokens (client side), the server's decision path (its
    bench/server_hooks.py totals over the arm) and, per group, the reward
    round trip over HTTP: from the start of the POST of its last reward
    to its final record read from the stream; with the server's two
    instants, split into the POST's start -> the route handing it to the
    service -> the pusher thread's push -> the poll handing out the final
    -> the record read here. Before the arm, with the server idle, the
    floor of an HTTP round trip at that moment: 20 GET /v05/stats."""
    a = arm.a
    floor = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        for _ in range(20):
            t = time.perf_counter()
            (await c.get("/v05/stats")).raise_for_status()
            floor.append(round(time.perf_counter() - t, 7))
    before = await server_bench(url)
    sampling = {"max_tokens": a.cap, "temperature": 1.0,
                "stop_token_ids": [sl.STOP]}
    posts_s, groups = [], {}

    async def post(client, rec, r, sent):
        # A POST lost in transport is sent again by V05Client (counted in
        # its .retries); the round trip runs from the first send.
        t = time.perf_counter()
        sent.append(t)
        await client.reward(rec, r)
        posts_s.append(time.perf_counter() - t)

    async def one(client, uid, ids, prior):
        sent, tasks, tokens = [], [], []
        async for rec in client.group(uid, prompt_ids=ids, prior=prior,
                                      sampling=sampling):
            if rec["type"] == "sample":
                tokens.append(len(rec["token_ids"]))
                r = reward[arm.index[uid]][rec["sample"]]
                tasks.append(asyncio.ensure_future(post(client, rec, r,
                                                        sent)))
            elif rec["type"] == "final":
                read = time.perf_counter()
                await asyncio.gather(*tasks)
                groups[uid] = {"k": rec["k"], "tokens": tokens,
                               "last_sent": max(sent), "read": read}
                return
            else:
                raise GroupFailed(rec)
        raise GroupFailed({"uid": uid, "type": "error",
                           "error": "the stream ended without a final"})

    t0 = time.perf_counter()
    c0, p0 = time.thread_time(), time.process_time()
    async with V05Client(url, timeout=None,
                         batch_rewards=a.batch_rewards) as client:
        await asyncio.gather(*[one(client, *it) for it in arm.items])
        retried, reward_posts = client.retries, client.reward_posts
    wall = time.perf_counter() - t0
    loop_cpu, proc_cpu = time.thread_time() - c0, time.process_time() - p0
    after = await server_bench(url)
    calls = {n: [after["calls"][n][0] - before["calls"].get(n, [0, 0])[0],
                 after["calls"][n][1] - before["calls"].get(n, [0, 0])[1]]
             for n in after["calls"]}
    rtt, split, bad, ks = [], [], 0, []
    for uid, g in groups.items():
        rtt.append(round(g["read"] - g["last_sent"], 7))
        at = [g["last_sent"], after["routed"].get(uid),
              after["pushed"].get(uid), after["decided"].get(uid), g["read"]]
        if None not in at:
            split.append([round(y - x, 7) for x, y in zip(at, at[1:])])
        ks.append(g["k"])
        bad += sum(g["tokens"]) != drawn(a, arm.index[uid], g["k"]) or \
            len(g["tokens"]) != g["k"]
    diff = {k: after[k] - before[k] for k in
            ("wait_cpu_s", "wait_calls", "timer_cpu_s", "push_cpu_s",
             "pushes", "push_timer_s", "process_cpu_s", "loop_cpu_s")}
    tokens = sum(sum(g["tokens"]) for g in groups.values())
    arm.row.update({
        "wall_s": wall, "tokens": tokens, "samples": sum(ks),
        "groups": len(groups),
        "k_hist": np.bincount(ks, minlength=17).tolist(),
        "length_mismatch": bad, "calls": calls,
        "wait_cpu_s": diff["wait_cpu_s"], "wait_calls": diff["wait_calls"],
        "timer_cpu_s": diff["timer_cpu_s"], "handoff_s": diff["push_cpu_s"],
        "handoff_timer_s": diff["push_timer_s"], "pushes": diff["pushes"],
        "server_proc_cpu_s": diff["process_cpu_s"],
        "server_loop_cpu_s": diff["loop_cpu_s"],
        "loop_cpu_s": loop_cpu, "proc_cpu_s": proc_cpu,
        "rtt_http_s": rtt, "rtt_split_s": split, "idle_get_s": floor,
        "post_s": [round(x, 7) for x in posts_s], "rewards": sum(ks),
        "post_retries": retried, "reward_posts": reward_posts})


def start_server(a, model, lengths_env, prefix, log):
    port = free_port()
    cfg = {"segment": prefix, "plugin": dict(PLUGIN, max_prompts=max(
        a.prompts, 64)), "reward_timeout_s": 300}
    argv = [sys.executable, os.path.join(BENCH, "server_hooks.py"), "serve",
            model, *server_args(a, port)]
    env = dict(os.environ)
    env.pop("V05_LIB", None)
    env.update({"VLLM_PLUGINS": "v05", "V05_SERVER": json.dumps(cfg),
                "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": BENCH, sl.ENV: lengths_env})
    s = Server(argv, env, log, prefix)
    s.port = port
    return s


def server_args(a, port):
    """The server's engine arguments: tiny.vllm_engine's, on the command
    line."""
    return ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--enforce-eager", "--max-model-len", str(a.context),
            "--max-num-seqs", str(a.max_seqs), "--seed", str(a.seed),
            "--skip-tokenizer-init", "--generation-config", "vllm",
            "--disable-log-stats",
            "--logits-processors", "server_lengths:DrawnLengths"]


async def run_all(a, model, prompts, priors, reward, server, save):
    # In the loop the engine will live in (vLLM binds it to its first).
    engine = tiny.vllm_engine(model, seed=a.seed, max_num_seqs=a.max_seqs,
                              max_model_len=a.context, kv_cache_gib=1,
                              logits_processors=[
                                  "server_lengths:DrawnLengths"])
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, server.wait_ready)
    print(f"server ready after {server.ready_after:.0f} s", file=sys.stderr)
    pid = os.getpid()
    plugins = {label: v05.Plugin.create(
        f"sb{pid}-{n}", reclaim=True, max_prompts=max(a.prompts, 64),
        **PLUGIN) for n, label in enumerate(ARMS) if label != "group route"}
    rows, run = [], 1
    t_run = time.perf_counter()

    async def one(label, rep, ps, vs):
        nonlocal run
        arm = Arm(a, label, run, rep, ps, vs)
        run += 1
        if label == "group route":
            await group_route(arm, server.url, reward)
        else:
            await in_process(arm, engine, plugins[label], reward,
                             label == "in-process one at a time")
        return arm.row
    try:
        # Warm-up, not recorded: the first requests of each path pay for
        # allocation and imports, and v05-eb's fit is cold for its first
        # eb_cold (64) first waves in each segment.
        n = min(64, len(prompts))
        for label in ARMS:
            await one(label, -1, prompts[:n], priors[:n])
        for rep in range(a.reps):
            order = ARMS[rep % len(ARMS):] + ARMS[:rep % len(ARMS)]
            for label in order:
                row = await one(label, rep, prompts, priors)
                rows.append(row)
                print(f"rep {rep + 1}/{a.reps} {label:26s} "
                      f"{row['wall_s']:7.2f} s, {row['tokens']} tokens, "
                      f"{row['samples']} samples, load {row['load1']}  "
                      f"[{time.perf_counter() - t_run:.0f} s]",
                      file=sys.stderr, flush=True)
            save(rows, time.perf_counter() - t_run, False)
    finally:
        for p in plugins.values():
            p.close()
        engine.shutdown()
    return rows, time.perf_counter() - t_run


def main():
    ap = argparse.ArgumentParser(prog="bench/engine --server")
    engine_args(ap)
    ap.add_argument("--server", action="store_true")  # bench/engine's switch
    ap.add_argument("--quick", action="store_true",
                    help="1 repetition of 8 prompts, a short tail")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--hallucination", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-rewards", default="origin",
                    choices=("origin", "group", "server", "off"),
                    help="how the client gathers reward POSTs "
                         "(V05Client's batch_rewards; default: its own)")
    ap.add_argument("--out", default=os.path.join(BENCH, "out"))
    a = ap.parse_args()
    if a.engine != "vllm":
        ap.error("--server: only vLLM's server so far (--engine vllm)")
    if a.quick:
        a.reps, a.prompts, a.cap = 1, 8, 64
    a.context = 16 + a.cap  # prompts of 4 + 5 tokens (server_lengths)
    os.makedirs(a.out, exist_ok=True)
    load0 = loadavg()
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # The engine-core process of the in-process engine imports the
    # lengths processor from here, and takes the draw's parameters.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [BENCH] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p])
    lengths_env = json.dumps({"seed": a.seed, "median": a.median,
                              "sigma": a.sigma,
                              "prompt_sigma": a.prompt_sigma, "cap": a.cap})
    os.environ[sl.ENV] = lengths_env
    model = tiny.make_model(os.path.join(
        ROOT, "build-venv", "models", f"tiny-llama-ctx{a.context}"),
        seed=0, max_positions=a.context)
    prompts = tiny.make_prompts(a.prompts, seed=a.seed)
    p = tiny.success_probs(model, prompts)
    priors = tiny.noisy_priors(p, a.noise, a.hallucination, seed=a.seed + 1)
    reward = rewards_of(a.seed, p)
    prefix = f"sbench{os.getpid()}"
    log = os.path.join(a.out, f"server-{prefix}.log")
    version, commit = engine_and_commit(types.SimpleNamespace(engine="vllm"))
    out = os.path.join(a.out, f"server-vllm-s{a.sigma:g}-"
                       f"{a.batch_rewards}.json")
    args = {k: v for k, v in vars(a).items() if k not in ("out", "server")}
    server = start_server(a, model, lengths_env, prefix, log)

    def save(rows, run_s, complete):
        """The run so far (after each repetition: a run cut short keeps
        what it measured, marked incomplete)."""
        with open(out + ".tmp", "w") as f:
            json.dump({"args": args, "engine": version, "v05": v05.version(),
                       "commit": commit, "date": str(datetime.date.today()),
                       "cpus": os.cpu_count(), "run_s": run_s,
                       "complete": complete,
                       "load_start": load0, "load_end": loadavg(),
                       "server_ready_s": server.ready_after,
                       "server_argv": ["v05-vllm", "serve", "MODEL",
                                       *server_args(a, 0)],
                       "plugin": PLUGIN, "arms": ARMS, "rows": rows}, f)
        os.replace(out + ".tmp", out)
    try:
        rows, run_s = asyncio.run(run_all(a, model, prompts, priors, reward,
                                          server, save))
    finally:
        server.stop()
    save(rows, run_s, True)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
