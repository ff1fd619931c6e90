#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/engine's body, run in an engine environment: what users pay in
wall time on a real engine when rollouts are long-tailed.

Every sample's length is drawn, seeded, from a lognormal with a per-prompt
component (hard prompts run long): length = clip(round(median * exp(
prompt_sigma * z_prompt + sigma * z_sample)), 1, cap), the same for a
(prompt, sample index) in every mode, enforced with max_tokens and
ignore_eos. Each mode runs `batches` batches of `prompts` prompts per
repetition, the modes interleaved (the order rotated per repetition), on
one engine in one process. Writes bench/out/engine-<engine>-s<sigma>.json;
bench/engine_report.py turns every such file into bench/ENGINE.md.
"""
import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

import v05
from v05.core import _lib
from v05.demos import tiny
from v05.engines.driver import sample_seed

from engine_report import EB_EARLY, PRIORS, tag_of  # this folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# label -> Plugin.create keywords. halt 0 for the paper's rule: with its
# 25% halt most batches stop at k_init (docs/STATISTICS.md).
MODES = {
    "GRPO G=16": dict(mode="grpo", k_init=16, k_max=16),
    "DAPO G=16": dict(mode="dapo", k_init=16, k_max=16),
    "fixed k=4": dict(mode="v05-fixed", k_init=4, k_max=4),
    "v05 rounds": dict(mode="v05", schedule="rounds", halt_fraction=0.0,
                       k_init=4, k_step=2, k_max=16),
    "v05 stream": dict(mode="v05", schedule="stream", halt_fraction=0.0,
                       k_init=4, k_step=2, k_max=16),
    "v05-eb barrier": dict(mode="v05-eb", schedule="rounds", k_init=4,
                           k_step=2, k_max=16),
    "v05-eb default": dict(mode="v05-eb", k_init=4, k_step=2, k_max=16),
    # The same with the driver waiting on the plugin's doorbell, as it did
    # before it waited for its own scores (v05.engines.driver): the two
    # waits side by side.
    "v05-eb doorbell wait": dict(mode="v05-eb", k_init=4, k_step=2,
                                 k_max=16, wait_on="doorbell"),
    # eb_early is set from --eb-early.
    "v05-eb early start": dict(mode="v05-eb", k_init=4, k_step=2, k_max=16),
    # The published rules (docs/RULES.md): Reinforce-Ada with its authors'
    # defaults (rounds of 8 up to 32); Knapsack RL's allocation from the
    # prior at fixed k=4's budget.
    "reinforce-ada": dict(mode="reinforce-ada"),
    "knapsack-prior 4/prompt": dict(mode="knapsack-prior", k_init=4),
    # The rules that carry history across epochs, as in a later epoch
    # (later_epoch): Knapsack RL with its own estimate at the same budget;
    # GRESO, dapo's groups of 8 on the prompts its filter keeps.
    "knapsack 4/prompt": dict(mode="knapsack", k_init=4,
                              epoch_state="knapsack"),
    "greso": dict(mode="greso", epoch_state="greso"),
}
DEFAULT = "v05-eb default"
BASE = "fixed k=4"


def lengths(seed, batch, uid_index, n_samples, a):
    """The drawn lengths of one prompt's samples 0..n_samples-1."""
    rp = np.random.default_rng([seed, batch, uid_index, 0])
    zp = rp.standard_normal()
    out = []
    for s in range(n_samples):
        rs = np.random.default_rng([seed, batch, uid_index, 1, s])
        x = a.median * np.exp(a.prompt_sigma * zp + a.sigma * rs.standard_normal())
        out.append(int(min(max(round(x), 1), a.cap)))
    return out


class Busy:
    """Requests in flight over time: the integral of min(inflight, cap)
    dt, taken at every start and end (its mean over the wall is the busy
    fraction), and the steps themselves when trace is a list."""

    def __init__(self, cap, trace=None):
        self.cap = cap
        self.inflight = 0
        self.area = 0.0
        self.t_last = None
        self.trace = trace

    def _step(self, delta):
        now = time.perf_counter()
        if self.t_last is not None:
            self.area += min(self.inflight, self.cap) * (now - self.t_last)
        self.t_last = now
        self.inflight += delta
        if self.trace is not None:
            self.trace.append((now, min(self.inflight, self.cap)))


