# SPDX-License-Identifier: MIT
"""Segments by name: remove one, reclaim a dead owner's."""

from . import _checks
from ._lib import check, lib

__all__ = ["unlink", "reclaim"]


def unlink(name: str) -> None:
    """Remove segment `name` (mappings stay valid until closed)."""
    check(lib.v05_segment_unlink(_checks.cstr("name", name)), f"unlink {name}")


def reclaim(name: str) -> None:
    """Remove the segment of a dead owner; V05Error(EBUSY) if it lives."""
    check(lib.v05_segment_reclaim(_checks.cstr("name", name), 0), f"reclaim {name}")
