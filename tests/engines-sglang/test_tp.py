# SPDX-License-Identifier: MIT
"""Tensor parallelism 2 on sglang's CPU engine (two scheduler processes,
one per rank, gloo between them): v05 drives it unchanged, and on the same
batch it makes the same decisions and writes the same advantages as at
TP 1. Sampling is greedy, so both engines must produce the same tokens
(checked); a reward is the verifier's on those tokens, its sign flipped by
a fixed function of (uid, sample) so that groups are mixed and the plugin
asks for second waves."""
import collections
import hashlib

import psutil
import pytest

import v05
from v05.demos import tiny
from v05.engines.sglang import SGLangRollout

from conftest import EngineLoop  # noqa: E402
from sgl_helpers import (PARAMS, batch_items, record_decisions,  # noqa: E402
                         sglang_idle)

GREEDY = {"temperature": 0.0, "max_new_tokens": 4}


@pytest.fixture(scope="module")
def tp2_loop(model_dir):
    el = EngineLoop(model_dir, max_running_requests=32, tp_size=2)
    yield el
    el.close()


def flip(uid, sample):
    h = hashlib.blake2b(f"{uid}/{sample}".encode(), digest_size=1).digest()
    return 1.0 if h[0] & 1 else -1.0


def rollout(el, name, items):
    prompt_of = {uid: p for uid, p, _ in items}
    outputs = {}

    def score(uid, sample, out):
        ids = list(out["output_ids"])
        outputs[(uid, sample)] = ids
        return tiny.reward(prompt_of[uid], ids) * flip(uid, sample)

    async def main(plugin):
        with SGLangRollout(el.engine, plugin, GREEDY, score=score) as ro:
            res = await ro.generate(items)
            groups = {}
            for uid, r in res.items():
                g = r.group
                groups[uid] = (g.k, g.rewards.tolist(), g.advantages.tolist(),
                               g.baseline)
                r.group = None
                plugin.release(r.decision)
        return groups, await sglang_idle(el.engine)

    with v05.Plugin.create(name, mode="v05-eb", pad_multiple=8,
                           max_prompts=256, **PARAMS) as plugin:
        seen = record_decisions(plugin)
        groups, idle = el.run(main(plugin))
    decisions = collections.defaultdict(list)
    for call in seen:
        for d in call:
            decisions[d.uid].append((d.kind, tuple(d.samples)))
    return groups, dict(decisions), outputs, idle


def test_tp2_same_decisions_and_advantages(engine_loop, tp2_loop, segname):
    ranks = sorted(p.name() for p in psutil.Process().children(recursive=True)
                   if p.name().startswith("sglang::scheduler_TP"))
    assert ranks == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    items = batch_items(0)
    g1, d1, o1, idle1 = rollout(engine_loop, segname, items)
    g2, d2, o2, idle2 = rollout(tp2_loop, segname + "-tp2", items)
    assert idle1 and idle2
    assert o2 == o1, "TP 2 generated other tokens than TP 1"
    assert d2 == d1
    assert g2 == g1
    assert max(k for k, _, _, _ in g1.values()) > PARAMS["k_init"]
