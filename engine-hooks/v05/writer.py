# SPDX-License-Identifier: MIT
"""Reward workers' side: push (uid, sample, reward, gen) into the plugin."""

import ctypes
import errno
from typing import Optional, Sequence

import numpy as np

from . import _checks, _lib
from ._lib import V05Error, check, lib
from .plugin import Uid, key_of

__all__ = ["RewardWriter", "Reader"]

PRODUCER_DEFER = _lib.const("V05_PRODUCER_DEFER")
PRODUCER_ANY_UID = _lib.const("V05_PRODUCER_ANY_UID")


def _uid_gen(uid, gen):
    """(uid, gen) from a uid and its gen, or from a Decision."""
    from .plugin import Decision
    if isinstance(uid, Decision):
        if gen is None:
            gen = uid.gen
        uid = uid.uid
    if gen is None:
        raise TypeError("push: gen is required: the gen of the decision that "
                        "issued the sample (it tells a late reward of an "
                        "earlier instance of the uid from this one's)")
    return uid, _checks.u32("gen", gen)


class RewardWriter:
    """One per reward-worker process: its own lane of the segment.

    push() publishes at once (the plugin can decide the moment the last
    reward of a group lands); with defer=True pushes are published together
    by flush(). A full lane makes push wait up to `timeout` seconds (the
    plugin drains it), then raise; nothing is dropped silently.
    """

    def __init__(self, handle, name, timeout):
        self._p = ctypes.c_void_p(handle)
        self.name = name
        self.timeout = timeout
        self._keys = {}

    @classmethod
    def attach(cls, name: str, *, defer: bool = False, timeout: float = 30.0,
               any_uid: bool = False) -> "RewardWriter":
        """any_uid: accept a segment another user created: its plugin must
        run a producer broker (Plugin.create(..., producer_broker=True)),
        which hands this process its own lane if the owner listed this
        user (broker_allow_uids / broker_allow_gids): else PermissionError
        naming the uid refused. Refused by default."""
        h = ctypes.c_void_p()
        flags = (PRODUCER_DEFER if defer else 0) | \
            (PRODUCER_ANY_UID if any_uid else 0)
        check(lib.v05_producer_open(_checks.cstr("name", name), flags, ctypes.byref(h)),
              f"open a reward lane of segment {name}")
        return cls(h.value, name, timeout)

    def _handle(self):
        if self._p is None:
            _lib.raise_errno(errno.EBADF,
                             f"reward writer of segment {self.name} is closed")
        return self._p

    def _timeout_ms(self) -> int:
        """The wait for room in ms, as the C int takes it (a negative
        timeout waits for ever; a huge one is the longest C can say)."""
        if self.timeout is None or self.timeout < 0:
            return -1
        return min(int(self.timeout * 1000), _checks.INT_MAX)

    def _key(self, uid: Uid) -> int:
        k = self._keys.get(uid)
        if k is None:
            k = key_of(uid)
            if len(self._keys) > 65536:
                self._keys.clear()
            self._keys[uid] = k
        return k

    def push(self, uid, sample: int, reward: float, *,
             gen: Optional[int] = None) -> None:
        """Reward of sample `sample` of prompt `uid`, on [-1, 1]
        (v05.reward_from_binary maps 0/1). gen is the gen of the decision
        that issued the sample: it names the prompt's instance, so a late
        reward for a uid since released and submitted again is rejected,
        not credited to the new one. `uid` may be that Decision itself
        (its uid and gen are taken). A producer the plugin cut off (most of
        its records were rejected) gets ConnectionAbortedError: close this
        writer; a new one gets a lane of its own."""
        uid, gen = _uid_gen(uid, gen)
        p = self._handle()
        key = self._key(uid)
        sample = _checks.u32("sample", sample)
        r = lib.v05_producer_push(p, key, gen, sample, float(reward))
        if r == -_lib.EAGAIN:
            rec = _lib.Reward(key=key, gen=gen, sample=sample,
                              reward=float(reward))
            r = lib.v05_producer_push_wait(p, ctypes.byref(rec), 1,
                                           self._timeout_ms())
        check(r, f"push to segment {self.name}")

    def push_many(self, uids: Sequence, samples, rewards,
                  gens: Optional[Sequence[int]] = None) -> None:
        """Many rewards, published with one store (waits for room). gens:
        each reward's decision gen (as push); may be left out when `uids`
        are the Decisions themselves."""
        samples = [_checks.u32("sample", s) for s in samples]
        rewards = np.asarray(rewards, dtype=np.float32)
        n = len(uids)
        if len(samples) != n or len(rewards) != n or \
                (gens is not None and len(gens) != n):
            raise ValueError("uids, samples, rewards and gens differ in "
                             "length")
        recs = (_lib.Reward * n)()
        for i in range(n):
            uid, gen = _uid_gen(uids[i], None if gens is None else gens[i])
            recs[i].key = self._key(uid)
            recs[i].gen = gen
            recs[i].sample = samples[i]
            recs[i].reward = float(rewards[i])
        check(lib.v05_producer_push_wait(self._handle(), recs, n,
                                         self._timeout_ms()),
              f"push_many to segment {self.name}")

    def flush(self) -> int:
        """Publish deferred pushes; returns how many."""
        return check(lib.v05_producer_flush(self._handle()),
                     f"flush to segment {self.name}")

    @property
    def lane(self) -> int:
        return lib.v05_producer_lane(self._handle())

    def close(self) -> None:
        if self._p is not None:
            p, self._p = self._p, None
            check(lib.v05_producer_close(p),
                  f"close the reward writer of segment {self.name}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Reader:
    """The trainer's side, in another process: final groups as zero-copy
    views of the segment, each handed back with release()."""

    def __init__(self, handle, name):
        self._p = ctypes.c_void_p(handle)
        self.name = name
        self._views = []

    @classmethod
    def open(cls, name: str, *, any_uid: bool = False) -> "Reader":
        h = ctypes.c_void_p()
        check(lib.v05_reader_open(_checks.cstr("name", name), 1 if any_uid else 0,
                                  ctypes.byref(h)), f"open a reader of {name}")
        return cls(h.value, name)

    def _track(self, buf):
        from .plugin import track_view
        track_view(self._views, buf)

    def next(self) -> Optional["Group"]:
        """The next final group, or None if none is waiting."""
        from .plugin import Group
        if self._p is None:
            _lib.raise_errno(errno.EBADF, "reader is closed")
        g = _lib.Group_()
        if check(lib.v05_reader_next(self._p, ctypes.byref(g)), "reader next") == 0:
            return None
        uid = ctypes.string_at(g.uid, g.uid_len).decode("utf-8", "surrogateescape")
        grp = Group(g, uid, self, readonly=True)
        return grp

    def release(self, group) -> None:
        g = _lib.Group_()
        g.slot = group.slot
        g.gen = group.gen
        check(lib.v05_reader_release(self._p, ctypes.byref(g)), "reader release")

    def close(self) -> None:
        """Give up the reader's claim and unmap. Refused while numpy views
        of its groups are alive: they would point at unmapped memory."""
        if self._p is not None:
            from .plugin import live_views
            alive = live_views(self._views)
            if alive:
                _lib.raise_errno(errno.EBUSY, f"close reader of {self.name}: {alive} "
                                   "views of groups are still alive; drop "
                                   "them first")
            p, self._p = self._p, None
            check(lib.v05_reader_close(p), "close reader")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # Leaving on an exception with views still alive: keep the reader
        # (and its mapping) rather than raise over the exception or leave
        # the views dangling; it is closed when the process ends.
        from .plugin import live_views
        if exc[0] is not None and live_views(self._views):
            return
        self.close()
