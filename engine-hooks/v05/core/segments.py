# SPDX-License-Identifier: MIT
"""Segments by name: remove one, reclaim a dead owner's, say who holds one."""

from . import _checks
from ._lib import check, lib
from .observer import Observer

__all__ = ["unlink", "reclaim", "exists_message"]


def unlink(name: str) -> None:
    """Remove segment `name` (mappings stay valid until closed)."""
    check(lib.v05_segment_unlink(_checks.cstr("name", name)), f"unlink {name}")


def reclaim(name: str) -> None:
    """Remove the segment of a dead owner; V05Error(EBUSY) if it lives."""
    check(lib.v05_segment_reclaim(_checks.cstr("name", name), 0), f"reclaim {name}")


def exists_message(name: str, reclaim: bool) -> str:
    """Why segment `name` exists and what to do about it, for create's
    EEXIST: a leftover of a dead owner, or another live run's."""
    try:
        with Observer(name) as o:
            info = o.info()
    except OSError:
        return (f"create segment {name}: it already exists (another user's, "
                "or unreadable); pick another name, or remove it: "
                f"v05ctl reclaim {name} (a dead owner's), v05.unlink({name!r})")
    pid = info["owner_pid"]
    if pid and info["owner_alive"]:
        return (f"create segment {name}: it already exists and its owner, "
                f"pid {pid}, is alive (another run uses this name); pick "
                "another name")
    who = f"its owner pid {pid} is gone" if pid else \
        "it was closed without being removed"
    if reclaim:
        return (f"create segment {name}: it already exists and {who}, but "
                "it could not be removed")
    return (f"create segment {name}: it already exists and {who} (left over "
            "from an earlier run): Plugin.create(..., reclaim=True) removes "
            f"it, as does `v05ctl reclaim {name}` (`v05ctl reclaim --stale` "
            "removes every such segment)")
