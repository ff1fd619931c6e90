# SPDX-License-Identifier: MIT
"""Engine-agnostic group rollout: what the vLLM and sglang adapters share.

A group is not a fixed n anymore: the plugin decides, per prompt, when to
stop. The driver turns each "sample" decision into single-sample generate
calls (n=1, same prompt: the engine's prefix cache shares it), each finished
sequence into a reward (scored here, or by external reward workers), and
each "final"/"drop" decision into a result with zero-copy advantages.

Where it runs, and why it is shaped this way:
- In the process that owns the engine client (vLLM's ``AsyncLLM``, sglang's
  ``Engine``), on the event loop that client is bound to. Both engines bind
  their output handler to the first loop they run on, so the driver refuses
  to run on a second loop (``RuntimeError``) instead of failing later with
  the engine's own "engine dead".
- Scoring never runs on that loop: a synchronous ``score`` runs in a small
  thread pool, an ``async def score`` is awaited, and in both cases the
  reward is pushed from a pool thread. Each pool thread has its own
  ``RewardWriter`` (its own single-producer lane), so a full lane makes that
  thread wait while the loop goes on draining the lanes in ``poll``.
- Every reward is checked where it enters (``RewardWriter.push``): a score
  that is not a finite number in [-1, 1] fails the batch with a ValueError
  naming the uid, the sample and the value. A bad reward pushed by another
  route (reward workers elsewhere) is refused by the plugin, which says so
  (a "reject" decision): the batch fails the same way instead of waiting
  for a sample that can no longer be rewarded.
- On any error (a raising or bad scorer, a failed generate, the caller's
  cancellation), every outstanding generate task is cancelled (the engines
  abort a request when its generator is closed), the batch is cancelled in
  the plugin (``Plugin.cancel``: its open prompts and slots are freed), the
  finals already collected are released, and the error is raised; a
  cancellation always ends in ``CancelledError``. The next batch then runs
  as if nothing happened.
"""

import asyncio
import concurrent.futures
import dataclasses
import errno
import hashlib
import inspect
import threading
from typing import (Any, Awaitable, Callable, Dict, List, Optional, Sequence,
                    Tuple, Union)

from ..core.decision import Decision, SubmitError, Uid
from ..core.group import Group
from ..core.plugin import Plugin
from ..core.writer import RewardWriter

__all__ = ["GroupResult", "GroupRollout", "EngineRollout", "sample_seed",
           "RewardRejected"]

# generate(prompt, uid, sample, batch) -> the engine's output for one sample
GenerateFn = Callable[[Any, Uid, int, int], Awaitable[Any]]
# score(uid, sample, output) -> reward on [-1, 1]; may be an async def
ScoreFn = Callable[[Uid, int, Any], Union[float, Awaitable[float]]]
# barrier(plugin, decision) -> awaitable resolving the batch (distributed)
BarrierFn = Callable[[Plugin, Decision], Awaitable[None]]


def sample_seed(base: int, uid: Uid, batch: int, sample: int) -> int:
    """A per-sample seed from the caller's base seed: different for every
    (uid, batch, sample), so a seeded run does not draw the same samples
    at every training step. 31 bits: every engine accepts it."""
    h = hashlib.blake2b(f"{base}\0{uid}\0{batch}\0{sample}".encode(),
                        digest_size=8)
    return int.from_bytes(h.digest(), "little") & 0x7FFFFFFF


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