class Meter(Busy):
    """What one batch costs: requests in flight over time (Busy), the time
    inside plugin calls and the reward hand-off, each prompt's first
    request and final decision."""

    def __init__(self, plugin, cap, trace):
        super().__init__(cap, [] if trace else None)
        self.overhead_s = 0.0   # inside plugin calls
        self.overhead_cpu_s = 0.0  # the same calls' CPU time (no GIL waits)
        self.calls = {}
        self.handoff_s = 0.0    # scoring and pushing rewards (pool threads)
        self.first = {}
        self.final = {}
        self.tokens = 0
        self.wasted = 0
        self.wait_cpu_s = 0.0   # arming the wait and asking for work
        self.wait_calls = 0
        self.timer_cpu_s = 0.0  # the clocks' own cost, loop thread
        self.handoff_timer_s = 0.0  # the same on the pool threads
        for name in ("submit", "poll", "release", "group"):
            setattr(plugin, name, self._timed(getattr(plugin, name),
                                              name == "poll"))
        # The driver's wait (Plugin.wait) calls these straight into C; the
        # originals (with their argtypes) are put back by unwrap.
        self._c = {n: getattr(_lib.lib, n) for n in ("v05_arm", "v05_pending")}
        for name, fn in self._c.items():
            setattr(_lib.lib, name, self._cpu(fn))

    def unwrap(self, plugin):
        for name in ("submit", "poll", "release", "group"):
            plugin.__dict__.pop(name, None)
        for name, fn in self._c.items():
            setattr(_lib.lib, name, fn)

    def timer_cost(self):
        """The CPU time a pair of thread_time() reads counts between
        them, measured beside each timed call the same way: a system call
        each (CLOCK_THREAD_CPUTIME_ID has no vDSO path), several
        microseconds on this VM under the engine's load. Subtracted from
        the timed calls, so the figures are the calls' and not the
        bench's clocks'."""
        z = time.thread_time()
        self.timer_cpu_s += time.thread_time() - z

    def _cpu(self, fn, handoff=False):
        """fn, timed in the calling thread's CPU time (a pool thread's wall
        time would count its waits for the GIL the engine's loop holds):
        the driver's wait (arming it), or the reward hand-off."""
        def timed(*a):
            c = time.thread_time()
            try:
                return fn(*a)
            finally:
                cpu = time.thread_time() - c
                z = time.thread_time()  # the clocks' own cost
                clock = time.thread_time() - z
                if handoff:
                    self.handoff_s += cpu
                    self.handoff_timer_s += clock
                else:
                    self.wait_cpu_s += cpu
                    self.wait_calls += 1
                    self.timer_cpu_s += clock
        return timed

    def _timed(self, fn, is_poll):
        def timed(*a, **kw):
            t, c = time.perf_counter(), time.thread_time()
            try:
                out = fn(*a, **kw)
            finally:
                cpu = time.thread_time() - c
                self.overhead_s += time.perf_counter() - t
                self.overhead_cpu_s += cpu
                n, sec = self.calls.get(fn.__name__, (0, 0.0))
                self.calls[fn.__name__] = (n + 1, sec + cpu)
                self.timer_cost()
            if is_poll:
                now = time.perf_counter()
                for d in out:
                    if d.kind in ("final", "drop"):
                        self.final[d.uid] = now
            return out
        return timed

    def start(self, uid):
        self.first.setdefault(uid, time.perf_counter())
        self._step(+1)

    def stop(self, ntok, finished):
        """A finished sample's tokens count; an aborted one's drawn length
        is counted as wasted, a bound (the engine reports no tokens for a
        request aborted before its end)."""
        self._step(-1)
        if finished:
            self.tokens += ntok
        else:
            self.wasted += ntok


