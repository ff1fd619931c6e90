# SPDX-License-Identifier: MIT
"""await plugin.wait(): the event loop sleeps on the plugin's fd (io_uring
futex wait or the fallback thread's eventfd) and wakes when a reward worker
in another process pushes."""
import asyncio
import multiprocessing as mp

import pytest

import v05


def pusher(name, go, uid, gen):
    go.wait(30)
    with v05.RewardWriter.attach(name) as w:
        for s in range(4):
            w.push(uid, s, 1.0, gen=gen)


@pytest.mark.parametrize("wait", ["auto", "thread"])
def test_wait_wakes_on_reward(segname, wait):
    async def main():
        with v05.Plugin.create(segname, max_prompts=8, wait=wait) as p:
            if wait == "thread":
                assert p.wait_path == "thread"
            else:  # io_uring where the kernel allows it
                assert p.wait_path in ("io_uring", "thread"), p.wait_reason
            (first,) = p.submit([("q", 0.8)])
            ctx = mp.get_context("fork")
            go = ctx.Event()
            proc = ctx.Process(target=pusher, args=(segname, go, "q", first.gen))
            proc.start()
            # Nothing yet: a short wait times out.
            assert await p.wait(0.05) is False
            go.set()
            decisions = []
            while not decisions:
                assert await p.wait(10.0)
                decisions = p.poll()
            proc.join(10)
            assert proc.exitcode == 0
            assert decisions[0].kind == "final" and decisions[0].uid == "q"
    asyncio.run(main())
