# SPDX-License-Identifier: MIT
"""The group service of one front-end process: its segment, the groups it
runs on its engine client, and the rewards, aborts and fit states the
routes hand it (docs/SERVERS.md).

- Groups run at once (v05.servers.groups): each group its own batch in
  the plugin, its waves submitted to the engine beside every other
  group's, one poller taking the decisions in for all of them. Each
  finished sample goes to its group's stream, and its reward comes back
  through the reward route into the segment's lanes (the poller waits on
  the doorbell).
- A group ends with its final record, or "aborted" (the abort route, or
  the client went away: the stream's generator is closed and the run is
  cancelled, which aborts the engine's requests and cancels the batch in
  the plugin), or "error".
- Rewards: a reward for a group this process runs is checked against what
  it issued (sample, gen) and what it received (a duplicate is a 409) and
  pushed into this process's segment; one naming another front end
  (``owner``) is pushed into that front end's segment as a lane producer,
  where the plugin's received-sample mask applies it exactly once.
- A reward posted again with the same (uid, sample, gen, reward) is
  acknowledged and not pushed again (``reward_duplicates``), also for a
  group that ended since (the last RECENT ended groups here are kept): a
  client may resend a POST whose answer it did not get. The same sample
  with another reward is a 409.
- Pushes run in one thread of their own (a RewardWriter is a
  single-producer lane, and a full lane waits): never on the event loop.
- With a scorer (v05.servers.scorer), each finished sample is also scored
  in the scorer's threads; its answer is the sample's reward unless one
  was pushed for it first. A scorer error ends the group "error".
"""

import asyncio
import collections
import concurrent.futures
import dataclasses
import errno
import functools
import uuid
from typing import Any, AsyncIterator, Dict, List, Optional

from ..core.eb_state import EbState
from ..core.observer import Observer
from ..core.plugin import Plugin
from ..core.writer import RewardWriter
from . import wire
from .groups import ConcurrentGroups
from .metrics import COUNTS, exposition, registry
from .scorer import Scorer

__all__ = ["GroupService", "segment_name"]

# Ended groups whose rewards are remembered for a resent POST (a client
# resends within its retries: seconds, a few groups per second each).
RECENT = 4096


