# SPDX-License-Identifier: MIT
"""Who may push rewards (docs/SHM.md, "The broker", "Cutting a lane off"):
a broker needs an allow-list; a user not on it gets a PermissionError
naming its uid and the way in, and the owner sees the refusal; a producer
whose records are mostly rejected is cut off, its next push raises
ConnectionAbortedError naming the segment, and the owner's stats say why.
Children are forked and driven over pipes: nothing sleeps."""

import errno
import json
import os
import subprocess

import pytest

import v05
from v05.core.observer import Observer


def _child(fn):
    """Run fn() in a forked child; returns (pid, read end) of a pipe on
    which the child writes fn's result as JSON."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
        except BaseException as e:  # report anything, exit anyway
            out = {"unexpected": repr(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    return pid, r


def _result(pid, r):
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, st = os.waitpid(pid, 0)
    assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    return json.loads(data)


def test_broker_needs_an_allow_list(segname):
    with pytest.raises(ValueError, match="broker_allow_uids or broker_allow_gids"):
        v05.Plugin.create(segname, producer_broker=True)
    with pytest.raises(ValueError, match="without producer_broker"):
        v05.Plugin.create(segname, broker_allow_uids=[1000])
    with pytest.raises(ValueError, match="no such name"):
        v05.Plugin.create(segname, producer_broker=True,
                          broker_allow_uids=["no-such-user-v05"])
    with pytest.raises(ValueError, match="at most"):
        v05.Plugin.create(segname, producer_broker=True,
                          broker_allow_gids=list(range(17)))
    with pytest.raises((ValueError, OverflowError)):
        v05.Plugin.create(segname, producer_broker=True, broker_allow_uids=[-1])
    with pytest.raises(TypeError):
        v05.Plugin.create(segname, producer_broker=True, broker_allow_uids=1000)
    with pytest.raises(ValueError, match="lane_cut_fraction"):
        v05.Plugin.create(segname, lane_cut_fraction=1.5)
    # Names are resolved; the list is what the segment stores.
    with v05.Plugin.create(segname, producer_broker=True,
                           broker_allow_uids=[1000, "root"],
                           broker_allow_gids=["root"]) as p:
        with Observer(segname) as o:
            info = o.info()
        assert info["broker"] is True
        assert info["broker_uids"] == [1000, 0]
        assert info["broker_gids"] == [0]
        assert p.stats()["broker_refused"] == 0


LISTED, STRANGER, OWNER = 4242, 4545, 4343  # no passwd entry needed


def _as_user(uid, name, push):
    """fn for _child: become uid (its own gid, no groups), then ask segment
    `name`'s broker for a lane and push `push`'s rewards."""
    def run():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        try:
            w = v05.RewardWriter.attach(name, any_uid=True)
        except PermissionError as e:
            return {"refused": str(e), "errno": e.errno}
        with w:
            lane = w.lane
            for d in push:
                for s in d["samples"]:
                    w.push(d["uid"], s, 1.0, gen=d["gen"])
        return {"lane": lane}
    return run


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="becomes other users: needs root (CI runs as root)")


@needs_root
def test_unlisted_user_refused_listed_admitted(segname):
    with v05.Plugin.create(segname, max_prompts=4, max_producers=2,
                           producer_broker=True,
                           broker_allow_uids=[LISTED]) as p:
        got = _result(*_child(_as_user(STRANGER, segname, [])))
        assert got.get("errno") == errno.EPERM, got
        msg = got["refused"]
        assert f"uid {STRANGER} " in msg
        assert segname in msg and "broker_allow_uids" in msg
        st = p.stats()
        assert st["broker_refused"] == 1
        assert st["broker_refused_last"] == {"uid": STRANGER, "gid": STRANGER}
        with Observer(segname) as o:
            assert all(x["owner_pid"] == 0 for x in o.lanes())
        (d,) = p.submit([("job", 0.0)])
        job = [{"uid": d.uid, "gen": d.gen, "samples": d.samples}]
        got = _result(*_child(_as_user(LISTED, segname, job)))
        assert "lane" in got, got
        p.poll()
        st = p.stats()
        assert st["rewards_applied"] == len(d.samples)
        assert st["broker_refused"] == 1


@needs_root
def test_overflow_ids_only_when_asked(segname):
    """nobody (65534 here) is the kernel's overflow uid, what every
    unmapped user of another user namespace looks like: listing it needs
    broker_overflow_ids=True, and without it such a peer is refused."""
    nobody = 65534
    with pytest.raises(ValueError, match="broker_overflow_ids=True"):
        v05.Plugin.create(segname, producer_broker=True,
                          broker_allow_uids=[nobody])
    with pytest.raises(ValueError, match="broker_overflow_ids=True"):
        v05.Plugin.create(segname, producer_broker=True,
                          broker_allow_gids=[nobody])
    with v05.Plugin.create(segname, max_prompts=4, max_producers=2,
                           producer_broker=True,
                           broker_allow_uids=[LISTED]) as p:
        got = _result(*_child(_as_user(nobody, segname, [])))
        assert got.get("errno") == errno.EPERM, got
        assert "overflow" in got["refused"]
    with v05.Plugin.create(segname + "o", max_prompts=4, max_producers=2,
                           producer_broker=True, broker_allow_uids=[nobody],
                           broker_overflow_ids=True) as p:
        (d,) = p.submit([("job", 0.0)])
        job = [{"uid": d.uid, "gen": d.gen, "samples": d.samples}]
        got = _result(*_child(_as_user(nobody, segname + "o", job)))
        assert "lane" in got, got
        p.poll()
        assert p.stats()["rewards_applied"] == len(d.samples)


@needs_root
def test_unprivileged_owner(segname):
    """The owner itself an unprivileged user: a stranger is refused and
    counted, the listed user's rewards are applied."""
    go_r, go_w = os.pipe()

    def owner():
        os.setgroups([])
        os.setgid(OWNER)
        os.setuid(OWNER)
        with v05.Plugin.create(segname, max_prompts=4, max_producers=2,
                               producer_broker=True,
                               broker_allow_uids=[LISTED]) as p:
            (d,) = p.submit([("job", 0.0)])
            os.write(ready_w, json.dumps({"uid": d.uid, "gen": d.gen,
                                          "samples": d.samples}).encode())
            os.read(go_r, 1)
            p.poll()
            st = p.stats()
            return {"refused": st["broker_refused"],
                    "applied": st["rewards_applied"]}

    ready_r, ready_w = os.pipe()
    opid, orr = _child(owner)
    job = [json.loads(os.read(ready_r, 65536))]
    got = _result(*_child(_as_user(STRANGER, segname, [])))
    assert got.get("errno") == errno.EPERM, got
    got = _result(*_child(_as_user(LISTED, segname, job)))
    assert "lane" in got, got
    os.write(go_w, b"1")
    st = _result(opid, orr)
    assert st == {"refused": 1, "applied": len(job[0]["samples"])}, st
    for x in (go_r, go_w, ready_r, ready_w):
        os.close(x)


