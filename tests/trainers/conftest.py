# SPDX-License-Identifier: MIT
"""Fixtures for the real-trainer tests (run with build-venv/verl's or build-venv/trl's
Python, where v05 is installed from its wheel: scripts/setup-trainers)."""
import errno
import itertools
import os

import pytest

_names = itertools.count()


@pytest.fixture
def segname():
    import v05

    name = f"trn-{os.getpid()}-{next(_names)}"
    yield name
    try:
        v05.unlink(name)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
