# SPDX-License-Identifier: MIT
"""What a verl run keeps per run: its segments' names, their reclaim, the
reaper that removes a worker's segment however the worker ends, and the run
report (algorithm.v05_report).

Segments are named by run: worker i of the run whose prefix is P
(``algorithm.v05_segment``) owns segment ``P-w<i>`` on its host. A later
start of the same run finds a dead run's segments by that name and
reclaims them (``reclaim_run``); a live run's are refused (two runs must
not share a prefix). Every worker also starts a reaper (``v05.trainers.
reaper``, started with ``start_reaper``, re-exported here): a small
process of its own session that waits for the worker's
death (a pidfd) and then removes the segment if it is still there, counting
the groups it had in flight as lost in the report and on its stderr. That
covers every way a run ends: a normal end (Ray ends the workers without
running their exit handlers), an exception, the trainer killed (Ray ends
the job's workers), a worker killed.

The report (``algorithm.v05_report=PATH``, JSON lines, appended by every
process of the run, one ``write`` per line): "chunk" (a worker's chunk:
its groups and the plugin's counters after it), "advantage" (an estimator
call: each v05 row's advantage and the rows that fell back), "end" (a
worker's segment removed by its reaper: prompts in flight lost), "state"
(a checkpoint's v05 state saved), "restore".
"""

import os
import re
from typing import List

from ..reaper import start_reaper
from ..report import report

__all__ = ["segment_name", "run_segments", "reclaim_run", "report",
           "start_reaper", "shm_dir"]


def shm_dir() -> str:
    """Where this host's segments live (the library's $V05_SHM_DIR)."""
    return os.environ.get("V05_SHM_DIR") or "/dev/shm"


def segment_name(prefix: str, index: int) -> str:
    return f"{prefix}-w{int(index)}"


def run_segments(prefix: str) -> List[str]:
    """The names of run `prefix`'s worker segments on this host."""
    pat = re.compile(r"v05-" + re.escape(prefix) + r"-w[0-9]+")
    try:
        files = os.listdir(shm_dir())
    except OSError:
        return []
    return sorted(f[4:] for f in files if pat.fullmatch(f))


def reclaim_run(prefix: str) -> List[str]:
    """Remove every segment of run `prefix` on this host whose owner is
    gone (a run that crashed, or was killed, before its reapers ran).
    Segments of a live owner are left alone. Returns the names removed."""
    from ...core.segments import reclaim

    gone = []
    for name in run_segments(prefix):
        try:
            reclaim(name)
            gone.append(name)
        except OSError:  # alive (EBUSY), or removed meanwhile
            pass
    return gone
