# SPDX-License-Identifier: MIT
"""The published rules' cross-epoch state, kept by the trainer: Knapsack
RL's per-prompt success-rate estimate (mode "knapsack"), GRESO's
pre-rollout filter (mode "greso"), Pilot-Commit's record of the prompts
that come back (mode "pilot-commit"); and EBPO's running statistics for
a trainer that computes EBPO's baseline itself (mode "ebpo" keeps its
own in the plugin). The arithmetic is libv05's
(include/v05/rules.h); these classes hold one record per dataset prompt,
keyed by a stable prompt id (the dataset index: a trainer's per-batch uid,
verl's fresh uuid, would be a new prompt every epoch), and save as plain
data with the trainer's checkpoint (state_dict / load_state_dict). The
plugin holds none of it, so a takeover or a new engine loses nothing.
docs/RULES.md has the rules and their defaults."""

import ctypes
import math
from typing import Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

from . import _checks, _lib
from ._lib import check, lib
from .decision import key_of

__all__ = ["KnapsackHistory", "Greso", "PilotCommit", "Ebpo"]

PromptId = Hashable


def _rewards(what: str, rewards: Sequence[float]):
    k = len(rewards)
    if not 1 <= k <= 64:
        raise ValueError(f"{what}: {k} rewards; a group has 1 to 64")
    return (ctypes.c_double * k)(*[
        _checks.unit_interval(f"{what}: reward {i}", r)
        for i, r in enumerate(rewards)]), k


def _key(pid: PromptId) -> int:
    """A prompt id's 64-bit key for GRESO's draws: v05's key of its
    str(), so an int dataset index and its str draw alike."""
    return key_of(pid if isinstance(pid, (str, bytes)) else str(pid))


class KnapsackHistory:
    """Knapsack RL's success-rate estimate per prompt (arXiv 2509.25849, as
    its authors' code runs it): fold each finished group with the epoch it
    was rolled out in; `prior(pid)` is what to submit for it under mode
    "knapsack": 2 p_hat - 1, or None while the prompt has fewer than 8
    outcomes (it then gets the uniform budget, outside the knapsack)."""

    def __init__(self):
        self._h: Dict[PromptId, _lib.KnapsackHist] = {}

    def __len__(self) -> int:
        return len(self._h)

    def fold(self, pid: PromptId, epoch: int, rewards: Sequence[float]
             ) -> None:
        """A finished group of prompt `pid` (its rewards in sample order),
        rolled out in `epoch` (epochs do not go back)."""
        r, k = _rewards(f"knapsack history of {pid!r}", rewards)
        h = self._h.get(pid)
        if h is None:
            h = self._h[pid] = _lib.KnapsackHist()
        check(lib.v05_knapsack_hist_fold(ctypes.byref(h),
                                         _checks.u64("epoch", epoch), r, k),
              f"knapsack history of {pid!r}")

    def estimate(self, pid: PromptId) -> Optional[float]:
        """p_hat in [0, 1], or None (no estimate yet)."""
        h = self._h.get(pid)
        if h is None:
            return None
        p = ctypes.c_double()
        got = check(lib.v05_knapsack_hist_estimate(ctypes.byref(h),
                                                   ctypes.byref(p)),
                    f"knapsack history of {pid!r}")
        return p.value if got else None

    def prior(self, pid: PromptId) -> Optional[float]:
        """The prior to submit under mode "knapsack" (None: no estimate)."""
        p = self.estimate(pid)
        return None if p is None else 2.0 * p - 1.0

    def state_dict(self) -> dict:
        return {"version": 1, "prompts": [
            [pid, h.epoch, h.window, h.filled, h.seen, h.last_n, h.last_s]
            for pid, h in self._h.items()]}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError("not a KnapsackHistory state (version 1)")
        hs = {}
        for pid, epoch, window, filled, seen, last_n, last_s in \
                state["prompts"]:
            pid = tuple(pid) if isinstance(pid, list) else pid
            h = _lib.KnapsackHist(epoch, window, filled, seen, last_n, last_s)
            p = ctypes.c_double()  # refuses a record that cannot be
            check(lib.v05_knapsack_hist_estimate(ctypes.byref(h),
                                                 ctypes.byref(p)),
                  f"knapsack history of {pid!r}")
            hs[pid] = h
        self._h = hs


