# SPDX-License-Identifier: MIT
"""pytest setup: the package from engine-hooks/, the library from the
build directory (V05_LIB, or build/libv05.so of this checkout)."""
import itertools
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "engine-hooks"))
# Subprocesses (python3 -m v05.demos) find the package too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [os.path.join(ROOT, "engine-hooks")] +
    [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
os.environ.setdefault("V05_LIB", os.path.join(ROOT, "build", "libv05.so"))
V05CTL = os.environ.get("V05CTL", os.path.join(ROOT, "build", "tools", "v05ctl", "v05ctl"))

_names = itertools.count()


@pytest.fixture
def segname(request):
    """A unique segment name, removed after the test if still there."""
    import v05

    name = f"py-{os.getpid()}-{next(_names)}"
    yield name
    try:
        v05.unlink(name)
    except OSError:
        pass


@pytest.fixture
def v05ctl():
    if not os.access(V05CTL, os.X_OK):
        pytest.skip("v05ctl not built")
    return V05CTL
