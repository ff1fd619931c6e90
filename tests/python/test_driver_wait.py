# SPDX-License-Identifier: MIT
"""How the shared driver (v05.engines.driver.GroupRollout) waits. Scoring
in-process, it waits for its own pushes and for the plugin's next stream
deadline, never on the plugin's doorbell; wait_on="doorbell" (and on_output,
where reward workers elsewhere push) waits on the doorbell. Every case
runs with a poll timeout of an hour under a 30 s bound: a push or a
deadline the wait missed would hang the batch, not slow it."""
import asyncio

import pytest

import v05
from v05.engines.driver import GroupRollout

P = 8


async def generate(prompt, uid, sample, batch):
    await asyncio.sleep(0)
    return sample


def score(uid, sample, out):
    return 1.0 if (int(uid[1:]) + sample) % 2 else -1.0


def items(prior=0.0, n=P):
    return [(f"q{i}", "p", prior) for i in range(n)]


def finish(plugin, drv, prior=0.0, n=P):
    async def main():
        return await asyncio.wait_for(drv.run(items(prior, n)), 30)
    res = asyncio.run(main())
    assert sorted(res) == sorted(u for u, _, _ in items(prior, n))
    for r in res.values():
        assert r.group.k >= 4 and not r.dropped
        assert [o for o in r.outputs] == list(range(r.group.k))
        r.group = None
        plugin.release(r.decision)
    drv.close()


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_which_wait(segname, wait):
    """auto with a scorer: no doorbell wait is ever armed (the plugin's
    "waits" counter stays 0) and the batch completes; doorbell: it is
    armed (the first poll comes before any sample ran)."""
    with v05.Plugin.create(segname, mode="v05-eb", eb_cold=1,
                           max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, score=score, poll_timeout=3600,
                           wait_on=wait, score_threads=2)
        assert drv.wait_on == ("scores" if wait == "auto" else "doorbell")
        finish(plugin, drv)
        waits = plugin.stats()["waits"]
        assert (waits == 0) if wait == "auto" else (waits > 0)


def test_on_output_waits_on_the_doorbell(segname):
    """Rewards pushed elsewhere: only the doorbell tells the driver."""
    with v05.Plugin.create(segname, mode="grpo", k_init=4, k_max=4,
                           max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, on_output=lambda *a: None,
                           wait_on="auto")
        assert drv.wait_on == "doorbell"
        drv.close()
    with pytest.raises(ValueError, match="wait_on must be 'auto' or "
                       "'doorbell', not 'spin'"):
        GroupRollout(object(), generate, score=score, wait_on="spin")


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_held_plan_goes_at_its_deadline(segname, wait):
    """Of 4 prompts, those decided "more" are held to pad (pad 32, more
    than their plans add up to) while the last prompt's first wave is
    still out, and that first wave does not end until a second-wave sample
    starts: no push comes, only the stream deadline (200 ms, longer than
    the other prompts take to push) can release the plan. Both waits must
    wake for it (a wait that sleeps to its poll timeout fails the bound)."""
    second = asyncio.Event()
    started = []

    async def gen(prompt, uid, sample, batch):
        if sample >= 4:
            second.set()
            started.append(uid)
        elif uid == "q3":
            await second.wait()
        else:
            await asyncio.sleep(0)
        return sample

    def mixed(uid, sample, out):  # 2 of 4 against a prior of 0.5: more
        return 1.0 if sample % 2 else -1.0

    with v05.Plugin.create(segname, mode="v05-eb", eb_cold=1,
                           pad_multiple=32, stream_deadline_us=200000,
                           max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, gen, score=mixed, poll_timeout=3600,
                           wait_on=wait)
        finish(plugin, drv, prior=0.5, n=4)
        assert started, "no prompt was decided more: the case tests nothing"
        if wait == "auto":
            assert plugin.stats()["waits"] == 0


