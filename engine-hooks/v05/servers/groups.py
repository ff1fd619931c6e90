# SPDX-License-Identifier: MIT
"""Many groups in flight on one plugin, each its own batch, one poller
(docs/SERVERS.md, "Groups at once"): what a front end's group service
runs its groups on.

Each group is submitted as a batch of one (``Plugin.submit``) and its
first wave started at once, beside every other group's: the engine sees
all their requests together and batches them, as it does the in-process
driver's. One poller task per front end drains the lanes (the rewards the
reward route and the scorer push) and hands each decision to the
decision runner (v05.engines.runner) and then to its group: a second
wave is started there, a final (or drop) or a producer's cancel resolves
the group's future, a fault (a refused reward, a barrier the server does
not take) fails that group alone. A generate or a finish that raises
fails its own group alone.

Threads: every Plugin call (submit, poll, wait, group, release, cancel)
runs on the event loop's thread, the one a Plugin must be used from; the
loop runs one of them at a time, so no lock is needed and none of the
generation is serialised. What the service's former turn (one group at a
time) protected was GroupRollout.run, which holds one batch's state and
refuses a second run; this runner keeps per-group state only.

Ends: run() returns the group's GroupResult (release=True: its numbers
copied out, its slot freed) or raises. Cancelled (a client gone, the
abort route, the server dropping it) or failed, the group's requests are
aborted in the engine (their tasks cancelled), its batch cancelled in the
plugin, and a final already handed out to it released: nothing is held.
"""

import asyncio
import logging
from typing import Any, Callable, Dict, Optional

from ..core.decision import Decision, SubmitError, Uid
from ..core.plugin import Plugin
from ..engines.runner import DecisionRunner, Flight, GroupResult

__all__ = ["ConcurrentGroups"]

log = logging.getLogger("v05.servers")


class _Failed(Exception):
    """A sample's generate or finish raised: which group it was."""

    def __init__(self, uid: Uid, exc: BaseException):
        super().__init__(uid, exc)
        self.uid, self.exc = uid, exc


