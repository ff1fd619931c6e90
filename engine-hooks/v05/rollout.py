# SPDX-License-Identifier: MIT
"""Engine-agnostic group rollout: what the vLLM and sglang adapters share.

A group is not a fixed n anymore: the plugin decides, per prompt, when to
stop. The driver turns each "sample" decision into single-sample generate
calls (n=1, same prompt: the engine's prefix cache shares it), each finished
sequence into a reward (scored here, or by external reward workers), and
each "final"/"drop" decision into a result with zero-copy advantages.
"""

import asyncio
import dataclasses
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from .plugin import Decision, Group, Plugin, Uid
from .writer import RewardWriter

__all__ = ["GroupResult", "GroupRollout", "EngineRollout"]

# generate(prompt, uid, sample) -> the engine's output for that one sample
GenerateFn = Callable[[Any, Uid, int], Awaitable[Any]]
# score(uid, sample, output) -> reward on [-1, 1]
ScoreFn = Callable[[Uid, int, Any], float]
# barrier(plugin, decision) -> awaitable resolving the batch (distributed)
BarrierFn = Callable[[Plugin, Decision], Awaitable[None]]


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

    score: compute each sample's reward in this process and push it (an
    in-process RewardWriter is opened); None when reward workers elsewhere
    push rewards themselves (then on_output(uid, sample, output) hands them
    each finished sequence). release: release slots after collecting the
    results (advantages are then copied out); False keeps the zero-copy
    views, the caller releases.
    """

    def __init__(self, plugin: Plugin, generate: GenerateFn, *,
                 score: Optional[ScoreFn] = None,
                 on_output: Optional[Callable[[Uid, int, Any], None]] = None,
                 on_barrier: Optional[BarrierFn] = None,
                 release: bool = False, poll_timeout: float = 0.05):
        if score is None and on_output is None:
            raise ValueError("give score (rewards computed here) or "
                             "on_output (reward workers push them)")
        self.plugin, self.generate = plugin, generate
        self.score, self.on_output = score, on_output
        self.on_barrier = on_barrier
        self.release = release
        self.poll_timeout = poll_timeout
        self.writer = RewardWriter.attach(plugin.name) if score else None
        self.generate_calls = 0

    def close(self):
        if self.writer:
            self.writer.close()
            self.writer = None

    async def _one(self, prompt, uid, sample, outputs, errors):
        try:
            out = await self.generate(prompt, uid, sample)
            self.generate_calls += 1
            outputs.setdefault(uid, {})[sample] = out
            if self.score:
                self.writer.push(uid, sample, float(self.score(uid, sample, out)))
            else:
                self.on_output(uid, sample, out)
        except Exception as e:  # surfaced by run(), not lost in a task
            errors.append(e)

    async def run(self, items: Sequence[Tuple[Uid, Any, float]]
                  ) -> Dict[Uid, GroupResult]:
        """items: (uid, prompt, prior). Returns uid -> GroupResult once every
        group is final (or dropped)."""
        prompts = {uid: prompt for uid, prompt, _ in items}
        outputs: Dict[Uid, Dict[int, Any]] = {}
        results: Dict[Uid, GroupResult] = {}
        errors: List[BaseException] = []
        tasks = set()

        def spawn(d: Decision):
            for s in d.samples:
                t = asyncio.ensure_future(
                    self._one(prompts[d.uid], d.uid, s, outputs, errors))
                tasks.add(t)
                t.add_done_callback(tasks.discard)

        for d in self.plugin.submit([(uid, prior) for uid, _, prior in items]):
            spawn(d)
        while len(results) < len(items):
            if errors:
                raise errors[0]
            for d in self.plugin.poll():
                if d.kind == "sample":
                    spawn(d)
                elif d.kind == "barrier":
                    if self.on_barrier is None:
                        raise RuntimeError("barrier decision: pass on_barrier")
                    await self.on_barrier(self.plugin, d)
                elif d.uid in prompts:
                    g = self.plugin.group(d)
                    outs = outputs.get(d.uid, {})
                    res = GroupResult(d.uid, [outs.get(s) for s in range(g.k)],
                                      g, d, d.kind == "drop", d.halted)
                    if self.release:
                        res.group = _Detached(g)
                        del g
                        self.plugin.release(d)
                    results[d.uid] = res
            if len(results) < len(items):
                await self.plugin.wait(self.poll_timeout)
        for t in list(tasks):
            await t
        if errors:
            raise errors[0]
        return results


class EngineRollout:
    """Base of the engine adapters: subclasses give _generate_one(prompt,
    uid, sample) for their engine; the rest is GroupRollout."""

    def __init__(self, plugin: Plugin, *, score: Optional[ScoreFn] = None,
                 on_output=None, on_barrier: Optional[BarrierFn] = None,
                 release: bool = False):
        self._driver = GroupRollout(plugin, self._generate_one, score=score,
                                    on_output=on_output, on_barrier=on_barrier,
                                    release=release)

    async def _generate_one(self, prompt, uid: Uid, sample: int):
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


class _Detached:
    """A group's numbers copied out, for callers that release at once."""

    def __init__(self, g: Group):
        for name in ("uid", "key", "slot", "k", "baseline", "sigma", "mean",
                     "prior", "action", "seq", "batch"):
            setattr(self, name, getattr(g, name))
        self.rewards = g.rewards.copy()
        self.advantages = g.advantages.copy()
