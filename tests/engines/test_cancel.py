# SPDX-License-Identifier: MIT
"""The caller's cancellation on a real vLLM always wins: a cancelled
generate() raises CancelledError at every moment of a batch (before the
first reward, during the first wave, at the second-wave decision, during
the second wave, while collecting finals), the engine is left with no
request, the plugin with no prompt or slot of the batch, and the next
batch on the same engine and plugin is right. Then faults at random:
scorers that raise, return NaN or values outside [-1, 1], or are slow,
engine requests that fail, and cancellations, batch after batch."""
import asyncio
import random
import threading

import numpy as np
import pytest

import v05
from v05.demos import tiny
from v05.engines.vllm import VLLMRollout

from vllm import SamplingParams  # noqa: E402

from engine_kit import VLLMKit, batch_items as kit_items  # noqa: E402

KIT = VLLMKit()
engine_idle = KIT.idle


def batch_items(step, n):
    """(uid, prompt, prior) of n prompts (engine_kit.batch_items)."""
    return kit_items(KIT, step, n=n)[0]


PARAMS = dict(mode="v05-eb", k_init=4, k_step=2, k_max=16, pad_multiple=8,
              max_prompts=128)
P = 24           # prompts per batch
REPEAT = 10      # cancellations per moment
MOMENTS = ("before the first reward", "during the first wave",
           "at the second-wave decision", "during the second wave",
           "while collecting finals")


class Canceller:
    """Cancels the task driving a batch the first time `moment` comes:
    hooks on the engine's generate (on the loop), the scorer (in the
    driver's scoring thread) and the plugin's poll (on the loop)."""

    def __init__(self, moment, loop):
        self.moment, self.loop = moment, loop
        self.task = None
        self.fired = False
        self.generates = 0
        self.scores = 0
        self.polls_with_samples = 0
        self.lock = threading.Lock()

    def _fire(self, from_thread=False):
        if self.fired or self.task is None:
            return
        self.fired = True
        if from_thread:
            self.loop.call_soon_threadsafe(self.task.cancel)
        else:
            self.task.cancel()

    def on_generate(self):
        self.generates += 1
        if self.moment == MOMENTS[0] and self.generates == 3:
            self._fire()

    def on_score(self, sample):
        with self.lock:
            self.scores += 1
            n = self.scores
        if self.moment == MOMENTS[1] and n == P * PARAMS["k_init"] // 2:
            self._fire(from_thread=True)
        elif self.moment == MOMENTS[3] and sample >= PARAMS["k_init"]:
            self._fire(from_thread=True)

    def on_poll(self, decisions):
        kinds = {d.kind for d in decisions}
        if self.moment == MOMENTS[2] and "sample" in kinds:
            self._fire()
        elif self.moment == MOMENTS[4] and "final" in kinds:
            self._fire()


class Hooked(VLLMRollout):
    def __init__(self, *a, hooks, **kw):
        self.hooks = hooks
        super().__init__(*a, **kw)

    async def _generate_one(self, prompt, uid, sample, batch):
        if self.hooks.canceller is not None:
            self.hooks.canceller.on_generate()
        return await super()._generate_one(prompt, uid, sample, batch)


class Hooks:
    canceller = None


def score_fn(hooks):
    def score(uid, sample, out):
        if hooks.canceller is not None:
            hooks.canceller.on_score(sample)
        return tiny.reward(out.prompt_token_ids, out.outputs[0].token_ids)
    return score


def hook_poll(plugin, hooks):
    poll = plugin.poll

    def hooked(*a, **kw):
        out = poll(*a, **kw)
        if hooks.canceller is not None:
            hooks.canceller.on_poll(out)
        return out
    plugin.poll = hooked


def plugin_clean(plugin):
    st = plugin.stats()
    return (st["prompts_open"], st["prompts_final"], len(plugin._uids),
            len(plugin._batch_keys), len(plugin._final_keys)) == (0, 0, 0, 0, 0)


async def full_batch(ro, plugin, step):
    """A batch run to its end and checked: each group's k in range and its
    advantages v05's for the rewards it got."""
    items = batch_items(step, n=P)
    res = await ro.generate(items)
    assert sorted(res) == sorted(uid for uid, _, _ in items)
    for uid, r in res.items():
        g = r.group
        assert PARAMS["k_init"] <= g.k <= PARAMS["k_max"]
        assert len(r.outputs) == g.k and all(o.finished for o in r.outputs)
        assert np.all(np.isfinite(g.advantages))
        r.group = None
        plugin.release(r.decision)
    return max(r.decision.k for r in res.values())