def make_rollout(engine_kind, engine, plugin, meter, lens, score, seed,
                 wait):
    """The project's rollout class for the engine, its per-sample request
    given the drawn length; the meter sees every request."""
    if engine_kind == "vllm":
        from vllm import SamplingParams

        from v05.engines.vllm import (VLLMRollout, engine_input,
                                      single_sample_params)

        sp = SamplingParams(temperature=1.0, max_tokens=1, detokenize=False,
                            ignore_eos=True, seed=seed)

        class Rollout(VLLMRollout):
            async def _generate_one(self, prompt, uid, sample, batch):
                p = single_sample_params(sp, uid, batch, sample)
                p.max_tokens = lens[uid][sample]
                meter.start(uid)
                final, n = None, 0
                try:
                    async for out in engine.generate(
                            engine_input(engine, prompt), p,
                            f"b-{batch}-{uid}-{sample}-{time.monotonic_ns()}"):
                        final = out
                    n = len(final.outputs[0].token_ids)
                    return final
                finally:
                    meter.stop(n if n else lens[uid][sample], n > 0)

        return Rollout(engine, plugin, sp, score=score, score_threads=2,
                       wait_on=wait)

    from v05.engines.sglang import SGLangRollout

    class Rollout(SGLangRollout):
        async def _generate_one(self, prompt, uid, sample, batch):
            params = {"temperature": 1.0, "ignore_eos": True,
                      "max_new_tokens": lens[uid][sample],
                      "sampling_seed": sample_seed(seed, uid, batch, sample)}
            meter.start(uid)
            out = None
            try:
                out = await engine.async_generate(
                    input_ids=[int(t) for t in prompt], sampling_params=params,
                    rid=f"b-{batch}-{uid}-{sample}-{time.monotonic_ns()}",
                    stream=False)
                return out
            finally:
                meter.stop(len(out["output_ids"]) if out
                           else lens[uid][sample], out is not None)

    return Rollout(engine, plugin, {}, score=score, score_threads=2,
                   wait_on=wait)


def later_epoch(kind, items, truth, seed):
    """A history rule's batch as a later epoch sees it: one past visit of
    every prompt (8 rewards drawn from its true p, seeded) folded into the
    trainer-side state (v05.core.rules); knapsack submits the estimate as
    the prior, greso keeps only the prompts its filter keeps."""
    from v05.core.rules import Greso, KnapsackHistory

    rng = np.random.default_rng([seed, 28])
    past = {uid: [1.0 if rng.random() < (truth[uid] + 1) / 2 else -1.0
                  for _ in range(8)] for uid, _, _ in items}
    if kind == "knapsack":
        h = KnapsackHistory()
        for uid, r in past.items():
            h.fold(uid, 0, r)
        return [(uid, p, h.prior(uid)) for uid, p, _ in items]
    g = Greso(seed=seed)
    for uid, r in past.items():
        g.fold(uid, r)
    keep = set(g.select([uid for uid, _, _ in items], step=1))
    return [x for x in items if x[0] in keep]


