# SPDX-License-Identifier: MIT
"""How the thread that polls a Plugin waits for work: the pollable fd, a
blocking wait, asyncio's wait on the event loop (add_reader on that fd),
the next stream deadline for a caller that knows when its own rewards
arrive, and wake(). A part of Plugin (its base class), in a file of its
own."""

import asyncio
from typing import Optional

from . import _checks
from ._lib import check, lib

__all__ = ["PluginWaiting"]


class PluginWaiting:
    """Plugin's waiting (Plugin derives from it: use Plugin). Needs the
    Plugin's _handle(), and its _wait_fut (the future wait() is parked
    on) and _deadline_ns (next_deadline's out) set at construction."""

    def fileno(self) -> int:
        return check(lib.v05_fd(self._handle()), "fd")

    fd = property(fileno)

    def wait_blocking(self, timeout: Optional[float] = None) -> bool:
        """Block until rewards (or a stream deadline) arrive: True, or
        False at the timeout."""
        ms = -1 if timeout is None else \
            min(max(0, int(timeout * 1000)), _checks.INT_MAX)
        while True:
            r = lib.v05_wait(self._handle(), ms)
            if r == -4:  # EINTR: retried, as PEP 475 does
                continue
            return check(r, "wait") == 1

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """asyncio: wait for rewards through the loop (add_reader on the
        plugin's fd). True: there is work, poll now; False: timed out, or
        woken by wake(). A cancellation of the waiting task always raises
        CancelledError, even when the fd turned readable at that moment."""
        ms = -1 if timeout is None else \
            min(max(0, int(timeout * 1000)), _checks.INT_MAX)
        if check(lib.v05_arm(self._handle(), ms), "arm") == 1:
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = self.fileno()

        def ready():
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        # The armed wait ends by itself at the timeout (the fd turns
        # readable), so this timer is only a safety net. Not
        # asyncio.wait_for: on Python 3.11 it returns the result instead
        # of raising when the task is cancelled as the future completes,
        # which swallowed a caller's cancellation. A task awaiting a plain
        # future is always cancelled.
        timer = None if timeout is None else loop.call_later(timeout + 1, ready)
        self._wait_fut = fut
        try:
            await fut
        finally:
            self._wait_fut = None
            loop.remove_reader(fd)
            if timer is not None:
                timer.cancel()
        return check(lib.v05_pending(self._handle()), "pending") == 1

    def next_deadline(self) -> Optional[float]:
        """For a caller that pushes its own rewards, and so knows when
        they arrive without the doorbell (the driver scoring in-process):
        0.0 when poll() has work now without a new reward (a stream
        deadline due, queued decisions, an error to report), the seconds
        until the next stream deadline, or None when none is set. Rewards
        pushed by anyone else are not looked at (pending() and wait() do)."""
        ns = self._deadline_ns
        check(lib.v05_next_deadline(self._handle(), ns), "next_deadline")
        return None if ns.value < 0 else ns.value * 1e-9

    def wake(self) -> None:
        """End a wait() in progress at once (it returns whether there is
        work), e.g. when the driver's own task failed and it must stop
        waiting for rewards. Call it from the event loop's thread."""
        fut = self._wait_fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    @property
    def wait_path(self) -> str:
        return lib.v05_wait_path(self._handle()).decode()

    @property
    def wait_reason(self) -> str:
        return lib.v05_wait_reason(self._handle()).decode()
