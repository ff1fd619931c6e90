# SPDX-License-Identifier: MIT
"""The Python API over libv05: lifecycle, submit/poll with a RewardWriter,
errors as exceptions carrying the C errno, counters, support buffer."""
import errno
import json
import subprocess

import numpy as np
import pytest

import v05


def drive(plugin, writer, decisions, reward=lambda uid, s: 1.0):
    """Answer every sample decision; return final decisions by uid."""
    finals = {}
    pending = list(decisions)
    n = len({d.uid for d in decisions})
    while len(finals) < n:
        for d in pending:
            if d.kind == "sample":
                for s in d.samples:
                    writer.push(d, s, reward(d.uid, s))
            elif d.kind in ("final", "drop"):
                finals[d.uid] = d
        if len(finals) < n:
            assert plugin.wait_blocking(5.0), "no progress for 5 s"
            pending = plugin.poll()
    return finals


def test_submit_poll_release(segname):
    with v05.Plugin.create(segname, max_prompts=64, max_producers=4,
                           mode="v05") as p:
        ds = p.submit([("a", 0.8), (b"b", -0.8), ("c", 0.0)])
        assert [d.kind for d in ds] == ["sample"] * 3
        assert all(d.samples == [0, 1, 2, 3] for d in ds)
        assert ds[1].uid == b"b"  # uid comes back as given
        with v05.RewardWriter.attach(segname) as w:
            finals = drive(p, w, ds)
        assert finals["a"].k == 4 and finals["a"].baseline == pytest.approx(0.8)
        assert finals[b"b"].k == 16  # the prior was wrong: more, to k_max
        g = p.group(finals["a"])
        assert g.uid == "a" and g.k == 4 and g.action == "stop"
        assert np.all(g.rewards == 1.0)
        ref = v05.estimate(0.8, [1, 1, 1, 1])
        assert np.array_equal(g.advantages,
                              np.array(ref["advantages"], dtype=np.float32))
        del g
        for d in finals.values():
            p.release(d)
        st = p.stats()
        # Every applied reward is in exactly one final group.
        assert st["rewards_applied"] == sum(k * n for k, n in st["k_hist"].items())
        assert st["prompts_final"] == 0 and st["releases"] == 3
        assert sum(st["k_hist"].values()) == 3


def test_polled_decisions_are_whole(segname):
    """poll builds its Decisions without __init__ (the hot path): each must
    carry every field and equal the one __init__ makes, stay frozen, and
    list its samples in order."""
    import dataclasses

    from v05.core.decision import _samples
    with v05.Plugin.create(segname, max_prompts=8, mode="v05-fixed",
                           k_init=4, k_max=4) as p:
        ds = p.submit([("a", 0.1)])
        with v05.RewardWriter.attach(segname) as w:
            finals = drive(p, w, ds)
        for d in ds + list(finals.values()):
            assert set(vars(d)) == {f.name for f in dataclasses.fields(d)}
            assert d == v05.Decision(**vars(d))
            with pytest.raises(dataclasses.FrozenInstanceError):
                d.k = 3
        p.release(finals["a"])
    assert _samples(0) == []
    assert _samples(1 << 63 | 1 << 5 | 1) == [0, 5, 63]
    assert _samples(2**64 - 1) == list(range(64))
    # Masks are remembered; the lists handed out are each caller's own.
    a, b = _samples(0b1011), _samples(0b1011)
    a.append(9)
    assert b == [0, 1, 3] and _samples(0b1011) == [0, 1, 3]