async def _get(q: asyncio.Queue, timeout: float):
    """q.get() or TimeoutError. asyncio.timeout where there is one
    (Python 3.11): wait_for runs the get as a task of its own, turns of
    the loop that each record of a stream paid."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            return await q.get()
    return await asyncio.wait_for(q.get(), timeout)


def segment_name(prefix: str, owner: int) -> str:
    """Front end `owner`'s segment: a restarted front end of the same
    index takes it over (Plugin.create's on_stale="takeover")."""
    return f"{prefix}-fe{owner}"


@dataclasses.dataclass
class _Live:
    req: wire.GroupRequest
    queue: asyncio.Queue
    task: Optional[asyncio.Future] = None
    inflight: int = 0
    issued: Dict[int, int] = dataclasses.field(default_factory=dict)
    # sample -> its reward (pushed, or the scorer's)
    rewarded: Dict[int, float] = dataclasses.field(default_factory=dict)
    dropped: bool = False  # by the server (a timeout, a scorer error)


@dataclasses.dataclass
class _Failed:
    reason: str


_END = object()
_TIMEOUT = object()


class GroupService:
    """engine: the adapter of the front end's engine client, with
    ``async generate(prompt, sampling, uid, sample, batch, second_wave)``
    and ``describe(output) -> dict`` (v05.servers.vllm, .sglang)."""

    def __init__(self, plugin: Plugin, engine, *, owner: int, prefix: str,
                 reward_timeout: float = 300.0, front_ends: int = 1,
                 scorer: Optional[Scorer] = None,
                 keep_segment: bool = False):
        self.plugin, self.engine = plugin, engine
        self.scorer = scorer
        self.keep_segment = keep_segment
        self.owner, self.prefix = owner, prefix
        # This front end process, on every sample record: a client gathers
        # the rewards of records of one origin into one POST (the server
        # that sent them takes them all, behind a router too).
        self.origin = uuid.uuid4().hex[:16]
        self.front_ends = max(1, front_ends)
        self.reward_timeout = reward_timeout
        self.groups = ConcurrentGroups(plugin, self._generate,
                                       on_output=self._on_output)
        self._live: Dict[str, _Live] = {}
        # uid -> (issued, rewarded) of the last RECENT groups ended
        self._recent: "collections.OrderedDict[str, Any]" = \
            collections.OrderedDict()
        self._pusher = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="v05-reward")
        self._writers: Dict[str, RewardWriter] = {}  # the pusher's only
        self._policy_version = -1
        self.counts = {name: 0 for name, _ in COUNTS}
        self._metrics = None

    # ---- a group ----------------------------------------------------------

    def check_new(self, req: wire.GroupRequest) -> None:
        if req.uid in self._live:
            raise wire.WireError("uid", f"{req.uid!r} is running on this "
                                 "front end already", status=409)

    async def group(self, req: wire.GroupRequest
                    ) -> AsyncIterator[Dict[str, Any]]:
        """The group's records: each sample as it finishes, then the final
        record (or "aborted" / "error"). Closing the iterator before its
        end aborts the group."""
        self.check_new(req)
        prompt = self.engine.prompt(req.prompt)
        live = _Live(req, asyncio.Queue())
        self._live[req.uid] = live
        self.counts["groups"] += 1
        task = live.task = asyncio.ensure_future(self.groups.run(
            req.uid, prompt, req.prior))
        task.add_done_callback(lambda t: self._ended(live, t))
        try:
            while True:
                rec = await self._next(live)
                if rec is _END:
                    break
                if rec is _TIMEOUT:
                    await self._drop(live, "reward_timeouts")
                    yield wire.error_record(
                        req.uid, "error", f"no reward came for "
                        f"{self.reward_timeout:g} s while nothing was "
                        "generating: the group was dropped")
                    return
                if isinstance(rec, _Failed):
                    if task.done():
                        continue  # ended meanwhile: its own last record
                    await self._drop(live, "scorer_errors")
                    yield wire.error_record(req.uid, "error", rec.reason +
                                            ": the group was dropped")
                    return
                yield rec
            yield self._last(live, task)
        finally:
            if not task.done():
                # The client went away (the generator is closed): the run
                # is cancelled, which aborts its requests in the engine
                # and cancels its batch in the plugin; _ended counts it.
                task.cancel()

    async def _drop(self, live: _Live, count: str) -> None:
        """The server gives the group up: its run cancelled (the engine
        aborts its requests, the plugin its prompt), counted as `count`
        rather than as aborted."""
        live.dropped = True
        live.task.cancel()
        await asyncio.wait([live.task])
        self.counts[count] += 1

    async def _next(self, live: _Live):
        """The group's next record, or _TIMEOUT when it has waited
        reward_timeout for rewards with nothing generating (the clock
        restarts whenever a request runs)."""
        q = live.queue
        if not q.empty():
            return q.get_nowait()
        loop = asyncio.get_running_loop()
        tick = min(1.0, self.reward_timeout / 4)
        idle_since = loop.time()
        while True:
            try:
                return await _get(q, tick)
            except asyncio.TimeoutError:
                now = loop.time()
                if live.inflight or live.task.done():
                    idle_since = now
                elif now - idle_since >= self.reward_timeout:
                    return _TIMEOUT

    def _ended(self, live: _Live, task) -> None:
        """The run is over, however it ended (the stream may be gone).
        One step of the loop: the end is queued behind every record of
        the group (each was queued when its sample finished, before its
        reward could come), and the uid is free for a new group only
        once its end is queued."""
        if task.cancelled():
            if not live.dropped:
                self.counts["aborted"] += 1
        elif task.exception() is not None:
            self.counts["failed"] += 1
        elif task.result().cancelled:
            self.counts["aborted"] += 1  # through another front end
        else:
            self.counts["final"] += 1
        live.queue.put_nowait(_END)
        uid = live.req.uid
        if self._live.get(uid) is live:
            del self._live[uid]
        self._recent[uid] = (live.issued, live.rewarded)
        self._recent.move_to_end(uid)
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    def _last(self, live: _Live, task) -> Dict[str, Any]:
        uid = live.req.uid
        if task.cancelled():
            return wire.error_record(uid, "aborted", "the group was aborted; "
                                     "its requests were aborted in the engine")
        exc = task.exception()
        if exc is not None:
            return wire.error_record(uid, "error", f"{type(exc).__name__}: "
                                     f"{exc}")
        res = task.result()
        if res.cancelled:
            return wire.error_record(uid, "aborted", "the group was aborted "
                                     "through another front end; its "
                                     "requests were aborted in the engine")
        return wire.final_record(uid, res.group, res.dropped, res.halted)

    async def _generate(self, prompt, uid, sample: int, batch: int):
        live = self._live[uid]
        live.inflight += 1
        try:
            return await self.engine.generate(
                prompt, live.req.sampling, uid, sample, batch,
                second_wave=self.groups.second_wave(uid, sample))
        finally:
            live.inflight -= 1

    def _on_output(self, uid, sample: int, gen: int, output) -> None:
        live = self._live.get(uid)
        if live is None:
            return
        live.issued[sample] = gen
        rec = wire.sample_record(uid, sample, gen, self.owner, self.origin,
                                 self.engine.describe(output))
        live.queue.put_nowait(rec)
        if self.scorer is not None:
            p = live.req.prompt
            mine = dict(rec, token_ids=list(rec["token_ids"]),
                        prompt=p if isinstance(p, str) else list(p))
            self.scorer.submit(asyncio.get_running_loop(), mine) \
                .add_done_callback(functools.partial(self._scored, live, rec))

    def _scored(self, live: _Live, rec, fut) -> None:
        """On the loop: the scorer's answer for sample record `rec`."""
        if fut.cancelled():
            return
        sample = rec["sample"]
        if self._live.get(live.req.uid) is not live or live.dropped or \
                live.task.done() or sample in live.rewarded:
            self.counts["scores_unused"] += 1
            return
        exc = fut.exception()
        if exc is not None:
            live.queue.put_nowait(_Failed(str(exc)))
            return
        reward = fut.result()
        if reward is None:
            return  # not the scorer's: a push will come
        live.rewarded[sample] = reward
        self.counts["rewards_scored"] += 1
        r = wire.Reward(rec["uid"], sample, reward, rec["gen"], self.owner)
        push = asyncio.get_running_loop().run_in_executor(
            self._pusher, self._push_all, [(self.plugin.name, r)])
        push.add_done_callback(functools.partial(self._pushed, live))

    def _pushed(self, live: _Live, fut) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            e = fut.exception()
            live.queue.put_nowait(_Failed(f"the scorer's reward could not be "
                                          f"pushed: {type(e).__name__}: {e}"))

    # ---- abort ------------------------------------------------------------

    async def abort(self, uid: str, owner: Optional[int] = None
                    ) -> Dict[str, Any]:
        """Abort group `uid`: its requests in the engine and its prompt in
        the plugin. Run here: at once, answering how many requests were
        running or queued. Run by another front end (`owner`, or the one
        whose segment holds the uid): an abort record into that segment,
        which its plugin turns into a "cancel" decision for the group's
        run there (docs/SERVERS.md, "Abort across front ends"); answers
        how many samples were out without a reward. WireError 404 when no
        front end runs it, 409 when its group is decided already."""
        live = self._live.get(uid)
        if live is not None and owner in (None, self.owner):
            n = live.inflight
            live.task.cancel()
            await asyncio.wait([live.task])
            return {"aborted": True, "uid": uid, "owner": self.owner,
                    "requests": n}
        others = [owner] if owner is not None else \
            [i for i in range(self.front_ends) if i != self.owner]
        if owner == self.owner:
            others = []
        found = await asyncio.get_running_loop().run_in_executor(
            self._pusher, self._abort_elsewhere, uid, others)
        if found is None:
            raise wire.WireError("uid", f"{uid!r} is no group running on "
                                 "any front end of this server", status=404)
        i, view = found
        if view["state"] == "final":
            raise wire.WireError("uid", f"the group of {uid!r} is decided "
                                 f"already (front end {i})", status=409)
        self.counts["aborts_forwarded"] += 1
        return {"aborted": True, "uid": uid, "owner": i, "forwarded": True,
                "requests": len(set(view["issued"]) - set(view["received"]))}

    def _abort_elsewhere(self, uid: str, owners: List[int]):
        """In the pusher thread: (front end, its view of uid) for the first
        of `owners` whose segment holds uid, an abort record pushed there
        unless the group is final; None when none holds it."""
        for i in owners:
            seg = segment_name(self.prefix, i)
            try:
                with Observer(seg) as o:
                    view = self._look(o, uid)
            except FileNotFoundError:
                continue  # no such front end (or not started yet)
            if view is None:
                continue
            if view["state"] != "final":
                try:
                    self._writer(seg).abort(uid, gen=view["gen"])
                except OSError as e:
                    if e.errno != errno.EAGAIN:
                        raise
                    raise wire.WireError(
                        "uid", f"front end {i}'s lane from this one is "
                        "full (it has not drained its rewards yet): ask "
                        "again", status=503) from None
            return i, view
        return None

    @staticmethod
    def _look(o: Observer, uid: str, tries: int = 8):
        """The owner's view of uid; an attempt that overlapped its moving
        entries (EAGAIN, rare: a move is a few copies) is made again."""
        for n in range(tries):
            try:
                return o.prompt(uid)
            except OSError as e:
                if e.errno != errno.EAGAIN or n == tries - 1:
                    raise
        return None

    # ---- rewards ----------------------------------------------------------

    async def push(self, rewards: List[wire.Reward]) -> Dict[str, int]:
        """Check each reward against this front end's groups, then push
        them all (one thread hop for the whole request). A reward posted
        before with the same value (a resent POST) is acknowledged,
        counted in "duplicates" and not pushed again. The answer of a
        request of several rewards also says what became of each, in
        order ("each": "accepted", "forwarded" or "duplicate"), so a
        client that gathered several callers' rewards into one POST
        answers each caller for its own."""
        jobs, marked, dups, each = [], [], 0, []
        try:
            for i, r in enumerate(rewards):
                owner = self.owner if r.owner is None else r.owner
                where = f"rewards[{i}]" if len(rewards) > 1 else "body"
                if owner == self.owner:
                    if self._check_own(r, where):
                        dups += 1
                        each.append("duplicate")
                        continue
                    # Marked at once (on the loop): the same reward in a
                    # POST that comes meanwhile is a duplicate.
                    rewarded = self._live[r.uid].rewarded
                    rewarded[r.sample] = r.reward
                    marked.append((rewarded, r.sample))
                jobs.append((segment_name(self.prefix, owner), r))
                each.append("accepted" if owner == self.owner
                            else "forwarded")
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._pusher, self._push_all, jobs)
        except BaseException:
            # Nothing of a refused or failed request counts as received:
            # a resend pushes it (the pusher pushes a request's rewards
            # in order and stops at the first failure; one it pushed
            # before that is refused by the plugin's received mask when
            # pushed again, never applied twice).
            for rewarded, sample in marked:
                rewarded.pop(sample, None)
            raise
        forwarded = sum(seg != self.plugin.name for seg, _ in jobs)
        self.counts["rewards"] += len(jobs) - forwarded
        self.counts["rewards_forwarded"] += forwarded
        self.counts["reward_duplicates"] += dups
        out = {"accepted": len(jobs), "forwarded": forwarded}
        if dups:
            out["duplicates"] = dups
        if len(rewards) > 1:
            out["each"] = each
        return out

    def _check_own(self, r: wire.Reward, where: str) -> bool:
        """WireError unless reward r may be pushed for a group of this
        front end; True when it was received before with the same value
        (also for a group ended since: the last RECENT are kept; any
        other reward for an ended group is a 404, as for one never
        run)."""
        live = self._live.get(r.uid)
        if live is None:
            issued, rewarded = self._recent.get(r.uid, ({}, {}))
            if issued.get(r.sample) == r.gen and r.sample in rewarded and \
                    rewarded[r.sample] == r.reward:
                return True
            raise wire.WireError(f"{where}.uid", f"{r.uid!r} is no group "
                                 "running on this front end", status=404)
        gen = live.issued.get(r.sample)
        if gen is None:
            raise wire.WireError(f"{where}.sample", f"sample {r.sample} of "
                                 f"{r.uid!r} has not been handed out",
                                 status=404)
        if gen != r.gen:
            raise wire.WireError(f"{where}.gen", f"{r.gen} is not the gen "
                                 f"sample {r.sample} was handed out with "
                                 f"({gen})", status=409)
        if r.sample in live.rewarded:
            if live.rewarded[r.sample] == r.reward:
                return True
            raise wire.WireError(f"{where}.sample", f"sample {r.sample} of "
                                 f"{r.uid!r} has its reward already",
                                 status=409)
        return False

    def _writer(self, seg: str) -> RewardWriter:
        """In the pusher thread: this process's lane of segment seg."""
        w = self._writers.get(seg)
        if w is None:
            w = self._writers[seg] = RewardWriter.attach(seg)
        return w

    def _push_all(self, jobs) -> None:
        """In the pusher thread."""
        for seg, r in jobs:
            self._writer(seg).push(r.uid, r.sample, r.reward, gen=r.gen)

    # ---- fit state and counters -------------------------------------------

    def fit(self) -> Dict[str, Any]:
        return {"segment": self.plugin.name, "owner": self.owner,
                "policy_version": self._policy_version,
                "own": self.plugin.eb_state_shared().to_list()}

    def post_fit(self, body: Dict[str, Any]) -> None:
        if body["policy_version"] < self._policy_version:
            raise wire.WireError("policy_version", f"{body['policy_version']}"
                                 f" is older than the last one posted "
                                 f"({self._policy_version})", status=409)
        try:
            state = EbState.from_list(body["others"])
        except ValueError as e:
            raise wire.WireError("others", str(e)) from None
        self.plugin.post_eb_remote(state)
        self._policy_version = body["policy_version"]

    def stats(self) -> Dict[str, Any]:
        s = {k: v for k, v in self.plugin.stats().items()
             if isinstance(v, (int, float))}
        return {"segment": self.plugin.name, "owner": self.owner,
                "plugin": s, "server": dict(self.counts),
                "running": len(self._live),
                "requests": sum(x.inflight for x in self._live.values())}

    def metrics(self):
        """(body, content type): Prometheus text of every front end's
        segment and of this front end's counts (v05.servers.metrics)."""
        if self._metrics is None:
            self._metrics = registry(self, [segment_name(self.prefix, i)
                                            for i in range(self.front_ends)])
        return exposition(self._metrics)

    def close(self) -> None:
        """At the process's exit (also after concurrent.futures' own exit
        hook, which refuses new jobs): the pusher thread is joined first,
        so its writers are closed here with no one else using them; the
        segment is removed whatever failed before (kept with
        keep_segment, for the next start to take over)."""
        try:
            self.groups.close()
            if self.scorer is not None:
                self.scorer.close()
            self._pusher.shutdown(wait=True)
            for w in self._writers.values():
                w.close()
            self._writers.clear()
        finally:
            self.plugin.close(unlink=not self.keep_segment, force=True)