def test_mostly_rejected_producer_cut_off(segname, v05ctl):
    """A producer pushing wrong gens is cut off after lane_cut_records of
    them: its next push raises ConnectionAbortedError naming the segment;
    stats() and `v05ctl stat` say which lane and why; the owner's own
    rewards are applied as before."""
    with v05.Plugin.create(segname, mode="v05-fixed", k_init=4, k_max=4,
                           max_prompts=8, max_producers=3, lane_capacity=256,
                           lane_cut_records=64) as p:
        ds = p.submit([(f"u{i}", 0.0) for i in range(8)])
        bad = [(d.uid, s, d.gen ^ 0x5A5A5A5A) for d in ds for s in d.samples]
        bad = (bad * 4)[:100]
        go_r, go_w = os.pipe()
        pushed_r, pushed_w = os.pipe()

        def hostile():
            w = v05.RewardWriter.attach(segname)
            w.push_many([u for u, _, _ in bad], [s for _, s, _ in bad],
                        [1.0] * len(bad), gens=[g for _, _, g in bad])
            os.write(pushed_w, b"1")
            os.read(go_r, 1)  # the owner has polled
            try:
                w.push(bad[0][0], bad[0][1], 1.0, gen=bad[0][2])
            except ConnectionAbortedError as e:
                w.close()
                return {"aborted": str(e)}
            return {"pushed": True}

        pid, r = _child(hostile)
        assert os.read(pushed_r, 1) == b"1"
        p.poll()
        st = p.stats()
        assert st["lanes_cut_off"] == 1
        assert st["rejected_late"] == 64 and st["rewards_applied"] == 0
        (cut,) = st["cut_lanes"]
        assert cut["cut"] and cut["cut_records"] == 64 and cut["cut_rejected"] == 64
        assert "rejected" in cut["reason"] and str(pid) in cut["reason"]
        out = subprocess.run([v05ctl, "stat", segname], capture_output=True,
                             text=True, check=True).stdout
        assert f"CUT {pid}" in out and "cut off: pid" in out
        assert "cut-off   1 lane window cut off" in out
        js = json.loads(subprocess.run([v05ctl, "stat", "--json", segname],
                                       capture_output=True, text=True,
                                       check=True).stdout)
        assert js["lane_cut"] == {"records": 64, "permille": 900, "cut_off": 1}
        assert [x["cut"] for x in js["lanes"]].count(True) == 1
        os.write(go_w, b"1")
        got = _result(pid, r)
        assert "aborted" in got, got
        assert segname in got["aborted"] and "cut lane" in got["aborted"]

        # The owner's honest rewards go on being applied.
        with v05.RewardWriter.attach(segname) as w:
            for d in ds:
                for s in d.samples:
                    w.push(d, s, 1.0)
            finals = [x for x in p.poll() if x.kind == "final"]
        assert len(finals) == 8
        assert p.stats()["rewards_applied"] == 32
        for x in (go_r, go_w, pushed_r, pushed_w):
            os.close(x)
