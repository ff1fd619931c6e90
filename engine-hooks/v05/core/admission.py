# SPDX-License-Identifier: MIT
"""The one admission policy for a step's full batch of informative groups:
which prompt is skipped before any sample (the skip by prior: a SkipRule,
v05.core.fill), how many informative groups the prompts in flight are
expected to give and so whether to admit another (the refill), and
whether a finished group counts (v05.core.fill.informative). The streamed
fill (v05.engines.fill.StreamFill) runs it, TRL's fill runs that fill,
and verl's tagging asks it which prompts to skip and which groups count
(its replay buffer refills as many as failed).

What it expects of the prompts in flight: 1 for each that already has two
different rewards (informative whatever comes next); for the others their
chance of being informative, the skip rule's 1 - P(all same) of the first
k_init samples from the prior (and history), or 1 without a rule, scaled
by how the finished groups bore such chances out so far (the informative
ones against the sum of their chances, both decayed by 1 - 1/512 per
finished group, so about the last 512 count; the scaled chance is at most
1). It admits another prompt while that falls short of what the step
still needs, or while fewer than `inflight` samples are running or
queued (the engine-full floor).

Every value handed in is checked here: TypeError or ValueError naming it.
"""

from typing import Any, Dict, Hashable, Optional, Tuple

from . import _checks
from .fill import COUNTS, SkipRule, default_count, group_informative
from .names import MODES

__all__ = ["Admission", "ADMIT", "SKIP", "REVISIT"]

# screen()'s verdicts: roll the prompt out; skip it (counted, never
# generated); roll it out though the rule would skip it (the revisit draw).
ADMIT, SKIP, REVISIT = "admit", "skip", "revisit"
# The calibration forgets a finished group's weight by this factor per
# group (about the last 512 groups count).
FORGET = 1.0 - 1.0 / 512


