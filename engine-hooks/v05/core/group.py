# SPDX-License-Identifier: MIT
"""A final group seen in place (zero-copy numpy/torch views of its slot),
and the weak bookkeeping that keeps a segment from closing under them."""

import ctypes
import weakref

import numpy as np

from .names import ACTIONS

__all__ = ["Group", "Views", "track_view", "live_views"]


class Group:
    """A final group, seen in place: `rewards` and `advantages` are numpy
    arrays over the segment's memory (no copy). They stay valid until the
    group is released; after that the slot may hold another group."""

    __slots__ = ("uid", "key", "slot", "gen", "k", "baseline", "sigma",
                 "mean", "prior", "action", "seq", "batch", "keep", "rewards",
                 "advantages", "_buffers", "_readonly", "__weakref__")

    def __init__(self, row, uid, owner, readonly=False):
        # row: a v05_group as _lib.GROUP_ROW unpacks it (the pointers as
        # addresses).
        (self.key, self.seq, self.batch, raddr, aaddr, _, self.prior,
         self.baseline, self.sigma, self.mean, self.slot, self.gen, k,
         action, _, keep) = row
        self.uid = uid
        self.k = k
        self.action = ACTIONS.get(action, "?")
        # Bit i: sample i is trained on (every sample but under
        # reinforce-ada, whose other advantages are 0).
        self.keep = keep
        floats = ctypes.c_float * k  # ctypes keeps one such type per k
        rbuf = floats.from_address(raddr) if k else floats()
        abuf = floats.from_address(aaddr) if k else floats()
        owner._track(rbuf)
        owner._track(abuf)
        self._buffers = (rbuf, abuf)
        self._readonly = readonly
        if readonly:
            # A reader maps the arena read-only: a write through a view
            # would fault. Read-only memoryviews make numpy refuse it (and
            # the flag cannot be turned back on).
            self.rewards = np.frombuffer(memoryview(rbuf).toreadonly(),
                                         dtype=np.float32)
            self.advantages = np.frombuffer(memoryview(abuf).toreadonly(),
                                            dtype=np.float32)
        else:
            self.rewards = np.frombuffer(rbuf, dtype=np.float32)
            self.advantages = np.frombuffer(abuf, dtype=np.float32)

    @property
    def kept(self):
        """The indices of the samples trained on, in order (all of 0..k-1
        but under reinforce-ada)."""
        return [i for i in range(self.k) if self.keep >> i & 1]

    def torch(self):
        """(rewards, advantages) as torch tensors over the same memory. A
        Reader's groups are read-only and torch has no read-only tensor:
        for them these are copies."""
        import warnings

        import torch
        if self._readonly:
            return (torch.from_numpy(self.rewards.copy()),
                    torch.from_numpy(self.advantages.copy()))
        with warnings.catch_warnings():
            # torch warns that the buffer is writable; so is the segment.
            warnings.simplefilter("ignore")
            return (torch.frombuffer(self._buffers[0], dtype=torch.float32),
                    torch.frombuffer(self._buffers[1], dtype=torch.float32))

    def __repr__(self):
        return (f"Group(uid={self.uid!r}, k={self.k}, baseline={self.baseline:.4f}, "
                f"action={self.action})")


class Views:
    """The slot buffers handed out whose views are alive. Each is held
    weakly (numpy/torch views keep it alive) and forgotten the moment the
    last view goes, so what is kept is the buffers alive now, not every
    one ever handed out. (ctypes arrays are not hashable: by identity.)"""

    def __init__(self):
        self._refs = {}

    def add(self, buf) -> None:
        key = id(buf)
        # The callback runs while buf is finalized, before its id can be
        # reused by another object.
        self._refs[key] = weakref.ref(buf, lambda _, k=key: self._refs.pop(k, None))

    def __len__(self) -> int:
        return len(self._refs)


def track_view(views: Views, buf) -> None:
    """Remember a slot buffer weakly."""
    views.add(buf)


def live_views(views: Views) -> int:
    return len(views)
