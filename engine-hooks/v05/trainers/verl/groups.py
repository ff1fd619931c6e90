# SPDX-License-Identifier: MIT
"""Final groups as this process knows them: plain copies (recorded, or taken
from rows), and the segment's completion ring through a Reader when the
segment is on this host."""

import collections
import logging
import os
import time
from typing import Dict

import numpy as np

from ...core.reader import Reader

__all__ = ["GroupRecord", "record_group", "groups", "attach_reader"]

log = logging.getLogger(__name__)


class GroupRecord:
    """One group's numbers as plain arrays (sample index -> value)."""

    __slots__ = ("uid", "k", "baseline", "sigma", "rewards", "advantages",
                 "source", "keep")

    def __init__(self, uid, k, baseline, sigma, rewards, advantages, source,
                 keep=None):
        self.uid = uid
        self.k = int(k)
        self.baseline = float(baseline)
        self.sigma = float(sigma)
        self.rewards = np.asarray(rewards, dtype=np.float32)
        self.advantages = np.asarray(advantages, dtype=np.float32)
        self.source = source
        # Bit i: sample i is trained on and has a row (all k but under
        # reinforce-ada).
        self.keep = (1 << self.k) - 1 if keep is None else int(keep)
        if self.rewards.shape != (self.k,) or self.advantages.shape != (self.k,):
            raise ValueError(f"v05: group {uid!r}: k = {k} but {self.rewards.size} "
                             f"rewards, {self.advantages.size} advantages")

    @classmethod
    def of_group(cls, g, source="segment") -> "GroupRecord":
        """A copy of a Group (views of the segment)."""
        return cls(g.uid, g.k, g.baseline, g.sigma, g.rewards.copy(),
                   g.advantages.copy(), source, g.keep)

    @property
    def kept(self):
        return [i for i in range(self.k) if self.keep >> i & 1]


class _Groups:
    """This process's view of final groups: recorded copies, and the
    segment's completion ring through a Reader (one per segment)."""

    MAX_RECORDS = 1 << 16

    def __init__(self):
        self.records: "collections.OrderedDict[str, GroupRecord]" = \
            collections.OrderedDict()
        self.readers: Dict[str, Reader] = {}
        self.pending: Dict[str, Dict[str, object]] = {}  # segment -> uid -> Group
        self.pid = os.getpid()

    def _check_fork(self):
        # A forked child must not use the parent's reader claim.
        if os.getpid() != self.pid:
            self.__init__()

    def record(self, rec: GroupRecord) -> None:
        self.records[rec.uid] = rec
        self.records.move_to_end(rec.uid)
        while len(self.records) > self.MAX_RECORDS:
            self.records.popitem(last=False)

    def _reader(self, segment):
        r = self.readers.get(segment)
        if r is None:
            try:
                r = Reader.open(segment)
            except OSError as e:
                # Not on this host (or not created yet): rows must carry
                # their numbers.
                log.debug("v05: no reader for segment %s: %s", segment, e)
                return None
            self.readers[segment] = r
            self.pending[segment] = {}
        return r

    def from_segment(self, segment, uid, wait: float):
        """The final group of uid from the segment (a Group view), or None.
        Drains the completion ring without blocking; waits up to `wait`
        seconds for groups still being finished."""
        self._check_fork()
        r = self._reader(segment)
        if r is None:
            return None
        pend = self.pending[segment]
        deadline = time.monotonic() + wait
        while uid not in pend:
            g = r.next()
            if g is not None:
                pend[g.uid] = g
                continue
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)
        return pend[uid]

    def done(self, segment, uid) -> None:
        """Keep a copy of uid's group and hand its slot back."""
        g = self.pending.get(segment, {}).pop(uid, None)
        if g is not None:
            self.record(GroupRecord.of_group(g))
            self.readers[segment].release(g)

    def close(self) -> None:
        for seg, r in self.readers.items():
            for g in self.pending.get(seg, {}).values():
                r.release(g)
            r.close()
        self.readers.clear()
        self.pending.clear()


groups = _Groups()


def record_group(uid, k, baseline, sigma, rewards, advantages,
                 keep=None) -> None:
    """Make a group known to this process's estimator (e.g. a rollout
    component in the trainer's driver that copied it out of the plugin).
    keep: the group's keep mask (Group.keep; all k samples if None)."""
    groups.record(GroupRecord(str(uid), k, baseline, sigma, rewards,
                               advantages, "recorded", keep))


def attach_reader(segment: str) -> None:
    """Open this process's reader of `segment` now (the estimator opens it
    at its first call otherwise). From then on every final group of the
    segment, and every one not yet released by the rollout side, waits for
    the estimator: a group the rollout side releases while no reader is
    attached is gone (docs/TRAINERS.md, "Who attaches and releases
    when"). Raises if the segment is not on this host."""
    groups._check_fork()
    if groups._reader(segment) is None:
        raise FileNotFoundError(f"v05: segment {segment} is not on this host "
                                "(or not created yet): its rows must carry "
                                "their numbers (V05Uid)")
