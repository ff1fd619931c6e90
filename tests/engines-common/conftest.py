# SPDX-License-Identifier: MIT
"""The real-engine tests both engines run (the same assertions for vLLM
and sglang): run with an engine environment's Python, next to that
engine's own tests, as scripts/test does (part 6: tests/engines with
build-venv/engine; part 7: tests/engines-sglang with build-venv/sglang).
Each test runs once per engine this Python can import (its id names the
engine); a Python that imports neither is an error, not a skip: these
tests would otherwise pass without running."""
import itertools
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/group_expect.py: what both engines' tests expect of a group.
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import engine_kit  # noqa: E402

ENGINES = engine_kit.available()
if not ENGINES:
    raise pytest.UsageError(
        f"tests/engines-common needs vLLM (scripts/setup-engine: "
        f"build-venv/engine) or sglang (scripts/setup-sglang: "
        f"build-venv/sglang); {sys.executable} imports neither")


def pytest_generate_tests(metafunc):
    if "kit" in metafunc.fixturenames:
        metafunc.parametrize("kit", ENGINES, indirect=True, scope="session")


@pytest.fixture(scope="session")
def kit(request):
    return engine_kit.KITS[request.param]()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from v05.demos import tiny

    root = os.environ.get("V05_MODEL_DIR") or str(tmp_path_factory.mktemp("model"))
    return tiny.make_model(os.path.join(root, "tiny-llama"))


@pytest.fixture(scope="session")
def engine_loop(kit, model_dir):
    el = engine_kit.engine_loop(kit, model_dir)
    yield el
    el.close()


_names = itertools.count()


@pytest.fixture
def segname(kit):
    import v05

    name = f"{kit.name[:3]}c-{os.getpid()}-{next(_names)}"
    yield name
    try:
        v05.unlink(name)
    except OSError:
        pass
