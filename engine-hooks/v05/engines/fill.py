# SPDX-License-Identifier: MIT
"""The streamed fill: a training step's batch of B informative groups,
filled from a prompt source while the engine stays full, never in rounds.

A step wants B groups a gradient can use (v05.core.fill: rewards not all
equal, by default, in every mode). Dropping the others (DAPO, GRESO) and
filling up is what every framework does outside the engine, in rounds
(verl's DAPO recipe) or group by group (verl's replay buffer, OpenRLHF,
slime). Here the fill runs on the driver (v05.engines.driver), where the
decisions and the rewards arrive:

- It pulls prompts from a source, an iterator of (uid, prompt, prior),
  and submits them; it keeps admitting while the groups it can expect
  from what is in flight fall short of B, or while fewer than `inflight`
  samples are running or queued (the engine-full floor: default the
  engine's own slots, vLLM's max_num_seqs or sglang's
  max_running_requests). What it expects: the groups final and
  informative, plus those in flight that already have two different
  rewards (certain), plus for the others their chance of being
  informative, the skip rule's 1 - P(all same) from the prior (1 without
  a rule), scaled by how the finished groups bore such chances out so
  far. So a dropped group brings a new prompt the moment it is decided,
  and the engine never runs dry at a step's end.
- A prompt whose prior (or history) predicts an all-same group with high
  confidence is skipped before any sample (a SkipRule, v05.core.fill),
  and counted; the source's next prompt takes its place.
- It stops when B informative groups are final. What is in flight then:
  at_target="abort" cancels it (the engine aborts the requests; their
  tokens are wasted; informative groups final beyond B are released too:
  nothing crosses a step, every sample is of the step's policy), or
  at_target="carry" keeps it: its requests go on generating, and the next
  fill() takes its groups first (finished ones beyond B too), so nothing
  is wasted, at the price of samples one step old (as slime's partial
  rollouts, APRIL). close() aborts what is carried.

The fill is the driver's only consumer while it holds carried prompts:
GroupRollout.run() on the same driver is refused until close(). Errors are
the driver's: on any of them (a scorer, a generate, a bad reward, the
caller's cancellation) every request in flight is aborted, every batch
cancelled in the plugin, every group held released, and the error raised;
nothing is left outstanding and the fill can run again.

Works in every mode: a "drop" is not informative; in modes that do not
drop, a final group is classified by the shared rule. Modes with a second
wave need pad_multiple 1 (the fill submits a few prompts at a time; a
small batch's second wave padded to 32 samples would oversample).
"""

import asyncio
import dataclasses
import errno
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..core import _checks
from ..core._lib import V05Error
from ..core.decision import Decision, SubmitError, Uid, uid_checked
from ..core.fill import COUNTS, SkipRule, informative
from ..core.observer import Observer
from .driver import EngineRollout, GroupResult, GroupRollout
from .runner import Flight

__all__ = ["StreamFill", "FillResult", "AT_TARGET"]

AT_TARGET = ("abort", "carry")
DEFAULT_INFLIGHT = 256
# The calibration of the expected share forgets a finished group's weight
# by this factor per group (about the last 512 groups count).
_FORGET = 1.0 - 1.0 / 512


@dataclasses.dataclass
class FillResult:
    """One fill's outcome. groups: uid -> GroupResult of the `target`
    informative groups, in the order they became final (fewer only when
    the source ran out: exhausted). Counts are this fill's."""
    groups: Dict[Uid, GroupResult]
    admitted: int = 0          # prompts submitted
    finished: int = 0          # groups final or dropped, informative or not
    dropped: int = 0           # of them not informative (released here)
    skipped: List[Uid] = dataclasses.field(default_factory=list)
    revisited: int = 0         # would be skipped, rolled out by the draw
    samples: int = 0           # samples started (generate calls)
    aborted: int = 0           # prompts in flight aborted at the target
    aborted_samples: int = 0   # their samples cancelled (running or queued)
    surplus: int = 0           # informative groups final beyond the target
    carried: int = 0           # prompts in flight kept for the next fill
    exhausted: bool = False    # the source ran out before the target


