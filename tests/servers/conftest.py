# SPDX-License-Identifier: MIT
"""Fixtures of the server tests (issue 44's spike): the tiny model with a
context long enough to keep requests running while a test aborts them,
and a prefix for the segments of this run."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from v05.demos import tiny  # noqa: E402

CONTEXT = 2048


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    root = os.environ.get("V05_MODEL_DIR") or \
        str(tmp_path_factory.mktemp("model"))
    return tiny.make_model(os.path.join(root, "tiny-llama-2k"),
                           max_positions=CONTEXT)


def server_env(**extra):
    """The server's environment: this one, less a development PYTHONPATH
    and V05_LIB (the installed v05 is what is tested)."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "V05_LIB"):
        env.pop(k, None)
    env.update({"HF_HUB_OFFLINE": "1"}, **extra)
    return env
