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
  and submits them, admitting as the one admission policy says
  (v05.core.admission.Admission): while the informative groups it can
  expect from what is in flight fall short of B, or while fewer than
  `inflight` samples are running or queued (the engine-full floor:
  default the engine's own slots, vLLM's max_num_seqs or sglang's
  max_running_requests, under carry). What it expects: the groups in
  flight that already have two different rewards (certain), and for the
  others their chance of being informative, the skip rule's 1 - P(all
  same) from the prior (1 without a rule), scaled by how the finished
  groups bore such chances out so far, across steps. So a dropped group
  brings a new prompt the moment it is decided, and the engine never runs
  dry at a step's end.
- A prompt whose prior (or history) predicts an all-same group with high
  confidence is skipped before any sample (a SkipRule, v05.core.fill),
  and counted; the source's next prompt takes its place.
- It stops when B informative groups are final (or the source runs out,
  or `max_admitted` prompts went in: the step comes back short, and says
  so). What is in flight then:
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

import dataclasses
import errno
from typing import Any, Callable, Dict, Hashable, Iterable, List, Optional, \
    Tuple

from ..core import _checks
from ..core._lib import V05Error
from ..core.admission import ADMIT, SKIP, Admission
from ..core.decision import Decision, SubmitError, Uid, uid_checked
from ..core.fill import COUNTS, SkipRule, default_count
from ..core.observer import Observer
from .driver import EngineRollout, GroupResult, GroupRollout
from .runner import Flight

__all__ = ["StreamFill", "FillResult", "AT_TARGET"]

AT_TARGET = ("abort", "carry")
DEFAULT_INFLIGHT = 256