def test_decision_rows_read_what_ctypes_reads(segname):
    """poll reads the C decisions as struct rows: every field must be the
    one the ctypes mirror of struct v05_decision reads, for every kind."""
    from v05.core import _lib
    from v05.core.names import KINDS, REJECT_REASONS
    (range_flag,) = [f for f, why in REJECT_REASONS.items()
                     if why == "outside [-1, 1]"]
    with v05.Plugin.create(segname, max_prompts=8) as p:
        p._uids[77] = "u"
        buf = (_lib.Decision_ * len(KINDS))()
        for i, kind in enumerate(KINDS):
            buf[i].key, buf[i].samples = 77, 0b10110 | 1 << 40
            buf[i].batch, buf[i].latency_ns = 2**40 + i, 123456789 + i
            buf[i].baseline, buf[i].kind = -0.25 - i, kind
            buf[i].slot, buf[i].k, buf[i].gen = 3 + i, 4 + i, 2**31 + i
            buf[i].flags = 0b111 if KINDS[kind] != "reject" else range_flag
        got = p._decisions(buf, len(KINDS))
        for c, d in zip(buf, got):
            name = KINDS[c.kind]
            assert d.kind == name and d.key == c.key and d.slot == c.slot
            assert d.batch == c.batch and d.latency_ns == c.latency_ns
            assert d.k == c.k and d.gen == c.gen
            assert d.uid == (None if name == "barrier" else "u")
            bits = [i for i in range(64) if c.samples >> i & 1]
            assert d.samples == (bits if name in ("sample", "abort", "reject",
                                                  "cancel")
                                 else [])
            assert d.batch_size == (c.samples if name == "barrier" else 0)
            if name == "reject":
                assert (d.baseline, d.value) == (0.0, c.baseline)
                assert d.reason == "outside [-1, 1]"
                assert not (d.padded or d.halted or d.recovered)
            else:
                assert (d.baseline, d.value, d.reason) == (c.baseline, 0.0, "")
                assert d.padded and d.halted and d.recovered


def test_submit_rejections(segname):
    with v05.Plugin.create(segname, max_prompts=4) as p:
        p.submit([("x", 0.1)])
        # A prior that is not a number in [-1, 1]: the whole call is
        # refused, nothing submitted.
        with pytest.raises(ValueError, match="the prior of uid 'z' is nan"):
            p.submit([("x", 0.2), ("y", 0.3), ("z", float("nan"))])
        assert p.stats()["prompts_submitted"] == 1
        # So is a uid that is not 1 to 128 bytes of a str or bytes.
        with pytest.raises(ValueError, match="uid '' is 0 bytes"):
            p.submit([("y", 0.3), ("", 0.3)])
        with pytest.raises(ValueError, match="is 129 bytes; a uid has 1 to 128"):
            p.submit([("y", 0.3), ("u" * 129, 0.3)])
        with pytest.raises(TypeError, match="uid 7 is of type int"):
            p.submit([("y", 0.3), (7, 0.3)])
        assert p.stats()["prompts_submitted"] == 1
        # What the plugin refuses (an active uid) fails alone.
        with pytest.raises(v05.SubmitError) as e:
            p.submit([("x", 0.2), ("y", 0.3)])
        assert e.value.errno == errno.EEXIST
        assert e.value.rejected == {"x": errno.EEXIST}
        assert "uid 'x': already active" in str(e.value)
        assert [d.uid for d in e.value.decisions] == ["y"]
        ds = p.submit([("x", 0.0), ("w", 0.0)], on_error="skip")
        assert [d.uid for d in ds] == ["w"]
        assert p.last_rejected == {"x": errno.EEXIST}


def test_errors_carry_errno(segname):
    with pytest.raises(v05.V05Error) as e:
        v05.Plugin.create(segname, cost=1.5)
    assert e.value.errno == errno.EINVAL
    assert "cost" in str(e.value)
    with pytest.raises(v05.V05Error) as e:
        v05.Plugin.create("bad/name")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(v05.V05Error) as e:
        v05.Plugin.attach("no-such-segment-here")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(ValueError):
        v05.Plugin.create(segname, mode="ppo")
    with pytest.raises(v05.V05Error) as e:
        v05.RewardWriter.attach("no-such-segment-here")
    assert e.value.errno == errno.ENOENT
    with v05.Plugin.create(segname) as p:
        with pytest.raises(v05.V05Error) as e:
            v05.Plugin.attach(segname)
        assert e.value.errno == errno.EBUSY
        with pytest.raises(TypeError):
            p.release(7)  # a bare slot number cannot be checked


def test_scales_and_estimate(v05ctl):
    assert v05.prior_from_p(0.9) == pytest.approx(0.8)
    assert v05.reward_from_binary(1) == 1.0
    assert v05.reward_from_binary(False) == -1.0
    with pytest.raises(v05.V05Error):
        v05.prior_from_p(1.2)
    with pytest.raises(TypeError):
        v05.reward_from_binary(0.5)
    py = v05.estimate(-0.8, [1, 1, 1, 1])
    out = subprocess.run([v05ctl, "estimate", "--prior", "-0.8", "--rewards",
                          "1,1,1,1"], capture_output=True, text=True, check=True)
    cli = json.loads(out.stdout)
    for key in ("k", "mean", "delta2", "weight", "baseline", "sigma",
                "k_target", "action", "advantages"):
        assert py[key] == cli[key], key


