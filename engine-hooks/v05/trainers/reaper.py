# SPDX-License-Identifier: MIT
"""The reaper of one segment: ``python -m v05.trainers.reaper --pidfd FD
--segment NAME [--report PATH] [--tag JSON]``.

Started by the segment's owner (a verl worker, a server's front end)
with ``start_reaper`` below, which hands it a pidfd of the owner; it
forks away at once, so that it is not the owner's child (Ray ends a
worker's children when it ends the worker). It waits for the owner to
end, however it ends (returned, raised, killed), and then, if the
segment is still there (the owner did not close it), counts what it had
in flight (prompts open or held: groups that will never be final) and
removes it. What it removed and lost goes to the report (a JSON line of
kind "end") and, when anything was lost, to its stderr. It never removes
a segment whose owner lives: the library's reclaim refuses one, and
removes only the segment it found dead (it claims its owner word first);
an owner restarted meanwhile that took the segment over or replaced it
keeps it (the report says "taken_over_by").
"""

import argparse
import errno
import json
import os
import select
import subprocess
import sys
import time
from typing import Optional

__all__ = ["start_reaper", "main"]


def start_reaper(segment: str, report_path: Optional[str] = None,
                 tag: Optional[dict] = None) -> subprocess.Popen:
    """Start the reaper of `segment`, owned by this process: it removes
    the segment when this process has ended, if it is still there."""
    pidfd = os.pidfd_open(os.getpid())
    try:
        args = [sys.executable, "-m", "v05.trainers.reaper",
                "--pidfd", str(pidfd), "--segment", segment]
        if report_path:
            args += ["--report", report_path]
        if tag:
            args += ["--tag", json.dumps(tag)]
        # Its own session: a signal to this process's group (a terminal's
        # ^C, a supervisor) does not reach it before it has done its job.
        proc = subprocess.Popen(args, pass_fds=(pidfd,), close_fds=True,
                                start_new_session=True,
                                stdin=subprocess.DEVNULL)
        # It forks the reaper away and exits at once (see reaper.py).
        proc.wait()
        return proc
    finally:
        os.close(pidfd)


def _pid_of(pidfd: int) -> int:
    """The pid a pidfd refers to (its fdinfo's Pid line), or 0."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _restarted(segment: str, dead: int):
    """The pid of a live owner of `segment` other than the dead one (an
    owner restarted since), or None."""
    from v05.core.observer import Observer

    try:
        with Observer(segment) as o:
            info = o.info()
    except OSError:
        return None
    pid = info.get("owner_pid")
    if pid and pid != dead and info.get("owner_alive"):
        return pid
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="v05.trainers.reaper")
    ap.add_argument("--pidfd", type=int, required=True)
    ap.add_argument("--segment", required=True)
    ap.add_argument("--report")
    ap.add_argument("--tag", default="{}")
    a = ap.parse_args(argv)
    tag = json.loads(a.tag)
    # Not the owner's child: Ray ends a worker's children with the worker
    # (its kill_child_processes_on_worker_exit), before they could do their
    # job. The child of this fork is nobody's but init's.
    if os.fork():
        os._exit(0)

    dead = _pid_of(a.pidfd)
    # The pidfd turns readable when the owner has ended.
    poller = select.poll()
    poller.register(a.pidfd, select.POLLIN)
    while not poller.poll(None):
        pass

    from v05.core.observer import Observer
    from v05.core.segments import reclaim
    from v05.trainers.report import report

    try:
        with Observer(a.segment) as o:
            c = o.counters()
            info = o.info()
    except OSError as e:
        if e.errno == errno.ENOENT:
            return 0  # closed by its owner: nothing to do
        c, info = {}, {}
    lost = int(c.get("prompts_open", 0)) + int(c.get("prompts_held", 0))
    # The owner's pid may still be reported alive for a moment after the
    # pidfd fired (the kernel reaps it); reclaim refuses a live owner.
    for _ in range(200):
        try:
            reclaim(a.segment)
            break
        except OSError as e:
            if e.errno == errno.ENOENT:
                return 0  # removed meanwhile (a reclaim at a new start)
            if e.errno != errno.EBUSY:
                raise
            # An owner restarted since took it over or replaced it: its
            # segment now, not a dead one's.
            new = _restarted(a.segment, dead or info.get("owner_pid"))
            if new:
                report(a.report, dict(tag, kind="end", segment=a.segment,
                                      owner_pid=dead or info.get("owner_pid"),
                                      taken_over_by=new, lost_groups=0))
                return 0
            time.sleep(0.05)
    else:
        print(f"v05 reaper: segment {a.segment}: its owner "
              f"{info.get('owner_pid')} is still reported alive; left",
              file=sys.stderr)
        return 1
    rec = dict(tag, kind="end", segment=a.segment,
               owner_pid=info.get("owner_pid"), lost_groups=lost,
               samples_issued=c.get("samples_issued"),
               rewards_applied=c.get("rewards_applied"),
               prompts_submitted=c.get("prompts_submitted"),
               prompts_final=c.get("prompts_final"),
               prompts_cancelled=c.get("prompts_cancelled"))
    report(a.report, rec)
    if lost:
        print(f"v05 reaper: segment {a.segment} removed; its owner pid "
              f"{info.get('owner_pid')} ended with {lost} groups in flight, "
              "lost", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
