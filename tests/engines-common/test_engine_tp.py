# SPDX-License-Identifier: MIT
"""Tensor parallelism 2 on a real engine (vLLM's CPU build: one worker
process per rank, each bound to a core of its own with
VLLM_CPU_OMP_THREADS_BIND; sglang's CPU engine: two scheduler processes,
one per rank, gloo between them): v05 drives it unchanged, and on the
same batch it makes the same decisions and writes the same advantages as
at TP 1. Sampling is greedy, so both engines must produce the same tokens
(checked); a reward is the verifier's on those tokens, its sign flipped by
a fixed function of (uid, sample) so that groups are mixed and the plugin
asks for second waves."""
import collections
import hashlib
import os

import psutil
import pytest

import v05
from v05.demos import tiny

from engine_kit import (PARAMS, EngineLoop, batch_items,  # noqa: E402
                        record_decisions)


@pytest.fixture(scope="module")
def tp2_loop(kit, model_dir):
    args, env = kit.tp2_args()
    # Read by the engine when it starts its ranks: set only meanwhile.
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        el = EngineLoop(kit, model_dir, **args)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    yield el
    el.close()


def flip(uid, sample):
    h = hashlib.blake2b(f"{uid}/{sample}".encode(), digest_size=1).digest()
    return 1.0 if h[0] & 1 else -1.0


def rollout(kit, el, name, items, prompt_of):
    outputs = {}

    def score(uid, sample, out):
        ids = kit.tokens(out)
        outputs[(uid, sample)] = ids
        return tiny.reward(prompt_of[uid], ids) * flip(uid, sample)

    async def main(plugin):
        sampling = kit.sampling(temperature=0.0, max_tokens=4)
        with kit.rollout(el.engine, plugin, sampling, score=score) as ro:
            res = await ro.generate(items)
            groups = {}
            for uid, r in res.items():
                g = r.group
                groups[uid] = (g.k, g.rewards.tolist(), g.advantages.tolist(),
                               g.baseline)
                r.group = None
                plugin.release(r.decision)
        return groups, await kit.idle(el.engine)

    with v05.Plugin.create(name, mode="v05-eb", pad_multiple=8,
                           max_prompts=256, **PARAMS) as plugin:
        seen = record_decisions(plugin)
        groups, idle = el.run(main(plugin))
    decisions = collections.defaultdict(list)
    for call in seen:
        for d in call:
            decisions[d.uid].append((d.kind, tuple(d.samples)))
    return groups, dict(decisions), outputs, idle


def test_tp2_same_decisions_and_advantages(kit, engine_loop, tp2_loop,
                                           segname):
    ranks = kit.tp2_processes(psutil.Process().children(recursive=True))
    assert ranks == kit.tp2_expected
    items, prompt_of = batch_items(kit, 0)
    g1, d1, o1, idle1 = rollout(kit, engine_loop, segname, items, prompt_of)
    g2, d2, o2, idle2 = rollout(kit, tp2_loop, segname + "-tp2", items,
                                prompt_of)
    assert idle1 and idle2
    assert o2 == o1, "TP 2 generated other tokens than TP 1"
    assert d2 == d1
    assert g2 == g1
    assert max(k for k, _, _, _ in g1.values()) > PARAMS["k_init"]
