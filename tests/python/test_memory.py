# SPDX-License-Identifier: MIT
"""What the Python side keeps stays flat over a long run: batch after batch
of fresh uids (finished, cancelled, or refused in part), the plugin's uid
maps, the reward writer's key cache and the value-model prior's texts stay
within bounds that do not depend on how many prompts the run has seen, and
the memory Python allocates does not grow with them."""
import asyncio
import gc
import os
import tracemalloc

import pytest

import v05
from v05.core.names import SUPPORT_GROUPS
from v05.core.prior import ValueModelPrior
from v05.core.writer import KEY_CACHE
from v05.engines.driver import GroupRollout

P, K = 128, 2
BATCHES = 120  # 15,360 prompts, 30x the support buffer
V05_FILES = os.path.join(os.path.dirname(v05.__file__), "*")
WARM = 40      # by then every bounded cache is full (the writer's: 4096 keys)


def sizes(plugin, drv, prior):
    writers = drv._writers
    return {"uids": len(plugin._uids), "released": len(plugin._released),
            "batch_keys": len(plugin._batch_keys),
            "final_keys": len(plugin._final_keys),
            "views": len(plugin._views),
            "writer_keys": max((len(w._keys) for w in writers), default=0),
            "texts": len(prior.texts)}


def test_python_side_stays_flat(segname):
    async def generate(prompt, uid, sample, batch):
        return None

    failing = set()

    def score(uid, sample, out):
        if uid in failing:
            raise ValueError("verifier crashed")
        return 1.0 if (hash(uid) + sample) % 3 else -1.0

    seen, blocks = [], []
    with v05.Plugin.create(segname, mode="grpo", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=2 * P) as plugin:
        prior = ValueModelPrior(plugin, lambda c, l, t: [0.5] * len(t),
                                max_texts=4 * P)
        drv = GroupRollout(plugin, generate, score=score)

        async def main():
            for b in range(BATCHES):
                uids = [f"run-{b}-{i}" for i in range(P)]
                priors = dict(prior.priors((u, f"text of {u}") for u in uids))
                items = [(u, None, priors[u]) for u in uids]
                if b % 10 == 3:  # a failed batch, cancelled in the plugin
                    failing.add(uids[P // 2])
                    with pytest.raises(ValueError, match="verifier crashed"):
                        await drv.run(items)
                    continue
                res = await drv.run(items)
                for r in res.values():
                    r.group = None
                    plugin.release(r.decision)
                if b in (WARM, BATCHES - 1):
                    # What v05's own code allocated and still holds:
                    # asyncio's queued handles and the scoring pool's
                    # futures come and go with the machine's load. What is
                    # held, not garbage waiting for the cycle collector
                    # (when it runs depends on the tests before this one).
                    gc.collect()
                    snap = tracemalloc.take_snapshot().filter_traces(
                        [tracemalloc.Filter(True, V05_FILES)])
                    blocks.append(sum(s.count for s in snap.statistics("filename")))
                seen.append(sizes(plugin, drv, prior))

        tracemalloc.start()
        try:
            asyncio.run(main())
        finally:
            tracemalloc.stop()
        drv.close()
    last = seen[-1]
    assert last["uids"] == last["batch_keys"] == last["final_keys"] == 0
    assert max(s["released"] for s in seen) == SUPPORT_GROUPS
    assert max(s["writer_keys"] for s in seen) <= KEY_CACHE
    assert max(s["texts"] for s in seen) == 4 * P
    # Two buffers (rewards, advantages) per group of the batch at most:
    # the views of released groups are gone.
    assert max(s["views"] for s in seen) <= 2 * P
    # Blocks v05's code holds after WARM batches and after all of them: the
    # same, but for a few in flight (a bounded map's table is resized as
    # it churns, so bytes move up and down; blocks do not). One object
    # leaked per prompt would be 10,240 more blocks here.
    assert blocks[1] - blocks[0] < 500, blocks
