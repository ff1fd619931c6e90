# SPDX-License-Identifier: MIT
"""The decision runner: the flight of requests for a set of groups. It
submits prompts, turns each "sample" decision into single-sample generate
calls, takes a poll's decisions in (samples started, aborts done, each
final or drop handed to the caller), makes the results, and aborts
everything in flight for a batch or for all of them. No scoring and no
waiting: who pushes the rewards and when the plugin is polled are the
host's (GroupRollout scores in-process and waits on its own scores or the
doorbell; a route inside an HTTP server takes rewards over HTTP or from
reward workers' lanes and polls on the server's loop).

The contract (docs/ENGINE_HOOKS.md, "The decision runner"):
- One thread: the event loop's that owns the plugin (a plugin is used by
  one thread at a time). Every call below, and the host's poll() of the
  plugin, runs there; generate is awaited in tasks on that loop.
- It owns the generate tasks it started (a Flight's) and nothing else: the
  prompts it submitted stay the plugin's until final (or cancelled), and a
  final or drop handed to keep() is the caller's to release.
- A generate that raises is reported to on_error (the host fails what it
  was running); a cancelled one is the runner's own abort.
- On cancellation or an error the host calls abandon() (or abort() and
  releases its finals): no request left in the engine, the batches
  cancelled in the plugin, the finals held released. Nothing of it waits
  for anything but the tasks' own ends.
"""

import asyncio
import dataclasses
import errno
from typing import (Any, Awaitable, Callable, Dict, Iterable, List, Optional,
                    Sequence, Tuple)

from ..core.decision import Decision, Uid
from ..core.group import Group
from ..core.plugin import Plugin

__all__ = ["DecisionRunner", "Flight", "GroupResult", "RewardRejected",
           "GenerateFn", "FinishFn", "BarrierFn"]

# generate(prompt, uid, sample, batch) -> the engine's output for one sample
GenerateFn = Callable[[Any, Uid, int, int], Awaitable[Any]]
# finish(decision, sample, output): what the host does with a finished
# sample (score it, hand it to reward workers, stream it out); awaited in
# the sample's task
FinishFn = Callable[[Decision, int, Any], Awaitable[None]]
# barrier(plugin, decision) -> awaitable resolving the batch (distributed)
BarrierFn = Callable[[Plugin, Decision], Awaitable[None]]


class RewardRejected(ValueError):
    """The plugin refused a reward this batch waits for (not finite, or
    outside [-1, 1]), pushed by a producer other than the driver's own
    checked writer."""


@dataclasses.dataclass
class GroupResult:
    uid: Uid
    outputs: List[Any]          # by sample index 0..k-1
    group: Any                  # Group views, or a copy if released
    decision: Decision          # the final/drop decision (release(decision))
    dropped: bool
    halted: bool
    # A producer aborted the group (a "cancel" decision, a segment made
    # with abort_records=True): no group, no slot to release; decision is
    # the cancel, outputs the samples that had finished.
    cancelled: bool = False


class Flight:
    """What a run (or a streamed fill, across its steps) has in flight:
    uid -> prompt of the prompts open, uid -> {sample: output} of the
    samples finished, the generate tasks, and uid -> {sample: task}."""

    __slots__ = ("prompts", "outputs", "tasks", "by_uid")

    def __init__(self):
        self.prompts: Dict[Uid, Any] = {}
        self.outputs: Dict[Uid, Dict[int, Any]] = {}
        self.tasks = set()
        self.by_uid: Dict[Uid, Dict[int, "asyncio.Future"]] = {}

    def forget(self, uid: Uid) -> None:
        """A prompt whose group is taken out (its outputs go with it)."""
        self.prompts.pop(uid, None)
        self.outputs.pop(uid, None)
        self.by_uid.pop(uid, None)