class StreamFill:
    """Fill each step to `target` informative groups (module text).

        rollout = VLLMRollout(engine, plugin, sp, score=score)
        fill = StreamFill(rollout, at_target="carry", skip=SkipRule())
        source = iter(dataset_items)          # (uid, prompt, prior)
        for step in range(steps):
            res = await fill.fill(source, 256)
            train(res.groups)
        await fill.close()

    rollout: a GroupRollout or an engine adapter (VLLMRollout,
    SGLangRollout). count: "contrast" or "signal" (v05.core.fill). skip: a
    SkipRule or None. history: an object with counts(uid) -> (successes,
    trials) or None and update(uid, rewards) (v05.core.prior.HistoryPrior):
    each finished group is folded into it, and the skip rule reads it
    (pass it when the source's prior is not itself the history's, which
    would count it twice). inflight: samples to keep running or queued at
    least (default: the engine's slots, else 256)."""

    def __init__(self, rollout, *, at_target: str = "abort",
                 count: str = "contrast", skip: Optional[SkipRule] = None,
                 history=None, inflight: Optional[int] = None):
        if isinstance(rollout, EngineRollout):
            self._adapter, drv = rollout, rollout._driver
        elif isinstance(rollout, GroupRollout):
            self._adapter, drv = None, rollout
        else:
            raise TypeError(f"rollout is {type(rollout).__name__}, not a "
                            "GroupRollout or an engine adapter")
        if at_target not in AT_TARGET:
            raise ValueError(f"at_target must be one of {AT_TARGET}, not "
                             f"{at_target!r}")
        if count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, not {count!r}")
        if skip is not None and not isinstance(skip, SkipRule):
            raise TypeError(f"skip is {type(skip).__name__}, not a SkipRule")
        if history is not None and not (
                callable(getattr(history, "counts", None)) and
                callable(getattr(history, "update", None))):
            raise TypeError("history needs counts(uid) and update(uid, "
                            "rewards) (v05.core.prior.HistoryPrior)")
        if drv.on_reward is not None:
            raise ValueError("this driver already has a streamed fill")
        self._drv = drv
        self.plugin = drv.plugin
        self.at_target, self.count = at_target, count
        self.skip, self.history = skip, history
        self.mode = self.plugin.mode
        with Observer(self.plugin.name) as o:
            info = o.info()
        self.k_init = info["k_init"]
        if info["k_max"] > info["k_init"] and info["pad_multiple"] > 1:
            raise ValueError(
                f"v05 fill: segment {self.plugin.name} runs mode {self.mode} "
                f"with second waves and pad_multiple {info['pad_multiple']}: "
                "the fill submits a few prompts at a time, and each small "
                "batch's second wave would be padded to that many samples; "
                "create the plugin with pad_multiple=1")
        if inflight is None:
            # Carried prompts cost nothing, so under carry the engine is
            # kept full to the end; under abort whatever runs at the
            # target is wasted, and the expectation alone decides.
            slots = self._adapter.engine_slots() if self._adapter else None
            inflight = (slots or DEFAULT_INFLIGHT) if at_target == "carry" \
                else 0
        self.inflight = _checks.integer("inflight", inflight, 0, 1 << 20,
                                        _checks.U32_MAX)
        self._flight = Flight()
        self._open: Dict[int, set] = {}     # batch -> its uids in flight
        self._batch_of: Dict[Uid, int] = {}
        self._pi: Dict[Uid, float] = {}     # uid -> predicted P(informative)
        self._contrast: Dict[Uid, Any] = {}  # uid -> first reward, or True
        self._ready: List[Tuple[Uid, Decision, dict]] = []  # carried finals
        self._held = set()  # uids of finals held: this step's and _ready's
        self._pending: List[Tuple[Uid, Any, Any]] = []  # pulled, not in yet
        self._errors: List[BaseException] = []
        self._got = 1.0   # calibration: informative finals (decayed) ...
        self._want = 1.0  # ... against their predicted chances
        self._step = 0
        self._closed = False
        self.totals = {k: 0 for k in ("fills", "admitted", "finished",
                                      "dropped", "skipped", "revisited",
                                      "samples", "aborted", "aborted_samples",
                                      "surplus")}
        drv.on_reward = self._on_reward

    # ---- what is in flight ----------------------------------------------

    @property
    def carried(self) -> int:
        """Prompts in flight, and informative groups final beyond the last
        target, that the next fill takes first (at_target "carry")."""
        return len(self._flight.prompts) + len(self._ready)

    def _on_reward(self, d: Decision, sample, reward):
        """On the loop, for each reward scored here: a group with two
        different rewards is informative whatever comes next."""
        if d.uid not in self._flight.prompts:
            return
        c = self._contrast.get(d.uid)
        if c is None:
            self._contrast[d.uid] = float(reward)
        elif c is not True and c != float(reward):
            self._contrast[d.uid] = True

    def _expected(self) -> float:
        """The informative groups to expect from what is in flight."""
        scale = self._got / self._want
        out = 0.0
        for uid in self._flight.prompts:
            out += 1.0 if self._contrast.get(uid) is True else \
                min(1.0, scale * self._pi.get(uid, 1.0))
        return out

    # ---- admitting prompts ----------------------------------------------

    def _check_item(self, item, taken) -> Tuple[Uid, Any, Any]:
        where = f"v05 fill: the source's item {item!r}"
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise TypeError(f"{where} is not a (uid, prompt, prior) triple")
        uid, prompt, prior = item
        uid_checked(uid, "v05 fill")
        if uid in self._flight.prompts or uid in taken or \
                uid in self._held or \
                any(uid == u for u, _, _ in self._pending):
            raise ValueError(f"v05 fill: the source gave uid {uid!r} again "
                             "while it is in flight (uids are unique among "
                             "the prompts in flight)")
        if prior is None:
            if self.mode != "knapsack":
                raise TypeError(f"v05 fill: the prior of uid {uid!r} is "
                                "None (no estimate): only in mode knapsack, "
                                f"and this plugin runs mode {self.mode}")
        else:
            prior = _checks.unit_interval(
                f"v05 fill: the prior of uid {uid!r}", prior)
        return uid, prompt, prior

    def _pull(self, it, taken, res: FillResult):
        """The next prompt to submit, (uid, prompt, prior): one that had
        no room before, else the source's next one the skip rule keeps;
        None when the source is exhausted."""
        if self._pending:
            return self._pending.pop(0)
        while True:
            item = next(it, _END)
            if item is _END:
                res.exhausted = True
                return None
            uid, prompt, prior = self._check_item(item, taken)
            if self.skip is not None:
                hist = self.history.counts(uid) if self.history else None
                if self.skip.would_skip(prior, self.k_init, hist):
                    if not self.skip.revisited(uid, self._step):
                        res.skipped.append(uid)
                        continue
                    res.revisited += 1
            return uid, prompt, prior

    def _chance(self, uid, prior) -> float:
        """A prompt's predicted chance of an informative group (1 without
        a skip rule), before calibration."""
        if self.skip is None:
            return 1.0
        hist = self.history.counts(uid) if self.history else None
        return 1.0 - self.skip.all_same(prior, self.k_init, hist)

    def _admit(self, it, need: int, res: FillResult) -> None:
        """Pull and submit prompts while the expected informative groups
        fall short of `need` (what the step still lacks) or the engine's
        floor is not met."""
        expected = self._expected()
        scale = self._got / self._want
        queued = len(self._flight.tasks)
        new: List[Tuple[Uid, Any, Any]] = []
        taken = set()
        # Bounded per call, so an endless source whose prompts the rule
        # all skips still lets the loop run.
        budget = 4 * need + self.inflight
        while (expected < need or queued < self.inflight) and budget > 0:
            budget -= 1
            item = self._pull(it, taken, res)
            if item is None:
                break
            uid = item[0]
            pi = self._pi[uid] = self._chance(uid, item[2])
            taken.add(uid)
            new.append(item)
            expected += min(1.0, scale * pi)
            queued += self.k_init
        if new:
            self._submit(new, res)

    def _submit(self, new, res: FillResult) -> None:
        try:
            first = self.plugin.submit([(u, p) for u, _, p in new])
            refused = {}
        except SubmitError as e:
            first, refused = e.decisions, e.rejected
        except V05Error as e:
            if e.errno != errno.EBUSY:  # EBUSY: every batch record in use
                raise
            first, refused = [], {u: errno.EBUSY for u, _, _ in new}
        prompt_of = {u: p for u, p, _ in new}
        for d in first:
            self._flight.prompts[d.uid] = prompt_of[d.uid]
        for d in first:
            self._open.setdefault(d.batch, set()).add(d.uid)
            self._batch_of[d.uid] = d.batch
            self._drv.runner.spawn(self._flight, d)
        res.admitted += len(first)
        back = []
        for uid, prompt, prior in new:
            code = refused.get(uid)
            if code is None:
                continue
            if code not in (errno.ENOSPC, errno.EBUSY):
                raise ValueError(
                    f"v05 fill: segment {self.plugin.name} refused uid "
                    f"{uid!r} ({errno.errorcode.get(code, code)}: "
                    "already active in the plugin, outside this fill?)")
            back.append((uid, prompt, prior))
            self._pi.pop(uid, None)
        if back:
            # No room now (slots or batch records): they go in when groups
            # are done. With nothing in flight, nothing would make room.
            if not self._flight.prompts:
                raise RuntimeError(
                    f"v05 fill: segment {self.plugin.name} has no room for "
                    f"a prompt with nothing in flight (max_prompts or "
                    "max_batches too small for the groups held: release "
                    "results, or create the plugin with more)")
            self._pending[:0] = back

    # ---- groups done ----------------------------------------------------

    def _finished(self, d: Decision, groups: list, target: int,
                  res: FillResult) -> None:
        """A final (or drop) of a prompt in flight: counted toward the
        target, kept beyond it (carry) or released."""
        uid = d.uid
        b = self._batch_of.pop(uid, None)
        if b is not None:
            mine = self._open.get(b)
            if mine is not None:
                mine.discard(uid)
                if not mine:
                    del self._open[b]
        self._contrast.pop(uid, None)
        pi = self._pi.pop(uid, 1.0)
        outs = self._flight.outputs.get(uid, {})
        self._flight.forget(uid)
        res.finished += 1
        g = self.plugin.group(d)
        try:
            k = g.k
            rewards = [float(x) for x in g.rewards[:k]]
            good = informative(self.mode, rewards,
                               advantages=[float(x) for x in g.advantages[:k]],
                               kept=g.kept, count=self.count,
                               dropped=d.kind == "drop")
        finally:
            del g  # no view may outlive the slot
        if self.history is not None:
            self.history.update(uid, rewards)
        self._got = self._got * _FORGET + (1.0 if good else 0.0)
        self._want = self._want * _FORGET + pi
        if not good:
            res.dropped += 1
            self.plugin.release(d)
        elif len(groups) < target:
            groups.append((uid, d, outs))
            self._held.add(uid)
        else:
            res.surplus += 1
            if self.at_target == "carry":
                self._ready.append((uid, d, outs))
                self._held.add(uid)
            else:
                self.plugin.release(d)

    # ---- one step ---------------------------------------------------------

    async def fill(self, source: Iterable, target: int) -> FillResult:
        """Fill one step: returns once `target` informative groups are
        final (or the source is exhausted with nothing left in flight).
        source: an iterator of (uid, prompt, prior); the same one may be
        handed to every step (what was pulled and not yet submitted waits
        inside the fill for the next step)."""
        if self._closed:
            raise RuntimeError("v05 fill: closed")
        drv = self._drv
        drv._bind_loop(holder=self)
        if self._adapter is not None:
            self._adapter._check_loop()
        target = _checks.integer("target", target, 1, 1 << 20,
                                 _checks.U32_MAX)
        try:
            it = iter(source)
        except TypeError:
            raise TypeError(f"v05 fill: the source is "
                            f"{type(source).__name__}, not an iterable of "
                            "(uid, prompt, prior)") from None
        drv._running = True
        drv._errors = self._errors
        self._step += 1
        calls0 = drv.generate_calls
        res = FillResult(groups={})
        groups: List[Tuple[Uid, Decision, dict]] = []
        while self._ready and len(groups) < target:
            groups.append(self._ready.pop(0))
        try:
            while len(groups) < target:
                if self._errors:
                    raise self._errors[0]
                self._admit(it, target - len(groups), res)
                if not self._flight.prompts and res.exhausted:
                    break
                if not await self._turn(groups, target, res) and \
                        len(groups) < target:
                    await drv._wait()
            if self._errors:
                raise self._errors[0]
            await self._at_target(res, groups, target)
            res.carried = len(self._flight.prompts)
            for uid, d, outs in groups:
                res.groups[uid] = drv.runner.result(d, {uid: outs})
                self._held.discard(uid)
        except BaseException as e:
            held = groups + self._ready
            self._ready = []
            self._held.clear()
            await self._give_up(e, held, res.groups)
            raise
        finally:
            drv._running = False
            drv._held_by = self if (self._flight.prompts or self._ready) \
                else None
        res.samples = drv.generate_calls - calls0
        self._count(res)
        return res

    async def _turn(self, groups, target, res: FillResult) -> int:
        """Publish the staged rewards, poll, and take the decisions in:
        samples started, groups done counted (_finished). Returns how many
        groups were done; raises the fault a decision brought."""
        drv = self._drv
        drv._kicked = drv.wait_on == "scores" and drv._publish()
        taken: List[Decision] = []
        fault = await drv.runner.take(self._flight, self.plugin.poll(),
                                      taken.append)
        for d in taken:
            self._finished(d, groups, target, res)
        if fault is not None:
            raise fault
        return len(taken)

    async def _at_target(self, res: FillResult, groups, target) -> None:
        """What happens to what is in flight once the target is met."""
        if self.at_target == "abort":
            await self._abort_all(res)

    def _count(self, res: FillResult) -> None:
        t = self.totals
        t["fills"] += 1
        for k in ("admitted", "finished", "dropped", "revisited", "samples",
                  "aborted", "aborted_samples", "surplus"):
            t[k] += getattr(res, k)
        t["skipped"] += len(res.skipped)

    def _forget_flight(self) -> None:
        self._flight = Flight()
        self._open.clear()
        self._batch_of.clear()
        self._pi.clear()
        self._contrast.clear()

    async def _abort_all(self, res: Optional[FillResult]) -> int:
        """Abort everything in flight and release the carried finals;
        returns the prompts aborted. Nothing outstanding afterwards."""
        drv = self._drv
        fl = self._flight
        pending = [t for t in fl.tasks if not t.done()]
        for t in pending:
            t.cancel()  # the engine aborts the request
        n = len(fl.prompts)
        for b in list(self._open):
            try:
                self.plugin.cancel(b)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
        ready, self._ready = self._ready, []
        for uid, d, _ in ready:
            self.plugin.release(d)
            self._held.discard(uid)
        self._forget_flight()
        drv._end_run()  # their scores and staged rewards are not pushed
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        # A final of an aborted batch still queued was released by cancel;
        # one of a batch already closed is handed out here: ours to free.
        for d in self.plugin.poll():
            if d.kind in ("final", "drop"):
                self.plugin.release(d)
        if res is not None:
            res.aborted += n
            res.aborted_samples += len(pending)
        return n

    async def _give_up(self, exc, held, results) -> None:
        """On an error: every request aborted, every batch cancelled, every
        group held released (the driver's clean-up), the state forgotten."""
        drv = self._drv
        batches = list(self._open)
        tasks = set(self._flight.tasks)
        self._forget_flight()
        self._pending.clear()
        try:
            await drv.runner.abandon(tasks, batches,
                               [(uid, d) for uid, d, _ in held], results,
                               exc)
        finally:
            drv._end_run()
            self._errors.clear()

    async def close(self) -> int:
        """Abort what is carried (requests in flight, groups held beyond
        the last target), release the driver; returns the prompts aborted.
        The fill cannot be used afterwards."""
        if self._closed:
            return 0
        drv = self._drv
        n = 0
        try:
            if self._flight.prompts or self._ready:
                drv._bind_loop(holder=self)
                n = await self._abort_all(None)
                self.totals["aborted"] += n
        finally:
            self._closed = True
            self._pending.clear()
            drv._held_by = None
            drv.on_reward = None
        return n

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


_END = object()
