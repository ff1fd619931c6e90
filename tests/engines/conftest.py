# SPDX-License-Identifier: MIT
"""Fixtures for the real-engine tests (run with the engine environment's
Python: scripts/test runs them, scripts/setup-engine builds it).

vLLM's AsyncLLM binds to the first event loop it runs on, so the engine
lives for the whole session on one loop in a thread of its own; each test
hands that loop its coroutine (`on_engine`) and waits for the result.
"""
import asyncio
import itertools
import os
import sys
import threading

import pytest

# tests/group_expect.py: what both engines' tests expect of a group.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

vllm = pytest.importorskip("vllm", reason="the engine environment "
                           "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402


class EngineLoop:
    def __init__(self, model, **engine_args):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="engine-loop", daemon=True)
        self.thread.start()
        self.engine = self.run(self._start(model, engine_args), timeout=600)

    async def _start(self, model, engine_args):
        # 32 sequences at a time: a batch's requests queue, so a test can
        # fail a batch while many of its requests are still in the engine.
        return tiny.vllm_engine(model, **{"max_num_seqs": 32, **engine_args})

    def run(self, coro, timeout=900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.engine.shutdown()
        self.run(self._drain(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()

    @staticmethod
    async def _drain():
        """vLLM's output-handler tasks end when cancelled; a loop closed
        under them would report them destroyed while pending."""
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    root = os.environ.get("V05_MODEL_DIR") or str(tmp_path_factory.mktemp("model"))
    return tiny.make_model(os.path.join(root, "tiny-llama"))


@pytest.fixture(scope="session")
def engine_loop(model_dir):
    el = EngineLoop(model_dir)
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