KINDS = {0: "mixed", 1: "easy", 2: "hard"}


class Greso:
    """GRESO's pre-rollout filter (docs/RULES.md): `select` the prompts of
    a step worth rolling out, `fold` each rolled-out prompt's final group,
    `step_end` after each training step (it adapts the skip rates, except
    in the first epoch), `refill` for the size of the next rollout batch
    when too few groups were kept. The groups themselves are mode
    "greso"'s (dapo's drop of zero-variance groups, G = 8). seed: the skip
    draws', so a rerun makes the same choices."""

    def __init__(self, seed: int = 0):
        self._g = _lib.Greso()
        lib.v05_greso_init(ctypes.byref(self._g), _checks.u64("seed", seed))
        self._x: Dict[PromptId, _lib.GresoPrompt] = {}

    @property
    def p_easy(self) -> float:
        return self._g.p_easy

    @property
    def p_hard(self) -> float:
        return self._g.p_hard

    def counts(self) -> Tuple[int, int, int]:
        """This step's rolled-out groups, all-success, all-failure."""
        return self._g.total, self._g.easy, self._g.hard

    def run(self, pid: PromptId) -> Tuple[int, str]:
        """(z, kind): the prompt's trailing run of zero-variance groups."""
        x = self._x.get(pid)
        return (0, "mixed") if x is None else (x.z, KINDS[x.kind])

    def seen(self, pid: PromptId) -> bool:
        """Whether a group of the prompt was ever folded."""
        return pid in self._x

    def keep_p(self, pid: PromptId) -> float:
        x = self._x.get(pid)
        if x is None:
            return 1.0
        p = ctypes.c_double()
        check(lib.v05_greso_keep_p(ctypes.byref(self._g), ctypes.byref(x),
                                   ctypes.byref(p)), "greso keep_p")
        return p.value

    def skip(self, pid: PromptId, step: int) -> bool:
        x = self._x.get(pid)
        if x is None:
            return False
        return bool(check(lib.v05_greso_skip(
            ctypes.byref(self._g), ctypes.byref(x), _key(pid),
            _checks.u64("step", step)), "greso skip"))

    def select(self, pids: Iterable[PromptId], step: int) -> List[PromptId]:
        """The candidates rolled out at training step `step`, in order."""
        return [pid for pid in pids if not self.skip(pid, step)]

    def fold(self, pid: PromptId, rewards: Sequence[float]) -> str:
        """A rolled-out prompt's final group; returns its kind ("easy":
        all successes, "hard": all failures, else "mixed")."""
        r, k = _rewards(f"greso fold of {pid!r}", rewards)
        x = self._x.get(pid)
        if x is None:
            x = self._x[pid] = _lib.GresoPrompt()
        kind = check(lib.v05_greso_fold(ctypes.byref(self._g),
                                        ctypes.byref(x), r, k),
                     f"greso fold of {pid!r}")
        return KINDS[kind]

    def step_end(self, first_epoch: bool = False) -> None:
        """After a training step: adapt p_easy and p_hard from its counts
        (not in the first epoch, as the authors run it), clear them."""
        if first_epoch:
            self._g.total = self._g.easy = self._g.hard = 0
            return
        check(lib.v05_greso_step_end(ctypes.byref(self._g)), "greso step_end")

    @staticmethod
    def refill(b_train: int, kept: int, zv_share: float, b_default: int
               ) -> Tuple[int, bool]:
        """(prompts to roll out next, whether that is the step's last try)
        when `kept` of `b_train` groups are in and the last rollout batch's
        share of zero-variance groups was zv_share."""
        out = ctypes.c_uint32()
        if not (isinstance(zv_share, (int, float)) and math.isfinite(zv_share)):
            raise ValueError(f"zv_share {zv_share!r} is not a number in [0, 1]")
        last = check(lib.v05_greso_refill(
            _checks.u32("b_train", b_train), _checks.u32("kept", kept),
            float(zv_share), _checks.u32("b_default", b_default),
            ctypes.byref(out)), "greso refill")
        return out.value, bool(last)

    def state_dict(self) -> dict:
        g = self._g
        return {"version": 1, "p_easy": g.p_easy, "p_hard": g.p_hard,
                "seed": g.seed, "counts": [g.total, g.easy, g.hard],
                "prompts": [[pid, x.z, x.kind] for pid, x in self._x.items()]}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError("not a Greso state (version 1)")
        g = _lib.Greso(state["p_easy"], state["p_hard"], state["seed"],
                       *state["counts"])
        xs = {}
        for pid, z, kind in state["prompts"]:
            pid = tuple(pid) if isinstance(pid, list) else pid
            x = _lib.GresoPrompt(z, kind)
            p = ctypes.c_double()  # refuses a record that cannot be
            check(lib.v05_greso_keep_p(ctypes.byref(g), ctypes.byref(x),
                                       ctypes.byref(p)), f"greso state of {pid!r}")
            xs[pid] = x
        self._g, self._x = g, xs