async def run_mode(a, engine, label, params, batches, trace_batch):
    """The mode's batches, one after another, through one plugin (what a
    plugin carries across batches, v05-eb's running fit, is exercised).
    One row per batch."""
    name = f"eb-{os.getpid()}-{abs(hash(label)) % 10000}"
    cfg = dict(max_prompts=max(len(batches[0][0]), 64), lane_capacity=16384)
    cfg.update(params)
    history = cfg.pop("epoch_state", None)
    wait = cfg.pop("wait_on", "auto")  # the driver's, not the plugin's
    prompt_of = {}
    for items, _truth, _lens in batches:
        for uid, p, _ in items:
            prompt_of[uid] = list(p["prompt_token_ids"]) \
                if isinstance(p, dict) else list(p)

    def score(uid, sample, out):
        ids = out.outputs[0].token_ids if a.engine == "vllm" \
            else out["output_ids"]
        return tiny.reward(prompt_of[uid], ids)

    rows = []
    with v05.Plugin.create(name, reclaim=True, **cfg) as plugin:
        for b, (items, truth, lens) in enumerate(batches):
            if history:
                items = later_epoch(history, items, truth, a.seed + b)
            meter = Meter(plugin, a.max_seqs, b == trace_batch)
            ro = make_rollout(a.engine, engine, plugin, meter, lens, score,
                              a.seed + b, wait)
            drv = ro._driver  # the shared driver (v05.engines.driver)
            # Its own wait's set-up, counted as the doorbell wait's arming
            # is (Meter._c); the wake-up is in the hand-off (_stage).
            drv._arm_scores = meter._cpu(drv._arm_scores)
            # The reward hand-off: pushed by a pool thread (wait_on
            # "doorbell"), or a scoring job's rewards taken back, checked
            # and staged on the loop (_take_scores, with _stage inside)
            # and published before each poll (wait_on "scores"). Handing
            # samples to scoring is not counted in either (a
            # run_in_executor per sample, or per job of several).
            for name in ("_push", "_take_scores", "_publish"):
                setattr(drv, name, meter._cpu(getattr(drv, name), True))
            before = plugin.stats()
            t0 = time.perf_counter()
            # Everything the loop thread and the whole process (but the
            # engine's own processes) spent on the batch: a check on the
            # timed calls that does not depend on what is timed.
            c0, p0 = time.thread_time(), time.process_time()
            try:
                res = await ro.generate(items)
            finally:
                ro.close()
            wall = time.perf_counter() - t0
            loop_cpu = time.thread_time() - c0
            proc_cpu = time.process_time() - p0
            err, ks = [], []
            for uid, r in sorted(res.items()):
                err.append((r.group.baseline - truth[uid]) ** 2)
                ks.append(r.group.k)
                r.group = None
                plugin.release(r.decision)
            meter.unwrap(plugin)
            after = plugin.stats()
            lat = [meter.final[u] - meter.first[u] for u in meter.final
                   if u in meter.first]
            row = {"mode": label, "batch": b, "prompts": len(items),
                   "wall_s": wall,
                   "tokens": meter.tokens, "wasted_tokens": meter.wasted,
                   "samples": ro.generate_calls,
                   "aborted": ro._driver.aborted,
                   "busy": meter.area / (wall * a.max_seqs),
                   "lat_p50_s": float(np.percentile(lat, 50)),
                   "lat_p99_s": float(np.percentile(lat, 99)),
                   "overhead_s": meter.overhead_s,
                   "handoff_s": meter.handoff_s,
                   "overhead_cpu_s": meter.overhead_cpu_s,
                   "wait_cpu_s": meter.wait_cpu_s,
                   "wait_calls": meter.wait_calls,
                   # the CPU the timers' own reads count, measured beside
                   # every timed call (loop thread; pool threads)
                   "timer_cpu_s": meter.timer_cpu_s,
                   "handoff_timer_s": meter.handoff_timer_s,
                   "loop_cpu_s": loop_cpu, "proc_cpu_s": proc_cpu,
                   # per plugin call: [calls, CPU seconds]
                   "calls": meter.calls,
                   "mse": float(np.mean(err)),
                   # samples added only to pad a dispatch to pad_multiple
                   "padded": after["samples_padded"] -
                   before["samples_padded"],
                   "k_hist": np.bincount(ks, minlength=17).tolist()}
            if meter.trace is not None:
                row["trace"] = [(round(t - t0, 4), n) for t, n in meter.trace]
            rows.append(row)
    return rows


def make_engine(a, model):
    if a.engine == "vllm":
        return tiny.vllm_engine(model, seed=a.seed, max_num_seqs=a.max_seqs,
                                max_model_len=a.context, kv_cache_gib=2)
    return tiny.sglang_engine(model, seed=a.seed,
                              max_running_requests=a.max_seqs,
                              context_length=a.context,
                              max_total_tokens=a.max_seqs * a.context)


def shutdown(a, engine, loop):
    if a.engine == "vllm":
        engine.shutdown()
    else:
        tiny.sglang_shutdown(engine)
    tasks = asyncio.all_tasks(loop)
    for t in tasks:
        t.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def engine_and_commit(a):
    """The engine's name and version, and the checkout's commit."""
    if a.engine == "vllm":
        import vllm
        version = f"vLLM {vllm.__version__}"
    else:
        import sglang
        version = f"sglang {sglang.__version__}"
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always",
                             "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    return version, commit