class GroupRollout:
    """Drive prompts through `plugin` with `generate`.

    score: compute each sample's reward in this process and push it (a sync
    function runs in a pool of `score_threads` threads, so with more than
    one it must be thread-safe; an async def is awaited); None when reward
    workers elsewhere push rewards themselves (then on_output(uid, sample,
    gen, output) hands them each finished sequence, with the gen their push
    must carry; it must not block).

    release: release slots after collecting the results (advantages are
    then copied out); False keeps the zero-copy views, the caller releases.
    """

    def __init__(self, plugin: Plugin, generate: GenerateFn, *,
                 score: Optional[ScoreFn] = None,
                 on_output: Optional[Callable[[Uid, int, int, Any], None]] = None,
                 on_barrier: Optional[BarrierFn] = None,
                 release: bool = False, poll_timeout: float = 0.05,
                 score_threads: int = 1):
        if score is None and on_output is None:
            raise ValueError("give score (rewards computed here) or "
                             "on_output (reward workers push them)")
        if not 1 <= score_threads <= 64:
            raise ValueError("score_threads must be in 1..64")
        self.plugin, self.generate = plugin, generate
        self.score, self.on_output = score, on_output
        self._score_async = score is not None and \
            inspect.iscoroutinefunction(score)
        self.on_barrier = on_barrier
        self.release = release
        self.poll_timeout = poll_timeout
        self.generate_calls = 0
        self.aborted = 0  # samples aborted on an "abort" decision
        self._loop = None
        self._running = False
        self._pool = None
        self._local = threading.local()
        self._writers: List[RewardWriter] = []
        self._writers_lock = threading.Lock()
        if score is not None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=score_threads, thread_name_prefix="v05-score")

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._writers_lock:
            writers, self._writers = self._writers, []
        for w in writers:
            w.close()

    # ---- scoring, off the event loop ------------------------------------

    def _writer(self) -> RewardWriter:
        w = getattr(self._local, "writer", None)
        if w is None:
            w = RewardWriter.attach(self.plugin.name)
            self._local.writer = w
            with self._writers_lock:
                self._writers.append(w)
        return w

    def _push(self, d: Decision, sample, reward):
        # d: the decision that issued the sample; its key and gen name the
        # prompt's instance, so the push hashes nothing.
        self._writer().push(d, sample, float(reward))

    def _score_and_push(self, d: Decision, sample, out):
        self._push(d, sample, self.score(d.uid, sample, out))

    async def _finish(self, d: Decision, sample, out):
        loop = asyncio.get_running_loop()
        if self.score is None:
            self.on_output(d.uid, sample, d.gen, out)
        elif self._score_async:
            r = await self.score(d.uid, sample, out)
            await loop.run_in_executor(self._pool, self._push, d, sample, r)
        else:
            await loop.run_in_executor(self._pool, self._score_and_push,
                                       d, sample, out)

    async def _one(self, prompt, d: Decision, sample, outputs, errors):
        try:
            self.generate_calls += 1
            out = await self.generate(prompt, d.uid, sample, d.batch)
            outputs.setdefault(d.uid, {})[sample] = out
            await self._finish(d, sample, out)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # surfaced by run(), not lost in a task
            errors.append(e)
            self.plugin.wake()  # run() stops waiting for rewards now

    # ---- one batch --------------------------------------------------------

    def _bind_loop(self):
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(
                "v05 rollout: driven from a different event loop than the "
                "one it first ran on. The engine client (vLLM AsyncLLM, "
                "sglang Engine) is bound to its first loop: run every batch "
                "inside one asyncio.run(main()).")
        if self._running:
            raise RuntimeError("v05 rollout: run() is already in progress; "
                               "one batch at a time per rollout")

    async def run(self, items: Sequence[Tuple[Uid, Any, float]]
                  ) -> Dict[Uid, GroupResult]:
        """items: (uid, prompt, prior). Returns uid -> GroupResult once every
        group is final (or dropped)."""
        self._bind_loop()
        items = list(items)
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 3:
                raise TypeError(f"v05 rollout: item {i} is {item!r}, not a "
                                "(uid, prompt, prior) triple")
        self._running = True
        prompts = {uid: prompt for uid, prompt, _ in items}
        outputs: Dict[Uid, Dict[int, Any]] = {}
        results: Dict[Uid, GroupResult] = {}
        # Final (or dropped) decisions by uid, turned into results once the
        # batch is whole: nothing waits on a result before then, and one
        # tight loop over them at the end costs a fraction of the same
        # calls spread between the engine's work on the event loop (its
        # caches cold each time; bench/ENGINE.md, decision overhead).
        finals: Dict[Uid, Decision] = {}
        errors: List[BaseException] = []
        tasks = set()
        by_sample = {}  # (uid, sample) -> its task, for "abort"
        batch = 0

        def spawn(d: Decision):
            for s in d.samples:
                t = asyncio.ensure_future(self._one(
                    prompts[d.uid], d, s, outputs, errors))
                tasks.add(t)
                by_sample[(d.uid, s)] = t
                t.add_done_callback(tasks.discard)

        def abort(d: Decision):
            # The engine aborts a request when its task is cancelled (its
            # generator closes); a reward already pushed is refused.
            for s in d.samples:
                t = by_sample.pop((d.uid, s), None)
                if t is not None and not t.done():
                    t.cancel()
                    self.aborted += 1

        try:
            try:
                first = self.plugin.submit(
                    [(uid, prior) for uid, _, prior in items])
            except SubmitError as e:  # the accepted prompts are live
                batch = e.decisions[0].batch if e.decisions else 0
                raise
            if first:
                batch = first[0].batch
            for d in first:
                spawn(d)
            while len(finals) < len(items):
                if errors:
                    raise errors[0]
                # Every decision of a poll is taken in before an error it
                # brings is raised: a final handed out and not kept would
                # hold its slot for good.
                fault = None
                for d in self.plugin.poll():
                    if d.kind == "sample":
                        if fault is None:
                            spawn(d)
                    elif d.kind == "abort":
                        abort(d)
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
                    elif d.uid in prompts:
                        finals[d.uid] = d
                    else:
                        fault = fault or RuntimeError(
                            f"v05 rollout: a {d.kind} decision for uid "
                            f"{d.uid!r}, not in this batch (another driver "
                            "polls the same plugin?)")
                if fault is not None:
                    raise fault
                if len(finals) < len(items):
                    await self.plugin.wait(self.poll_timeout)
            # Every group is final: its samples' tasks have finished too
            # (the reward is pushed last); wait for the bookkeeping.
            if tasks:
                done = await asyncio.gather(*list(tasks),
                                            return_exceptions=True)
                for x in done:  # an aborted sample's task is cancelled
                    if isinstance(x, BaseException) and \
                            not isinstance(x, asyncio.CancelledError):
                        raise x
            if errors:
                raise errors[0]
            for uid, d in finals.items():
                results[uid] = self._result(d, outputs)
            return results
        except BaseException as e:
            await self._abandon(tasks, batch, finals, results, e)
            raise
        finally:
            self._running = False

    def _result(self, d: Decision, outputs) -> GroupResult:
        g = self.plugin.group(d)
        outs = outputs.get(d.uid, {})
        res = GroupResult(d.uid, [outs.get(s) for s in range(g.k)], g, d,
                          d.kind == "drop", d.halted)
        if self.release:
            res.group = _Detached(g)
            del g
            self.plugin.release(d)
        return res

    async def _abandon(self, tasks, batch, finals, results, exc):
        """Clean up after an error: no request left in the engine, nothing
        of this batch left in the plugin. What can be done at once is done
        before the first await, so a second cancellation arriving while the
        tasks wind down cannot leave slots held; a failure of the clean-up
        itself is attached to the error being raised, never raised over it
        (a cancellation must stay a CancelledError)."""
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()  # the engine aborts the request (its generator ends)
        closed = getattr(exc, "errno", None) == errno.EBADF
        if batch and not closed:
            try:
                self.plugin.cancel(batch)
            except OSError as ce:
                if ce.errno != errno.ENOENT:  # ENOENT: every group was final
                    _note(exc, f"v05: cancelling batch {batch} failed too: {ce}")
        if not closed:
            for uid, d in finals.items():
                r = results.get(uid)
                if r is not None:
                    r.group = None
                    if self.release:  # _result released it
                        continue
                try:
                    self.plugin.release(d)
                except OSError as re:
                    _note(exc, f"v05: releasing the group of uid "
                               f"{uid!r} failed too: {re}")
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


class EngineRollout:
    """Base of the engine adapters: subclasses give _generate_one(prompt,
    uid, sample, batch) for their engine; the rest is GroupRollout."""

    def __init__(self, plugin: Plugin, *, score: Optional[ScoreFn] = None,
                 on_output=None, on_barrier: Optional[BarrierFn] = None,
                 release: bool = False, score_threads: int = 1):
        self._driver = GroupRollout(plugin, self._generate_one, score=score,
                                    on_output=on_output, on_barrier=on_barrier,
                                    release=release,
                                    score_threads=score_threads)

    async def _generate_one(self, prompt, uid: Uid, sample: int, batch: int):
        raise NotImplementedError

    async def generate(self, items: Sequence[Tuple[Uid, Any, float]]
                       ) -> Dict[Uid, GroupResult]:
        """items: (uid, prompt, prior); uid -> GroupResult when all final."""
        return await self._driver.run(items)

    @property
    def generate_calls(self) -> int:
        return self._driver.generate_calls

    def close(self):
        self._driver.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