class DecisionRunner:
    """The flight of requests of `plugin`'s groups through `generate`
    (module text). finish(decision, sample, output) is awaited in each
    sample's task once its output is in; on_error(exc), on the loop, gets
    what a generate or a finish raised. release: results copy their
    numbers out and free the slot (else they hold zero-copy views the
    caller releases)."""

    def __init__(self, plugin: Plugin, generate: GenerateFn, *,
                 finish: FinishFn, on_error: Callable[[BaseException], None],
                 on_barrier: Optional[BarrierFn] = None,
                 release: bool = False):
        self.plugin, self.generate = plugin, generate
        self.finish, self.on_error = finish, on_error
        self.on_barrier = on_barrier
        self.release = release
        self.generate_calls = 0
        self.aborted = 0  # samples aborted on an "abort" decision
        self.running = 0  # samples generating or finishing now
        self.taken = 0  # decisions taken in (take), all told
        # Called with each "abort" decision after its tasks are cancelled
        # (a host that queues outputs for scoring drops that sample's).
        self.on_abort: Optional[Callable[[Decision], None]] = None

    # ---- submitting ----------------------------------------------------

    def submit(self, flight: Flight, items: Sequence[Tuple[Uid, Any, Any]]
               ) -> List[Decision]:
        """Submit (uid, prompt, prior) items as one batch and start their
        first samples; returns the first decisions. Refusals raise as
        Plugin.submit does (SubmitError: its .decisions were accepted and
        are not started: start() them, or cancel their batch)."""
        first = self.plugin.submit([(u, p) for u, _, p in items])
        self.start(flight, first, {u: x for u, x, _ in items})
        return first

    def start(self, flight: Flight, first: List[Decision],
              prompts: Dict[Uid, Any], refused=()) -> None:
        """The first decisions of submitted prompts (prompts: uid ->
        prompt, refused: the uids the plugin refused): every accepted
        prompt in flight, the first samples started. An accepted prompt
        without a first decision was skipped at submit (mode v05-pg): its
        drop of k = 0 comes at a poll, for a prompt in flight."""
        for u, x in prompts.items():
            if u not in refused:
                flight.prompts[u] = x
        for d in first:
            self.spawn(flight, d)

    def spawn(self, flight: Flight, d: Decision) -> None:
        """A "sample" decision (or a first dispatch): one generate task
        per sample, for a prompt in flight."""
        prompt = flight.prompts[d.uid]
        mine = flight.by_uid.setdefault(d.uid, {})
        for s in d.samples:
            t = asyncio.ensure_future(self._one(prompt, d, s,
                                                flight.outputs))
            flight.tasks.add(t)
            mine[s] = t
            t.add_done_callback(flight.tasks.discard)

    async def _one(self, prompt, d: Decision, sample, outputs):
        self.running += 1
        try:
            self.generate_calls += 1
            out = await self.generate(prompt, d.uid, sample, d.batch)
            outputs.setdefault(d.uid, {})[sample] = out
            await self.finish(d, sample, out)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # surfaced by the host, not lost in a task
            self.on_error(e)
        finally:
            self.running -= 1

    # ---- taking decisions in --------------------------------------------

    def _abort_samples(self, flight: Flight, d: Decision) -> None:
        """An "abort" decision: the engine aborts a request when its task
        is cancelled (its generator closes); a reward already pushed is
        refused."""
        mine = flight.by_uid.get(d.uid, {})
        for s in d.samples:
            t = mine.pop(s, None)
            if t is not None and not t.done():
                t.cancel()
                self.aborted += 1
        if self.on_abort is not None:
            self.on_abort(d)

    def _cancel_prompt(self, flight: Flight, d: Decision) -> None:
        """A "cancel" decision: the plugin took the prompt out (a
        producer's abort record); every request of it still running is
        aborted in the engine (its task cancelled)."""
        for t in flight.by_uid.get(d.uid, {}).values():
            if not t.done():
                t.cancel()
                self.aborted += 1
        if self.on_abort is not None:
            self.on_abort(d)

    async def take(self, flight: Flight, decisions: List[Decision],
                   keep: Callable[[Decision], None],
                   cancelled: Optional[Callable[[Decision], None]] = None
                   ) -> Optional[BaseException]:
        """One poll's decisions: samples started, aborts done, each final
        or drop of a prompt in flight handed to keep(), each cancel (its
        requests aborted) to cancelled(); returns the fault a decision
        brings (the caller raises it), after every decision was taken in:
        a final handed out and not kept would hold its slot for good."""
        fault = None
        self.taken += len(decisions)
        for d in decisions:
            if d.kind == "sample":
                if fault is None:
                    self.spawn(flight, d)
            elif d.kind == "abort":
                self._abort_samples(flight, d)
            elif d.kind == "cancel" and d.uid in flight.prompts:
                self._cancel_prompt(flight, d)
                if cancelled is None:
                    fault = fault or RuntimeError(
                        f"v05 rollout: uid {d.uid!r} was aborted by a "
                        f"producer of segment {self.plugin.name} "
                        "(abort_records=True), which this host does not "
                        "take: the batch is cancelled")
                else:
                    cancelled(d)
            elif d.kind == "reject":
                fault = fault or RewardRejected(
                    f"v05: segment {self.plugin.name} refused the "
                    f"reward of uid {d.uid!r} sample {d.samples[0]}: "
                    f"{d.value!r} is {d.reason} (rewards are finite "
                    "numbers in [-1, 1]); the batch is cancelled, as "
                    "that sample can no longer be rewarded")
            elif d.kind == "barrier":
                if self.on_barrier is None:
                    fault = fault or RuntimeError(
                        "barrier decision: pass on_barrier")
                elif fault is None:
                    await self.on_barrier(self.plugin, d)
            elif d.uid in flight.prompts:
                keep(d)
            else:
                fault = fault or RuntimeError(
                    f"v05 rollout: a {d.kind} decision for uid "
                    f"{d.uid!r}, not in this batch (another driver "
                    "polls the same plugin?)")
        return fault

    @staticmethod
    async def settle(tasks) -> None:
        """Wait for tasks that have finished their work (or were aborted)
        to be done; an error other than a cancellation is raised."""
        tasks = list(tasks)
        if not all(t.done() for t in tasks):
            # Not on the common path (a final comes after its samples'
            # records): gather costs the caller turns of the loop.
            await asyncio.gather(*tasks, return_exceptions=True)
        for t in tasks:  # an aborted sample's task is cancelled
            if not t.cancelled() and t.exception() is not None and \
                    not isinstance(t.exception(), asyncio.CancelledError):
                raise t.exception()

    def result(self, d: Decision, outputs) -> GroupResult:
        """A final (or drop) as a GroupResult: its outputs by sample, its
        group's views (or, with release, a copy, and the slot freed)."""
        g = self.plugin.group(d)
        outs = outputs.get(d.uid, {})
        res = GroupResult(d.uid, [outs.get(s) for s in range(g.k)], g, d,
                          d.kind == "drop", d.halted)
        if self.release:
            res.group = _Detached(g)
            del g
            self.plugin.release(d)
        return res

    # ---- aborting ---------------------------------------------------------

    async def abort(self, flight: Flight, batches: Iterable[int],
                    uids: Optional[Iterable[Uid]] = None) -> int:
        """Abort what is in flight (every prompt's, or only `uids`'s: a
        group's) and cancel `batches` in the plugin (their open prompts
        and slots freed; a batch every group of which is final already is
        fine). Returns the samples that were still running or queued.
        Finals already handed out stay the caller's to release."""
        if uids is None:
            pending = [t for t in flight.tasks if not t.done()]
        else:
            uids = list(uids)
            pending = [t for u in uids
                       for t in flight.by_uid.get(u, {}).values()
                       if not t.done()]
        for t in pending:
            t.cancel()  # the engine aborts the request
        for b in batches:
            try:
                self.plugin.cancel(b)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
        if uids is None:
            flight.prompts.clear()
            flight.outputs.clear()
            flight.by_uid.clear()
        else:
            for u in uids:
                flight.forget(u)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    async def abandon(self, tasks, batches, finals, results, exc) -> None:
        """Clean up after an error: no request left in the engine, nothing
        of these batches left in the plugin. finals: (uid, decision) of
        the groups handed out; results: uid -> the results made of them.
        What can be done at once is done before the first await, so a
        second cancellation arriving while the tasks wind down cannot
        leave slots held; a failure of the clean-up itself is attached to
        the error being raised, never raised over it (a cancellation must
        stay a CancelledError)."""
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()  # the engine aborts the request (its generator ends)
        closed = getattr(exc, "errno", None) == errno.EBADF
        for batch in batches if not closed else ():
            if not batch:
                continue
            try:
                self.plugin.cancel(batch)
            except OSError as ce:
                if ce.errno != errno.ENOENT:  # ENOENT: every group was final
                    _note(exc, f"v05: cancelling batch {batch} failed too: {ce}")
        if not closed:
            for uid, d in finals:
                r = results.get(uid)
                if r is not None:
                    r.group = None
                    if self.release:  # result() released it
                        continue
                try:
                    self.plugin.release(d)
                except OSError as re:
                    _note(exc, f"v05: releasing the group of uid "
                               f"{uid!r} failed too: {re}")
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


class _Detached:
    """A group's numbers copied out, for callers that release at once."""

    def __init__(self, g: Group):
        for name in ("uid", "key", "slot", "k", "baseline", "sigma", "mean",
                     "prior", "action", "seq", "batch", "keep"):
            setattr(self, name, getattr(g, name))
        self.kept = g.kept
        self.rewards = g.rewards.copy()
        self.advantages = g.advantages.copy()


def _note(exc: BaseException, text: str) -> None:
    """Add a line to an exception's report (PEP 678 notes, Python 3.11+;
    before that, nothing: the original error is what matters)."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(text)