def test_close_refuses_live_views(segname):
    p = v05.Plugin.create(segname, max_prompts=8, mode="v05-fixed")
    ds = p.submit([("a", 0.0)])
    with v05.RewardWriter.attach(segname) as w:
        finals = drive(p, w, ds)
    g = p.group(finals["a"])
    view = g.advantages
    del g
    with pytest.raises(v05.V05Error) as e:
        p.close()
    assert e.value.errno == errno.EBUSY
    del view
    p.close()


def test_attach_recover(segname):
    p = v05.Plugin.create(segname, max_prompts=8, pad_multiple=1, mode="v05")
    ds = p.submit([("a", 0.8), ("b", 0.8)])
    with v05.RewardWriter.attach(segname) as w:
        assert [d.uid for d in ds] == ["a", "b"]
        for s in ds[0].samples:
            w.push("a", s, 1.0, gen=ds[0].gen)
        w.push(ds[1], 0, 1.0)
    assert p.wait_blocking(5.0)
    assert [d.kind for d in p.poll()] == ["final"]
    p.close(unlink=False)
    q = v05.Plugin.attach(segname)
    rec = {(d.kind, d.uid): d for d in q.recover()}
    assert rec[("final", "a")].recovered
    assert rec[("sample", "b")].samples == [1, 2, 3]
    assert q.recover() == []  # the set is handed out once
    q.close()


def test_support_sample(segname):
    with v05.Plugin.create(segname, max_prompts=64, mode="v05-fixed") as p:
        ds = p.submit([(f"s{i}", 0.0) for i in range(40)])
        with v05.RewardWriter.attach(segname) as w:
            finals = drive(p, w, ds, lambda uid, s: 1.0 if s % 2 else -1.0)
        for d in finals.values():
            p.release(d)
        sample = p.support_sample(256, seed=3)
        assert len(sample) == 40
        assert sample == p.support_sample(256, seed=3)
        assert {uid for uid, *_ in sample} == {f"s{i}" for i in range(40)}
        assert all(mean == 0.0 and k == 4 for _, _, mean, k in sample)
        assert len(p.support_sample(10, seed=1)) == 10


def test_uid_memory_bounded(segname):
    """What the bindings remember per prompt does not grow with the run:
    a released prompt's uid leaves the live map (kept, bounded, for
    support_sample), and a prior's texts keep the most recent."""
    from v05.core.lru import LruMap
    from v05.core.prior import ValueModelPrior
    with v05.Plugin.create(segname, max_prompts=4, mode="v05-fixed",
                           k_init=2, k_max=2, pad_multiple=1) as p:
        p._released.cap = 8
        with v05.RewardWriter.attach(segname) as w:
            for i in range(40):
                (d,) = p.submit([(f"u{i}", 0.0)])
                w.push(d, 0, 1.0)
                w.push(d, 1, 1.0)
                assert p.wait_blocking(5.0)
                (f,) = p.poll()
                assert f.kind == "final" and f.uid == f"u{i}"
                p.release(f)
        assert len(p._uids) == 0 and len(p._released) == 8
        # Older groups in the support buffer come back without a uid.
        got = {u for u, *_ in p.support_sample(40)}
        assert got - {None} <= {f"u{i}" for i in range(32, 40)}
        prior = ValueModelPrior(p, lambda *a: [], max_texts=5)
        for i in range(20):
            prior.remember(f"t{i}", "text")
        assert len(prior.texts) == 5 and prior.texts.get(v05.key_of("t19")) == "text"
    m = LruMap(2)
    m[1] = "a"; m[2] = "b"; m[1] = "a"; m[3] = "c"
    assert m.get(2) is None and m.get(1) == "a" and m.get(3) == "c"


