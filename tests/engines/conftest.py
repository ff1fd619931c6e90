# SPDX-License-Identifier: MIT
"""Fixtures for the tests of what only vLLM has (run with the engine
environment's Python: scripts/test runs them with tests/engines-common,
scripts/setup-engine builds it). The engine is tests/engines-common's
(engine_kit): vLLM's AsyncLLM binds to the first event loop it runs on, so
it lives for the whole session on one loop in a thread of its own, shared
with the common tests; each test hands that loop its coroutine and waits
for the result."""
import itertools
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# tests/group_expect.py, and tests/engines-common/engine_kit.py.
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "engines-common"))

vllm = pytest.importorskip("vllm", reason="the engine environment "
                           "(scripts/setup-engine) is not this Python")

import engine_kit  # noqa: E402
from v05.demos import tiny  # noqa: E402


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    root = os.environ.get("V05_MODEL_DIR") or str(tmp_path_factory.mktemp("model"))
    return tiny.make_model(os.path.join(root, "tiny-llama"))


@pytest.fixture(scope="session")
def engine_loop(model_dir):
    el = engine_kit.engine_loop(engine_kit.VLLMKit(), model_dir)
    yield el
    el.close()


_names = itertools.count()


@pytest.fixture
def segname():
    import v05

    name = f"eng-{os.getpid()}-{next(_names)}"
    yield name
    try:
        v05.unlink(name)
    except OSError:
        pass
