# SPDX-License-Identifier: MIT
"""Engine-agnostic group rollout: what the vLLM and sglang adapters share.

A group is not a fixed n anymore: the plugin decides, per prompt, when to
stop. The driver turns each "sample" decision into single-sample generate
calls (n=1, same prompt: the engine's prefix cache shares it), each finished
sequence into a reward (scored here, or by external reward workers), and
each "final"/"drop" decision into a result with zero-copy advantages.

Two parts: the flight of requests (submit, generate calls, decisions taken
in, results, aborts) is the decision runner's (v05.engines.runner), which
a host that scores and waits its own way (a route inside an HTTP server)
uses alone; GroupRollout here adds the in-process scoring, the two ways of
waiting and the binding to the event loop, and runs a batch (run()) or a
streamed fill's steps (v05.engines.fill).

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
- When it scores in-process, the rewards come back to the loop, which
  needs no doorbell for them. Finished samples queue for scoring, and the
  queue goes to a free scoring thread as one job once the loop has run
  what is ready (the engine finishes samples in bursts, a step at a time:
  here 2.8 samples per job on vLLM); the loop checks the job's scores (the
  same errors as a push) and stages them in its own lane; right before
  each poll it publishes everything staged with one store, then waits for
  the next scores or the plugin's next stream deadline. Against a push
  per reward from a scoring thread and a wait on the doorbell, that saves
  per burst all but one trip through the pool and back, and per wait an
  io_uring futex wait armed (a membarrier on the way) and a reader added
  to and removed from the loop (bench/ENGINE.md). Rewards pushed into the
  segment by anyone else are then seen at the next scores or within
  ``poll_timeout``; ``wait_on="doorbell"`` scores and pushes per sample in
  the pool and waits on the doorbell, as the driver always does when
  reward workers elsewhere push (``on_output``).
"""

import asyncio
import concurrent.futures
import functools
import hashlib
import inspect
import threading
import time
from typing import (Any, Awaitable, Callable, Dict, List, Optional, Sequence,
                    Tuple, Union)

from ..core.decision import Decision, SubmitError, Uid
from ..core.plugin import Plugin
from ..core.writer import RewardWriter
from .runner import (BarrierFn, DecisionRunner, Flight, GenerateFn,
                     GroupResult, RewardRejected)

__all__ = ["GroupResult", "GroupRollout", "EngineRollout", "sample_seed",
           "RewardRejected", "DecisionRunner", "Flight"]

# score(uid, sample, output) -> reward on [-1, 1]; may be an async def
ScoreFn = Callable[[Uid, int, Any], Union[float, Awaitable[float]]]


