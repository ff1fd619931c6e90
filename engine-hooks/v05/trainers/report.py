# SPDX-License-Identifier: MIT
"""A run report: JSON lines appended by every process of a run (one
``write`` per line, so lines of several processes do not mix). Read by
docs/TRAINERS.md's "How to read v05's counters from a run"."""

import json
import os
from typing import Optional

__all__ = ["report", "read_report"]


def report(path: Optional[str], record: dict) -> None:
    """Append one JSON line to the run report (nothing without a path)."""
    if not path:
        return
    line = (json.dumps(record, default=_plain) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write: lines of several processes do not mix
    finally:
        os.close(fd)


def _plain(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def read_report(path: str) -> list:
    """Every record of a report, in the order written."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