PC_CLASSES = {0: "commit", 1: "too_hard", 2: "too_easy", 3: "solved"}


class PilotCommit:
    """Pilot-Commit's record of which prompts come back (arXiv 2605.26606,
    as its authors' code runs it; docs/RULES.md). `fold` each prompt's
    group with the epoch it was drawn in: its first `pilot` rewards are
    the pilot, classed "commit" (success rate in [lower, 1 - upper]: the
    plugin's mode "pilot-commit" gave it its commit), "too_hard"
    (deferred: back next epoch), "too_easy" (skipped this epoch) or
    "solved" (rate at or above `evict`: never drawn again; None: never
    evicts). `skip(pid, epoch)`: a prompt is drawn once per epoch, a
    solved one no more. pilot, lower and upper must be the plugin's
    k_init, pc_lower and pc_upper."""

    def __init__(self, pilot: int = 8, lower: float = 0.125,
                 upper: float = 0.25, evict: Optional[float] = 1.0):
        self.pilot = _checks.u32("pilot", pilot, 1, 64)
        self.lower, self.upper = float(lower), float(upper)
        self.evict = None if evict is None else float(evict)
        # The band and evict checked by the library, on a group of one.
        one = (ctypes.c_double * 1)(1.0)
        check(lib.v05_pc_class(one, 1, self.lower, self.upper,
                               self._evict()), "pilot-commit")
        self._x: Dict[PromptId, _lib.PcPrompt] = {}

    def _evict(self) -> float:
        return math.nan if self.evict is None else self.evict

    def __len__(self) -> int:
        return len(self._x)

    def fold(self, pid: PromptId, epoch: int, rewards: Sequence[float]
             ) -> str:
        """A drawn prompt's group (its rewards in sample order, at least
        the pilot's) in `epoch` (epochs do not go back); returns the
        pilot's class."""
        if len(rewards) < self.pilot:
            raise ValueError(f"pilot-commit fold of {pid!r}: {len(rewards)} "
                             f"rewards, fewer than the pilot's {self.pilot}")
        r, k = _rewards(f"pilot-commit fold of {pid!r}",
                        list(rewards)[:self.pilot])
        x = self._x.get(pid)
        if x is None:
            x = self._x[pid] = _lib.PcPrompt()
        c = check(lib.v05_pc_fold(ctypes.byref(x),
                                  _checks.u64("epoch", epoch), r, k,
                                  self.lower, self.upper, self._evict()),
                  f"pilot-commit fold of {pid!r}")
        return PC_CLASSES[c]

    def skip(self, pid: PromptId, epoch: int) -> bool:
        x = self._x.get(pid)
        if x is None:
            return False
        return bool(check(lib.v05_pc_skip(ctypes.byref(x),
                                          _checks.u64("epoch", epoch)),
                          f"pilot-commit skip of {pid!r}"))

    def select(self, pids: Iterable[PromptId], epoch: int
               ) -> List[PromptId]:
        """The candidates drawn in `epoch`, in order."""
        return [pid for pid in pids if not self.skip(pid, epoch)]

    def last(self, pid: PromptId) -> Optional[str]:
        """The class of the prompt's last pilot (None: never drawn)."""
        x = self._x.get(pid)
        return None if x is None else PC_CLASSES[x.last]

    def evicted(self) -> List[PromptId]:
        return [pid for pid, x in self._x.items() if x.last == 3]

    def state_dict(self) -> dict:
        return {"version": 1, "pilot": self.pilot, "lower": self.lower,
                "upper": self.upper, "evict": self.evict,
                "prompts": [[pid, x.epoch, x.last]
                            for pid, x in self._x.items()]}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError("not a PilotCommit state (version 1)")
        if (state["pilot"], state["lower"], state["upper"], state["evict"]) \
                != (self.pilot, self.lower, self.upper, self.evict):
            raise ValueError("PilotCommit state of another pilot, band or "
                             f"evict: {state['pilot']}, {state['lower']}, "
                             f"{state['upper']}, {state['evict']}")
        xs = {}
        for pid, epoch, last in state["prompts"]:
            pid = tuple(pid) if isinstance(pid, list) else pid
            x = _lib.PcPrompt(epoch, last, 1)
            check(lib.v05_pc_skip(ctypes.byref(x), epoch),
                  f"pilot-commit state of {pid!r}")  # refuses a bad one
            xs[pid] = x
        self._x = xs


