# SPDX-License-Identifier: MIT
"""Tensor parallelism 2 on vLLM's CPU build (one worker process per rank,
each bound to a core of its own with VLLM_CPU_OMP_THREADS_BIND): v05
drives it unchanged, and on the same batch it makes the same decisions and
writes the same advantages as at TP 1. Sampling is greedy, so both
engines must produce the same tokens (checked); a reward is the verifier's
on those tokens, its sign flipped by a fixed function of (uid, sample) so
that groups are mixed and the plugin asks for second waves."""
import collections
import hashlib
import os

import psutil
import pytest

import v05
from v05.demos import tiny
from v05.engines.vllm import VLLMRollout

from vllm import SamplingParams  # noqa: E402

from conftest import EngineLoop  # noqa: E402
from helpers import PARAMS, batch_items, engine_idle, record_decisions  # noqa: E402


@pytest.fixture(scope="module")
def tp2_loop(model_dir):
    # One core per rank: the workers' OpenMP threads are bound by vLLM.
    # Read by the engine core when it starts its workers, so set only
    # while this engine starts.
    saved = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"
    try:
        el = EngineLoop(model_dir, tensor_parallel_size=2)
    finally:
        if saved is None:
            del os.environ["VLLM_CPU_OMP_THREADS_BIND"]
        else:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = saved
    yield el
    el.close()


def flip(uid, sample):
    h = hashlib.blake2b(f"{uid}/{sample}".encode(), digest_size=1).digest()
    return 1.0 if h[0] & 1 else -1.0


def rollout(el, name, items):
    outputs = {}

    def score(uid, sample, out):
        ids = list(out.outputs[0].token_ids)
        outputs[(uid, sample)] = ids
        return tiny.reward(out.prompt_token_ids, ids) * flip(uid, sample)

    async def main(plugin):
        sp = SamplingParams(temperature=0.0, max_tokens=4, detokenize=False)
        with VLLMRollout(el.engine, plugin, sp, score=score) as ro:
            res = await ro.generate(items)
            groups = {}
            for uid, r in res.items():
                g = r.group
                groups[uid] = (g.k, g.rewards.tolist(), g.advantages.tolist(),
                               g.baseline)
                r.group = None
                plugin.release(r.decision)
        return groups, await engine_idle(el.engine)

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
    workers = {p.name(): p.cpu_affinity() for p in
               psutil.Process().children(recursive=True)
               if p.name().startswith("VLLM::Worker_TP")}
    assert workers == {"VLLM::Worker_TP0": [0], "VLLM::Worker_TP1": [1]}
    items = batch_items(0)
    g1, d1, o1, idle1 = rollout(engine_loop, segname, items)
    g2, d2, o2, idle2 = rollout(tp2_loop, segname + "-tp2", items)
    assert idle1 and idle2
    assert o2 == o1, "TP 2 generated other tokens than TP 1"
    assert d2 == d1
    assert g2 == g1
    assert max(k for k, _, _, _ in g1.values()) > PARAMS["k_init"]
