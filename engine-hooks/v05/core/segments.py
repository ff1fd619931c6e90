# SPDX-License-Identifier: MIT
"""Segments by name: remove one (or what is left of it), reclaim a dead
owner's, say who holds one and what to do about it."""

import errno
import os

from . import _checks
from ._lib import check, lib
from .names import CONFIG_PRODUCER_BROKER, MODES, SCHEDULES
from .observer import Observer

__all__ = ["unlink", "reclaim", "exists_message", "stale_state",
           "config_differences"]


def unlink(name: str) -> None:
    """Remove segment `name`, or whatever is left of it (its side files
    after its file was removed): no error once anything was removed;
    FileNotFoundError when nothing of the name exists (mappings stay valid
    until closed)."""
    check(lib.v05_segment_unlink(_checks.cstr("name", name)), f"unlink {name}")


def reclaim(name: str) -> None:
    """Remove the segment of a dead owner, or what is left of one;
    V05Error(EBUSY) if its owner lives."""
    check(lib.v05_segment_reclaim(_checks.cstr("name", name), 0), f"reclaim {name}")


def stale_state(name: str):
    """What holds segment `name` that create found taken: ("live", info),
    ("dead", info) (its owner died, or closed without removing it),
    ("leftover", None) (its file is gone, its side files are not),
    ("foreign", message) (another user's, or not a segment this process
    can read)."""
    try:
        with Observer(name) as o:
            info = o.info()
    except FileNotFoundError:
        shm = os.environ.get("V05_SHM_DIR", "")
        side = os.path.join(shm if shm.startswith("/") else "/dev/shm",
                            f"v05-{name}:side")
        try:
            st = os.lstat(side)
        except OSError:
            return "leftover", None
        if st.st_uid != os.geteuid():
            # Another user's name: never ours to clear, root or not.
            return "foreign", (f"{side} belongs to uid {st.st_uid}, not "
                               f"to uid {os.geteuid()}")
        return "leftover", None
    except OSError as e:
        return "foreign", str(e)
    if info["owner_pid"] and info["owner_alive"]:
        return "live", info
    return "dead", info


def exists_message(name: str, state=None, info=None) -> str:
    """Why segment `name` exists and what to do about it, for create's
    EEXIST; the first remedy named is the one most likely wanted, and
    each one works."""
    if state is None:
        state, info = stale_state(name)
    if state == "foreign":
        return (f"create segment {name}: the name is taken by something this "
                f"process cannot take over ({info}); pick another name, or "
                f"have its owner remove it (v05.unlink({name!r}) or "
                f"`v05ctl reclaim {name}` as that user), or root: "
                f"`v05ctl reclaim --any-uid {name}`")
    if state == "live":
        return (f"create segment {name}: it already exists and its owner, "
                f"pid {info['owner_pid']}, is alive (another run uses this "
                "name); pick another name")
    if state == "leftover":
        return (f"create segment {name}: its file is gone but its side files "
                f"are left: Plugin.create({name!r}, ...) clears them (the "
                f"default on_stale), as do v05.reclaim({name!r}) and "
                f"`v05ctl reclaim {name}`")
    pid = info["owner_pid"]
    who = f"its owner pid {pid} is gone" if pid else \
        "it was closed without being removed"
    return (f"create segment {name}: it already exists and {who} (left over "
            f"from an earlier run): Plugin.create({name!r}, ...) takes it "
            "over, keeping its groups (on_stale='takeover', the default; then "
            "call recover()); Plugin.create(..., on_stale='remove') replaces "
            f"it with a new segment; v05.reclaim({name!r}) or "
            f"`v05ctl reclaim {name}` removes it (`v05ctl reclaim --stale` "
            "removes every such segment)")


# The settings a segment stores that Plugin.create's config gives (the
# observer's name for it, the config's).
_SETTINGS = (
    ("mode", None), ("schedule", None),
    ("cost", "params.cost"), ("k_init", "params.k_init"),
    ("k_step", "params.k_step"), ("k_max", "params.k_max"),
    ("halt_fraction", "halt_fraction"), ("pad_multiple", "pad_multiple"),
    ("slots", "max_prompts"), ("lanes", "max_producers"),
    ("lane_capacity", "lane_capacity"), ("batches", "max_batches"),
)


def config_differences(info: dict, c) -> list:
    """The settings in which config c differs from a segment's (its
    observer info): ["max_prompts: the segment has 8, this config 16", ...]."""
    out = []
    for key, field in _SETTINGS:
        have = info[key]
        if field is None:
            table = MODES if key == "mode" else SCHEDULES
            code = c.params.mode if key == "mode" else c.schedule
            want = next((n for n, v in table.items() if v == code), code)
            shown = key
        else:
            obj = c
            for part in field.split("."):
                obj = getattr(obj, part)
            want, shown = obj, field.split(".")[-1]
        if have != want:
            out.append(f"{shown}: the segment has {have!r}, this config {want!r}")
    broker = bool(c.flags & CONFIG_PRODUCER_BROKER)
    if info["broker"] != broker or \
            info["broker_uids"] != list(c.broker_uids[:c.n_broker_uids]) or \
            info["broker_gids"] != list(c.broker_gids[:c.n_broker_gids]):
        out.append("producer_broker / broker_allow_uids / broker_allow_gids "
                   "differ")
    return out