class Ebpo:
    """EBPO's running statistics (arXiv 2602.05165; docs/RULES.md) for a
    trainer that computes its baseline itself: `fold` each group (k >= 2
    rewards), then `estimate` it. window: forget with a window of that
    many groups (0: never, the paper's Welford). Mode "ebpo" of a plugin
    keeps the same statistics itself."""

    def __init__(self, window: int = 0):
        w = _checks.u32("window", window)
        self.keep = 1.0 - 1.0 / w if w else 1.0
        self._s = _lib.Ebpo()
        lib.v05_ebpo_init(ctypes.byref(self._s))

    @property
    def mean(self) -> float:
        """The running mean of the group means."""
        return self._s.mean

    @property
    def groups(self) -> int:
        return self._s.groups

    def fold(self, rewards: Sequence[float]) -> None:
        r, k = _rewards("ebpo fold", rewards)
        check(lib.v05_ebpo_fold(ctypes.byref(self._s), self.keep, r, k),
              "ebpo fold")

    def shrinkage(self, k: int) -> float:
        """S, the global mean's weight in a group of k's baseline."""
        out = ctypes.c_double()
        check(lib.v05_ebpo_shrinkage(ctypes.byref(self._s),
                                     _checks.u32("k", k), ctypes.byref(out)),
              "ebpo shrinkage")
        return out.value

    def estimate(self, rewards: Sequence[float]) -> dict:
        """baseline, weight (the group mean's, 1 - S), sigma, advantages."""
        r, k = _rewards("ebpo estimate", rewards)
        e = _lib.Estimate()
        adv = (ctypes.c_double * k)()
        check(lib.v05_ebpo_estimate(ctypes.byref(self._s), r, k,
                                    ctypes.byref(e), adv), "ebpo estimate")
        return {"mean": e.mean, "baseline": e.baseline, "weight": e.weight,
                "sigma": e.sigma, "advantages": list(adv)}

    def state_dict(self) -> dict:
        s = self._s
        return {"version": 1, "keep": self.keep,
                "stats": [s.weight, s.mean, s.m2, s.within, s.noise,
                          s.groups]}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError("not an Ebpo state (version 1)")
        s = _lib.Ebpo(*state["stats"])
        out = ctypes.c_double()
        check(lib.v05_ebpo_shrinkage(ctypes.byref(s), 2, ctypes.byref(out)),
              "ebpo state")  # refuses statistics that cannot be
        self.keep, self._s = float(state["keep"]), s
