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
import math
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


def rollout(kit, el, name, items, prompt_of, batches=None, sure=(),
            **create):
    """items (or the list `batches` of them, run one after the other on
    one plugin) through el's engine; rewards: the verifier's, its sign
    flipped by flip(), but -1 for every sample of a uid in `sure`."""
    outputs = {}

    def score(uid, sample, out):
        ids = kit.tokens(out)
        outputs[(uid, sample)] = ids
        if uid in sure:
            return -1.0
        return tiny.reward(prompt_of[uid], ids) * flip(uid, sample)

    async def main(plugin):
        sampling = kit.sampling(temperature=0.0, max_tokens=4)
        groups = {}
        with kit.rollout(el.engine, plugin, sampling, score=score) as ro:
            for batch in batches or [items]:
                res = await ro.generate(batch)
                for uid, r in res.items():
                    g = r.group
                    groups[uid] = (g.k, g.rewards.tolist(),
                                   g.advantages.tolist(), g.baseline)
                    r.group = None
                    plugin.release(r.decision)
        return groups, await kit.idle(el.engine)

    create = create or dict(mode="v05-eb", pad_multiple=8, **PARAMS)
    with v05.Plugin.create(name, max_prompts=256, **create) as plugin:
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


def test_tp2_v05_pg_skips_the_same(kit, engine_loop, tp2_loop, segname):
    """Mode v05-pg (skip 0.75, the batch's fit: schedule rounds) at TP 1
    and TP 2 on the same two batches: a prompt in three is sure to fail
    and its prior says so (-0.98), the others are a fair coin with the
    prior 0. The first batch warms the fit; in the second, past its first
    32 prompts, the sure ones are skipped (k = 0, no sample). Both runs
    make the same decisions, skip the same prompts and write the same
    advantages."""
    items, prompt_of = batch_items(kit, 0)
    later, more = batch_items(kit, 1)
    prompt_of.update(more)
    sure = {u for i, (u, _, _) in enumerate(items + later) if i % 3 == 0}
    batches = [[(u, x, -0.98 if u in sure else 0.0) for u, x, _ in b]
               for b in (items, later)]
    create = dict(mode="v05-pg", pg=dict(skip=0.75), schedule="rounds",
                  pad_multiple=1, eb_cold=16)
    g1, d1, o1, idle1 = rollout(kit, engine_loop, segname, None, prompt_of,
                                batches, sure, **create)
    g2, d2, o2, idle2 = rollout(kit, tp2_loop, segname + "-tp2", None,
                                prompt_of, batches, sure, **create)
    assert idle1 and idle2
    assert o2 == o1, "TP 2 generated other tokens than TP 1"
    assert d2 == d1 and g2 == g1
    skipped = {u for u, (k, _, _, _) in g1.items() if k == 0}
    later_ids = [u for u, _, _ in later]
    assert skipped and skipped <= sure & set(later_ids[32:])
    assert not {u for u, _ in o1} & skipped  # nothing generated for them
    for u in skipped:  # its one decision: the drop
        assert g1[u][3] == pytest.approx(-0.98) and d1[u] == [("drop", ())]
    for u, (k, rw, adv, base) in g1.items():
        assert all(math.isfinite(a) for a in adv) and len(adv) == k
        if k:
            assert adv == pytest.approx(
                [(r - base) / math.sqrt(1 - base * base) for r in rw],
                rel=1e-5)
    first = {u: ws[0][1] for u, ws in d1.items() if ws[0][0] == "sample"}
    assert {len(first[u]) for u, _, _ in items} == {2}  # cold: the preset's
    assert {len(first[u]) for u in later_ids if u in first} <= {1, 2, 4}
