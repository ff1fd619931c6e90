# SPDX-License-Identifier: MIT
"""Reclaim acts only on the instance it checked (issue 45, defect 8): the
reaper (v05.trainers.reaper), v05.reclaim and `v05ctl reclaim` find a
segment's owner dead and are held up right after that check (a test point
of the library, shm/testpoint.h: the process stops there until the test
lets it go; no sleep); meanwhile the owner restarts and takes the segment
over (Plugin.create's default) or replaces it (on_stale="remove"). When
the reclaim goes on, the restarted owner's segment is still there: its
producers reach it and their rewards are applied."""
import json
import os
import select
import signal
import subprocess
import sys

import pytest

import v05

KW = dict(mode="v05-fixed", k_init=4, k_step=4, k_max=4, max_prompts=16,
          pad_multiple=1, max_producers=4)


def _dying_owner(name):
    """A process that creates segment `name`, submits 8 prompts, pushes
    every reward of 4 into a lane and waits; it dies (SIGKILL) when told.
    Returns (Popen, pidfd)."""
    code = f"""
import sys, v05
p = v05.Plugin.create({name!r}, **{KW!r})
ds = p.submit([(f"u{{i}}", 0.0) for i in range(8)])
with v05.RewardWriter.attach({name!r}) as w:
    for d in ds[:4]:
        for s in d.samples:
            w.push(d, s, 1.0)
print("ready", flush=True)
sys.stdin.read()
"""
    pr = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    assert pr.stdout.readline().strip() == "ready"
    return pr, os.pidfd_open(pr.pid)


def _stopped_at(fd):
    """Did the reclaim reach its test point (one byte), or end without
    (end of file)? The reclaim either writes or exits at once."""
    r, _, _ = select.select([fd], [], [], 120)
    assert r, "the reclaim neither stopped nor ended in 120 s"
    return os.read(fd, 1) == b"p"


def _reclaimer(kind, name, pidfd, report, v05ctl):
    """Start the reclaim of `kind`, set to stop after its check. Returns
    (Popen, the test's end of its 'stopped' pipe, of its 'go' pipe)."""
    up_r, up_w = os.pipe()
    go_r, go_w = os.pipe()
    env = dict(os.environ, V05_TEST_POINT="reclaim.checked",
               V05_TEST_POINT_ACTION=f"fd:{up_w}:{go_r}")
    if kind == "reaper":
        cmd = [sys.executable, "-m", "v05.trainers.reaper", "--pidfd",
               str(pidfd), "--segment", name, "--report", report]
        fds = (up_w, go_r, pidfd)
    elif kind == "v05.reclaim":
        cmd = [sys.executable, "-c", f"import v05; v05.reclaim({name!r})"]
        fds = (up_w, go_r)
    else:
        cmd = [v05ctl, "reclaim", name]
        fds = (up_w, go_r)
    pr = subprocess.Popen(cmd, env=env, pass_fds=fds, stderr=subprocess.PIPE,
                          text=True)
    os.close(up_w)
    os.close(go_r)
    return pr, up_r, go_w


@pytest.mark.parametrize("restart", ["takeover", "remove"])
@pytest.mark.parametrize("kind", ["reaper", "v05.reclaim", "v05ctl"])
def test_reclaim_leaves_a_restarted_owner_alone(segname, v05ctl, tmp_path,
                                                kind, restart):
    owner, pidfd = _dying_owner(segname)
    report = str(tmp_path / "report.jsonl")
    if kind == "reaper":   # it waits for the owner's end itself
        rec, up, go = _reclaimer(kind, segname, pidfd, report, v05ctl)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    if kind != "reaper":
        rec, up, go = _reclaimer(kind, segname, pidfd, report, v05ctl)
    os.close(pidfd)
    assert _stopped_at(up), "the reclaim did not stop after its check"
    # The owner restarts while the reclaim stands between check and act.
    p = v05.Plugin.create(segname, on_stale=restart, **KW)
    try:
        assert p.taken_over == (restart == "takeover")
        os.write(go, b"g")
        rec.wait(120)
        # The reaper forked away: its end of the pipe closes when it ends.
        while os.read(up, 1):
            pass
        os.close(up)
        os.close(go)
        assert os.path.exists(f"/dev/shm/v05-{segname}"), \
            "the reclaim removed the restarted owner's segment"
        # The owner's producers reach it, their rewards are applied: the
        # dead owner's 16 that waited in a lane, and one more.
        if p.taken_over:
            for _ in range(2):
                p.poll()
            ds = p.recover()
        else:
            ds = p.submit([("n", 0.0)])
        before = p.stats()["rewards_applied"]
        assert before == (16 if p.taken_over else 0)
        d = next(x for x in ds if x.kind == "sample")
        with v05.RewardWriter.attach(segname) as w:
            w.push(d, d.samples[0], 1.0)
        for _ in range(2):
            p.poll()
        assert p.stats()["rewards_applied"] == before + 1
    finally:
        p.close()
    err = rec.stderr.read()
    if kind == "reaper":
        ends = [json.loads(x) for x in open(report)]
        assert ends and ends[-1]["kind"] == "end"
        assert ends[-1].get("taken_over_by") == os.getpid(), ends[-1]
        assert rec.returncode == 0, err
    else:
        assert rec.returncode != 0 and "left alone" in err, err