def test_producer_broker_and_file_mode(segname):
    """file_mode may let others read the segment, never write it; the
    broker flag is accepted, and the segment's lanes and doorbell are files
    of their own, 0600, in a side directory only its owner can write (0711
    with a broker: others may search it, for the socket), removed with
    it."""
    import os
    import stat

    with pytest.raises(v05.V05Error) as e:
        v05.Plugin.create(segname, file_mode=0o666)
    assert e.value.errno == errno.EINVAL
    with v05.Plugin.create(segname, max_producers=2, file_mode=0o644,
                           producer_broker=True,
                           broker_allow_uids=[4242]) as p:
        base = os.path.join(os.environ.get("V05_SHM_DIR", "/dev/shm"),
                            "v05-" + segname)
        assert stat.S_IMODE(os.stat(base).st_mode) == 0o644
        assert stat.S_IMODE(os.stat(base + ":side").st_mode) == 0o711
        for f in (":side/lane.0", ":side/lane.1", ":side/bell"):
            assert stat.S_IMODE(os.stat(base + f).st_mode) == 0o600
        ds = p.submit([("x", 0.5)])
        with v05.RewardWriter.attach(segname, any_uid=True) as w:
            finals = drive(p, w, ds)
        assert "x" in finals
        p.close(unlink=True)
    assert not any(os.path.exists(base + f) for f in ("", ":side"))


@pytest.mark.parametrize("bad, exc, words", [
    (float("nan"), ValueError, "is nan: not finite"),
    (float("inf"), ValueError, "is inf: not finite"),
    (1.5, ValueError, "is 1.5: outside [-1, 1]"),
    (-1.0000001, ValueError, "is -1.0000001: outside [-1, 1]"),
    (True, TypeError, "is True (bool), not a number"),
    ("0.5", TypeError, "is '0.5' (str), not a number"),
    (None, TypeError, "is None (NoneType), not a number"),
])
def test_push_refuses_bad_rewards_before_the_lane(segname, bad, exc, words):
    """A reward that is not a finite number in [-1, 1] is refused where it
    enters, with the segment, uid, sample and value named; nothing reaches
    the lane (push_many: not even the good ones beside it)."""
    with v05.Plugin.create(segname, max_prompts=4, mode="grpo", k_init=2,
                           k_max=2) as p:
        (d,) = p.submit([("q", 0.0)])
        with v05.RewardWriter.attach(segname) as w:
            with pytest.raises(exc) as e:
                w.push(d, 0, bad)
            msg = str(e.value)
            assert f"push to segment {segname}: the reward of uid 'q' sample 0 " in msg
            assert words in msg and "[-1, 1]" in msg
            with pytest.raises(exc):
                w.push_many([d, d], [0, 1], [0.5, bad])
            assert p.poll() == []
            st = p.stats()
            assert st["rewards_applied"] == 0
            assert st["rejected_nonfinite"] == st["rejected_range"] == 0
            # Valid ones still go through.
            w.push_many([d, d], [0, 1], [1.0, -1.0])
            (f,) = p.poll()
            assert f.kind == "final"
            p.release(f)


def _killed_owner(segname, script):
    """Run script (Python, with v05 imported and NAME the segment's name)
    in another process that then dies without closing anything."""
    import os
    import subprocess
    import sys

    code = ("import os, sys; sys.path.insert(0, %r); import v05; NAME = %r\n"
            % (os.path.join(os.path.dirname(__file__), "..", "..",
                            "engine-hooks"), segname)) + script + \
        "\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_create_over_a_dead_owners_segment(segname):
    """A run killed with its segment left: the next create takes it over by
    default (the groups kept), replaces it when asked, or raises with the
    remedies, the first of which works; a live owner's segment is never
    taken; a config that differs from the kept one is refused."""
    import os

    _killed_owner(segname, "p = v05.Plugin.create(NAME, max_prompts=8)\n"
                  "p.submit([('a', 0.0), ('b', 0.5)])")
    with pytest.raises(FileExistsError) as e:
        v05.Plugin.create(segname, max_prompts=8, on_stale="raise")
    msg = str(e.value)
    assert f"create segment {segname}: it already exists and its owner pid" in msg
    assert "is gone" in msg and "v05ctl reclaim" in msg
    # Its first remedy: Plugin.create(name, ...) takes it over.
    assert "Plugin.create(%r, ...) takes it over" % segname in msg
    with pytest.raises(ValueError, match="max_prompts: the segment has 8"):
        v05.Plugin.create(segname, max_prompts=16)
    with v05.Plugin.create(segname, max_prompts=8) as p:
        assert p.taken_over
        got = {d.uid for d in p.recover()}
        assert got == {"a", "b"}
        assert p.stats()["prompts_open"] == 2
        with pytest.raises(FileExistsError) as e:
            v05.Plugin.create(segname, max_prompts=8)
        assert f"its owner, pid {os.getpid()}, is alive" in str(e.value)
        assert p.stats()["prompts_open"] == 2  # untouched
        p.close(unlink=False)
    # Closed without removing it: on_stale="remove" replaces it (and the
    # older reclaim=True says the same).
    with pytest.raises(FileExistsError, match="closed without being removed"):
        v05.Plugin.create(segname, max_prompts=8, reclaim=False)
    with v05.Plugin.create(segname, max_prompts=16, on_stale="remove") as p:
        assert not p.taken_over
        assert p.stats()["prompts_open"] == 0
        p.close(unlink=False)
    v05.Plugin.create(segname, max_prompts=8, reclaim=True).close()
    with pytest.raises(ValueError, match="on_stale"):
        v05.Plugin.create(segname, on_stale="keep")