def sample_seed(base: int, uid: Uid, batch: int, sample: int) -> int:
    """A per-sample seed from the caller's base seed: different for every
    (uid, batch, sample), so a seeded run does not draw the same samples
    at every training step. 31 bits: every engine accepts it."""
    h = hashlib.blake2b(f"{base}\0{uid}\0{batch}\0{sample}".encode(),
                        digest_size=8)
    return int.from_bytes(h.digest(), "little") & 0x7FFFFFFF


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

    wait_on: "auto" waits for its own scores when it scores (``score``),
    on the plugin's doorbell otherwise; "doorbell" always waits there (for
    a segment that other reward workers push into as well: see the
    module's text). ``.wait_on`` says which: "scores" or "doorbell".

    writer: the RewardWriter the loop stages its scores in (wait_on
    "scores"; the caller's, left open by close()); default: a lane
    attached on first use. stall_timeout: seconds a wait may go on with
    nothing running (every sample generated and scored) and no decision
    before the batch fails with TimeoutError; None (the default) waits
    for ever, as a segment others push into may.

    The flight of requests (submit, generate calls, taking decisions in,
    results, aborts) is ``self.runner``'s, a DecisionRunner
    (v05.engines.runner); this class scores, waits and binds the loop.
    """

    def __init__(self, plugin: Plugin, generate: GenerateFn, *,
                 score: Optional[ScoreFn] = None,
                 on_output: Optional[Callable[[Uid, int, int, Any], None]] = None,
                 on_barrier: Optional[BarrierFn] = None,
                 release: bool = False, poll_timeout: float = 0.05,
                 score_threads: int = 1, wait_on: str = "auto",
                 writer: Optional[RewardWriter] = None,
                 stall_timeout: Optional[float] = None):
        if score is None and on_output is None:
            raise ValueError("give score (rewards computed here) or "
                             "on_output (reward workers push them)")
        if not 1 <= score_threads <= 64:
            raise ValueError("score_threads must be in 1..64")
        if wait_on not in ("auto", "doorbell"):
            raise ValueError(f"wait_on must be 'auto' or 'doorbell', not "
                             f"{wait_on!r}")
        if writer is not None and not isinstance(writer, RewardWriter):
            raise TypeError(f"writer is {type(writer).__name__}, not a "
                            "RewardWriter")
        if stall_timeout is not None and not stall_timeout > 0:
            raise ValueError(f"stall_timeout must be None or > 0, not "
                             f"{stall_timeout!r}")
        self.plugin, self.generate = plugin, generate
        self.score, self.on_output = score, on_output
        self._score_async = score is not None and \
            inspect.iscoroutinefunction(score)
        self.runner = DecisionRunner(plugin, generate, finish=self._finish,
                                     on_error=self._fail,
                                     on_barrier=on_barrier, release=release)
        self.runner.on_abort = self._unqueue
        self.poll_timeout = poll_timeout
        self.stall_timeout = stall_timeout
        self._stall_since = 0.0  # stall_timeout: since when nothing ran
        self._stall_seen = -1  # ... and the decisions taken by then
        # "scores": woken by its own scores (see the module's text).
        self.wait_on = "scores" if score is not None and wait_on == "auto" \
            else "doorbell"
        self._kicked = False  # staged rewards (or a failure) since the last poll
        self._stager = writer  # the loop's RewardWriter (wait_on "scores")
        self._kick_fut = None  # the future a wait for scores is parked on
        # wait_on "scores": outputs waiting for a scoring thread, jobs out,
        # and the run they are for (a job of a run given up is ignored).
        self._score_threads = score_threads
        self._to_score: List[Tuple[Decision, int, Any]] = []
        self._scoring = 0
        self._dispatch_due = False
        self._run_id = 0
        self._errors: List[BaseException] = []
        # A streamed fill's: called on the loop with (decision, sample,
        # reward) for each reward scored here; and the fill holding this
        # driver between its steps (prompts carried into the next fill).
        self.on_reward = None
        self._held_by = None
        self._loop = None
        self._running = False
        self._pool = None
        self._local = threading.local()
        self._writers: List[RewardWriter] = []
        self._writers_lock = threading.Lock()
        if score is not None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=score_threads, thread_name_prefix="v05-score")

    # The runner's settings and counts, as this driver's.
    release = property(lambda self: self.runner.release,
                       lambda self, v: setattr(self.runner, "release", v))
    on_barrier = property(lambda self: self.runner.on_barrier,
                          lambda self, v: setattr(self.runner, "on_barrier",
                                                  v))
    generate_calls = property(lambda self: self.runner.generate_calls,
                              doc="generate calls started")
    aborted = property(lambda self: self.runner.aborted,
                       doc="samples aborted on an \"abort\" decision")

    def close(self):
        if self.plugin.on_post == self._posted_wake:
            self.plugin.on_post = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._writers_lock:
            writers, self._writers = self._writers, []
            if self._stager in writers:  # attached here, not the caller's
                self._stager = None
        for w in writers:
            w.close()

    # ---- scoring, off the event loop ------------------------------------

    def _loop_writer(self) -> RewardWriter:
        """The lane the loop stages rewards in (wait_on "scores")."""
        w = self._stager
        if w is None:
            w = self._stager = RewardWriter.attach(self.plugin.name)
            with self._writers_lock:
                self._writers.append(w)
        return w

    def _queue_score(self, d: Decision, sample, out):
        """On the loop: a finished sample waits for a scoring thread. The
        job starts once the loop has run everything ready now: the other
        samples of the engine step that finished this one join it."""
        self._to_score.append((d, sample, out))
        if not self._dispatch_due:
            self._dispatch_due = True
            self._loop.call_soon(self._dispatch_scoring)

    def _dispatch_scoring(self):
        """Everything waiting goes to a free scoring thread as one job."""
        self._dispatch_due = False
        if not self._to_score or self._scoring >= self._score_threads:
            return  # a job that ends dispatches again
        q, self._to_score = self._to_score, []
        self._scoring += 1
        self._loop.run_in_executor(self._pool, self._score_many, q) \
            .add_done_callback(functools.partial(self._scored, self._run_id))

    def _score_many(self, items):
        """In a scoring thread."""
        score = self.score
        return [(d, s, score(d.uid, s, out)) for d, s, out in items]

    def _scored(self, run, fut):
        """On the loop, when a scoring job ends: its rewards, then what
        waits for scoring meanwhile."""
        self._scoring -= 1
        if run == self._run_id and not fut.cancelled():
            self._take_scores(fut)
        self._dispatch_scoring()

    def _take_scores(self, fut):
        """Stage a scoring job's rewards, or fail the run with its error."""
        exc = fut.exception()
        if exc is None:
            try:
                self._stage(fut.result())
                return
            except Exception as e:  # a bad score: as a failed sample
                exc = e
        self._fail(exc)

    def _stage(self, scored):
        """On the loop: check and hold (decision, sample, reward) for
        _publish, and wake the driver for them."""
        w = self._stager or self._loop_writer()
        for d, sample, reward in scored:
            w.stage(d, sample, reward)
            self._saw(d, sample, reward)
        self._kick()

    def _saw(self, d: Decision, sample, reward):
        """On the loop: a reward checked and on its way (a streamed fill
        watches them: v05.engines.fill)."""
        if self.on_reward is not None:
            self.on_reward(d, sample, reward)

    def _fail(self, exc):
        """On the loop: a sample's generate or score failed; run() raises
        it and stops waiting for rewards now."""
        self._errors.append(exc)
        self._kick()
        self.plugin.wake()

    def _publish(self) -> bool:
        """On the loop, before each poll: publish the staged rewards.
        True when some are still held (the lane was full: poll drains it,
        and the loop comes back without waiting)."""
        w = self._stager
        return w is not None and w.staged > 0 and w.publish_staged() > 0

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
        # Not float(reward) first: the push's check refuses a bool or a
        # string, which float() would have turned into a number.
        self._writer().push(d, sample, reward)

    def _score_and_push(self, d: Decision, sample, out):
        r = self.score(d.uid, sample, out)
        self._push(d, sample, r)
        return r

    async def _finish(self, d: Decision, sample, out):
        loop = asyncio.get_running_loop()
        if self.score is None:
            self.on_output(d.uid, sample, d.gen, out)
        elif self.wait_on == "scores":
            if self._score_async:
                self._stage(((d, sample, await self.score(d.uid, sample,
                                                          out)),))
            else:
                self._queue_score(d, sample, out)
        elif self._score_async:
            r = await self.score(d.uid, sample, out)
            await loop.run_in_executor(self._pool, self._push, d, sample, r)
            self._saw(d, sample, r)
        else:
            self._saw(d, sample, await loop.run_in_executor(
                self._pool, self._score_and_push, d, sample, out))

    # ---- waiting for its own scores ----------------------------------------

    def _kick(self):
        """On the loop: poll now (rewards staged, or a sample failed)."""
        self._kicked = True
        if self._kick_fut is not None:
            _resolve(self._kick_fut)

    def _arm_scores(self):
        """The wait for scores, set up (timed apart by bench/engine_run.py
        as the doorbell's arming is): None when there is work now, else
        the future to await and its timer."""
        if self._kicked:
            return None
        dl = self.plugin.next_deadline()
        if dl == 0.0:
            return None
        t = self.poll_timeout if dl is None else min(dl, self.poll_timeout)
        fut = self._loop.create_future()
        self._kick_fut = fut
        return fut, self._loop.call_later(t, _resolve, fut)

    def _check_stall(self) -> None:
        """stall_timeout: a wait with nothing running (no sample
        generating or being scored, no reward staged) and no decision
        taken in since the last such check for longer than that fails."""
        now = time.monotonic()
        busy = self.runner.running or self._scoring or self._to_score or \
            self._kicked
        if busy or self.runner.taken != self._stall_seen:
            self._stall_since, self._stall_seen = now, self.runner.taken
        elif now - self._stall_since > self.stall_timeout:
            raise TimeoutError(
                f"v05: no decision in {self.stall_timeout} s with nothing "
                f"running (segment {self.plugin.name}: every sample "
                "generated and its reward pushed)")

    async def _wait(self):
        if self.stall_timeout is not None:
            self._check_stall()
        if self.wait_on == "doorbell":
            await self.plugin.wait(self.poll_timeout)
            return
        armed = self._arm_scores()
        if armed is None:
            return
        fut, timer = armed
        # A task awaiting a plain future is always cancelled by a
        # cancellation (see Plugin.wait, where wait_for was not).
        try:
            await fut
        finally:
            self._kick_fut = None
            timer.cancel()

    def _posted_wake(self):
        """In a thread that posted a fit state (Plugin.post_eb_remote, e.g.
        FitExchange's): the loop polls now, which hands it in."""
        loop = self._loop
        try:
            loop.call_soon_threadsafe(self._wake_for_post)
        except RuntimeError:  # the loop is closed: nothing to wake
            pass

    def _wake_for_post(self):
        self._kick()
        self.plugin.wake()

    # ---- one batch --------------------------------------------------------

    def _bind_loop(self, holder=None):
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            # The plugin is this loop's (one thread at a time): a state
            # another thread posts wakes it.
            self.plugin.on_post = self._posted_wake
        elif self._loop is not loop:
            raise RuntimeError(
                "v05 rollout: driven from a different event loop than the "
                "one it first ran on. The engine client (vLLM AsyncLLM, "
                "sglang Engine) is bound to its first loop: run every batch "
                "inside one asyncio.run(main()).")
        if self._running:
            raise RuntimeError("v05 rollout: run() is already in progress; "
                               "one batch at a time per rollout")
        if self._held_by is not None and self._held_by is not holder:
            raise RuntimeError("v05 rollout: a streamed fill holds prompts "
                               "carried into its next step; close() it "
                               "before running anything else")
        self._stall_seen = -1  # stall_timeout counts from now

    async def run(self, items: Sequence[Tuple[Uid, Any, float]]
                  ) -> Dict[Uid, GroupResult]:
        """items: (uid, prompt, prior). Returns uid -> GroupResult once every
        group is final (or dropped, or aborted by a producer's abort
        record: .cancelled, no group)."""
        self._bind_loop()
        items = list(items)
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 3:
                raise TypeError(f"v05 rollout: item {i} is {item!r}, not a "
                                "(uid, prompt, prior) triple")
        self._running = True
        flight = Flight()
        results: Dict[Uid, GroupResult] = {}
        # Final (or dropped) decisions by uid, turned into results once the
        # batch is whole: nothing waits on a result before then, and one
        # tight loop over them at the end costs a fraction of the same
        # calls spread between the engine's work on the event loop (its
        # caches cold each time; bench/ENGINE.md, decision overhead).
        finals: Dict[Uid, Decision] = {}
        # Failed samples (generate or score), raised by this run.
        errors: List[BaseException] = []
        self._errors = errors
        batch = 0

        def keep(d: Decision):
            finals[d.uid] = d

        # Groups a producer aborted (abort records): out of the plugin,
        # their requests aborted; their results say so.
        gone: Dict[Uid, Decision] = {}

        def cancelled(d: Decision):
            gone[d.uid] = d

        runner = self.runner
        try:
            try:
                first = runner.submit(flight, items)
            except SubmitError as e:  # the accepted prompts are live
                batch = e.decisions[0].batch if e.decisions else 0
                raise
            if first:
                batch = first[0].batch
            while len(finals) + len(gone) < len(items):
                if errors:
                    raise errors[0]
                # Cleared before the poll: a reward staged after it sets
                # it again, so none is left unpolled; one still held (a
                # full lane) sets it too.
                self._kicked = self.wait_on == "scores" and self._publish()
                fault = await runner.take(flight, self.plugin.poll(), keep,
                                          cancelled)
                if fault is not None:
                    raise fault
                if len(finals) + len(gone) < len(items):
                    await self._wait()
            # Every group is final: its samples' tasks have finished too
            # (the reward is pushed last); wait for the bookkeeping.
            await runner.settle(flight.tasks)
            if errors:
                raise errors[0]
            for uid, d in finals.items():
                results[uid] = runner.result(d, flight.outputs)
            for uid, d in gone.items():
                outs = flight.outputs.get(uid, {})
                results[uid] = GroupResult(uid, [outs.get(s) for s in
                                                 range(max(outs, default=-1)
                                                       + 1)],
                                           None, d, True, False,
                                           cancelled=True)
            return results
        except BaseException as e:
            await runner.abandon(flight.tasks, [batch], finals.items(),
                                 results, e)
            raise
        finally:
            self._running = False
            self._end_run()

    def _end_run(self):
        """What is left is not this run's to push: the scores and rewards
        of samples aborted (or of a batch given up). A new run id: a
        scoring job still out stages nothing later."""
        self._run_id += 1
        self._to_score = []
        if self._stager is not None:
            self._stager.discard_staged()

    def _unqueue(self, d: Decision) -> None:
        """An "abort" decision's samples (the runner cancelled their
        tasks): one still waiting to be scored is not scored."""
        if self._to_score:
            gone = set(d.samples)
            self._to_score = [x for x in self._to_score
                              if x[0].key != d.key or x[1] not in gone]


class EngineRollout:
    """Base of the engine adapters: subclasses give _generate_one(prompt,
    uid, sample, batch) for their engine; the rest is GroupRollout."""

    def __init__(self, plugin: Plugin, *, score: Optional[ScoreFn] = None,
                 on_output=None, on_barrier: Optional[BarrierFn] = None,
                 release: bool = False, score_threads: int = 1,
                 wait_on: str = "auto"):
        self._driver = GroupRollout(plugin, self._generate_one, score=score,
                                    on_output=on_output, on_barrier=on_barrier,
                                    release=release,
                                    score_threads=score_threads, wait_on=wait_on)

    async def _generate_one(self, prompt, uid: Uid, sample: int, batch: int):
        raise NotImplementedError

    def _check_loop(self) -> None:
        """Refuse an event loop the engine is not bound to (the adapters
        that can tell)."""

    def engine_slots(self) -> Optional[int]:
        """How many sequences the engine runs at once (its scheduler's
        limit), when the adapter can tell: a streamed fill keeps at least
        that many samples running or queued."""
        return None

    async def generate(self, items: Sequence[Tuple[Uid, Any, float]]
                       ) -> Dict[Uid, GroupResult]:
        """items: (uid, prompt, prior); uid -> GroupResult when all final."""
        self._check_loop()
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


def _resolve(fut) -> None:
    if not fut.done():
        fut.set_result(None)
