# SPDX-License-Identifier: MIT
"""Fixtures for the tests of what only sglang has (run with the sglang
environment's python, `scripts/setup-sglang --print`: PyPI's sglang on
its CPU engine, with the CUDA driver stub on LD_LIBRARY_PATH; scripts/test
runs them with tests/engines-common). The engine is tests/engines-common's
(engine_kit): sglang's TokenizerManager binds the first event loop it
runs on, so the engine is created on one loop, in a thread of its own,
and lives there for the session, shared with the common tests; each test
hands that loop its coroutine and waits for the result."""
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TESTS, "engines-common"))

sglang = pytest.importorskip("sglang", reason="the sglang environment "
                             "(scripts/setup-sglang) is not this Python")

import engine_kit  # noqa: E402
from v05.demos import tiny  # noqa: E402


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    root = os.environ.get("V05_MODEL_DIR") or str(tmp_path_factory.mktemp("model"))
    return tiny.make_model(os.path.join(root, "tiny-llama"))


@pytest.fixture(scope="session")
def engine_loop(model_dir):
    el = engine_kit.engine_loop(engine_kit.SGLangKit(), model_dir)
    yield el
    el.close()
