# SPDX-License-Identifier: MIT
"""Ordinary arguments never corrupt memory or kill the process: every count
and index is range-checked before C sees it, zero-copy views are never left
over unmapped memory, a reader's views are read-only, and a release checks
the identity of what it releases."""
import errno
import gc

import numpy as np
import pytest

import v05


def finish(p, w, first, reward=1.0):
    """Push the 4 rewards of `first` (the prompt's submit decision)."""
    uid = first.uid
    for s in range(4):
        w.push(first, s, reward)
    while True:
        assert p.wait_blocking(5.0)
        for d in p.poll():
            if d.uid == uid and d.kind == "final":
                return d


def test_counts_checked_before_c(segname):
    with v05.Plugin.create(segname, max_prompts=4, mode="v05-fixed") as p, \
            v05.RewardWriter.attach(segname) as w:
        with pytest.raises(ValueError):
            p.poll(max_decisions=-1)
        with pytest.raises(OverflowError):
            p.poll(max_decisions=2**32)
        with pytest.raises(ValueError):
            p.support_sample(n=-1)
        with pytest.raises(OverflowError):
            p.support_sample(n=1, seed=2**64)
        with pytest.raises(OverflowError):
            w.push("a", 2**32 + 1, 1.0, gen=1)
        with pytest.raises(ValueError):
            w.push("a", -1, 1.0, gen=1)
        with pytest.raises(OverflowError):
            w.push("a", 0, 1.0, gen=2**32 + 1)
        with pytest.raises(ValueError):
            w.push("a", 0, 1.0, gen=-1)
        with pytest.raises(TypeError, match="gen is required"):
            w.push("a", 0, 1.0)
        with pytest.raises(OverflowError):
            w.push_many(["a"], [2**32 + 1], [1.0], [1])
        with pytest.raises(TypeError, match="gen is required"):
            w.push_many(["a"], [0], [1.0])
        with pytest.raises(ValueError, match="differ in length"):
            w.push_many(["a"], [0], [1.0], [1, 2])
        with pytest.raises(OverflowError):
            p.group(2**32)
        with pytest.raises(OverflowError):
            p.resolve(2**64, True)
        with pytest.raises(TypeError):
            p.poll(max_decisions=1.5)
        assert p.wait_blocking(timeout=1e-3) in (True, False)
        with pytest.raises(OverflowError):
            v05.reward_from_binary(2**32)
        with pytest.raises(OverflowError):
            v05.estimate(0.0, [1.0], k_max=2**32 + 16)
        assert p.poll(max_decisions=0) == []


@pytest.mark.parametrize("field", ["max_prompts", "k_max", "k_init", "k_step",
                                   "lane_capacity", "max_producers",
                                   "pad_multiple", "max_batches",
                                   "stream_deadline_us"])
def test_config_fields_not_truncated(segname, field):
    with pytest.raises(OverflowError):
        v05.Plugin.create(segname, **{field: 2**32 + 16})
    with pytest.raises((ValueError, OverflowError)):
        v05.Plugin.create(segname, **{field: -1})


def test_reader_views_read_only_and_close_refused(segname):
    with v05.Plugin.create(segname, max_prompts=2, mode="v05-fixed") as p, \
            v05.RewardWriter.attach(segname) as w:
        r = v05.Reader.open(segname)
        p.poll()  # the plugin sees the reader
        (first,) = p.submit([("a", 0.0)])
        d = finish(p, w, first)
        g = None
        for _ in range(1000):
            p.poll()
            g = r.next()
            if g is not None:
                break
        assert g is not None
        assert not g.rewards.flags.writeable
        with pytest.raises(ValueError):
            g.rewards[0] = 5.0
        with pytest.raises(ValueError):
            g.advantages.flags.writeable = True
        t_rew, _ = g.torch()
        t_rew[0] = 7.0  # a copy: the segment is not touched
        assert g.rewards[0] == 1.0
        view = g.advantages
        with pytest.raises(v05.V05Error) as e:
            r.close()
        assert e.value.errno == errno.EBUSY
        r.release(g)
        del g, view, t_rew, _
        gc.collect()
        r.close()
        p.release(d)


def test_forced_close_leaves_views_readable(segname):
    p = v05.Plugin.create(segname, max_prompts=1, mode="v05-fixed")
    w = v05.RewardWriter.attach(segname)
    (first,) = p.submit([("a", 0.0)])
    d = finish(p, w, first, 1.0)
    g = p.group(d)
    rew, adv = g.rewards, g.advantages
    t_rew, t_adv = g.torch()
    assert rew[0] == 1.0
    w.close()
    with pytest.raises(v05.V05Error):
        p.close()
    p.close(force=True)
    # Reads do not fault; the memory now reads as zeros.
    assert float(np.sum(rew)) == 0.0 and float(np.sum(adv)) == 0.0
    assert float(t_rew.sum()) == 0.0 and float(t_adv.sum()) == 0.0


def test_release_checks_identity(segname):
    with v05.Plugin.create(segname, max_prompts=1, mode="v05-fixed") as p, \
            v05.RewardWriter.attach(segname) as w:
        (first,) = p.submit([("a", 0.0)])
        old = finish(p, w, first)
        p.release(old)
        (first,) = p.submit([("a", 0.0)])
        new = finish(p, w, first, -1.0)
        assert new.slot == old.slot and new.gen != old.gen
        with pytest.raises(v05.V05Error) as e:
            p.release(old)
        assert e.value.errno == errno.ESTALE
        g = p.group(new)  # still there
        assert g.rewards[0] == -1.0
        del g
        p.release(new)


def test_late_reward_of_an_earlier_instance_rejected(segname):
    """A reward for a uid released and submitted again, pushed after the
    new submit with the old decision's gen, is late: the new instance gets
    only its own."""
    with v05.Plugin.create(segname, max_prompts=1, mode="v05-fixed") as p, \
            v05.RewardWriter.attach(segname) as w:
        (old_first,) = p.submit([("a", 0.0)])
        p.release(finish(p, w, old_first))
        (first,) = p.submit([("a", 0.0)])
        assert first.gen != old_first.gen
        w.push(old_first, 0, -1.0)          # the old instance's, late
        w.push("a", 1, -1.0, gen=old_first.gen)
        p.poll()
        assert p.stats()["rejected_late"] == 2
        d = finish(p, w, first, 1.0)        # its own, all four
        g = p.group(d)
        assert list(g.rewards) == [1.0] * 4
        del g
        p.release(d)
