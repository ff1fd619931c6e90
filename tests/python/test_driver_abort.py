# SPDX-License-Identifier: MIT
"""v05-eb's early start through the shared driver (no engine: a generate
function of its own whose early samples run until cancelled): an "abort"
decision cancels exactly the early samples the first wave made useless,
the group finalizes on its first wave, and nothing is left behind."""
import asyncio
import random
import zlib

import pytest

import v05
from v05.engines.driver import GroupRollout

N = 48


def batch(step, rng):
    out = []
    for i in range(N):
        # A value model that is often wrong: second waves, early starts.
        mu = rng.uniform(-1, 1)
        prior = rng.uniform(-1, 1) if rng.random() < 0.4 else \
            max(-1.0, min(1.0, mu + rng.gauss(0, 0.3)))
        out.append((f"s{step}-q{i}", mu, prior))
    return out


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_abort_cancels_the_early_samples(segname, wait):
    rng = random.Random(3)
    started, cancelled = set(), set()

    async def generate(prompt, uid, sample, b):
        started.add((uid, sample))
        if sample >= 4:
            # An early sample runs long: it ends only when its first wave
            # asks for it (released below) or when it is aborted.
            try:
                await release[uid].wait()
            except asyncio.CancelledError:
                cancelled.add((uid, sample))
                raise
        return (uid, sample)

    def score(uid, sample, out):
        # A draw keyed by the sample, not by the order the scoring thread
        # happens to take them in (rng is for the batches only).
        u = zlib.crc32(f"{uid}/{sample}".encode()) / 2**32
        return 1.0 if u < (1 + truth[uid]) / 2 else -1.0

    truth, release = {}, {}

    pushed, aborted_uids = set(), set()

    async def main(plugin):
        drv = GroupRollout(plugin, generate, score=score, release=True,
                           wait_on=wait)
        # The driver's hand-off: rewards staged on the loop are published
        # right before the next poll (wait "local"); a pool thread's push
        # is in the lane when it returns (doorbell).
        if drv.wait_on == "scores":
            stage = drv._stage

            def recording_stage(scored):
                stage(scored)
                pushed.update((d.uid, s) for d, s, _ in scored)
            drv._stage = recording_stage
        else:
            push = drv._push

            def recording_push(d, sample, reward):
                push(d, sample, reward)
                pushed.add((d.uid, sample))
            drv._push = recording_push
        poll = plugin.poll

        def watching_poll(*a):
            # Rewards pushed before this poll are applied by it: a first
            # wave complete by then is decided in it, and an abort for it
            # comes out of it. Its wanted early samples may finish now.
            before = set(pushed)
            out = poll(*a)
            aborted_uids.update(d.uid for d in out if d.kind == "abort")
            for uid in release:
                if uid not in aborted_uids and \
                        all((uid, s) in before for s in range(4)):
                    release[uid].set()
            return out
        plugin.poll = watching_poll
        res = {}
        for step in range(2):
            items = batch(step, rng)
            for uid, mu, _ in items:
                truth[uid] = mu
                release[uid] = asyncio.Event()
            res.update(await drv.run([(u, "p", v) for u, _, v in items]))
        drv.close()
        return res, drv.aborted

    with v05.Plugin.create(segname, mode="v05-eb", eb_cold=8, eb_early=0.2,
                           pad_multiple=1, max_prompts=64) as plugin:
        res, aborted = asyncio.run(main(plugin))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    # The second batch started early (warm at submit); some were aborted.
    early = {u for u, s in started if s >= 4 and u.startswith("s1-")}
    assert early and cancelled and aborted == len(cancelled)
    for uid, s in cancelled:
        assert res[uid].group.k == 4, uid   # finalized on its first wave
    assert all(r.group.k >= 4 for r in res.values())
