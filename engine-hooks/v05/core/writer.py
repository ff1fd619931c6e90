# SPDX-License-Identifier: MIT
"""Reward workers' side: push (uid, sample, reward, gen) into the plugin."""

import ctypes
import errno
from typing import Optional, Sequence

from . import _checks, _lib
from ._lib import check, lib
from .decision import Decision, Uid, key_of
from .lru import LruMap

__all__ = ["RewardWriter"]

PRODUCER_DEFER = _lib.const("V05_PRODUCER_DEFER")
# uid -> key for the uids pushed lately (a key is one XXH3 of the uid's
# bytes, so this only saves repeated work; bounded over a long run).
KEY_CACHE = 4096
PRODUCER_ANY_UID = _lib.const("V05_PRODUCER_ANY_UID")


def _uid_gen(uid, gen):
    """(uid, gen) from a uid and its gen, or from a Decision."""
    if isinstance(uid, Decision):
        if gen is None:
            return uid.uid, uid.gen  # a u32 as the plugin gave it
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
        self._keys = LruMap(KEY_CACHE)
        self._staged = []  # (key, gen, sample, reward, 0): stage()
        self._stage_buf = None  # a Reward array publish_staged packs into
        self._stage_mv = None  # its bytes

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
            self._keys[uid] = k
        return k

    def _reward(self, uid, sample, reward) -> float:
        if type(reward) is float and -1.0 <= reward <= 1.0:  # not NaN
            return reward  # before the message below is built
        return _checks.unit_interval(
            f"push to segment {self.name}: the reward of uid {uid!r} sample "
            f"{sample}", reward,
            " (a 0/1 or True/False outcome: v05.reward_from_binary)")

    def push(self, uid, sample: int, reward: float, *,
             gen: Optional[int] = None) -> None:
        """Reward of sample `sample` of prompt `uid`, a finite number in
        [-1, 1] (v05.reward_from_binary maps 0/1); anything else raises
        ValueError (TypeError for a bool or a non-number) naming the uid,
        the sample and the value, and nothing is pushed. gen is the gen of the decision
        that issued the sample: it names the prompt's instance, so a late
        reward for a uid since released and submitted again is rejected,
        not credited to the new one. `uid` may be that Decision itself
        (its uid and gen are taken). A producer the plugin cut off (most of
        its records were rejected) gets ConnectionAbortedError: close this
        writer; a new one gets a lane of its own."""
        if type(uid) is Decision and uid.uid is not None:
            # The decision names the prompt's key: nothing to hash.
            key = uid.key
            uid, gen = _uid_gen(uid, gen)
        else:
            uid, gen = _uid_gen(uid, gen)
            key = self._keys.get(uid)
            if key is None:
                key = self._key(uid)
        p = self._handle()
        if type(sample) is not int or not 0 <= sample <= _checks.U32_MAX:
            sample = _checks.u32("sample", sample)
        if type(reward) is not float or not -1.0 <= reward <= 1.0:  # NaN too
            reward = self._reward(uid, sample, reward)
        r = lib.v05_producer_push(p, key, gen, sample, reward)
        if r == -_lib.EAGAIN:
            rec = _lib.Reward(key=key, gen=gen, sample=sample, reward=reward)
            r = lib.v05_producer_push_wait(p, ctypes.byref(rec), 1,
                                           self._timeout_ms())
        if r < 0:  # the message is built only when it is needed
            check(r, f"push the reward of uid {uid!r} sample {sample} to "
                  f"segment {self.name}")

    def abort(self, uid, *, gen: Optional[int] = None) -> None:
        """Abort the instance `gen` of prompt `uid` (or a Decision of it)
        in the segment's plugin, published at once: a segment made with
        abort_records=True takes the prompt out and its owner's poll()
        returns a "cancel" decision naming the samples to stop; any other
        segment, an unknown uid, another instance or a decided group
        refuses the record and counts it (rejected_kind, rejected_unknown,
        rejected_late). A full lane raises V05Error EAGAIN at once
        (nothing written): an abort is not worth waiting behind rewards
        the owner has not drained; ask again."""
        if type(uid) is Decision and uid.uid is not None:
            key = uid.key
            uid, gen = _uid_gen(uid, gen)
        else:
            uid, gen = _uid_gen(uid, gen)
            key = self._key(uid)
        p = self._handle()
        r = lib.v05_producer_abort(p, key, gen)
        if r < 0:
            check(r, f"abort uid {uid!r} gen {gen} in segment {self.name}")

    def stage(self, d: Decision, sample: int, reward: float) -> None:
        """Hold the reward of sample `sample` of the prompt decision `d`
        issued, checked as push() checks it (ValueError naming the uid,
        the sample and the value; nothing is held), until publish_staged().
        For a caller on the plugin's own thread that polls right after (the
        driver scoring in-process): one push per poll instead of one per
        reward."""
        if type(d) is not Decision:
            raise TypeError(f"stage takes the Decision that issued the "
                            f"sample, not {type(d).__name__}")
        if type(sample) is not int or not 0 <= sample <= _checks.U32_MAX:
            sample = _checks.u32("sample", sample)
        if type(reward) is not float or not -1.0 <= reward <= 1.0:  # NaN too
            reward = self._reward(d.uid, sample, reward)
        self._staged.append((d.key, d.gen, sample, reward))

    @property
    def staged(self) -> int:
        """Rewards stage() holds, not yet published."""
        return len(self._staged)

    def publish_staged(self) -> int:
        """Publish what stage() holds, in order, with one store when the
        lane has room for all of it; else as many as fit (the plugin must
        drain the lane before the rest can go: poll, then call again).
        Never waits. Returns how many are still held."""
        staged = self._staged
        n = len(staged)
        if not n:
            return 0
        p = self._handle()
        buf, mv = self._stage_buf, self._stage_mv
        if buf is None or len(buf) < n:
            buf = self._stage_buf = (_lib.Reward * max(64, 2 * n))()
            mv = self._stage_mv = memoryview(buf).cast("B")
        size, pack = _lib.REWARD_ROW.size, _lib.REWARD_ROW.pack_into
        for i, rec in enumerate(staged):
            pack(mv, i * size, *rec)
        r = lib.v05_producer_push_batch(p, buf, n)
        if r == -_lib.EAGAIN or r == -errno.EINVAL:
            # Fewer than n fit, or n is more than the lane holds: push
            # those that fit.
            r = 0
            while r < n:
                e = lib.v05_producer_push(p, *staged[r])
                if e == -_lib.EAGAIN:
                    break
                if e < 0:
                    r = e
                    break
                r += 1
        if r < 0:
            staged.clear()  # the batch fails; nothing of it is kept
            check(r, f"push {n} rewards to segment {self.name}")
        del staged[:r]
        return len(staged)

    def discard_staged(self) -> int:
        """Forget what stage() holds (its batch was given up); returns how
        many."""
        n = len(self._staged)
        self._staged.clear()
        return n

    def push_many(self, uids: Sequence, samples, rewards,
                  gens: Optional[Sequence[int]] = None) -> None:
        """Many rewards, published with one store (waits for room). gens:
        each reward's decision gen (as push); may be left out when `uids`
        are the Decisions themselves."""
        samples = [_checks.u32("sample", s) for s in samples]
        rewards = list(rewards)
        n = len(uids)
        if len(samples) != n or len(rewards) != n or \
                (gens is not None and len(gens) != n):
            raise ValueError("uids, samples, rewards and gens differ in "
                             "length")
        # Every one checked before any is pushed: all or nothing.
        recs = (_lib.Reward * n)()
        for i in range(n):
            uid, gen = _uid_gen(uids[i], None if gens is None else gens[i])
            recs[i].reward = self._reward(uid, samples[i], rewards[i])
            recs[i].key = self._key(uid)
            recs[i].gen = gen
            recs[i].sample = samples[i]
        check(lib.v05_producer_push_wait(self._handle(), recs, n,
                                         self._timeout_ms()),
              f"push {n} rewards to segment {self.name}")

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
