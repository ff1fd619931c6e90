# SPDX-License-Identifier: MIT
"""Fixtures for the real-sglang tests (run with the sglang environment's
python, `scripts/setup-sglang --print`: PyPI's sglang on its CPU engine,
with the CUDA driver stub on LD_LIBRARY_PATH).

sglang's TokenizerManager binds the first event loop it runs on, so the
engine is created on one loop, in a thread of its own, and lives there for
the session; each test hands that loop its coroutine (`EngineLoop.run`)
and waits for the result.
"""
import asyncio
import itertools
import os
import sys
import signal
import threading

import pytest

# tests/group_expect.py: what both engines' tests expect of a group.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

sglang = pytest.importorskip("sglang", reason="the sglang environment "
                             "(scripts/setup-sglang) is not this Python")

from v05.demos import tiny  # noqa: E402


def _child_failed(signum, frame):
    # sglang's scheduler and detokenizer processes send their parent SIGQUIT
    # when they fail; its own handler is installed only when the engine is
    # made on the main thread, and here it is not. Fail the test running
    # now with a message instead of dying without one.
    raise RuntimeError("an sglang child process failed (it sent SIGQUIT); "
                       "its traceback is in the log above")


signal.signal(signal.SIGQUIT, _child_failed)


class EngineLoop:
    def __init__(self, model, **engine_args):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="engine-loop", daemon=True)
        self.thread.start()
        self.engine = self.run(self._start(model, engine_args), timeout=900)

    async def _start(self, model, engine_args):
        # Created on the running loop: sglang's tokenizer manager takes it.
        return tiny.sglang_engine(model, **engine_args)

    def run(self, coro, timeout=900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        # Ends the scheduler and detokenizer processes (SIGQUIT ignored
        # while it does: a dying rank reports its peer's end with one).
        tiny.sglang_shutdown(self.engine)
        self.run(self._drain(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()

    @staticmethod
    async def _drain():
        """The tokenizer manager's receive loop ends when cancelled; a loop
        closed under it would report it destroyed while pending."""
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
    # 32 requests running at a time: a batch's requests queue in the
    # scheduler, so a test can fail a batch while many are still there.
    el = EngineLoop(model_dir, max_running_requests=32)
    yield el
    el.close()


_names = itertools.count()


@pytest.fixture
def segname():
    import v05

    name = f"sgl-{os.getpid()}-{next(_names)}"
    yield name
    try:
        v05.unlink(name)
    except OSError:
        pass
