# SPDX-License-Identifier: MIT
"""Stand-in of slime/utils/async_utils.py at slime 624b824: `run(coro)`
runs the coroutine on one event loop kept in a daemon thread for the
process's life, and blocks until it is done."""
import asyncio
import threading

_loop = None


def run(coro):
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        threading.Thread(target=_loop.run_forever, daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result()