class ConcurrentGroups:
    """generate(prompt, uid, sample, batch) -> the engine's output;
    on_output(uid, sample, gen, output): a finished sample (must not
    block). poll_timeout: the longest the poller sleeps between polls with
    no doorbell (a stream deadline, a fit state posted)."""

    def __init__(self, plugin: Plugin, generate, *,
                 on_output: Callable[[Uid, int, int, Any], None],
                 poll_timeout: float = 0.05):
        self.plugin = plugin
        self._generate, self.on_output = generate, on_output
        self.poll_timeout = poll_timeout
        self.runner = DecisionRunner(plugin, self._one, finish=self._finish,
                                     on_error=self._error, release=True)
        self.flight = Flight()
        self._waiting: Dict[Uid, asyncio.Future] = {}  # uid -> its end
        self._first: Dict[Uid, frozenset] = {}  # uid -> its first wave
        self._poller: Optional[asyncio.Task] = None

    @property
    def running(self) -> int:
        return len(self._waiting)

    def second_wave(self, uid: Uid, sample: int) -> bool:
        """Whether sample is one the group's first dispatch did not ask
        for (its size is the rule's: from the running fit under v05-eb
        and v05-pg, k_init otherwise): the requests its group waits on
        to finish."""
        first = self._first.get(uid)
        return first is not None and sample not in first

    # ---- one group ---------------------------------------------------------

    async def run(self, uid: Uid, prompt, prior) -> GroupResult:
        if uid in self._waiting:
            raise RuntimeError(f"v05: group {uid!r} is running already")
        end = asyncio.get_running_loop().create_future()
        self._waiting[uid] = end
        batch, final = 0, None
        try:
            try:
                first = self.runner.submit(self.flight,
                                           [(uid, prompt, prior)])
            except SubmitError as e:  # refused: nothing of it is live
                batch = e.decisions[0].batch if e.decisions else 0
                raise
            batch = first[0].batch if first else 0
            # Before any of its generates runs (they are tasks, started
            # after this step of the loop): what second_wave() reads.
            self._first[uid] = frozenset(
                s for d in first if d.kind == "sample" for s in d.samples)
            self._start_poller()
            kind, d = await end
            if kind == "cancel":  # a producer's abort record
                outs = self.flight.outputs.get(uid, {})
                return GroupResult(uid, [outs.get(s) for s in range(
                    max(outs, default=-1) + 1)], None, d, True, False,
                    cancelled=True)
            final = d
            # Its samples' tasks ended with their records (the rewards
            # came after): only their bookkeeping is left.
            await self.runner.settle(list(self.flight.by_uid.get(
                uid, {}).values()))
            res = self.runner.result(d, self.flight.outputs)
            final = None  # result() released it
            return res
        except BaseException as e:
            if final is None and end.done() and not end.cancelled() and \
                    end.exception() is None and end.result()[0] == "final":
                final = end.result()[1]  # handed out, not yet read
            tasks = list(self.flight.by_uid.get(uid, {}).values())
            await self.runner.abandon(
                tasks, [batch] if batch else [],
                [(uid, final)] if final is not None else [], {}, e)
            raise
        finally:
            self.flight.forget(uid)
            if self._waiting.get(uid) is end:
                del self._waiting[uid]
                self._first.pop(uid, None)

    # ---- the runner's callbacks, each bound to its group -------------------

    async def _one(self, prompt, uid: Uid, sample: int, batch: int):
        try:
            return await self._generate(prompt, uid, sample, batch)
        except Exception as e:
            raise _Failed(uid, e) from e

    async def _finish(self, d: Decision, sample: int, out) -> None:
        try:
            self.on_output(d.uid, sample, d.gen, out)
        except Exception as e:
            raise _Failed(d.uid, e) from e

    def _error(self, e: BaseException) -> None:
        if isinstance(e, _Failed):
            self._end(e.uid, exc=e.exc)
        else:  # not expected: every call the runner makes is wrapped
            log.error("v05: a sample failed outside any group: %r", e)

    def _end(self, uid: Uid, value=None, exc=None) -> bool:
        """Resolve group uid's future; False when nothing waits on it."""
        end = self._waiting.get(uid)
        if end is None or end.done():
            return False
        if exc is not None:
            end.set_exception(exc)
        else:
            end.set_result(value)
        return True

    # ---- the poller ----------------------------------------------------------

    def _start_poller(self) -> None:
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll())

    async def _poll(self) -> None:
        """While groups are in flight: poll, hand each decision over,
        wait on the doorbell. It exits when the last group has left (the
        check and the exit are one step of the loop: a group that comes
        next starts a new poller)."""
        try:
            while self._waiting:
                for d in self.plugin.poll():
                    await self._take(d)
                if self._waiting:
                    await self.plugin.wait(self.poll_timeout)
        except Exception as e:  # the plugin itself failed: every group
            for uid in list(self._waiting):
                self._end(uid, exc=e)
        finally:
            self._poller = None

    async def _take(self, d: Decision) -> None:
        """One decision through the runner; a fault it brings is its
        group's alone."""
        if d.uid not in self.flight.prompts and \
                d.kind in ("sample", "final", "drop"):
            # Of a group gone before its batch could be cancelled (a
            # prompt skipped at submit, v05-pg: no first decision, no
            # batch known): a final or drop is released, nothing started.
            if d.kind != "sample":
                self.plugin.release(d)
            return
        def keep(x: Decision):
            if not self._end(x.uid, ("final", x)):
                # Its group is gone (failed meanwhile): nobody will read
                # it, so the slot is freed here.
                self.plugin.release(x)

        fault = await self.runner.take(
            self.flight, [d], keep,
            lambda x: self._end(x.uid, ("cancel", x)))
        if fault is not None and not self._end(d.uid, exc=fault):
            log.error("v05: %s", fault)

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
