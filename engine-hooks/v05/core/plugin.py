# SPDX-License-Identifier: MIT
"""The plugin: lives in the engine's process, turns rewards into decisions."""

import ctypes
import errno
import math
import threading
from typing import Iterable, List, Optional, Tuple, Union

from . import _checks, _lib
from ._lib import check, lib
from .counters import counters_dict
from ._lib import GROUP_ROW
from .decision import (Decision, SubmitError, Uid, decisions_of, key_of,
                       uid_checked)
from .eb_state import EbState
from .group import Group, Views, live_views, track_view
from .lru import LruMap
from .config import make_config
from .names import (CLOSE_KEEP_READABLE, CLOSE_UNLINK, MODES, SUPPORT_GROUPS,
                    UID_MAX)
from .observer import Observer, cut_lanes
from .plugin_wait import PluginWaiting
from .segments import config_differences, exists_message, stale_state

__all__ = ["Plugin"]


# Released prompts' uids kept for support_sample: as many as the support
# buffer holds groups (V05_SUPPORT_GROUPS), so that what a long run keeps
# here does not grow with the prompts it has seen.
RELEASED_UIDS = SUPPORT_GROUPS

# A refused prompt's errno, in words (v05_submit's status codes).
_REFUSED = {
    errno.EEXIST: "already active in this plugin (submitted before and "
                  "not yet released or cancelled)",
    errno.ENOSPC: "no free slot (max_prompts prompts are active: release "
                  "final groups, or create the plugin with more)",
    errno.EINVAL: f"uid is not 1 to {UID_MAX} bytes",
    errno.EDOM: "prior is not a finite number in [-1, 1]",
}


