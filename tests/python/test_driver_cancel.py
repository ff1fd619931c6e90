# SPDX-License-Identifier: MIT
"""The shared driver and a "cancel" decision: a group aborted by another
process's abort record (a server's other front end, docs/SERVERS.md)
while its samples run ends with its requests cancelled and a result that
says so; the batch's other groups are not disturbed."""
import asyncio
import threading

import pytest

import v05
from v05.engines.driver import GroupRollout
from v05.core.observer import Observer

KW = dict(k_init=4, k_max=8, pad_multiple=1, max_prompts=16)


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_the_driver_ends_a_group_aborted_by_another_process(segname, wait):
    """GroupRollout with a plugin taking abort records: another producer
    (a server's other front end) aborts one group of the batch while its
    samples run; that group's requests are cancelled, its result says
    cancelled, the other group ends final, and the segment keeps no
    slot."""
    gens, running, cancelled = {}, set(), set()

    async def generate(prompt, uid, sample, b):
        if uid == "b":
            return (uid, sample)
        running.add(sample)
        try:
            await asyncio.Event().wait()  # ends only when cancelled
        except asyncio.CancelledError:
            cancelled.add(sample)
            raise

    def score(uid, sample, out):
        return 1.0

    async def main(plugin):
        drv = GroupRollout(plugin, generate, score=score, release=True,
                           wait_on=wait)
        submit = plugin.submit

        def recording_submit(items):
            ds = submit(items)
            gens.update({d.uid: d.gen for d in ds})
            return ds
        plugin.submit = recording_submit
        run = asyncio.ensure_future(drv.run([("a", "pa", 0.0),
                                             ("b", "pb", 0.0)]))
        while len(running) < 4:
            await asyncio.sleep(0)
        def other_front_end():
            with v05.RewardWriter.attach(segname) as w:
                w.abort("a", gen=gens["a"])
        t = threading.Thread(target=other_front_end)
        t.start()
        # A guard against a hang, not a timing: the run ends once the
        # abort is polled.
        res = await asyncio.wait_for(run, 120)
        t.join()
        drv.close()
        return res

    with v05.Plugin.create(segname, abort_records=True, **KW) as p:
        res = asyncio.run(main(p))
        s = p.stats()
        assert res["a"].cancelled and res["a"].group is None
        assert res["a"].decision.kind == "cancel"
        assert sorted(res["a"].decision.samples) == [0, 1, 2, 3]
        assert cancelled == {0, 1, 2, 3}
        assert not res["b"].cancelled and res["b"].group.k >= 4
        assert s["aborts_applied"] == 1
        with Observer(segname) as o:
            assert o.prompt("a") is None and o.prompt("b") is None
        # Every slot is free again: a full table's worth submits.
        ds = p.submit([(f"n{i}", 0.0) for i in range(KW["max_prompts"])])
        assert len(ds) == KW["max_prompts"]