def test_cancellation_always_wins(engine_loop, segname):
    hooks = Hooks()
    sp = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True,
                        detokenize=False, seed=7)
    outcome = {m: [] for m in MOMENTS}

    async def main(plugin):
        engine = engine_loop.engine
        loop = asyncio.get_running_loop()
        with Hooked(engine, plugin, sp, score=score_fn(hooks), hooks=hooks,
                    score_threads=2) as ro:
            # The batch reaches every moment when left alone.
            assert await full_batch(ro, plugin, 0) > PARAMS["k_init"]
            step = 1
            for rep in range(REPEAT):
                for moment in MOMENTS:
                    c = hooks.canceller = Canceller(moment, loop)
                    c.task = asyncio.ensure_future(
                        ro.generate(batch_items(step, n=P)))
                    step += 1
                    try:
                        await c.task
                        got = "a result"  # the cancellation was swallowed
                    except asyncio.CancelledError:
                        got = "CancelledError"
                    hooks.canceller = None
                    idle = await engine_idle(engine)
                    clean = plugin_clean(plugin)
                    outcome[moment].append((c.fired, got, idle, clean))
                    await full_batch(ro, plugin, step)
                    step += 1
                    assert plugin_clean(plugin)
        return outcome

    with v05.Plugin.create(segname, **PARAMS) as plugin:
        hook_poll(plugin, hooks)
        engine_loop.run(main(plugin), timeout=1800)
    cancelled = sum(len(v) for v in outcome.values())
    assert cancelled >= 50
    for moment, runs in outcome.items():
        for fired, got, idle, clean in runs:
            assert fired, f"{moment}: the batch never got there"
            assert got == "CancelledError", f"{moment}: cancellation swallowed"
            assert idle, f"{moment}: requests left in the engine"
            assert clean, f"{moment}: prompts or slots left in the plugin"


class Faulty(Hooked):
    """The engine's generate failing for one request, as an engine does
    for a request it cannot serve."""

    fail_at = None

    async def _generate_one(self, prompt, uid, sample, batch):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected engine error")
        return await super()._generate_one(prompt, uid, sample, batch)


FAULTS = {  # kind: (what the caller must get, words in its message)
    "none": (None, ""), "slow": (None, ""),
    "raise": (ValueError, "injected verifier crash"),
    "nan": (ValueError, "is nan: not finite"),
    "range": (ValueError, "is 1.5: outside [-1, 1]"),
    "engine": (RuntimeError, "injected engine error"),
    "cancel": (asyncio.CancelledError, ""),
}


def test_random_faults_batch_after_batch(engine_loop, segname):
    import os
    import time

    rng = random.Random(2026)
    sp = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True,
                        detokenize=False, seed=11)
    plan = {"kind": "none", "at": 0, "n": 0}
    lock = threading.Lock()
    log = []

    def score(uid, sample, out):
        with lock:
            plan["n"] += 1
            hit = plan["n"] == plan["at"]
        kind = plan["kind"] if hit else "none"
        if kind == "raise":
            raise ValueError("injected verifier crash")
        if kind == "slow":
            time.sleep(0.2)
        if kind == "cancel":
            loop.call_soon_threadsafe(task.cancel)
        r = tiny.reward(out.prompt_token_ids, out.outputs[0].token_ids)
        return {"nan": float("nan"), "range": 1.5}.get(kind, r)

    async def main(plugin):
        nonlocal loop, task
        loop = asyncio.get_running_loop()
        engine = engine_loop.engine
        with Faulty(engine, plugin, sp, score=score, hooks=Hooks(),
                    score_threads=2) as ro:
            for step in range(40):
                kind = rng.choice(sorted(FAULTS))
                at = rng.randrange(1, P * PARAMS["k_init"])
                plan.update(kind=kind, at=at, n=0)
                ro.calls, ro.fail_at = 0, at if kind == "engine" else None
                task = asyncio.ensure_future(ro.generate(batch_items(step, n=P)))
                done, _ = await asyncio.wait({task}, timeout=300)
                assert task in done, f"batch {step} ({kind}) did not end"
                want, words = FAULTS[kind]
                if want is None:
                    res = task.result()
                    assert len(res) == P
                    for r in res.values():
                        assert PARAMS["k_init"] <= r.group.k <= PARAMS["k_max"]
                        r.group = None
                        plugin.release(r.decision)
                    got = "result"
                else:
                    with pytest.raises(want) as ei:
                        task.result()
                    assert words in str(ei.value), (kind, str(ei.value))
                    got = type(ei.value).__name__
                log.append((step, kind, got))
                assert await engine_idle(engine), f"batch {step} ({kind})"
                assert plugin_clean(plugin), f"batch {step} ({kind})"
        return log

    loop = task = None
    with v05.Plugin.create(segname, **PARAMS) as plugin:
        engine_loop.run(main(plugin), timeout=1800)
    left = [f for f in os.listdir(os.environ.get("V05_SHM_DIR", "/dev/shm"))
            if f.startswith("v05-" + segname)]
    assert left == [], left
    kinds = {k for _, k, _ in log}
    assert kinds == set(FAULTS), f"not every fault came up: {kinds}"
