# SPDX-License-Identifier: MIT
"""tiny.sglang_shutdown: a SIGQUIT that arrives while the engine shuts down
(a tensor-parallel rank reporting its killed peer) does not kill the
process, and the caller's own SIGQUIT handler is back afterwards."""
import os
import signal
import threading

from v05.demos import tiny


class QuittingEngine:
    """Stands for an engine whose child reports a failure on the way down."""

    def __init__(self):
        self.down = False

    def shutdown(self):
        os.kill(os.getpid(), signal.SIGQUIT)
        self.down = True


def test_sigquit_during_shutdown_is_ignored_and_handler_restored():
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGQUIT, mine)
    try:
        engine = QuittingEngine()
        tiny.sglang_shutdown(engine)
        assert engine.down
        assert seen == []
        assert signal.getsignal(signal.SIGQUIT) is mine
        os.kill(os.getpid(), signal.SIGQUIT)   # delivered to ours again
        assert seen == [signal.SIGQUIT]
    finally:
        signal.signal(signal.SIGQUIT, old)


def test_off_the_main_thread_it_is_a_plain_shutdown():
    engine = QuittingEngine()
    engine.shutdown = lambda: setattr(engine, "down", True)
    t = threading.Thread(target=tiny.sglang_shutdown, args=(engine,))
    t.start()
    t.join()
    assert engine.down
