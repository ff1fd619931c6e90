# SPDX-License-Identifier: MIT
"""The published rules' cross-epoch state, kept by the trainer: Knapsack
RL's per-prompt success-rate estimate (mode "knapsack") and GRESO's
pre-rollout filter (mode "greso"). The arithmetic is libv05's
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

__all__ = ["KnapsackHistory", "Greso"]

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
