# SPDX-License-Identifier: MIT
"""The plugin: lives in the engine's process, turns rewards into decisions."""

import asyncio
import collections
import ctypes
import errno
import dataclasses
import weakref
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _checks, _lib
from ._lib import V05Error, check, lib

__all__ = ["Plugin", "Decision", "Group", "SubmitError", "key_of"]

# Every name and number below comes from the loaded library.
MODES = _lib.names(lib.v05_mode_name)
# Advantage normaliser of the fused modes (docs/STATISTICS.md).
SIGMAS = _lib.names(lib.v05_sigma_name)
SCHEDULES = _lib.names(lib.v05_schedule_name, stop="?")
ACTIONS = {v: k for k, v in _lib.names(lib.v05_action_name).items()}
KINDS = {_lib.const("V05_DECISION_" + k.upper()): k
         for k in ("sample", "final", "drop", "barrier")}

FLAG_PADDED = _lib.const("V05_DF_PADDED")
FLAG_HALTED = _lib.const("V05_DF_HALTED")
FLAG_RECOVERED = _lib.const("V05_DF_RECOVERED")
CONFIG_WAIT_THREAD = _lib.const("V05_CONFIG_WAIT_THREAD")
CONFIG_EXTERNAL_HALT = _lib.const("V05_CONFIG_EXTERNAL_HALT")
CONFIG_PRODUCER_BROKER = _lib.const("V05_CONFIG_PRODUCER_BROKER")
BROKER_ALLOW_MAX = _lib.const("V05_BROKER_ALLOW_MAX")
CLOSE_UNLINK = _lib.const("V05_CLOSE_UNLINK")
CLOSE_KEEP_READABLE = _lib.const("V05_CLOSE_KEEP_READABLE")
UID_MAX = _lib.const("V05_UID_MAX_BYTES")

Uid = Union[str, bytes]


def _uid_bytes(uid: Uid) -> bytes:
    if isinstance(uid, str):
        return uid.encode("utf-8")
    if isinstance(uid, (bytes, bytearray, memoryview)):
        return bytes(uid)
    raise TypeError(f"uid must be str or bytes, not {type(uid).__name__}")


def _ids(what: str, ids, lookup) -> List[int]:
    """A broker allow-list: uids or gids as ints or names (resolved here
    with pwd / grp, so a typo fails now, not as a refused worker later)."""
    if isinstance(ids, (str, bytes, int)):
        raise TypeError(f"{what} must be a list of ids or names, "
                        f"not a single {type(ids).__name__}")
    out = []
    for x in ids:
        if isinstance(x, str):
            try:
                x = lookup(x)
            except KeyError:
                raise ValueError(f"{what}: no such name {x!r}") from None
        out.append(_checks.u32(what, x, 0, _checks.U32_MAX - 1))
    if len(out) > BROKER_ALLOW_MAX:
        raise ValueError(f"{what}: {len(out)} entries, at most "
                         f"{BROKER_ALLOW_MAX}")
    return out


def _uid_of_name(name: str) -> int:
    import pwd
    return pwd.getpwnam(name).pw_uid


def _gid_of_name(name: str) -> int:
    import grp
    return grp.getgrnam(name).gr_gid


