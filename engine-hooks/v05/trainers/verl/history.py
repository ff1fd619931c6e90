# SPDX-License-Identifier: MIT
"""The rules with a cross-epoch state (docs/RULES.md) under verl: one
RuleHistory per training run, a named Ray actor every rollout worker
reaches, holding a KnapsackHistory (mode knapsack: the priors), a Greso
filter (the prompts skipped) or a PilotCommit record (mode pilot-commit:
the prompts evicted as solved; its pilot and band are the plugin's
k_init, pc_lower and pc_upper). Configured with
``+algorithm.v05_history={rule: knapsack|greso|pilot-commit, path: FILE,
seed: 0, evict: 1.0}`` (evict: Pilot-Commit's, null never evicts).

verl's checkpoint does not hold the rollout side's state, so the actor
keeps its own: it loads FILE when it starts (a restarted run has its
history back) and rewrites it (atomically) each time a new training step
begins, so a crash loses at most the last step's groups. A prompt is
known across epochs by its dataset index (the row's "index", verl's
extra_info.index); the training step stands for the epoch in Knapsack's
history and in Pilot-Commit's record (each prompt is seen once per
epoch, so its last step is its last epoch). GRESO's step ends when the first chunk of a later step asks; its
first epoch ends when a prompt comes back."""

import json
import os
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from ...core.config import make_config
from ...core.names import MODES
from ...core.rules import Greso, KnapsackHistory, PilotCommit
from .config import cfg_get

__all__ = ["RuleHistory", "history_config", "prompt_id", "RULES"]

RULES = ("knapsack", "greso", "pilot-commit")


def _default_mode() -> str:
    """The mode a plugin made without one runs (v05_config_default's)."""
    mode = make_config("verl-history").params.mode
    return next(name for name, v in MODES.items() if v == mode)


def history_config(algo, plugin_params: Dict[str, Any]
                   ) -> Optional[Dict[str, Any]]:
    """algorithm.v05_history as {rule, path, seed}, checked against the
    plugin's mode; None when it is not set."""
    raw = cfg_get(algo, "v05_history")
    if raw is None:
        return None
    h = dict(raw.items()) if hasattr(raw, "items") else None
    if h is None or set(h) - {"rule", "path", "seed", "evict"}:
        raise ValueError(f"v05: algorithm.v05_history={raw!r}: a dict of "
                         "rule (knapsack, greso or pilot-commit), path, "
                         "seed, evict")
    if h.get("rule") not in RULES:
        raise ValueError(f"v05: algorithm.v05_history.rule={h.get('rule')!r}"
                         f"; known: {RULES}")
    mode = plugin_params.get("mode") or _default_mode()
    if h["rule"] == "knapsack" and mode != "knapsack":
        raise ValueError("v05: algorithm.v05_history.rule=knapsack gives "
                         "the priors of mode knapsack; algorithm.v05_plugin"
                         f".mode is {mode}")
    if h["rule"] == "pilot-commit" and mode != "pilot-commit":
        raise ValueError("v05: algorithm.v05_history.rule=pilot-commit "
                         "keeps the evictions of mode pilot-commit; "
                         f"algorithm.v05_plugin.mode is {mode}")
    if "evict" in h and h["rule"] != "pilot-commit":
        raise ValueError("v05: algorithm.v05_history.evict is "
                         "Pilot-Commit's (rule pilot-commit)")
    h["seed"] = int(h.get("seed", 0))
    h["path"] = str(h["path"]) if h.get("path") else None
    if h["rule"] == "pilot-commit":
        # The plugin's pilot and band (v05_config_mode's defaults).
        h["pc"] = {"pilot": int(plugin_params.get("k_init", 8)),
                   "lower": float(plugin_params.get("pc_lower", 0.125)),
                   "upper": float(plugin_params.get("pc_upper", 0.25)),
                   "evict": h.pop("evict", 1.0)}
        PilotCommit(**h["pc"])  # refuses a bad band or evict now
    return h


def prompt_id(kwargs: Dict[str, Any]) -> Hashable:
    """A row's prompt id across epochs: its dataset index."""
    if "index" not in kwargs:
        raise ValueError("v05: algorithm.v05_history needs each prompt's "
                         "dataset index (the row's 'index', verl's "
                         "extra_info.index)")
    x = kwargs["index"]
    x = x.item() if hasattr(x, "item") else x  # numpy and torch scalars
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x.is_integer():  # NaN and inf are not
        return int(x)
    return str(x)


class RuleHistory:
    """The actor's body (ray.remote(RuleHistory)); every method takes and
    returns plain data."""

    def __init__(self, rule: str, seed: int = 0, path: Optional[str] = None,
                 pc: Optional[Dict[str, Any]] = None):
        self.rule, self.seed, self.path = rule, seed, path
        self.step: Optional[int] = None
        self.first_epoch = True
        self.h = KnapsackHistory() if rule == "knapsack" else \
            PilotCommit(**(pc or {})) if rule == "pilot-commit" else \
            Greso(seed)
        if path and os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            if saved.get("rule") != rule:
                raise ValueError(f"v05: {path} holds the history of rule "
                                 f"{saved.get('rule')!r}, not {rule!r}")
            self.h.load_state_dict(saved["state"])
            self.step = saved["step"]
            self.first_epoch = saved["first_epoch"]

    def plan(self, step: int, pids: Sequence[Hashable]) -> List[Any]:
        """Knapsack: each prompt's prior (None: no estimate yet). GRESO and
        Pilot-Commit: whether each prompt is rolled out at this step."""
        self._advance(step)
        if self.rule == "knapsack":
            return [self.h.prior(p) for p in pids]
        if self.rule == "pilot-commit":
            return [not self.h.skip(p, int(step)) for p in pids]
        if self.first_epoch and any(self.h.seen(p) for p in pids):
            self.first_epoch = False  # a prompt came back
        return [not self.h.skip(p, step) for p in pids]

    def fold(self, step: int, groups: Sequence[Tuple[Hashable, List[float]]]
             ) -> None:
        for pid, rewards in groups:
            if self.rule in ("knapsack", "pilot-commit"):
                self.h.fold(pid, step, rewards)
            else:
                self.h.fold(pid, rewards)

    def state(self) -> Dict[str, Any]:
        return {"rule": self.rule, "step": self.step,
                "first_epoch": self.first_epoch, "state": self.h.state_dict()}

    def load_state(self, saved: Dict[str, Any]) -> None:
        """Back to a state() (a checkpoint's, when verl resumes)."""
        if saved.get("rule") != self.rule:
            raise ValueError(f"v05: a history of rule {saved.get('rule')!r} "
                             f"cannot restore rule {self.rule!r}")
        self.h = KnapsackHistory() if self.rule == "knapsack" else \
            Greso(self.seed)
        self.h.load_state_dict(saved["state"])
        self.step = saved["step"]
        self.first_epoch = saved["first_epoch"]
        self.save()

    def save(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.state(), f)
        os.replace(tmp, self.path)

    def _advance(self, step: int) -> None:
        step = int(step)
        if self.step is not None and step > self.step:
            if self.rule == "greso":
                self.h.step_end(first_epoch=self.first_epoch)
            self.step = step
            self.save()
        elif self.step is None:
            self.step = step
