# SPDX-License-Identifier: MIT
"""Read-only views of a live segment from any process of its uid: what
``v05ctl stat`` shows, for Python (the Prometheus exporter uses it)."""

import ctypes
import errno
from typing import Optional

from . import _checks, _lib
from ._lib import check, lib
from .counters import counters_dict
from .decision import key_of
from .eb_state import EbState

__all__ = ["Observer", "cut_lanes"]


_VIEW_STATES = {_lib.const("V05_PROMPT_COLLECTING"): "collecting",
                _lib.const("V05_PROMPT_HELD"): "held",
                _lib.const("V05_PROMPT_FINAL"): "final"}


def _bits(mask: int) -> list:
    return [i for i in range(64) if mask >> i & 1]


def cut_lanes(lanes: list) -> list:
    """The lanes of `lanes` (Observer.lanes()) cut off now or before, each
    with why: a producer whose records were mostly rejected (docs/SHM.md,
    "Cutting a lane off")."""
    out = []
    for x in lanes:
        if not x["cut"] and not x["cuts"]:
            continue
        if x["cut"]:
            reason = (f"lane {x['lane']}: pid {x['cut_pid']}'s claim is cut "
                      f"off: {x['cut_rejected']} of its last "
                      f"{x['cut_records']} records were rejected; its "
                      "records are not read; the lane is free again once "
                      "that producer closes or exits")
        else:
            reason = (f"lane {x['lane']}: cut off {x['cuts']} time(s) before "
                      f"(last: {x['cut_rejected']} of {x['cut_records']} "
                      f"records rejected), {x['discarded']} records dropped "
                      "unread; free again")
        out.append({k: x[k] for k in ("lane", "cut", "cut_pid", "cuts",
                                      "cut_records", "cut_rejected",
                                      "discarded", "applied", "rejected")}
                   | {"reason": reason})
    return out


class Observer:
    """``Observer(name)`` maps segment ``name`` read-only; it writes
    nothing, so it is safe against a running plugin at any rate."""

    def __init__(self, name: str, *, any_uid: bool = False):
        self.name = name
        h = ctypes.c_void_p()
        check(lib.v05_observer_open(_checks.cstr("name", name), 1 if any_uid else 0,
                                    ctypes.byref(h)),
              f"observe segment {name}")
        self._h = h

    def _handle(self):
        if self._h is None:
            _lib.raise_errno(errno.EBADF, "observer is closed")
        return self._h

    def counters(self) -> dict:
        """Every counter by name, with "k_hist" {k: n} and "latency_hist"
        {bucket: n} (bucket b holds latencies in [2^b, 2^(b+1)) ns)."""
        vals = (ctypes.c_uint64 * _lib.COUNTER_SLOTS)()
        check(lib.v05_observer_counters(self._handle(), vals,
                                        _lib.COUNTER_SLOTS), "counters")
        return counters_dict(vals)

    def info(self) -> dict:
        i = _lib.ObserverInfo()
        check(lib.v05_observer_info(self._handle(), ctypes.byref(i)), "info")
        out = {f: getattr(i, f) for f, _ in _lib.ObserverInfo._fields_
               if f not in ("journal_error", "journal_path", "reserved",
                            "reserved2", "broker_uids", "broker_gids")}
        out["broker"] = bool(i.broker)
        out["broker_uids"] = list(i.broker_uids[:min(i.n_broker_uids, 16)])
        out["broker_gids"] = list(i.broker_gids[:min(i.n_broker_gids, 16)])
        out["journal_error"] = i.journal_error.decode("utf-8", "replace")
        out["journal_path"] = i.journal_path.decode("utf-8", "replace")
        out["owner_alive"] = bool(i.owner_alive)
        out["asym_doorbell"] = bool(i.asym_doorbell)
        out["wait_path"] = lib.v05_wait_path_name(i.wait_path).decode()
        out["journal_state"] = lib.v05_journal_state_name(i.journal_state).decode()
        out["mode"] = lib.v05_mode_name(i.mode).decode()
        out["schedule"] = lib.v05_schedule_name(i.schedule).decode()
        return out

    def lanes(self) -> list:
        """Per lane: owner_pid, owner_alive, fill, high_water, consumed,
        claims; applied and rejected (the records the plugin applied and
        rejected); cut (its producer is cut off now), cut_pid, cuts,
        cut_records and cut_rejected (the last cut's window), discarded
        (records of cut claims dropped unread)."""
        n = 256
        arr = (_lib.LaneStat * n)()
        m = check(lib.v05_observer_lanes(self._handle(), arr, n), "lanes")
        return [{"lane": i, "owner_pid": arr[i].owner_pid,
                 "owner_alive": bool(arr[i].owner_alive), "fill": arr[i].fill,
                 "high_water": arr[i].high_water, "consumed": arr[i].consumed,
                 "claims": arr[i].claims, "applied": arr[i].applied,
                 "rejected": arr[i].rejected, "cut": bool(arr[i].cut),
                 "cut_pid": arr[i].cut_pid, "cuts": arr[i].cuts,
                 "cut_records": arr[i].cut_records,
                 "cut_rejected": arr[i].cut_rejected,
                 "discarded": arr[i].discarded} for i in range(m)]

    def prompt(self, uid) -> Optional[dict]:
        """Prompt `uid` as the owner's table holds it now, or None when it
        holds no such prompt: {"gen", "issued", "received" (sample index
        lists), "state": "collecting" | "held" | "final"}. A hint for an
        early answer (the owner checks every record itself); V05Error
        EAGAIN when every attempt overlapped the owner moving entries
        (ask again)."""
        v = _lib.PromptView()
        r = check(lib.v05_observer_prompt(self._handle(), key_of(uid),
                                          ctypes.byref(v)),
                  f"look uid {uid!r} up in segment {self.name}")
        if r == 0:
            return None
        return {"gen": v.gen, "issued": _bits(v.issued),
                "received": _bits(v.received),
                "state": _VIEW_STATES.get(v.state, "?")}

    def eb_state(self) -> EbState:
        """v05-eb under the stream schedule: the owner's own part of the
        running fit, copied whole while it runs (what a front end hands
        the others, docs/SERVERS.md). V05Error EINVAL for a segment of
        another mode or schedule, EAGAIN when the owner kept folding."""
        st = _lib.EbState()
        check(lib.v05_observer_eb_state(self._handle(), ctypes.byref(st)),
              f"read the fit of segment {self.name}")
        return EbState._of(st)

    def close(self):
        if self._h is not None:
            lib.v05_observer_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
