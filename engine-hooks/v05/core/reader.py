# SPDX-License-Identifier: MIT
"""The trainer's side, in another process: final groups off the segment's
completion ring, as read-only zero-copy views."""

import ctypes
import errno
from typing import Optional

from . import _checks, _lib
from ._lib import check, lib
from .group import Group, Views, live_views, track_view

__all__ = ["Reader"]


class Reader:
    """The trainer's side, in another process: final groups as zero-copy
    views of the segment, each handed back with release()."""

    def __init__(self, handle, name):
        self._p = ctypes.c_void_p(handle)
        self.name = name
        self._views = Views()  # group buffers with views alive

    @classmethod
    def open(cls, name: str, *, any_uid: bool = False) -> "Reader":
        h = ctypes.c_void_p()
        check(lib.v05_reader_open(_checks.cstr("name", name), 1 if any_uid else 0,
                                  ctypes.byref(h)), f"open a reader of {name}")
        return cls(h.value, name)

    def _track(self, buf):
        track_view(self._views, buf)

    def next(self) -> Optional[Group]:
        """The next final group, or None if none is waiting."""
        if self._p is None:
            _lib.raise_errno(errno.EBADF, "reader is closed")
        g = _lib.Group_()
        if check(lib.v05_reader_next(self._p, ctypes.byref(g)), "reader next") == 0:
            return None
        uid = ctypes.string_at(g.uid, g.uid_len).decode("utf-8", "surrogateescape")
        return Group(_lib.GROUP_ROW.unpack(bytes(g)), uid, self, readonly=True)

    def release(self, group) -> None:
        g = _lib.Group_()
        g.slot = group.slot
        g.gen = group.gen
        check(lib.v05_reader_release(self._p, ctypes.byref(g)), "reader release")

    def close(self) -> None:
        """Give up the reader's claim and unmap. Refused while numpy views
        of its groups are alive: they would point at unmapped memory."""
        if self._p is not None:
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
        if exc[0] is not None and live_views(self._views):
            return
        self.close()