def test_takeover_keeps_every_group(segname):
    """An owner with 64 prompts (16 final, 48 open, 33 of them with some
    of their rewards) is killed: create takes its segment over and the 64
    come back from recover(), the open ones with exactly the samples that
    lack a reward."""
    script = """
p = v05.Plugin.create(NAME, max_prompts=64, mode="v05-fixed", k_init=4,
                      k_max=4, pad_multiple=1, max_producers=2)
ds = p.submit([(f"u{i}", 0.0) for i in range(64)])
with v05.RewardWriter.attach(NAME) as w:
    for d in ds[:16]:
        for s in d.samples:
            w.push(d, s, 1.0)
    for d in ds[16:49]:
        w.push(d, d.samples[0], 1.0)
finals = [x for x in p.poll() if x.kind == "final"]
assert len(finals) == 16, len(finals)
"""
    _killed_owner(segname, script)
    with v05.Plugin.create(segname, max_prompts=64, mode="v05-fixed",
                           k_init=4, k_max=4, pad_multiple=1,
                           max_producers=2) as p:
        assert p.taken_over
        rec = p.recover()
        kinds = {}
        for d in rec:
            kinds.setdefault(d.kind, []).append(d)
        assert len(kinds["final"]) == 16
        assert len(kinds["sample"]) == 48
        partial = [d for d in kinds["sample"] if len(d.samples) == 3]
        assert len(partial) == 33
        assert all(len(d.samples) == 4 for d in kinds["sample"]
                   if d not in partial)


def test_create_clears_what_is_left_of_a_removed_segment(segname, v05ctl):
    """`rm` of the segment file alone leaves its side files: create, plain,
    clears them and makes the segment; v05.unlink and v05.reclaim clear
    them without an error; v05ctl lists and removes them."""
    import json
    import os
    import subprocess

    base = os.path.join(os.environ.get("V05_SHM_DIR", "/dev/shm"),
                        "v05-" + segname)

    def leave():
        v05.Plugin.create(segname, max_prompts=8).close(unlink=False)
        os.unlink(base)
        assert os.path.isdir(base + ":side")

    leave()
    with pytest.raises(FileExistsError) as e:
        v05.Plugin.create(segname, max_prompts=8, on_stale="raise")
    assert "side files are left" in str(e.value)
    with v05.Plugin.create(segname, max_prompts=8) as p:
        assert not p.taken_over
    assert not os.path.exists(base + ":side")
    leave()
    v05.unlink(segname)  # no error: what was left is gone
    assert not os.path.exists(base + ":side")
    with pytest.raises(FileNotFoundError):
        v05.unlink(segname)
    leave()
    v05.reclaim(segname)
    assert not os.path.exists(base + ":side")
    leave()
    out = subprocess.run([v05ctl, "ls", "--stale", "--json"], check=True,
                         capture_output=True, text=True).stdout
    rows = [json.loads(r) for r in out.splitlines()]
    assert {"name": segname, "owner": "gone", "leftover": True} in rows
    out = subprocess.run([v05ctl, "reclaim", segname], check=True,
                         capture_output=True, text=True).stdout
    assert f"removed {segname}" in out
    assert not os.path.exists(base + ":side")
    leave()
    out = subprocess.run([v05ctl, "reclaim", "--stale"], check=True,
                         capture_output=True, text=True).stdout
    assert f"removed {segname} (what was left of it" in out
    assert not os.path.exists(base + ":side")