def engine_args(ap):
    """The options both engine benches take: the engine, and the lengths
    drawn per (prompt, sample) and the engine's running sequences."""
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--prompt-sigma", type=float, default=0.5)
    ap.add_argument("--median", type=float, default=24)
    ap.add_argument("--cap", type=int, default=480)
    ap.add_argument("--max-seqs", type=int, default=256)


def main():
    ap = argparse.ArgumentParser(prog="bench/engine")
    engine_args(ap)
    ap.add_argument("--quick", action="store_true",
                    help="1 repetition, 2 batches of 64 prompts")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--noise", type=float, default=PRIORS[0])
    ap.add_argument("--hallucination", type=float, default=PRIORS[1])
    ap.add_argument("--eb-early", type=float, default=EB_EARLY,
                    help="the early start mode's threshold: a prompt whose "
                    "chance of more samples is at least this starts k_step "
                    "more with its first wave (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated labels (default: all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.batches, a.prompts = 1, 2, 64
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; known: {', '.join(MODES)}")
    a.context = 8 + a.cap
    MODES["v05-eb early start"]["eb_early"] = a.eb_early
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    model = tiny.make_model(os.path.join(
        ROOT, "build-venv", "models", f"tiny-llama-ctx{a.context}"),
        seed=0, max_positions=a.context)
    n = a.prompts * a.batches
    prompts = tiny.make_prompts(n, seed=a.seed)
    p = tiny.success_probs(model, prompts)
    priors = tiny.noisy_priors(p, a.noise, a.hallucination, seed=a.seed + 1)
    batches = []
    for b in range(a.batches):
        items, truth, lens = [], {}, {}
        for i in range(b * a.prompts, (b + 1) * a.prompts):
            uid = f"q{i}"
            pr = prompts[i]
            if a.engine == "vllm":
                from vllm.inputs import TokensPrompt
                pr = TokensPrompt(prompt_token_ids=pr)
            items.append((uid, pr, float(priors[i])))
            truth[uid] = 2.0 * float(p[i]) - 1.0
            # Up to 64 samples a prompt (knapsack-prior's k_max); each
            # sample's draw is its own, so the first 16 do not change.
            lens[uid] = lengths(a.seed, b, i, 64, a)
        batches.append((items, truth, lens))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    t = time.perf_counter()

    async def start():
        return make_engine(a, model)
    engine = loop.run_until_complete(start())
    print(f"{a.engine} engine up in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)
    rows = []
    t_run = time.perf_counter()
    try:
        # A warm-up batch, not recorded: the first requests pay for
        # compilation and allocation.
        warm = [(batches[0][0][:32], batches[0][1], batches[0][2])]
        loop.run_until_complete(run_mode(a, engine, "warm-up", MODES[BASE],
                                         warm, -1))
        for rep in range(a.reps):
            order = modes[rep % len(modes):] + modes[:rep % len(modes)]
            for label in order:
                got = loop.run_until_complete(run_mode(
                    a, engine, label, MODES[label], batches,
                    a.batches - 1 if rep == 0 else -1))
                for row in got:
                    row["rep"] = rep
                    rows.append(row)
                    print(f"rep {rep + 1}/{a.reps} {label:16s} batch "
                          f"{row['batch']}: {row['wall_s']:6.2f} s, "
                          f"{row['tokens']} tokens, {row['samples']} samples,"
                          f" busy {row['busy']:.2f}  "
                          f"[{time.perf_counter() - t_run:.0f} s]",
                          file=sys.stderr, flush=True)
    finally:
        shutdown(a, engine, loop)
        loop.close()
    version, commit = engine_and_commit(a)
    out = os.path.join(a.out, tag_of(a.engine, vars(a)) + ".json")
    args = {k: v for k, v in vars(a).items() if k != "out"}
    with open(out, "w") as f:
        json.dump({"args": args, "engine": version, "v05": v05.version(),
                   "commit": commit, "date": str(datetime.date.today()),
                   "cpus": os.cpu_count(), "run_s": time.perf_counter() - t_run,
                   "modes": modes, "rows": rows}, f)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
