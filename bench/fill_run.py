#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/engine --fill's body, run in an engine environment: what a
training step's full batch of B informative groups costs on a real engine
when groups are dropped (DAPO's filter, G = 16), filled the ways the
frameworks fill it, side by side in one run:

- "verl DAPO recipe": verl's recipe/dapo at its defaults (its run scripts
  and docs: gen_batch_size = 3 x train_batch_size, rollout.n = 16): rounds
  of 3B prompts, each waiting for its slowest sample, until B groups
  survive the filter; the surplus is discarded (batch[:traj_bsz]).
- "verl v1 replay buffer": verl 0.9.1's ReplayBuffer.sample in sync mode
  with DAPO filtering (trainer/ppo/v1/replay_buffer.py): B prompts
  dispatched, each filtered group earns 2 refill credits, spent one
  prompt at a time while fewer than B prompts are in flight; once B
  groups are sampleable, dispatch stops, what is in flight is drained
  (finished) and the surplus discarded. verl polls every 2 s; here it
  reacts at once (in its favour).
- "OpenRLHF per-group": OpenRLHF's SamplesGeneratorStreamingAsync: B
  prompts, each filtered group replaced by one new prompt at once; stops
  at B (nothing is left in flight).
- "slime over-request": slime's generate_rollout_async: while the
  submitted prompts minus the dropped fall short of B, another
  over_sampling_batch_size (its default: rollout_batch_size = B) prompts
  go in; at B, every request still running is aborted.
- "GRESO": the DAPO recipe's rounds with GRESO's pre-rollout filter (its
  state as a later epoch has it: one past visit of 16 samples per prompt
  folded in) and its adaptive rollout size (v05.core.rules.Greso.refill).