class Admission:
    """The admission policy (module text) for a plugin of mode `mode` whose
    first wave is k_init samples.

    count: "contrast" or "signal" (v05.core.fill; default
    v05.core.fill.default_count(mode, k_init): "signal" where a group may
    end at one sample, v05-pg's or k_init 1, "contrast" otherwise). skip: a SkipRule or
    None. history: an object with counts(name) -> (successes, trials) or
    None and update(name, rewards) (v05.core.prior.HistoryPrior): each
    finished group is folded into it and the skip rule reads it. inflight:
    samples to keep running or queued at least. A prompt goes by its uid
    while in flight; its name (default the uid) is what its history and
    its revisit draw go by across steps.

    The state it keeps: the prompts in flight with their chances, which
    of them showed two different rewards, and the calibration, carried
    from one step to the next."""

    def __init__(self, mode: str, k_init: int, *,
                 count: Optional[str] = None,
                 skip: Optional[SkipRule] = None, history=None,
                 inflight: int = 0):
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of "
                             f"{', '.join(MODES)}")
        k_init = _checks.integer("k_init", k_init, 1, 64, _checks.U32_MAX)
        if count is None:
            count = default_count(mode, k_init)
        if count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, not {count!r}")
        if skip is not None and not isinstance(skip, SkipRule):
            raise TypeError(f"skip is {type(skip).__name__}, not a SkipRule")
        if history is not None and not (
                callable(getattr(history, "counts", None)) and
                callable(getattr(history, "update", None))):
            raise TypeError("history needs counts(uid) and update(uid, "
                            "rewards) (v05.core.prior.HistoryPrior)")
        self.mode = mode
        self.k_init = k_init
        self.count, self.skip, self.history = count, skip, history
        self.inflight = _checks.integer("inflight", inflight, 0, 1 << 20,
                                        _checks.U32_MAX)
        self._pi: Dict[Any, float] = {}      # uid -> predicted P(informative)
        self._name: Dict[Any, Hashable] = {}  # uid -> its name, if not uid
        self._contrast: Dict[Any, Any] = {}  # uid -> first reward, or True
        self._got = 1.0   # calibration: informative finals (decayed) ...
        self._want = 1.0  # ... against their predicted chances

    def __repr__(self):
        return (f"Admission({self.mode!r}, k_init={self.k_init}, "
                f"count={self.count!r}, skip={self.skip!r}, "
                f"inflight={self.inflight})")

    # ---- the skip by prior -------------------------------------------

    def _hist(self, name) -> Optional[Tuple[float, float]]:
        return self.history.counts(name) if self.history is not None \
            else None

    def screen(self, uid, prior: Optional[float], *, visit: int = 0,
               name: Hashable = None) -> str:
        """ADMIT, SKIP or REVISIT for a prompt about to be admitted (its
        prior V or None): SKIP when the rule predicts an all-same first
        wave and the revisit draw for (name, visit) does not keep it
        (SkipRule.skip); visit numbers the decisions on one name (a step)."""
        if self.skip is None:
            return ADMIT
        name = uid if name is None else name
        if not self.skip.would_skip(prior, self.k_init, self._hist(name)):
            return ADMIT
        return REVISIT if self.skip.revisited(name, visit) else SKIP

    def chance(self, prior: Optional[float], name: Hashable) -> float:
        """A prompt's predicted chance of an informative group (1 without
        a skip rule), before calibration."""
        if self.skip is None:
            return 1.0
        return 1.0 - self.skip.all_same(prior, self.k_init, self._hist(name))

    # ---- the prompts in flight -------------------------------------------

    @property
    def scale(self) -> float:
        """How the finished groups bore their predicted chances out."""
        return self._got / self._want

    def admit(self, uid, prior: Optional[float], name: Hashable = None
              ) -> float:
        """A prompt goes in flight: returns what it adds to the expected
        informative groups."""
        key = uid if name is None else name
        pi = self._pi[uid] = self.chance(prior, key)
        if name is not None:
            self._name[uid] = name
        return min(1.0, self.scale * pi)

    def refused(self, uid) -> None:
        """A prompt admit() counted that did not go in (no room)."""
        self._pi.pop(uid, None)
        self._name.pop(uid, None)

    def reward(self, uid, reward: float) -> None:
        """A reward of a prompt in flight: with two different ones its
        group is informative whatever comes next."""
        if uid not in self._pi:
            return
        c = self._contrast.get(uid)
        if c is None:
            self._contrast[uid] = float(reward)
        elif c is not True and c != float(reward):
            self._contrast[uid] = True

    def expected(self) -> float:
        """The informative groups to expect from the prompts in flight."""
        scale = self.scale
        out = 0.0
        for uid, pi in self._pi.items():
            out += 1.0 if self._contrast.get(uid) is True else \
                min(1.0, scale * pi)
        return out

    def wants(self, expected: float, need: int, queued: int) -> bool:
        """Admit another prompt: the expected groups fall short of what
        the step still needs, or fewer than `inflight` samples are running
        or queued."""
        return expected < need or queued < self.inflight

    def finished(self, uid, group, *, dropped: bool = False) -> bool:
        """A prompt's group is final (or dropped): whether it counts, its
        rewards folded into the history, the calibration updated, the
        prompt out of flight. group: a Group (or its copy)."""
        name = self._name.pop(uid, uid)
        self._contrast.pop(uid, None)
        pi = self._pi.pop(uid, 1.0)
        good = self.counts(group, dropped=dropped)
        if self.history is not None:
            self.history.update(name, [float(x) for x in
                                       group.rewards[:group.k]])
        self._got = self._got * FORGET + (1.0 if good else 0.0)
        self._want = self._want * FORGET + pi
        return good

    def forget(self) -> None:
        """Nothing is in flight any more (aborted): the calibration stays."""
        self._pi.clear()
        self._name.clear()
        self._contrast.clear()

    # ---- what counts -----------------------------------------------------

    def counts(self, group, *, dropped: bool = False) -> bool:
        """Whether a final group counts toward the batch (informative under
        `count`; a dropped group never)."""
        return group_informative(self.mode, group, count=self.count,
                                 dropped=bool(dropped))