def test_staged_rewards(segname):
    """RewardWriter.stage checks as push does and holds nothing it
    refuses; publish_staged publishes what fits (16 of 40 in a 16-record
    lane), keeps the rest in order for after a poll, and
    discard_staged forgets what is held."""
    with v05.Plugin.create(segname, mode="grpo", k_init=4, k_max=4,
                           pad_multiple=1, lane_capacity=16,
                           max_prompts=16) as plugin:
        first = plugin.submit([(f"s{i}", 0.0) for i in range(10)])
        w = v05.RewardWriter.attach(segname)
        with pytest.raises(ValueError, match="uid 's0' sample 1 is nan: not finite"):
            w.stage(first[0], 1, float("nan"))
        with pytest.raises(ValueError, match="outside"):
            w.stage(first[0], 1, 1.5)
        with pytest.raises(TypeError, match="the Decision that issued"):
            w.stage("s0", 1, 1.0)
        assert w.staged == 0
        for d in first:
            for s in d.samples:
                w.stage(d, s, 1.0 if s % 2 else -1.0)
        assert w.staged == 40
        assert w.publish_staged() == 24
        finals = []
        while w.staged:
            finals += [d for d in plugin.poll() if d.kind == "final"]
            w.publish_staged()
        finals += [d for d in plugin.poll() if d.kind == "final"]
        assert sorted(d.uid for d in finals) == sorted(d.uid for d in first)
        for d in finals:
            g = plugin.group(d)
            assert list(g.rewards) == [-1.0, 1.0, -1.0, 1.0]
            del g
            plugin.release(d)
        again = plugin.submit([("t0", 0.0)])
        w.stage(again[0], 0, 1.0)
        assert w.discard_staged() == 1 and w.staged == 0
        assert w.publish_staged() == 0
        assert plugin.stats()["rewards_applied"] == 40
        plugin.cancel(again[0].batch)
        w.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_scores_go_in_jobs(segname, threads):
    """Samples that finish together are scored together, not one trip
    through the pool each: the 32 samples here all end in one turn of the
    loop (each generate yields once), and go to scoring as one job once
    that turn is over; every sample is scored exactly once."""
    import collections
    import threading

    lock = threading.Lock()
    scored = collections.Counter()

    def counting(uid, sample, out):
        with lock:
            scored[(uid, sample)] += 1
        return score(uid, sample, out)

    with v05.Plugin.create(segname, mode="grpo", k_init=4, k_max=4,
                           max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, score=counting,
                           poll_timeout=3600, score_threads=threads)
        jobs = []
        many = drv._score_many

        def counted(items):
            jobs.append(len(items))
            return many(items)
        drv._score_many = counted
        finish(plugin, drv)
    assert jobs == [4 * P], jobs
    assert sorted(scored) == sorted((f"q{i}", s) for i in range(P)
                                    for s in range(4))
    assert set(scored.values()) == {1}


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_stall_timeout(segname, wait):
    """stall_timeout: a batch whose rewards never come (reward workers
    that never push) fails with TimeoutError once nothing has run and no
    decision has come for that long, and leaves nothing behind; a batch
    whose samples take longer than it, but run, is not a stall."""
    async def slow(prompt, uid, sample, batch):
        await asyncio.sleep(0.3)  # longer than the stall timeout
        return sample

    with v05.Plugin.create(segname, mode="grpo", k_init=4, k_max=4,
                           max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, on_output=lambda *a: None,
                           stall_timeout=0.2, poll_timeout=0.05)
        with pytest.raises(TimeoutError, match="no decision in 0.2 s"):
            asyncio.run(asyncio.wait_for(drv.run(items()), 30))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_cancelled"] == P
        drv.close()
        drv = GroupRollout(plugin, slow, score=score, stall_timeout=0.2,
                           poll_timeout=0.05, wait_on=wait)
        finish(plugin, drv)
    with pytest.raises(ValueError, match="stall_timeout"):
        GroupRollout(object(), generate, score=score, stall_timeout=0)
