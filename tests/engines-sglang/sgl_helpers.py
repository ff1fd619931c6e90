# SPDX-License-Identifier: MIT
"""What the real-sglang tests share: a recording wrapper of the Engine,
the plugin's decisions as they are handed out, sglang found idle (in its
own state: the tokenizer manager's requests and the scheduler's queues),
and a batch of the tiny model's prompts as token ids."""
import time

import numpy as np

from v05.demos import tiny

PROMPTS = 64
PARAMS = dict(cost=0.0039, k_init=4, k_step=2, k_max=16)


class AbortLog:
    """The real tokenizer manager, with each abort_request the rollout
    makes kept (by rid); everything else is the manager's own."""

    def __init__(self, tm):
        self.tm, self.rids = tm, []

    def abort_request(self, rid="", abort_all=False):
        self.rids.append(rid)
        return self.tm.abort_request(rid, abort_all)

    def __getattr__(self, name):
        return getattr(self.tm, name)


class Recorder:
    """The real sglang Engine, with each async_generate call's keyword
    arguments kept; the rollout's aborts go through AbortLog."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.tokenizer_manager = AbortLog(engine.tokenizer_manager)

    async def async_generate(self, **kw):
        self.calls.append(dict(kw, sampling_params=dict(kw["sampling_params"])))
        return await self.engine.async_generate(**kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def rid_uid_sample(rid):
    """v05.engines.sglang's rid: v05-BATCH-UID-SAMPLE-COUNTER."""
    head, sample, _ = rid.rsplit("-", 2)
    return head.split("-", 2)[2], int(sample)


def record_decisions(plugin):
    """Every submit/poll call's decisions, one list per call."""
    calls = []

    def wrap(fn):
        def recorded(*a, **kw):
            out = fn(*a, **kw)
            calls.append(out)
            return out
        return recorded
    plugin.poll, plugin.submit = wrap(plugin.poll), wrap(plugin.submit)
    return calls


async def sglang_idle(engine, tries=200):
    """No request left in sglang: none in the tokenizer manager
    (rid_to_state: an aborted request leaves it when the scheduler's
    abort answer comes back), and none running or waiting in the scheduler,
    read from a load snapshot the scheduler published after that (it
    publishes one on every pass of its idle loop). Each get_internal_state
    is a round trip to the scheduler, which runs its loop in between."""
    tm = engine.tokenizer_manager
    for _ in range(tries):
        if not tm.rid_to_state:
            break
        await tm.get_internal_state()
    else:
        return False
    mark = time.time()
    for _ in range(tries):
        await tm.get_internal_state()
        loads = await tm.get_loads()
        if loads and all(ld.timestamp > mark for ld in loads):
            return all(ld.num_running_reqs == 0 and ld.num_waiting_reqs == 0
                       for ld in loads) and not tm.rid_to_state
    return False


def batch_items(step, n=PROMPTS, seed=0):
    prompts = tiny.make_prompts(n, seed=seed)
    priors = np.linspace(-0.9, 0.9, n)
    return [(f"s{step}-p{i}", p, float(v))
            for i, (p, v) in enumerate(zip(prompts, priors))]