class Plugin(PluginWaiting):
    """v05 inside the engine's process. Create one per engine (it owns a
    shared-memory segment), or attach to take over a dead owner's.

    Threads: a Plugin is used by one thread at a time, the one that polls
    it (include/v05/plugin.h; libv05 built with debug info refuses a
    second thread's call with EBUSY). From another thread, only stats(),
    fileno(), wait_path, wait_reason and post_eb_remote()."""

    def __init__(self, handle, name):
        self._p = ctypes.c_void_p(handle)
        self.name = name
        # key -> uid as the caller gave it: live prompts here (dropped at
        # release, or at cancel), the last RELEASED_UIDS released ones in
        # _released. batch id -> keys of its prompts not yet released; the
        # keys of final groups handed out and not yet released.
        self._uids = {}
        self._released = LruMap(RELEASED_UIDS)
        self._batch_keys = {}
        self._final_keys = set()
        self._wait_fut = None  # the future wait() is parked on
        self._views = Views()  # slot buffers with views alive
        self._buf = (_lib.Decision_ * 4096)()
        self._deadline_ns = ctypes.c_int64()  # next_deadline's out
        self.last_rejected = {}
        self.config = None  # the v05_config it was created with (create)
        # poll may write a journal; with none (known at create) it runs
        # with the GIL held, as the other short calls do (_lib._GIL_HELD).
        self._poll_holds_gil = False
        self._mode = None  # its mode's name, once asked (mode)
        # Created over a dead owner's segment and took it over (create's
        # on_stale="takeover"): recover() has what it had handed out.
        self.taken_over = False
        # post_eb_remote: the state another thread handed in, applied by
        # the next poll or submit on the owning thread; on_post, if set,
        # is called (in the posting thread) to wake that thread.
        self._posted = None
        self._post_lock = threading.Lock()
        self.on_post = None
        # eb_state_shared: the thread that polls (the owner), and the own
        # part as it last saw it, kept once someone asked (_eb_share).
        self._owner = None
        self._eb_share = False
        self._eb_shared = None

    @property
    def halt_fraction(self) -> float:
        """The batch halt this plugin applies (from its segment after an
        attach), so that a coordinator and the engines cannot disagree."""
        if self.config is not None:
            return self.config.halt_fraction
        with Observer(self.name) as o:
            return o.info()["halt_fraction"]

    # ---- lifecycle ---------------------------------------------------

    _ON_STALE = ("takeover", "remove", "raise")

    @classmethod
    def create(cls, name: str, *, on_stale: str = "takeover",
               reclaim: Optional[bool] = None, **config) -> "Plugin":
        """Create segment `name` and own it. `config`: the keyword
        arguments of v05.core.config.make_config (cost, k_init, k_step,
        k_max, halt_fraction, pad_multiple, mode, schedule, max_prompts,
        max_producers, lane_capacity, max_batches, stream_deadline_us,
        journal, journal_sync, file_mode, wait, external_halt, sigma,
        paper, producer_broker, broker_allow_uids, broker_allow_gids,
        broker_overflow_ids, lane_cut_records, lane_cut_fraction,
        eb_window, eb_cold, eb_early, eb_first, pc_lower, pc_upper,
        ebpo_window), each checked; one left out keeps
        the library's default (mode "v05-pg", sigma "paper", ...).

        on_stale: what to do when segment `name` is left over from a run
        whose owner is gone (it was killed, or closed without removing
        it):
          "takeover" (the default): take it over as Plugin.attach does,
            keeping its groups (the slots, the journal): the Plugin comes
            back with taken_over True, and recover() hands out what the
            dead owner had handed out. Its stored config is kept: a config
            given here that differs in a setting is refused (ValueError
            naming the settings; on_stale="remove" replaces it instead).
          "remove": replace it with a new segment (its groups are lost),
            never removing it before the new one is whole
            (v05_plugin_replace).
          "raise": FileExistsError naming what is there and the remedies.
        What is left of a name whose segment file is gone (its side files)
        is cleared and the segment created, unless on_stale is "raise". A
        segment whose owner is alive, or another user's, is never touched:
        FileExistsError. reclaim=True is the older spelling of
        on_stale="remove", reclaim=False of on_stale="raise"."""
        if reclaim is not None:
            if not isinstance(reclaim, bool):
                raise TypeError(f"reclaim must be True or False, not {reclaim!r}")
            on_stale = "remove" if reclaim else "raise"
        if on_stale not in cls._ON_STALE:
            raise ValueError(f"on_stale must be one of {cls._ON_STALE}, "
                             f"not {on_stale!r}")
        c = make_config(name, **config)
        h = ctypes.c_void_p()
        cname = _checks.cstr("name", name)
        ret = lib.v05_plugin_create(cname, ctypes.byref(c), ctypes.byref(h))
        taken_over = False
        if ret == -errno.EEXIST:
            state, info = stale_state(name)
            if on_stale == "raise" or state in ("live", "foreign"):
                _lib.raise_errno(errno.EEXIST,
                                 exists_message(name, state, info))
            if state == "dead" and on_stale == "takeover":
                diff = config_differences(info, c)
                if diff:
                    raise ValueError(
                        f"create segment {name}: a dead owner's segment of "
                        "this name is there, and this config differs from "
                        "the one it keeps (" + "; ".join(diff) + "): take it "
                        "over with its own (Plugin.attach, or this config), "
                        "or replace it: on_stale='remove'")
                ret = lib.v05_plugin_attach(cname, 0, ctypes.byref(h))
                taken_over = ret == 0
            else:
                ret = lib.v05_plugin_replace(cname, ctypes.byref(c),
                                             ctypes.byref(h))
        if ret == -errno.EEXIST:
            _lib.raise_errno(errno.EEXIST, exists_message(name))
        check(ret, f"create segment {name}")
        p = cls(h.value, name)
        p.taken_over = taken_over
        if not taken_over:  # else the segment's own config, read from it
            p.config = c
            p._poll_holds_gil = not c.journal_path
        return p

    def __repr__(self):
        return f"Plugin({self.name!r}{'' if self._p is not None else ', closed'})"

    @classmethod
    def attach(cls, name: str, *, any_uid: bool = False) -> "Plugin":
        """Take over segment `name` whose owner is gone; then call
        recover() for what it had handed out."""
        h = ctypes.c_void_p()
        check(lib.v05_plugin_attach(_checks.cstr("name", name), 1 if any_uid else 0,
                                    ctypes.byref(h)), f"attach segment {name}")
        p = cls(h.value, name)
        p.taken_over = True
        return p

    def close(self, unlink: bool = True, force: bool = False) -> None:
        """Flush the journal, give up the segment (and remove it). Refuses
        while numpy/torch views of slots are alive (they would dangle)
        unless force=True: then the views stay readable (the segment's
        address range is replaced by read-only zeros, kept reserved for the
        life of the process) and read zeros from then on."""
        if self._p is None:
            return
        alive = live_views(self._views)
        if alive and not force:
            _lib.raise_errno(errno.EBUSY, f"close {self.name}: {alive} views of slots are "
                               "still alive; drop them (or close(force=True))")
        p, self._p = self._p, None
        flags = (CLOSE_UNLINK if unlink else 0) | \
            (CLOSE_KEEP_READABLE if alive else 0)
        check(lib.v05_plugin_close(p, flags), f"close {self.name}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=exc[0] is not None)

    def _handle(self):
        if self._p is None:
            _lib.raise_errno(errno.EBADF, f"plugin {self.name} is closed")
        return self._p

    def _track(self, buf):
        track_view(self._views, buf)

    # ---- decisions ---------------------------------------------------

    def _uid_of(self, key, slot):
        uid = self._uids.get(key)
        if uid is None:
            uid = self._released.get(key)
        if uid is None:
            buf = ctypes.create_string_buffer(UID_MAX)
            n = lib.v05_slot_uid(self._handle(), slot, buf, UID_MAX)
            if n >= 0:
                uid = buf.raw[:n].decode("utf-8", "surrogateescape")
                self._uids[key] = uid
        return uid

    def _decisions(self, buf, n: int) -> List[Decision]:
        """The first n decisions of a Decision_ array (decisions_of). A
        "cancel" decision's prompt is gone from the plugin: its name is
        forgotten here as a cancelled batch's are."""
        cancelled = []
        out = decisions_of(buf, n, self._uids, self._final_keys,
                           self._uid_of, cancelled)
        for d in cancelled:
            self._uids.pop(d.key, None)
            keys = self._batch_keys.get(d.batch)
            if keys is not None:
                keys.discard(d.key)
                if not keys:
                    del self._batch_keys[d.batch]
        return out

    def submit(self, prompts: Iterable[Tuple[Uid, Optional[float]]],
               on_error: str = "raise") -> List[Decision]:
        """Register a batch of (uid, prior) and return its first dispatch
        (k_init samples per prompt). A refused prompt (uid already active,
        no free slot) fails alone: with on_error="raise" a SubmitError
        carries the accepted decisions and the refusals; with "skip" they
        are in self.last_rejected. An item that is not a (uid, prior) with a
        str or bytes uid of 1 to 128 bytes and a finite prior in [-1, 1], or
        a uid twice in one batch, fails the whole call before anything is
        submitted (TypeError, ValueError naming the uid). In mode knapsack
        a prior may be None: no estimate yet (v05.core.rules.
        KnapsackHistory.prior), the prompt gets k_init outside the
        knapsack."""
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self._owner = threading.get_ident()
        if self._posted is not None:
            self._apply_posted()
        items = list(prompts)
        n = len(items)
        if n == 0:
            return []
        where = f"submit to segment {self.name}"
        ins = (_lib.PromptIn * n)()
        out = (_lib.Decision_ * n)()
        status = (ctypes.c_int * n)()
        keep, uid_of_key = [], {}
        for i, item in enumerate(items):
            try:
                uid, prior = item
            except (TypeError, ValueError):
                raise TypeError(f"{where}: item {i} is {item!r}, not a "
                                "(uid, prior) pair") from None
            b = uid_checked(uid, where)
            if prior is None:
                if not self._no_estimate_ok():
                    raise TypeError(
                        f"{where}: the prior of uid {uid!r} is None (no "
                        "estimate yet): only in mode knapsack, and "
                        f"this plugin runs mode {self._mode}")
                p = math.nan  # the uniform share, outside the knapsack
            else:
                p = _checks.unit_interval(
                    f"{where}: the prior of uid {uid!r}", prior,
                    " (a value model's success probability p is the prior "
                    "2p - 1: v05.prior_from_p)")
            key = key_of(b)
            if key in uid_of_key:
                other = uid_of_key[key]
                raise ValueError(
                    f"{where}: uid {uid!r} appears twice in one batch" +
                    ("" if other == uid else
                     f" (as {other!r}: the same bytes, so the same prompt)"))
            uid_of_key[key] = uid
            cb = ctypes.create_string_buffer(b, len(b))
            keep.append(cb)
            ins[i].uid = ctypes.cast(cb, ctypes.c_void_p)
            ins[i].uid_len = len(b)
            ins[i].prior = p
        m = check(lib.v05_submit(self._handle(), ins, n, out, status), where)
        # Only the accepted ones are ours to name: a refused uid that is
        # already active keeps the name its live prompt has.
        for i in range(m):
            self._uids[out[i].key] = uid_of_key[out[i].key]
        decisions = self._decisions(out, m)
        if decisions:
            self._batch_keys[decisions[0].batch] = {d.key for d in decisions}
        self.last_rejected = {items[i][0]: -status[i] for i in range(n)
                              if status[i]}
        if self.last_rejected and on_error == "raise":
            raise SubmitError(next(iter(self.last_rejected.values())),
                              self._refused_message(where, n), decisions,
                              self.last_rejected)
        return decisions

    @property
    def mode(self) -> str:
        """The mode's name ("v05-eb", "knapsack", ...: v05.MODES)."""
        if self._mode is None:
            if self.config is not None:
                code = self.config.params.mode
                self._mode = next(m for m, c in MODES.items() if c == code)
            else:  # attached: the segment says
                with Observer(self.name) as o:
                    self._mode = o.info()["mode"]
        return self._mode

    def _no_estimate_ok(self) -> bool:
        """Whether a prior may be None (no estimate): mode knapsack only
        (under knapsack-prior the prior is a value model's, which has one
        for every prompt)."""
        return self.mode == "knapsack"

    def _refused_message(self, where: str, n: int) -> str:
        bad = list(self.last_rejected.items())
        parts = [f"uid {uid!r}: " +
                 _REFUSED.get(code, f"errno {code} ({errno.errorcode.get(code, '?')})")
                 for uid, code in bad[:5]]
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        return (f"{where}: {len(bad)} of {n} prompts refused (the others "
                f"were submitted): " + "; ".join(parts) + more)

    def poll(self, max_decisions: int = 4096) -> List[Decision]:
        """Drain rewards, decide, return new decisions (at most
        max_decisions; the rest wait for the next call)."""
        if type(max_decisions) is not int or \
                not 0 <= max_decisions <= _checks.U32_MAX:
            max_decisions = _checks.u32("max_decisions", max_decisions)
        self._owner = threading.get_ident()
        if self._posted is not None:  # unlocked: a read of one reference
            self._apply_posted()
        buf = self._buf
        poll = _lib.gil.v05_poll if self._poll_holds_gil else lib.v05_poll
        n = poll(self._handle(), buf, min(max_decisions, len(buf)))
        if n < 0:
            check(n, "poll")
        if n and self._eb_share:
            # A first wave folded comes with a decision: the own part
            # for other threads (eb_state_shared), as of this poll.
            self._eb_shared = self.eb_state()
        return self._decisions(buf, n)

    def recover(self) -> List[Decision]:
        """After attach: everything the previous owner handed out and may
        not have seen through (samples to generate again, final groups not
        yet released, barriers waiting)."""
        out = []
        while True:
            n = check(lib.v05_recover(self._handle(), self._buf,
                                      len(self._buf)), "recover")
            if n == 0:
                return out
            out.extend(self._decisions(self._buf, n))

    def resolve(self, batch: int, halt: bool) -> None:
        """Answer a "barrier" decision: halt the batch or release its round."""
        batch = _checks.u64("batch", batch, 1)
        check(lib.v05_resolve(self._handle(), batch, 1 if halt else 0),
              f"resolve batch {batch}")

    def eb_state(self) -> EbState:
        """v05-eb without a barrier: this plugin's own part of the running
        fit (the first waves it folded), for the other engines to merge.
        ValueError unless the plugin runs v05-eb with schedule "stream"."""
        raw = _lib.EbState()
        ret = lib.v05_eb_state_get(self._handle(), ctypes.byref(raw))
        if ret == -errno.EINVAL:
            raise ValueError((lib.v05_errmsg() or b"").decode("utf-8", "replace"))
        check(ret, "eb_state")
        return EbState._of(raw)

    def eb_state_shared(self) -> EbState:
        """eb_state() from any thread (v05.trainers.fit_exchange): on the
        plugin's own thread (the one that polls) it is eb_state(); on
        another, the own part as of the owning thread's last poll that
        returned decisions (every first wave is folded before its
        decision). The first call, on the plugin's thread (or before
        anything polls it), starts keeping it: a copy per such poll."""
        me = threading.get_ident()
        if self._owner == me or (self._owner is None and
                                 self._eb_shared is None):
            self._eb_share = True
            self._eb_shared = self.eb_state()
            return self._eb_shared
        st = self._eb_shared
        if st is None:
            raise RuntimeError(f"plugin {self.name}: call eb_state_shared() "
                               "once on the plugin's own thread first")
        return st

    def set_eb_remote(self, others: EbState) -> None:
        """Hand in the sum of the other engines' parts (EbState.__add__),
        replacing the last one handed in; the next decision fits this
        plugin's own part plus it. Prompts held by a cold start that it
        makes warm are decided at once (poll() returns them)."""
        if not isinstance(others, EbState):
            raise TypeError(f"set_eb_remote takes an EbState, not "
                            f"{type(others).__name__}")
        ret = lib.v05_eb_state_set_remote(self._handle(),
                                          ctypes.byref(others._s))
        if ret in (-errno.EINVAL, -errno.EDOM):
            raise ValueError((lib.v05_errmsg() or b"").decode("utf-8", "replace"))
        check(ret, "set_eb_remote")

    def post_eb_remote(self, others: EbState) -> None:
        """set_eb_remote from any thread: others is checked here (the
        errors set_eb_remote raises for its values), kept, and handed in by
        the owning thread's next poll() or submit(), replacing a posted
        state not yet handed in; then on_post(), if set, wakes that thread
        (the driver sets it: GroupRollout). For v05.trainers.fit_exchange,
        whose exchange completes on a trainer thread while the engine's
        loop polls (a plugin is used by one thread at a time)."""
        if not isinstance(others, EbState):
            raise TypeError(f"post_eb_remote takes an EbState, not "
                            f"{type(others).__name__}")
        scratch = _lib.EbState()  # zero: the sum checks both states
        ret = lib.v05_eb_state_add(ctypes.byref(scratch),
                                   ctypes.byref(others._s))
        if ret == -errno.EDOM:
            raise ValueError((lib.v05_errmsg() or b"").decode("utf-8", "replace"))
        check(ret, "post_eb_remote")
        with self._post_lock:
            self._posted = EbState._of(others._s)
        wake = self.on_post
        if wake is not None:
            wake()

    def _apply_posted(self):
        """On the owning thread: hand in what post_eb_remote kept."""
        with self._post_lock:
            posted, self._posted = self._posted, None
        if posted is not None:
            self.set_eb_remote(posted)

    def set_eb_own(self, own: EbState) -> None:
        """Replace this plugin's own part of the running fit with `own`
        (an eb_state() saved before, e.g. with a checkpoint): a resumed
        run decides under the fit it had. ValueError as set_eb_remote."""
        if not isinstance(own, EbState):
            raise TypeError(f"set_eb_own takes an EbState, not "
                            f"{type(own).__name__}")
        ret = lib.v05_eb_state_set_own(self._handle(), ctypes.byref(own._s))
        if ret in (-errno.EINVAL, -errno.EDOM):
            raise ValueError((lib.v05_errmsg() or b"").decode("utf-8", "replace"))
        check(ret, "set_eb_own")

    def cancel(self, batch: int) -> int:
        """Give up batch `batch` (a decision's .batch): its open prompts
        and their slots are freed, its undelivered decisions discarded;
        finals already returned stay yours to release. Returns the number
        of prompts cancelled."""
        batch = _checks.u64("batch", batch, 1)
        n = check(lib.v05_cancel(self._handle(), batch),
                  f"cancel batch {batch} of segment {self.name}")
        # Its prompts are gone but for the finals handed out, whose names
        # stay until they are released.
        for key in self._batch_keys.pop(batch, ()):
            if key not in self._final_keys:
                self._uids.pop(key, None)
        return n

    # ---- groups ------------------------------------------------------

    @staticmethod
    def _slot(x) -> int:
        if isinstance(x, (Decision, Group)):
            return x.slot
        return _checks.u32("slot", x)

    def group(self, decision: Union[Decision, int]) -> Group:
        """Zero-copy view of a final (or dropped) group."""
        slot = decision.slot if type(decision) is Decision \
            else self._slot(decision)
        g = _lib.Group_()
        r = lib.v05_group(self._handle(), slot, g)
        if r < 0:
            check(r, f"group of slot {slot}")
        row = GROUP_ROW.unpack(g)
        return Group(row, self._uid_of(row[0], slot), self)

    def release(self, x: Union[Decision, Group]) -> None:
        """The slot may be reused (after the journal has its group). x is
        the decision or group being released: its slot, generation and key
        are checked, so a stale one (its slot reused since) or another
        plugin's is refused (ESTALE) and frees nothing."""
        if not isinstance(x, (Decision, Group)):
            raise TypeError("release takes the Decision or Group, not a slot "
                            "number (a bare number cannot be checked)")
        r = lib.v05_release(self._handle(), x.slot, x.gen, x.key)
        if r < 0:
            check(r, f"release the group of uid {self._uids.get(x.key)!r} "
                  f"(slot {x.slot}) of segment {self.name}")
        uid = self._uids.pop(x.key, None)
        self._final_keys.discard(x.key)
        keys = self._batch_keys.get(x.batch)
        if keys is not None:
            keys.discard(x.key)
            if not keys:
                del self._batch_keys[x.batch]
        if uid is not None:
            self._released[x.key] = uid

    def slot_offsets(self, x) -> Tuple[int, int]:
        """Byte offsets of a slot's rewards and advantages in the segment
        file (/dev/shm/v05-NAME), for mapping them elsewhere."""
        r, a = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.v05_slot_offsets(self._handle(), self._slot(x),
                                   ctypes.byref(r), ctypes.byref(a)),
              "slot offsets")
        return r.value, a.value

    # ---- counters, support buffer -----------------------------------

    def stats(self) -> dict:
        """Every counter by name; histograms as "k_hist" {k: n} and
        "latency_hist" {bucket: n} (bucket b: [2^b, 2^(b+1)) ns). Once the
        broker refused someone, "broker_refused_last" says whom ({"uid",
        "gid"}); once a lane was cut off, "cut_lanes" lists each lane cut
        now or before, with why (observer.cut_lanes)."""
        vals = (ctypes.c_uint64 * _lib.COUNTER_SLOTS)()
        check(lib.v05_counters(self._handle(), vals, _lib.COUNTER_SLOTS),
              "counters")
        out = counters_dict(vals)
        if out.get("broker_refused") or out.get("lanes_cut_off"):
            with Observer(self.name) as o:
                info = o.info()
                if out.get("broker_refused"):
                    out["broker_refused_last"] = {
                        "uid": info["broker_refused_uid"],
                        "gid": info["broker_refused_gid"]}
                if out.get("lanes_cut_off"):
                    out["cut_lanes"] = cut_lanes(o.lanes())
        return out

    def support_sample(self, n: int = 256, seed: int = 0):
        """Up to n of the last 512 final groups: (uid, key, mean, k); uid
        is None for a group released more than RELEASED_UIDS releases ago
        (its uid is no longer remembered here)."""
        n = _checks.u32("n", n, 0, 1 << 20)
        seed = _checks.u64("seed", seed)
        out = (_lib.Support * max(1, n))()
        m = check(lib.v05_support_sample(self._handle(), out, n, seed),
                  "support sample")
        return [(self._uids.get(out[i].key, self._released.get(out[i].key)),
                 out[i].key, out[i].mean, out[i].k) for i in range(m)]