- "v05 fill ...": v05.engines.fill.StreamFill, at_target abort or carry,
  with and without the skip by prior (SkipRule's defaults).
- "GRPO G=16": B prompts, no filter: the busy-fraction reference.

Every strategy sees the same prompts in the same order, each sample's
length drawn per (prompt, sample index) as bench/engine does, and the same
reward per (prompt, sample): with --p-dist model the tiny model's parity
task on the generated tokens, with --p-dist beta:A:B a success drawn with
the prompt's probability p ~ Beta(A, B) (the tokens are still generated).
Tokens of an aborted request are those it generated before the abort
(vLLM and sglang hand back the partial output of an aborted request).
Writes bench/out/fill-<engine>-<tag>.json; bench/fill_report.py puts it
into bench/ENGINE.md.
"""
import argparse
import asyncio
import datetime
import hashlib
import json
import os
import sys
import time

import numpy as np

import v05
from v05.core.fill import SkipRule, informative
from v05.core.rules import Greso
from v05.demos import tiny
from v05.engines.driver import sample_seed
from v05.engines.fill import StreamFill

from engine_run import (Busy, engine_and_commit, engine_args,  # this folder
                        lengths, make_engine, shutdown)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
G = 16
DAPO_GEN = 3  # verl's DAPO recipe: gen_prompt_bsz = train_prompt_bsz * 3

STRATEGIES = ["GRPO G=16", "verl DAPO recipe", "verl v1 replay buffer",
              "OpenRLHF per-group", "slime over-request", "GRESO",
              "v05 fill abort", "v05 fill carry", "v05 fill abort + skip",
              "v05 fill carry + skip"]
# Not run by default: the abort fill keeping the engine full to the end
# (inflight = the engine's slots), to show what that floor costs here.
EXTRA = ["v05 fill abort + floor"]


class Meter(Busy):
    """Requests in flight over time (Busy), the tokens each prompt's
    finished and aborted samples generated."""

    def __init__(self, cap):
        super().__init__(cap)
        self.done = {}      # uid -> tokens of finished samples
        self.cut = {}       # uid -> tokens of aborted samples

    def start(self):
        self._step(+1)

    def stop(self, uid, ntok, finished):
        self._step(-1)
        d = self.done if finished else self.cut
        d[uid] = d.get(uid, 0) + ntok


def synthetic_reward(seed, uid, sample, p):
    h = hashlib.blake2b(f"{seed}\0{uid}\0{sample}".encode(), digest_size=8)
    u = int.from_bytes(h.digest(), "little") / 2.0 ** 64
    return 1.0 if u < p else -1.0


def make_rollout(a, engine, plugin, meter, lens, score):
    """The project's rollout for the engine; each request's length is the
    drawn one, and an aborted request's partial tokens are counted."""
    if a.engine == "vllm":
        from vllm import SamplingParams

        from v05.engines.vllm import (VLLMRollout, engine_input,
                                      single_sample_params)
        sp = SamplingParams(temperature=1.0, max_tokens=1, detokenize=False,
                            ignore_eos=True, seed=a.seed)

        async def consume(gen):
            final = None
            async for out in gen:
                final = out
            return final

        class Rollout(VLLMRollout):
            async def _generate_one(self, prompt, uid, sample, batch):
                p = single_sample_params(sp, uid, batch, sample)
                p.max_tokens = lens[uid][sample]
                rid = f"f-{batch}-{uid}-{sample}-{time.monotonic_ns()}"
                meter.start()
                inner = asyncio.ensure_future(consume(engine.generate(
                    engine_input(engine, prompt), p, rid)))
                try:
                    final = await asyncio.shield(inner)
                except asyncio.CancelledError:
                    # Aborted by vLLM's own call, which hands the request's
                    # partial output back: its tokens are counted.
                    await engine.abort(rid)
                    try:
                        final = await inner
                    except BaseException:
                        final = None
                    n = len(final.outputs[0].token_ids) if final else 0
                    meter.stop(uid, n, False)
                    raise
                except BaseException:
                    meter.stop(uid, 0, False)
                    raise
                meter.stop(uid, len(final.outputs[0].token_ids), True)
                return final

        return Rollout(engine, plugin, sp, score=score, score_threads=2)

    from v05.engines.sglang import SGLangRollout

    class Rollout(SGLangRollout):
        async def _generate_one(self, prompt, uid, sample, batch):
            params = {"temperature": 1.0, "ignore_eos": True,
                      "max_new_tokens": lens[uid][sample],
                      "sampling_seed": sample_seed(a.seed, uid, batch, sample)}
            rid = f"f-{batch}-{uid}-{sample}-{time.monotonic_ns()}"
            meter.start()
            inner = asyncio.ensure_future(engine.async_generate(
                input_ids=[int(t) for t in prompt], sampling_params=params,
                rid=rid, stream=False))
            try:
                out = await asyncio.shield(inner)
            except asyncio.CancelledError:
                engine.tokenizer_manager.abort_request(rid)
                try:
                    out = await inner
                except BaseException:
                    out = None
                meter.stop(uid, len(out["output_ids"]) if out else 0, False)
                raise
            except BaseException:
                meter.stop(uid, 0, False)
                raise
            meter.stop(uid, len(out["output_ids"]), True)
            return out

    return Rollout(engine, plugin, {}, score=score, score_threads=2)


class Source:
    """The prompt stream every strategy reads from the start: items
    (uid, prompt, prior) in one fixed order; counts what was pulled."""

    def __init__(self, items):
        self.items, self.i = items, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= len(self.items):
            raise StopIteration
        self.i += 1
        return self.items[self.i - 1]

    def take(self, n):
        out = self.items[self.i:self.i + n]
        self.i += len(out)
        return out


# ---- the frameworks' fills as policies of the same streamed fill -------

class OpenRLHFFill(StreamFill):
    """B prompts in flight minus the groups kept: each filtered group is
    replaced by one prompt."""

    def _admit(self, it, need, res):
        new, taken = [], set()
        while len(self._flight.prompts) + len(new) < need:
            item = self._pull(it, taken, res)
            if item is None:
                break
            taken.add(item[0])
            new.append(item)
        if new:
            self._submit(new, res)


class SlimeFill(StreamFill):
    """While submitted minus dropped < B: another chunk of B prompts."""

    def _admit(self, it, need, res):
        if res.admitted == 0:
            self._target = need
        new, taken = [], set()
        while res.admitted + len(new) - res.dropped < self._target:
            for _ in range(self._target):
                item = self._pull(it, taken, res)
                if item is None:
                    break
                taken.add(item[0])
                new.append(item)
            if res.exhausted:
                break
        if new:
            self._submit(new, res)


class VerlV1Fill(StreamFill):
    """verl 0.9.1's sync ReplayBuffer with DAPO: B prompts, 2 credits per
    filtered group, at most B prompts in flight; at B, drain."""

    def _admit(self, it, need, res):
        if res.admitted == 0 and not self._flight.prompts:
            self._target, self._credit, self._seen = need, need, 0
        self._credit += 2 * (res.dropped - self._seen)
        self._seen = res.dropped
        n = min(self._credit, self._target - len(self._flight.prompts))
        new, taken = [], set()
        while len(new) < n:
            item = self._pull(it, taken, res)
            if item is None:
                break
            taken.add(item[0])
            new.append(item)
        self._credit -= len(new)
        if new:
            self._submit(new, res)

    async def _at_target(self, res, groups, target):
        """Drain: what is in flight finishes; the surplus is discarded."""
        while self._flight.prompts:
            if self._errors:
                raise self._errors[0]
            if not await self._turn(groups, target, res) and \
                    self._flight.prompts:
                await self._drv._wait()


FILLS = {"verl v1 replay buffer": VerlV1Fill,
         "OpenRLHF per-group": OpenRLHFFill,
         "slime over-request": SlimeFill}


async def rounds(drv, items):
    """One round (a batch through the driver); its groups' (uid, rewards,
    dropped), released."""
    res = await drv.run(items)
    out = []
    for uid, r in res.items():
        k = r.group.k
        out.append((uid, [float(x) for x in r.group.rewards[:k]],
                    r.dropped))
        r.group = None
    return out


def informative_of(groups):
    return [uid for uid, rw, dropped in groups
            if informative("dapo", rw, dropped=dropped)]


async def run_strategy(a, engine, name, items, truth, lens, reward_of, rep,
                       trace, p_of):
    """S steps of B informative groups: one row per step."""
    seg = f"fill-{os.getpid()}-{abs(hash(name)) % 10000}"
    mode = "grpo" if name.startswith("GRPO") else "dapo"
    meter = Meter(a.max_seqs)
    if trace:
        meter.trace = []

    def score(uid, sample, out):
        return reward_of(uid, sample, out)

    rows = []
    src = Source(items)
    cfg = dict(mode=mode, k_init=G, k_max=G, pad_multiple=1,
               max_prompts=8192, max_batches=4096, lane_capacity=65536)
    greso = None
    if name == "GRESO":
        greso = Greso(seed=a.seed)
        rng = np.random.default_rng([a.seed, 38])
        for uid, _, _ in items:  # a later epoch: one past visit each
            q = (truth[uid] + 1) / 2
            greso.fold(uid, [1.0 if rng.random() < q else -1.0
                             for _ in range(G)])
    t_start = time.perf_counter()
    with v05.Plugin.create(seg, reclaim=True, **cfg) as plugin:
        ro = make_rollout(a, engine, plugin, meter, lens, score)
        drv = ro._driver
        drv.release = True
        fill = None
        if name in FILLS or name.startswith("v05"):
            fill = FILLS.get(name, StreamFill)(
                ro, at_target="carry" if "carry" in name else "abort",
                skip=SkipRule(seed=a.seed) if "skip" in name else None,
                inflight=a.max_seqs if "floor" in name else None)
        zv_share = None
        try:
            for step in range(a.steps):
                t0 = time.perf_counter()
                calls0, area0 = drv.generate_calls, meter.area
                done0, cut0 = dict(meter.done), dict(meter.cut)
                used, skipped, lost = [], 0, 0.0
                rounds_n = 0
                if fill is not None:
                    res = await fill.fill(src, a.target)
                    if res.short:  # the pool ran out: the row would lie
                        raise SystemExit(
                            f"fill_run: {name}, step {step}: "
                            f"{len(res.groups)} of {a.target} informative "
                            "groups before the pool of prompts ran out "
                            "(its size follows --target and --steps)")
                    used = list(res.groups)
                    skipped = len(res.skipped)
                    # The informative groups the skipped prompts would
                    # have given, expected from their true p.
                    lost = sum(1 - p_of[u] ** G - (1 - p_of[u]) ** G
                               for u in res.skipped)
                    for r in res.groups.values():
                        r.group = None
                    n_drop, n_surplus = res.dropped, res.surplus
                    aborted = res.aborted
                elif mode == "grpo":
                    got = await rounds(drv, src.take(a.target))
                    used = informative_of(got)
                    n_drop, n_surplus, aborted = len(got) - len(used), 0, 0
                    rounds_n = 1
                else:
                    kept, n_drop, n_surplus, aborted = [], 0, 0, 0
                    while len(kept) < a.target:
                        if greso is None:
                            size = DAPO_GEN * a.target
                            batch = src.take(size)
                        else:
                            size = DAPO_GEN * a.target
                            if zv_share is not None:
                                size, _ = Greso.refill(
                                    a.target, len(kept), zv_share, size)
                            batch = []
                            while len(batch) < size:
                                x = src.take(1)
                                if not x:
                                    break
                                if greso.skip(x[0][0], rep * a.steps + step
                                              + 1):
                                    skipped += 1
                                    q = p_of[x[0][0]]
                                    lost += 1 - q ** G - (1 - q) ** G
                                else:
                                    batch.append(x[0])
                        if not batch:
                            break
                        got = await rounds(drv, batch)
                        rounds_n += 1
                        good = informative_of(got)
                        if greso is not None:
                            for uid, rw, _ in got:
                                greso.fold(uid, rw)
                            zv_share = 1 - len(good) / len(got)
                        n_drop += len(got) - len(good)
                        room = a.target - len(kept)
                        kept += good[:room]
                        n_surplus += max(0, len(good) - room)
                    used = kept
                    if greso is not None:
                        greso.step_end(first_epoch=False)
                wall = time.perf_counter() - t0
                tok = sum(meter.done.values()) - sum(done0.values())
                cut = sum(meter.cut.values()) - sum(cut0.values())
                tok_used = sum(meter.done.get(u, 0) for u in used)
                rows.append({
                    "strategy": name, "rep": rep, "step": step,
                    "wall_s": wall, "groups": len(used),
                    "tokens": tok, "aborted_tokens": cut,
                    "used_tokens": tok_used,
                    "samples": drv.generate_calls - calls0,
                    "dropped": n_drop, "surplus": n_surplus,
                    "aborted": aborted, "skipped": skipped,
                    "skipped_informative": lost,
                    "load1": os.getloadavg()[0],
                    "rounds": rounds_n,
                    "busy": (meter.area - area0) / (wall * a.max_seqs),
                    "pulled": src.i})
        finally:
            if fill is not None:
                # What the last step carried is wasted: aborted here, its
                # tokens counted in the run's tail.
                t0 = time.perf_counter()
                cut0 = sum(meter.cut.values())
                n = await fill.close()
                if rows:
                    rows[-1]["close_aborted"] = n
                    rows[-1]["close_tokens"] = \
                        sum(meter.cut.values()) - cut0
                    rows[-1]["close_s"] = time.perf_counter() - t0
            ro.close()
    if trace and rows:
        rows[0]["trace"] = [(round(t - t_start, 4), n)
                            for t, n in meter.trace]
    return rows


def main():
    ap = argparse.ArgumentParser(prog="bench/engine --fill")
    engine_args(ap)
    ap.add_argument("--fill", action="store_true")  # bench/engine's switch
    ap.add_argument("--quick", action="store_true",
                    help="1 repetition, B = 32, 2 steps")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--target", type=int, default=96,
                    help="B: informative groups per step")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--hallucination", type=float, default=0.05)
    ap.add_argument("--p-dist", default="beta:0.3:0.3",
                    help="'model' (the tiny model's task) or beta:A:B")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.target, a.steps = 1, 32, 2
    names = [m.strip() for m in a.strategies.split(",") if m.strip()]
    for m in names:
        if m not in STRATEGIES + EXTRA:
            ap.error(f"unknown strategy {m!r}; known: "
                     f"{', '.join(STRATEGIES + EXTRA)}")
    if a.p_dist != "model":
        try:
            kind, alpha, beta = a.p_dist.split(":")
            alpha, beta = float(alpha), float(beta)
            assert kind == "beta" and alpha > 0 and beta > 0
        except (ValueError, AssertionError):
            ap.error(f"--p-dist {a.p_dist!r}: 'model' or beta:A:B, A, B > 0")
    a.context = 8 + a.cap
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    model = tiny.make_model(os.path.join(
        ROOT, "build-venv", "models", f"tiny-llama-ctx{a.context}"),
        seed=0, max_positions=a.context)
    # Enough prompts for the hungriest strategy: the recipe's rounds of 3B.
    n = max(64, 2 * DAPO_GEN * a.target * (a.steps + 1))
    prompts = tiny.make_prompts(n, seed=a.seed)
    if a.p_dist == "model":
        p = tiny.success_probs(model, prompts)
    else:
        p = np.random.default_rng([a.seed, 7]).beta(alpha, beta, size=n)
    priors = tiny.noisy_priors(p, a.noise, a.hallucination, seed=a.seed + 1)
    items, truth, lens, prompt_of, p_of = [], {}, {}, {}, {}
    for i in range(n):
        uid = f"q{i}"
        pr = prompts[i]
        prompt_of[uid] = pr
        p_of[uid] = float(p[i])
        if a.engine == "vllm":
            from vllm.inputs import TokensPrompt
            pr = TokensPrompt(prompt_token_ids=pr)
        items.append((uid, pr, float(priors[i])))
        truth[uid] = 2.0 * float(p[i]) - 1.0
        lens[uid] = lengths(a.seed, 0, i, G, a)

    def reward_of(uid, sample, out):
        if a.p_dist == "model":
            ids = out.outputs[0].token_ids if a.engine == "vllm" \
                else out["output_ids"]
            return tiny.reward(prompt_of[uid], ids)
        return synthetic_reward(a.seed, uid, sample, p_of[uid])

    share = float(np.mean(1 - p ** G - (1 - p) ** G))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    t = time.perf_counter()

    async def start():
        return make_engine(a, model)
    engine = loop.run_until_complete(start())
    print(f"{a.engine} engine up in {time.perf_counter() - t:.1f} s; "
          f"informative share at G={G}: {share:.3f}", file=sys.stderr)
    rows = []
    t_run = time.perf_counter()
    load0 = os.getloadavg()
    try:
        warm = argparse.Namespace(**vars(a))
        warm.steps, warm.target = 1, 8
        loop.run_until_complete(run_strategy(
            warm, engine, "GRPO G=16", items[-64:], truth, lens, reward_of,
            -1, False, p_of))
        for rep in range(a.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                got = loop.run_until_complete(run_strategy(
                    a, engine, name, items, truth, lens, reward_of, rep,
                    rep == 0, p_of))
                rows += got
                wall = sum(r["wall_s"] for r in got)
                tok = sum(r["tokens"] + r["aborted_tokens"] +
                          r.get("close_tokens", 0) for r in got)
                grp = sum(r["groups"] for r in got)
                print(f"rep {rep + 1}/{a.reps} {name:24s} {wall:7.2f} s "
                      f"{tok:8d} tokens {grp} groups, "
                      f"busy {np.mean([r['busy'] for r in got]):.2f} "
                      f"[{time.perf_counter() - t_run:.0f} s]",
                      file=sys.stderr, flush=True)
    finally:
        shutdown(a, engine, loop)
        loop.close()
    version, commit = engine_and_commit(a)
    load = [load0, os.getloadavg()]
    tag = f"fill-{a.engine}-s{a.sigma:g}-{a.p_dist.replace(':', '')}"
    out = os.path.join(a.out, tag + ".json")
    args = {k: v for k, v in vars(a).items() if k not in ("out", "fill")}
    with open(out, "w") as f:
        json.dump({"args": args, "engine": version, "v05": v05.version(),
                   "commit": commit, "date": str(datetime.date.today()),
                   "cpus": os.cpu_count(), "load": load,
                   "share": share, "run_s": time.perf_counter() - t_run,
                   "strategies": names, "rows": rows}, f)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