def key_of(uid: Uid) -> int:
    """The 64-bit key v05 uses for a uid (XXH3 of its bytes)."""
    b = _uid_bytes(uid)
    return lib.v05_key(b, len(b))


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the engine must do next for one prompt.

    kind: "sample" (generate `samples`), "final" (the group's advantages are
    in `slot`), "drop" (dapo: the group carries no signal; release it), or
    "barrier" (external halt: `batch` waits at a round barrier, `k` of its
    `batch_size` prompts need more; see v05.distributed).
    """
    kind: str
    uid: Optional[Uid]
    key: int
    slot: int
    samples: List[int]
    k: int
    baseline: float
    batch: int
    latency_ns: int
    padded: bool
    halted: bool
    recovered: bool
    batch_size: int = 0
    gen: int = 0  # the prompt instance: release() checks it with the key,
    # and every reward for these samples carries it (RewardWriter.push)


class Group:
    """A final group, seen in place: `rewards` and `advantages` are numpy
    arrays over the segment's memory (no copy). They stay valid until the
    group is released; after that the slot may hold another group."""

    __slots__ = ("uid", "key", "slot", "gen", "k", "baseline", "sigma",
                 "mean", "prior", "action", "seq", "batch", "rewards",
                 "advantages", "_buffers", "_readonly", "__weakref__")

    def __init__(self, g, uid, owner, readonly=False):
        self.uid = uid
        self.key = g.key
        self.slot = g.slot
        self.gen = g.gen
        self.k = g.k
        self.baseline = g.baseline
        self.sigma = g.sigma
        self.mean = g.mean
        self.prior = g.prior
        self.action = ACTIONS.get(g.action, "?")
        self.seq = g.seq
        self.batch = g.batch
        rbuf = (ctypes.c_float * g.k).from_address(
            ctypes.addressof(g.rewards.contents)) if g.k else (ctypes.c_float * 0)()
        abuf = (ctypes.c_float * g.k).from_address(
            ctypes.addressof(g.advantages.contents)) if g.k else (ctypes.c_float * 0)()
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


class SubmitError(V05Error):
    """Some prompts of a submit were refused; the others were registered.
    `decisions` is the first dispatch of the accepted ones, `rejected` maps
    each refused uid to its errno."""

    def __init__(self, errno_, msg, decisions, rejected):
        super().__init__(errno_, msg)
        self.decisions = decisions
        self.rejected = rejected


def _samples(mask: int) -> List[int]:
    return [s for s in range(64) if mask >> s & 1]


class LruMap:
    """A dict that keeps its `cap` most recently set keys: what a long run
    remembers per prompt stays bounded."""

    def __init__(self, cap: int):
        self.cap = cap
        self._d = collections.OrderedDict()

    def __setitem__(self, key, value):
        self._d[key] = value
        self._d.move_to_end(key)
        if len(self._d) > self.cap:
            self._d.popitem(last=False)

    def get(self, key, default=None):
        return self._d.get(key, default)

    def pop(self, key, default=None):
        return self._d.pop(key, default)

    def __len__(self):
        return len(self._d)


# Released prompts' uids kept for support_sample: the support buffer's
# largest capacity (V05_SUPPORT_MAX).
RELEASED_UIDS = 65536


class Plugin:
    """v05 inside the engine's process. Create one per engine (it owns a
    shared-memory segment), or attach to take over a dead owner's."""

    def __init__(self, handle, name):
        self._p = ctypes.c_void_p(handle)
        self.name = name
        # key -> uid as the caller gave it: live prompts here (dropped at
        # release), the last RELEASED_UIDS released ones in _released.
        self._uids = {}
        self._released = LruMap(RELEASED_UIDS)
        self._views = []  # weak references to slot buffers handed out
        self._buf = (_lib.Decision_ * 4096)()
        self.last_rejected = {}
        self.config = None  # the v05_config it was created with (create)

    @property
    def halt_fraction(self) -> float:
        """The batch halt this plugin applies (from its segment after an
        attach), so that a coordinator and the engines cannot disagree."""
        if self.config is not None:
            return self.config.halt_fraction
        from .observer import Observer
        with Observer(self.name) as o:
            return o.info()["halt_fraction"]

    # ---- lifecycle ---------------------------------------------------

    @classmethod
    def create(cls, name: str, *, cost: Optional[float] = None,
               k_init: Optional[int] = None, k_step: Optional[int] = None,
               k_max: Optional[int] = None,
               halt_fraction: Optional[float] = None,
               pad_multiple: Optional[int] = None, mode: Optional[str] = None,
               schedule: Optional[str] = None,
               max_prompts: Optional[int] = None,
               max_producers: Optional[int] = None,
               lane_capacity: Optional[int] = None,
               max_batches: Optional[int] = None,
               stream_deadline_us: Optional[int] = None,
               journal: Optional[str] = None, journal_sync: bool = False,
               file_mode: Optional[int] = None, wait: str = "auto",
               external_halt: bool = False, sigma: Optional[str] = None,
               paper: bool = False,
               producer_broker: bool = False,
               broker_allow_uids: Sequence[Union[int, str]] = (),
               broker_allow_gids: Sequence[Union[int, str]] = (),
               lane_cut_records: Optional[int] = None,
               lane_cut_fraction: Optional[float] = None) -> "Plugin":
        """Create segment `name` and own it. Parameters as in
        include/v05/plugin.h (struct v05_config); every one is checked.
        A parameter left at None keeps the library's default
        (v05_config_default: mode "v05-eb", sigma "rms", ...); paper=True
        starts from v05_config_paper instead (mode "v05", sigma "paper",
        halt_fraction 0.25: the paper's exact behaviour), and explicit
        parameters still win. producer_broker=True lets reward workers of
        other users in (RewardWriter.attach(..., any_uid=True)) through a
        broker thread that hands each its own lane only, and only to the
        users named: broker_allow_uids (uids or user names) and
        broker_allow_gids (gids or group names, matched against a worker's
        effective gid and its supplementary groups), at least one entry in
        all, at most BROKER_ALLOW_MAX each; the plugin's own uid is always
        admitted. file_mode may let others read the segment, never write
        it. lane_cut_records and lane_cut_fraction set when a producer
        whose records are mostly rejected is cut off (at least that many
        records of its claim, more than that fraction rejected; defaults
        4 x max_prompts x k_max records, at least 4096, and 0.9;
        fraction 1.0 never cuts; docs/SHM.md, "Cutting a lane off")."""
        c = _lib.Config()
        if paper:
            lib.v05_config_paper(ctypes.byref(c))
        else:
            lib.v05_config_default(ctypes.byref(c))
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {sorted(MODES)}")
        if sigma is not None and sigma not in SIGMAS:
            raise ValueError(f"sigma {sigma!r} is not one of {sorted(SIGMAS)}")
        if schedule is not None and schedule not in SCHEDULES:
            raise ValueError(f"schedule {schedule!r} is not one of "
                             f"{sorted(SCHEDULES)}")
        if wait not in ("auto", "thread"):
            raise ValueError("wait must be 'auto' or 'thread'")
        uids = _ids("broker_allow_uids", broker_allow_uids, _uid_of_name)
        gids = _ids("broker_allow_gids", broker_allow_gids, _gid_of_name)
        if producer_broker and not uids and not gids:
            raise ValueError(
                f"create {name}: producer_broker=True needs broker_allow_uids "
                "or broker_allow_gids: the broker hands lanes only to the "
                "users you name (reward workers of another user; your own "
                "uid is always admitted)")
        if (uids or gids) and not producer_broker:
            raise ValueError(
                f"create {name}: broker_allow_uids / broker_allow_gids "
                "without producer_broker=True: no broker would use them")
        u32 = _checks.u32
        if cost is not None:
            c.params.cost = cost
        if k_init is not None:
            c.params.k_init = u32("k_init", k_init, 1)
        if k_step is not None:
            c.params.k_step = u32("k_step", k_step, 1)
        if k_max is not None:
            c.params.k_max = u32("k_max", k_max, 1)
        if mode is not None:
            c.params.mode = MODES[mode]
        if sigma is not None:
            c.params.sigma = SIGMAS[sigma]
        if halt_fraction is not None:
            c.halt_fraction = halt_fraction
        if pad_multiple is not None:
            c.pad_multiple = u32("pad_multiple", pad_multiple, 1)
        if schedule is not None:
            c.schedule = SCHEDULES[schedule]
        if stream_deadline_us is not None:
            c.stream_deadline_us = u32("stream_deadline_us",
                                       stream_deadline_us)
        for field, value in (("max_prompts", max_prompts),
                             ("max_producers", max_producers),
                             ("lane_capacity", lane_capacity),
                             ("max_batches", max_batches)):
            if value is not None:
                setattr(c, field, u32(field, value, 1))
        if file_mode is not None:
            c.file_mode = u32("file_mode", file_mode, 0, 0o777)
        for i, x in enumerate(uids):
            c.broker_uids[i] = x
        for i, x in enumerate(gids):
            c.broker_gids[i] = x
        c.n_broker_uids, c.n_broker_gids = len(uids), len(gids)
        if lane_cut_records is not None:
            c.lane_cut_records = u32("lane_cut_records", lane_cut_records, 1)
        if lane_cut_fraction is not None:
            f = float(lane_cut_fraction)
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"lane_cut_fraction {lane_cut_fraction!r} "
                                 "is not in [0, 1]")
            # 0 in C is "the default": the smallest fraction is 1 per mille.
            c.lane_cut_permille = max(1, round(f * 1000))
        c.flags |= ((CONFIG_WAIT_THREAD if wait == "thread" else 0) |
                    (CONFIG_EXTERNAL_HALT if external_halt else 0) |
                    (CONFIG_PRODUCER_BROKER if producer_broker else 0))
        if journal_sync:
            c.journal_sync = _lib.const("V05_JOURNAL_SYNC_BATCH")
        c.journal_path = _checks.cstr("journal", journal) if journal else None
        h = ctypes.c_void_p()
        check(lib.v05_plugin_create(_checks.cstr("name", name), ctypes.byref(c),
                                    ctypes.byref(h)), f"create {name}")
        p = cls(h.value, name)
        p.config = c
        return p

    @classmethod
    def attach(cls, name: str, *, any_uid: bool = False) -> "Plugin":
        """Take over segment `name` whose owner is gone; then call
        recover() for what it had handed out."""
        h = ctypes.c_void_p()
        check(lib.v05_plugin_attach(_checks.cstr("name", name), 1 if any_uid else 0,
                                    ctypes.byref(h)), f"attach {name}")
        return cls(h.value, name)

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

    def _decision(self, d) -> Decision:
        kind = KINDS.get(d.kind, "?")
        uid = None if kind == "barrier" else self._uid_of(d.key, d.slot)
        return Decision(kind=kind, uid=uid, key=d.key, slot=d.slot, gen=d.gen,
                        samples=_samples(d.samples) if kind == "sample" else [],
                        k=d.k, baseline=d.baseline, batch=d.batch,
                        latency_ns=d.latency_ns,
                        padded=bool(d.flags & FLAG_PADDED),
                        halted=bool(d.flags & FLAG_HALTED),
                        recovered=bool(d.flags & FLAG_RECOVERED),
                        batch_size=d.samples if kind == "barrier" else 0)

    def submit(self, prompts: Iterable[Tuple[Uid, float]],
               on_error: str = "raise") -> List[Decision]:
        """Register a batch of (uid, prior) and return its first dispatch
        (k_init samples per prompt). A refused prompt (uid already active,
        no free slot, bad uid or prior) fails alone: with on_error="raise"
        a SubmitError carries the accepted decisions and the refusals; with
        "skip" they are in self.last_rejected."""
        items = list(prompts)
        n = len(items)
        if n == 0:
            return []
        ins = (_lib.PromptIn * n)()
        out = (_lib.Decision_ * n)()
        status = (ctypes.c_int * n)()
        keep = []
        for i, (uid, prior) in enumerate(items):
            b = _uid_bytes(uid)
            cb = ctypes.create_string_buffer(b, len(b))
            keep.append(cb)
            ins[i].uid = ctypes.cast(cb, ctypes.c_void_p)
            ins[i].uid_len = len(b)
            ins[i].prior = float(prior)
            self._uids[key_of(b)] = uid
        m = check(lib.v05_submit(self._handle(), ins, n, out, status), "submit")
        decisions = [self._decision(out[i]) for i in range(m)]
        self.last_rejected = {items[i][0]: -status[i] for i in range(n)
                              if status[i]}
        if self.last_rejected and on_error == "raise":
            raise SubmitError(next(iter(self.last_rejected.values())),
                              f"submit: {len(self.last_rejected)} of {n} "
                              "prompts refused", decisions, self.last_rejected)
        return decisions

    def poll(self, max_decisions: int = 4096) -> List[Decision]:
        """Drain rewards, decide, return new decisions (at most
        max_decisions; the rest wait for the next call)."""
        max_decisions = min(_checks.u32("max_decisions", max_decisions),
                            len(self._buf))
        n = check(lib.v05_poll(self._handle(), self._buf, max_decisions), "poll")
        return [self._decision(self._buf[i]) for i in range(n)]

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
            out.extend(self._decision(self._buf[i]) for i in range(n))

    def resolve(self, batch: int, halt: bool) -> None:
        """Answer a "barrier" decision: halt the batch or release its round."""
        batch = _checks.u64("batch", batch, 1)
        check(lib.v05_resolve(self._handle(), batch, 1 if halt else 0),
              f"resolve batch {batch}")

    def cancel(self, batch: int) -> int:
        """Give up batch `batch` (a decision's .batch): its open prompts
        and their slots are freed, its undelivered decisions discarded;
        finals already returned stay yours to release. Returns the number
        of prompts cancelled."""
        if not 0 < batch < 2**64:
            raise ValueError(f"batch {batch} is not a batch id")
        return check(lib.v05_cancel(self._handle(), batch),
                     f"cancel batch {batch}")

    # ---- groups ------------------------------------------------------

    @staticmethod
    def _slot(x) -> int:
        if isinstance(x, (Decision, Group)):
            return x.slot
        return _checks.u32("slot", x)

    def group(self, decision: Union[Decision, int]) -> Group:
        """Zero-copy view of a final (or dropped) group."""
        g = _lib.Group_()
        slot = self._slot(decision)
        check(lib.v05_group(self._handle(), slot, ctypes.byref(g)),
              f"group of slot {slot}")
        return Group(g, self._uid_of(g.key, slot), self)

    def release(self, x: Union[Decision, Group]) -> None:
        """The slot may be reused (after the journal has its group). x is
        the decision or group being released: its slot, generation and key
        are checked, so a stale one (its slot reused since) or another
        plugin's is refused (ESTALE) and frees nothing."""
        if not isinstance(x, (Decision, Group)):
            raise TypeError("release takes the Decision or Group, not a slot "
                            "number (a bare number cannot be checked)")
        check(lib.v05_release(self._handle(), x.slot, x.gen, x.key),
              f"release slot {x.slot}")
        uid = self._uids.pop(x.key, None)
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

    # ---- waiting -----------------------------------------------------

    def fileno(self) -> int:
        return check(lib.v05_fd(self._handle()), "fd")

    fd = property(fileno)

    def wait_blocking(self, timeout: Optional[float] = None) -> bool:
        """Block until rewards (or a stream deadline) arrive: True, or
        False at the timeout."""
        ms = -1 if timeout is None else \
            min(max(0, int(timeout * 1000)), _checks.INT_MAX)
        while True:
            r = lib.v05_wait(self._handle(), ms)
            if r == -4:  # EINTR: retried, as PEP 475 does
                continue
            return check(r, "wait") == 1

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """asyncio: wait for rewards through the loop (add_reader on the
        plugin's fd). True: there is work, poll now; False: timed out."""
        ms = -1 if timeout is None else \
            min(max(0, int(timeout * 1000)), _checks.INT_MAX)
        if check(lib.v05_arm(self._handle(), ms), "arm") == 1:
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = self.fileno()

        def ready():
            if not fut.done():
                fut.set_result(True)

        loop.add_reader(fd, ready)
        try:
            # The armed wait ends by itself at the timeout (the fd turns
            # readable), so this bound is only a safety net.
            await asyncio.wait_for(fut, None if timeout is None else timeout + 1)
        except asyncio.TimeoutError:
            pass
        finally:
            loop.remove_reader(fd)
        return check(lib.v05_pending(self._handle()), "pending") == 1

    @property
    def wait_path(self) -> str:
        return lib.v05_wait_path(self._handle()).decode()

    @property
    def wait_reason(self) -> str:
        return lib.v05_wait_reason(self._handle()).decode()

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
            from .observer import Observer, cut_lanes
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


def track_view(views: list, buf) -> None:
    """Remember a slot buffer weakly (numpy/torch views keep it alive)."""
    if len(views) >= 4096:
        views[:] = [r for r in views if r() is not None]
    views.append(weakref.ref(buf))


def live_views(views: list) -> int:
    return sum(1 for r in views if r() is not None)


def counters_dict(vals: Sequence[int]) -> dict:
    """Counter values by name (shared by Plugin.stats and v05.metrics)."""
    out, khist, lhist = {}, {}, {}
    for i in range(_lib.COUNTER_SLOTS):
        name = lib.v05_counter_name(i)
        if not name:
            continue
        name = name.decode()
        if name.startswith("k_hist_"):
            if vals[i]:
                khist[int(name[7:])] = vals[i]
        elif name.startswith("latency_hist_"):
            if vals[i]:
                lhist[int(name[13:])] = vals[i]
        else:
            out[name] = vals[i]
    out["k_hist"] = khist
    out["latency_hist"] = lhist
    return out
