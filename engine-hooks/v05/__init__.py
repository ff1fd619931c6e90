# SPDX-License-Identifier: MIT
"""v05: the V0.5 method (value-model prior fused with sampled rewards, OSLA
stopping) inside an LLM rollout engine. Pure Python over libv05 (ctypes).

    plugin = v05.Plugin.create("run1", max_prompts=1024)
    for d in plugin.submit([(uid, v05.prior_from_p(p)) for uid, p in batch]):
        ...                       # generate d.samples for d.uid
    writer = v05.RewardWriter.attach("run1")   # in each reward worker
    writer.push(uid, sample, v05.reward_from_binary(correct))
    for d in plugin.poll(): ...   # "sample", "final", "drop"
    g = plugin.group(d)           # g.rewards, g.advantages: views, no copy
    plugin.release(d)
"""

import ctypes
from typing import Sequence

from . import _checks
from . import _lib
from ._lib import V05Error, check, lib
from .plugin import Decision, Group, Plugin, SubmitError, key_of
from .writer import Reader, RewardWriter

__all__ = ["Plugin", "RewardWriter", "Reader", "Decision", "Group",
           "V05Error", "SubmitError", "prior_from_p", "reward_from_binary",
           "estimate", "key_of", "version", "unlink", "reclaim"]


def version() -> str:
    return lib.v05_version().decode()


def prior_from_p(p: float) -> float:
    """A value model's success probability p in [0, 1] as a prior on the
    [-1, 1] reward scale: 2p - 1."""
    out = ctypes.c_double()
    check(lib.v05_prior_from_p(float(p), ctypes.byref(out)), "prior_from_p")
    return out.value


def reward_from_binary(r) -> float:
    """A 0/1 (or False/True) reward on the [-1, 1] scale: 2r - 1."""
    if isinstance(r, float) and r in (0.0, 1.0):
        r = int(r)
    if isinstance(r, bool):
        r = int(r)
    if not isinstance(r, int):
        raise TypeError(f"binary reward must be 0 or 1, not {r!r}")
    r = _checks.integer("binary reward", r, -_checks.INT_MAX - 1,
                        _checks.INT_MAX, _checks.INT_MAX)
    out = ctypes.c_double()
    check(lib.v05_reward_from_binary(r, ctypes.byref(out)), "reward_from_binary")
    return out.value


def estimate(prior: float, rewards: Sequence[float], *, cost: float = 0.0039,
             k_step: int = 2, k_max: int = 16, mode: str = "v05") -> dict:
    """The statistics core on one group (as `v05ctl estimate`)."""
    from .plugin import MODES
    p = _lib.Params()
    lib.v05_params_default(ctypes.byref(p))
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {sorted(MODES)}")
    p.cost, p.mode = cost, MODES[mode]
    p.k_step = _checks.u32("k_step", k_step, 1)
    p.k_max = _checks.u32("k_max", k_max, 1)
    k = len(rewards)
    p.k_init = max(1, min(k, k_max))
    r = (ctypes.c_double * max(1, k))(*rewards)
    adv = (ctypes.c_double * max(1, k))()
    e = _lib.Estimate()
    check(lib.v05_estimate(ctypes.byref(p), float(prior), r, k,
                           ctypes.byref(e), adv), "estimate")
    return {"k": e.k, "mean": e.mean, "delta2": e.delta2, "weight": e.weight,
            "baseline": e.baseline, "sigma": e.sigma,
            "k_target": e.k_target if e.has_target else None,
            "action": {0: "stop", 1: "more", 2: "drop"}[e.action],
            "advantages": list(adv[:k])}


def unlink(name: str) -> None:
    """Remove segment `name` (mappings stay valid until closed)."""
    check(lib.v05_segment_unlink(_checks.cstr("name", name)), f"unlink {name}")


def reclaim(name: str) -> None:
    """Remove the segment of a dead owner; V05Error(EBUSY) if it lives."""
    check(lib.v05_segment_reclaim(_checks.cstr("name", name), 0), f"reclaim {name}")
