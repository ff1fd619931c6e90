# SPDX-License-Identifier: MIT
"""The thread contract (include/v05/plugin.h): a plugin is used by one
thread at a time. FitExchange running on a trainer thread beside a driver
whose event loop polls the plugin hands each merge to the loop
(Plugin.post_eb_remote): every set_eb_remote runs on the loop's thread,
none beside a poll. Under TSan (meson test 'python-threads' in a
-Db_sanitize=thread build: libv05 instrumented, this test run with the
TSan runtime preloaded) no race is reported; with libv05 built with debug
info a call from a second thread during one of the loop's is refused
with EBUSY."""
import asyncio
import errno
import threading

import pytest

import v05
from v05.core.eb_state import EbState
from v05.engines.driver import GroupRollout

ROUNDS = 400  # enough exchanges that a call beside a poll would happen


async def generate(prompt, uid, sample, batch):
    await asyncio.sleep(0)
    return sample


def score(uid, sample, out):
    return 1.0 if (hash(uid) + sample) % 3 else -1.0


def test_fit_exchange_beside_a_driver(segname, tmp_path):
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdzv",
                            rank=0, world_size=1)
    from v05.trainers.fit_exchange import FitExchange

    loop_thread = threading.get_ident()
    handed_in = []
    done = threading.Event()
    errors = []
    try:
        with v05.Plugin.create(segname, mode="v05-eb", schedule="stream",
                               eb_cold=4, pad_multiple=1,
                               max_prompts=64) as plugin:
            real = plugin.set_eb_remote

            def spy(others):
                handed_in.append(threading.get_ident())
                real(others)

            plugin.set_eb_remote = spy
            ex = FitExchange(plugin)

            def trainer():
                # Exchanges back to back while the loop runs batches.
                try:
                    for _ in range(ROUNDS):
                        assert ex.start()
                        assert ex.wait()
                except BaseException as e:  # raised below, in the test
                    errors.append(e)
                finally:
                    done.set()

            ro = GroupRollout(plugin, generate, score=score, release=True)
            t = threading.Thread(target=trainer)

            async def main():
                t.start()
                batch = 0
                while not done.is_set() or batch < 2:
                    items = [(f"b{batch}-{i}", f"p{i}", 0.4 - 0.05 * i)
                             for i in range(16)]
                    res = await ro.run(items)
                    assert len(res) == 16
                    batch += 1
                return batch

            batches = asyncio.run(main())
            t.join()
            ro.close()
            assert not errors, errors[0]
            assert ex.exchanges == ROUNDS
            plugin.poll()  # hands in the last state posted, if still held
            assert batches >= 2
            assert handed_in, "no exchange was ever handed in"
            assert set(handed_in) == {loop_thread}
    finally:
        dist.destroy_process_group()


def test_post_checks_in_the_posting_thread(segname):
    """A state with a value no fold could make is refused where it is
    posted (ValueError), not later in the loop's poll."""
    with v05.Plugin.create(segname, mode="v05-eb", schedule="stream") as p:
        bad = EbState().fold(0.2, [1.0, -1.0, 1.0, 1.0])
        bad._s.weight = float("nan")
        with pytest.raises(ValueError, match="weight"):
            p.post_eb_remote(bad)
        assert p._posted is None
        good = EbState().fold(0.2, [1.0, -1.0, 1.0, 1.0])
        woke = []
        p.on_post = lambda: woke.append(threading.get_ident())
        p.post_eb_remote(good)
        assert woke == [threading.get_ident()] and p._posted == good
        p.poll()
        assert p._posted is None


def test_second_thread_refused_in_debug_builds(segname):
    """libv05 with debug info (the test builds): a call on the plugin
    from a second thread while the first is inside one is refused."""
    with v05.Plugin.create(segname, mode="grpo", k_init=2, k_max=2) as p:
        d = p.submit([("u", 0.0)])[0]
        out = []

        def waiter():
            # Blocks in v05_wait (the GIL given up) until a reward lands;
            # refused itself while our poll is inside its call: again.
            while True:
                try:
                    out.append(p.wait_blocking(30))
                    return
                except v05.V05Error as e:
                    if e.errno != errno.EBUSY:
                        raise

        t = threading.Thread(target=waiter)
        t.start()
        try:
            # Until the waiter is inside its call, a call of ours goes
            # through; then it is refused.
            for _ in range(1000000):
                try:
                    p.poll()
                except v05.V05Error as e:
                    assert e.errno == errno.EBUSY
                    assert "one thread at a time" in str(e)
                    break
            else:
                pytest.fail("no call was refused while another thread was "
                            "in v05_wait (libv05 built without debug info?)")
        finally:
            with v05.RewardWriter.attach(p.name) as w:
                w.push("u", 0, 1.0, gen=d.gen)
                w.push("u", 1, -1.0, gen=d.gen)
            t.join()
        assert out == [True]
        assert [x.kind for x in p.poll()] == ["final"]
