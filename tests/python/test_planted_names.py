# SPDX-License-Identifier: MIT
"""Names another user plants next to a segment's (issue 45, defects 3 and
4), through Plugin.create, as root and as an unprivileged owner: a name a
replace could once have used for its temporary does not block
on_stale="remove", and another user's v05-NAME:side is never removed,
root or not, with a refusal that names it and a call that works. The
other users are real uids (CI runs as root; no passwd entry needed)."""
import os
import pickle
import signal
import subprocess
import sys

import pytest

import v05

STRANGER, OWNER = 4545, 4343
KW = dict(mode="v05-fixed", k_init=4, k_step=4, k_max=4, max_prompts=8,
          pad_multiple=1)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="becomes other users: needs root (CI runs as root)")


def _start_as(uid, fn):
    """Fork a child that runs fn() as uid (root: uid None) and pickles
    back its result or the exception it raised: (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            out = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            out = ("err", (type(e).__name__, getattr(e, "errno", None),
                           str(e)))
        os.write(w, pickle.dumps(out))
        os._exit(0)
    os.close(w)
    return pid, r


def _result(pid, r):
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(data)


def _as(uid, fn):
    """fn() in a child as uid: ("ok", its result) or ("err", what)."""
    return _result(*_start_as(uid, fn))


def _dead_owner(uid, name):
    """A segment of uid whose owner was killed."""
    def run():
        code = (f"import v05, sys; p = v05.Plugin.create({name!r}, **{KW!r});"
                " p.submit([('a', 0.0)]); print('ready', flush=True);"
                " sys.stdin.read()")
        pr = subprocess.Popen([sys.executable, "-c", code],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
        assert pr.stdout.readline().strip() == "ready"
        pr.send_signal(signal.SIGKILL)
        pr.wait()
    assert _as(uid, run)[0] == "ok"


def _plant(paths, kind="dir"):
    def run():
        for p in paths:
            if kind == "dir":
                os.mkdir(p, 0o700)
                with open(os.path.join(p, "lane.0"), "w"):
                    pass
            else:
                open(p, "w").close()
        return True
    assert _as(STRANGER, run) == ("ok", True)


def _unplant(paths):
    for p in paths:
        if os.path.isdir(p):
            for f in os.listdir(p):
                os.unlink(os.path.join(p, f))
            os.rmdir(p)
        elif os.path.lexists(p):
            os.unlink(p)


@needs_root
@pytest.mark.parametrize("owner", [None, OWNER], ids=["root", "unprivileged"])
def test_planted_temporary_does_not_block_remove(segname, owner):
    """Defect 3: the names a replace once took for its temporary
    (v05-v05-replace-<pid>-<n>), planted by a stranger, do not make
    on_stale="remove" fail; they are left alone."""
    _dead_owner(owner, segname)

    def replace():
        names = [f"/dev/shm/v05-v05-replace-{os.getpid()}-{n}"
                 for n in range(4)]
        with open(f"/dev/shm/{segname}.names", "w") as f:
            f.write("\n".join(names))
        os.kill(os.getpid(), signal.SIGSTOP)   # the stranger plants now
        with v05.Plugin.create(segname, on_stale="remove", **KW) as p:
            return (p.taken_over, p.stats()["prompts_open"])

    pid, r = _start_as(owner, replace)
    _, st = os.waitpid(pid, os.WUNTRACED)
    assert os.WIFSTOPPED(st)
    with open(f"/dev/shm/{segname}.names") as f:
        names = f.read().split("\n")
    os.unlink(f"/dev/shm/{segname}.names")
    _plant(names)
    try:
        os.kill(pid, signal.SIGCONT)
        got = _result(pid, r)
        assert got == ("ok", (False, 0)), got
        for n in names:
            assert os.stat(n).st_uid == STRANGER
    finally:
        _unplant(names)


@needs_root
@pytest.mark.parametrize("owner", [None, OWNER], ids=["root", "unprivileged"])
@pytest.mark.parametrize("on_stale", ["takeover", "remove", "raise"])
def test_planted_side_directory_never_removed(segname, owner, on_stale):
    """Defect 4: a stranger's v05-NAME:side (a directory with a file in
    it) makes create fail naming it and how to get past it, whatever
    on_stale says, and as root too: it and its file stay."""
    side = f"/dev/shm/v05-{segname}:side"
    _plant([side])
    try:
        got = _as(owner, lambda: v05.Plugin.create(segname, on_stale=on_stale,
                                                   **KW).close())
        assert got[0] == "err", got
        name, err, msg = got[1]
        assert err in (17, 13), got  # EEXIST, EACCES
        assert side in msg or f"v05-{segname}:side" in msg, msg
        assert "uid 4545" in msg, msg
        assert "v05ctl reclaim --any-uid" in msg, msg
        assert os.stat(side).st_uid == STRANGER
        assert os.path.exists(os.path.join(side, "lane.0"))
        assert not os.path.exists(f"/dev/shm/v05-{segname}")
        # v05.reclaim and v05.unlink, root or not, leave it too.
        for fn in (v05.reclaim, v05.unlink):
            got = _as(owner, lambda fn=fn: fn(segname))
            assert got[0] == "err", got
            assert os.path.exists(os.path.join(side, "lane.0"))
    finally:
        _unplant([side])