@dataclasses.dataclass
class FillResult:
    """One fill's outcome. groups: uid -> GroupResult of the `target`
    informative groups, in the order they became final; fewer only when
    the step came back short (short: the source ran out, or max_admitted
    prompts went in, before the target). Counts are this fill's."""
    groups: Dict[Uid, GroupResult]
    admitted: int = 0          # prompts submitted
    finished: int = 0          # groups final or dropped, informative or not
    dropped: int = 0           # of them not informative (released here)
    skipped: List[Uid] = dataclasses.field(default_factory=list)
    revisited: int = 0         # would be skipped, rolled out by the draw
    plugin_skipped: int = 0    # of the dropped, skipped by the plugin at
    # submit (mode v05-pg): admitted, dropped with k = 0, no sample
    samples: int = 0           # samples started (generate calls)
    aborted: int = 0           # prompts in flight aborted at the target
    aborted_samples: int = 0   # their samples cancelled (running or queued)
    surplus: int = 0           # informative groups final beyond the target
    carried: int = 0           # prompts in flight kept for the next fill
    short: bool = False        # fewer groups than the target came back
    exhausted: bool = False    # the source ran out during this fill (its
    # last prompt pulled; the step may still have met its target)
    capped: bool = False       # max_admitted prompts went in


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
    SGLangRollout). count: "contrast" or "signal" (v05.core.fill; by
    default "signal" where a group may end at one sample, v05-pg's or
    k_init 1, "contrast" otherwise). skip: a
    SkipRule or None. history: an object with counts(uid) -> (successes,
    trials) or None and update(uid, rewards) (v05.core.prior.HistoryPrior):
    each finished group is folded into it, and the skip rule reads it
    (pass it when the source's prior is not itself the history's, which
    would count it twice). inflight: samples to keep running or queued at
    least (default: the engine's slots under carry, else 0). policy: an
    Admission (v05.core.admission) made with those, to carry its state
    (the calibration) from one fill object to the next; then leave count,
    skip, history and inflight out. prompt_name(uid, prompt): what a
    prompt's history and revisit draw go by across steps (default its
    uid, for sources whose uids are stable). on_group(decision, group,
    counts): called on the loop with every group final or dropped (its
    "final" or "drop" decision), informative or not, before it is kept
    or released (a view: copy what you keep)."""

    def __init__(self, rollout, *, at_target: str = "abort",
                 count: Optional[str] = None,
                 skip: Optional[SkipRule] = None,
                 history=None, inflight: Optional[int] = None,
                 policy: Optional[Admission] = None,
                 prompt_name: Optional[Callable[[Uid, Any], Hashable]] = None,
                 on_group: Optional[Callable[[Decision, Any, bool], None]]
                 = None):
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
        for name, fn in (("prompt_name", prompt_name),
                         ("on_group", on_group)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} is {type(fn).__name__}, not "
                                "callable")
        if drv.on_reward is not None:
            raise ValueError("this driver already has a streamed fill")
        self._drv = drv
        self.plugin = drv.plugin
        self.at_target = at_target
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
        self.policy = self._policy(policy, count, skip, history, inflight)
        self.prompt_name, self.on_group = prompt_name, on_group
        self._flight = Flight()
        self._open: Dict[int, set] = {}     # batch -> its uids in flight
        self._batch_of: Dict[Uid, int] = {}
        self._ready: List[Tuple[Uid, Decision, dict]] = []  # carried finals
        self._held = set()  # uids of finals held: this step's and _ready's
        self._pending: List[Tuple[Uid, Any, Any]] = []  # pulled, not in yet
        self._errors: List[BaseException] = []
        self._step = 0
        self._visit = 0   # the revisit draws' visit, this fill's
        self._cap = None  # this fill's max_admitted
        self._closed = False
        self.totals = {k: 0 for k in ("fills", "admitted", "finished",
                                      "dropped", "skipped", "plugin_skipped",
                                      "revisited",
                                      "samples", "aborted", "aborted_samples",
                                      "surplus")}
        drv.on_reward = self._on_reward

    def _policy(self, policy, count, skip, history, inflight) -> Admission:
        """The admission policy: the one handed in (checked against this
        plugin), or one made of the settings."""
        if policy is not None:
            if not isinstance(policy, Admission):
                raise TypeError(f"policy is {type(policy).__name__}, not "
                                "an Admission")
            if count is not None or skip is not None or \
                    history is not None or inflight is not None:
                raise ValueError("give the policy, or count, skip, history "
                                 "and inflight: not both")
            if (policy.mode, policy.k_init) != (self.mode, self.k_init):
                raise ValueError(
                    f"the policy is for mode {policy.mode} with k_init "
                    f"{policy.k_init}; segment {self.plugin.name} runs "
                    f"{self.mode} with k_init {self.k_init}")
            return policy
        if count is None:
            count = default_count(self.mode, self.k_init)
        if count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, not {count!r}")
        if inflight is None:
            # Carried prompts cost nothing, so under carry the engine is
            # kept full to the end; under abort whatever runs at the
            # target is wasted, and the expectation alone decides.
            slots = self._adapter.engine_slots() if self._adapter else None
            inflight = (slots or DEFAULT_INFLIGHT) \
                if self.at_target == "carry" else 0
        return Admission(self.mode, self.k_init, count=count, skip=skip,
                         history=history, inflight=inflight)

    # The policy's settings, as this fill's.
    count = property(lambda self: self.policy.count)
    skip = property(lambda self: self.policy.skip)
    history = property(lambda self: self.policy.history)
    inflight = property(lambda self: self.policy.inflight)

    # ---- what is in flight ----------------------------------------------

    @property
    def carried(self) -> int:
        """Prompts in flight, and informative groups final beyond the last
        target, that the next fill takes first (at_target "carry")."""
        return len(self._flight.prompts) + len(self._ready)

    def _on_reward(self, d: Decision, sample, reward):
        """On the loop, for each reward scored here."""
        if d.uid in self._flight.prompts:
            self.policy.reward(d.uid, reward)

    def _name(self, uid, prompt):
        return uid if self.prompt_name is None else \
            self.prompt_name(uid, prompt)

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
        None when the source is exhausted (or max_admitted went in)."""
        if self._cap is not None and res.admitted + len(taken) >= self._cap:
            res.capped = True
            return None
        if self._pending:
            return self._pending.pop(0)
        while True:
            item = next(it, _END)
            if item is _END:
                res.exhausted = True
                return None
            uid, prompt, prior = self._check_item(item, taken)
            if self.policy.skip is not None:
                verdict = self.policy.screen(uid, prior, visit=self._visit,
                                             name=self._name(uid, prompt))
                if verdict != ADMIT:
                    if verdict == SKIP:
                        res.skipped.append(uid)
                        continue
                    res.revisited += 1
            return uid, prompt, prior

    def _admit(self, it, need: int, res: FillResult) -> None:
        """Pull and submit prompts while the policy wants more: the
        expected informative groups fall short of `need` (what the step
        still lacks) or the engine's floor is not met."""
        policy = self.policy
        expected = policy.expected()
        queued = len(self._flight.tasks)
        new: List[Tuple[Uid, Any, Any]] = []
        taken = set()
        # Bounded per call, so an endless source whose prompts the rule
        # all skips still lets the loop run.
        budget = 4 * need + policy.inflight
        while policy.wants(expected, need, queued) and budget > 0:
            budget -= 1
            item = self._pull(it, taken, res)
            if item is None:
                break
            uid, prompt, prior = item
            taken.add(uid)
            new.append(item)
            expected += policy.admit(uid, prior, None if self.prompt_name
                                     is None else self._name(uid, prompt))
            queued += self.k_init
        if new:
            self._submit(new, res)

    def _submit(self, new, res: FillResult) -> None:
        runner = self._drv.runner
        try:
            first = self.plugin.submit([(u, p) for u, _, p in new])
            refused = {}
        except SubmitError as e:
            first, refused = e.decisions, e.rejected
        except V05Error as e:
            if e.errno != errno.EBUSY:  # EBUSY: every batch record in use
                raise
            first, refused = [], {u: errno.EBUSY for u, _, _ in new}
        runner.start(self._flight, first, {u: p for u, p, _ in new},
                     refused)
        for d in first:
            self._open.setdefault(d.batch, set()).add(d.uid)
            self._batch_of[d.uid] = d.batch
        # A prompt skipped at submit (v05-pg) is admitted too: its drop
        # of k = 0 comes at a poll.
        res.admitted += sum(1 for u, _, _ in new if u not in refused)
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
            self.policy.refused(uid)
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
        outs = self._flight.outputs.get(uid, {})
        self._flight.forget(uid)
        res.finished += 1
        g = self.plugin.group(d)
        try:
            good = self.policy.finished(uid, g, dropped=d.kind == "drop")
            if self.on_group is not None:
                self.on_group(d, g, good)
        finally:
            del g  # no view may outlive the slot
        if not good:
            res.dropped += 1
            if d.kind == "drop" and d.k == 0:
                res.plugin_skipped += 1
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

    async def fill(self, source: Iterable, target: int, *,
                   visit: Optional[int] = None,
                   max_admitted: Optional[int] = None) -> FillResult:
        """Fill one step: returns once `target` informative groups are
        final, or short (FillResult.short) once the source is exhausted,
        or max_admitted prompts went in, with nothing left in flight.
        source: an iterator of (uid, prompt, prior); the same one may be
        handed to every step (what was pulled and not yet submitted waits
        inside the fill for the next step). visit: the skip's revisit
        draws' visit (default: this fill's number, 1 for the first);
        max_admitted: prompts submitted in this fill at most (None: no
        bound)."""
        if self._closed:
            raise RuntimeError("v05 fill: closed")
        drv = self._drv
        drv._bind_loop(holder=self)
        if self._adapter is not None:
            self._adapter._check_loop()
        target = _checks.integer("target", target, 1, 1 << 20,
                                 _checks.U32_MAX)
        self._cap = None if max_admitted is None else _checks.integer(
            "max_admitted", max_admitted, 1, 1 << 30, _checks.U32_MAX)
        try:
            it = iter(source)
        except TypeError:
            raise TypeError(f"v05 fill: the source is "
                            f"{type(source).__name__}, not an iterable of "
                            "(uid, prompt, prior)") from None
        self._step += 1
        self._visit = self._step if visit is None else \
            _checks.u64("visit", visit)
        drv._running = True
        drv._errors = self._errors
        calls0 = drv.generate_calls
        res = FillResult(groups={})
        groups: List[Tuple[Uid, Decision, dict]] = []
        while self._ready and len(groups) < target:
            groups.append(self._ready.pop(0))
        try:
            await self._run(it, groups, target, res)
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
        res.short = len(res.groups) < target
        res.samples = drv.generate_calls - calls0
        self._count(res)
        return res

    async def _run(self, it, groups, target, res: FillResult) -> None:
        """The step's loop: admit, take decisions in, wait; then what the
        target does to what is in flight."""
        while len(groups) < target:
            if self._errors:
                raise self._errors[0]
            self._admit(it, target - len(groups), res)
            if not self._flight.prompts and (res.exhausted or res.capped):
                break
            if not await self._turn(groups, target, res) and \
                    len(groups) < target:
                await self._drv._wait()
        if self._errors:
            raise self._errors[0]
        await self._at_target(res, groups, target)

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
        for k in ("admitted", "finished", "dropped", "plugin_skipped",
                  "revisited", "samples", "aborted", "aborted_samples",
                  "surplus"):
            t[k] += getattr(res, k)
        t["skipped"] += len(res.skipped)

    def _forget_flight(self) -> None:
        self._flight = Flight()
        self._open.clear()
        self._batch_of.clear()
        self.policy.forget()

    async def _abort_all(self, res: Optional[FillResult]) -> int:
        """Abort everything in flight and release the carried finals;
        returns the prompts aborted. Nothing outstanding afterwards."""
        drv = self._drv
        fl = self._flight
        n = len(fl.prompts)
        batches = list(self._open)
        ready, self._ready = self._ready, []
        for uid, d, _ in ready:
            self.plugin.release(d)
            self._held.discard(uid)
        self._forget_flight()
        drv._end_run()  # their scores and staged rewards are not pushed
        pending = await drv.runner.abort(fl, batches)
        # A final of an aborted batch still queued was released by cancel;
        # one of a batch already closed is handed out here: ours to free.
        for d in self.plugin.poll():
            if d.kind in ("final", "drop"):
                self.plugin.release(d)
        if res is not None:
            res.aborted += n
            res.aborted_samples += pending
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
                                     [(uid, d) for uid, d, _ in held],
                                     results, exc)
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
