# SPDX-License-Identifier: MIT
"""The statistics core on single groups, from Python: the reward and prior
scales, v05_estimate (as `v05ctl estimate`) and v05-eb's batch fit."""

import ctypes
import math
from typing import List, Optional, Sequence, Tuple

from . import _checks, _lib
from ._lib import check, lib
from .names import MODES, SIGMAS

__all__ = ["prior_from_p", "reward_from_binary", "reward_from_score",
           "estimate", "eb_fit", "eb_first_wave", "knapsack_plan"]


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


def reward_from_score(score, lo: float = 0.0, hi: float = 1.0, *,
                      what: str = "score") -> float:
    """A trainer's score on [lo, hi] (default [0, 1]: a verifier's 0/1 or a
    success probability) as a reward on [-1, 1], linearly: lo -> -1,
    hi -> 1 (a verifier's True/False is 1/0). A score that is not a finite
    number in [lo, hi] raises (ValueError; TypeError for a non-number),
    naming `what` and the value: a verifier that failed returns NaN, and a
    NaN read as a reward would train the policy toward that sample."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"score range [{lo}, {hi}] is not lo < hi, finite")
    accepted = (f"; the accepted range is finite numbers in [{lo:g}, {hi:g}], "
                f"mapped onto rewards in [-1, 1]")
    if isinstance(score, (str, bytes)) or score is None:
        raise TypeError(f"{what} is {score!r} ({type(score).__name__}), not "
                        f"a number{accepted}")
    try:
        s = float(score)
    except (TypeError, ValueError):
        raise TypeError(f"{what} is {score!r} ({type(score).__name__}), not "
                        f"a number{accepted}") from None
    if not lo <= s <= hi:  # false for NaN too
        kind = "not finite" if not math.isfinite(s) else \
            f"outside [{lo:g}, {hi:g}]"
        raise ValueError(f"{what} is {s!r}: {kind}{accepted}")
    return max(-1.0, min(1.0, 2.0 * (s - lo) / (hi - lo) - 1.0))


RULE_MODES = ("reinforce-ada", "reinforce-ada-pos", "knapsack-prior",
              "knapsack", "greso", "ebpo", "pilot-commit")


def estimate(prior: float, rewards: Sequence[float], *,
             cost: Optional[float] = None, k_step: Optional[int] = None,
             k_max: Optional[int] = None, mode: str = "v05",
             sigma: str = "rms", fit: Optional[Sequence[float]] = None,
             k_init: Optional[int] = None, keep_n: Optional[int] = None
             ) -> dict:
    """The statistics core on one group (as `v05ctl estimate`). `sigma`:
    the advantage normaliser, "rms" (bounded, |A| <= sqrt(k)) or "paper".
    Mode "v05-eb" needs `fit=(n0, h, a2, b2)`, its batch's fitted prior
    (eb_fit, EbState.fit; (n0, h) alone: the uniform Beta(1, 1) as its
    second component). cost, k_step and k_max left at None are the
    library's defaults (v05_params_default; for v05-eb and the published
    rules, their own: v05_config_mode). k_init is the group size the rule started from (by
    default the number of rewards, for the rules their own); keep_n
    Reinforce-Ada's n. "keep" lists the samples trained on. Mode
    "pilot-commit" answers with the default band (its authors'); mode
    "ebpo" needs its running statistics: v05.core.rules.Ebpo.estimate."""
    p = _lib.Params()
    if mode in RULE_MODES or mode == "v05-eb":
        c = _lib.Config()
        check(lib.v05_config_init(ctypes.byref(c), ctypes.sizeof(c), 0),
              "estimate")
        check(lib.v05_config_mode(ctypes.byref(c), MODES[mode]), "estimate")
        p = c.params
    else:
        lib.v05_params_default(ctypes.byref(p))
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {sorted(MODES)}")
    if sigma not in SIGMAS:
        raise ValueError(f"sigma {sigma!r} is not rms or paper")
    if (mode == "v05-eb") != (fit is not None):
        raise ValueError("fit=(n0, h, a2, b2) is required for mode v05-eb, "
                         "and only applies there")
    p.mode = MODES[mode]
    if cost is not None:
        p.cost = cost
    if k_step is not None:
        p.k_step = _checks.u32("k_step", k_step, 1)
    if k_max is not None:
        p.k_max = _checks.u32("k_max", k_max, 1)
    p.sigma = SIGMAS[sigma]
    k = len(rewards)
    if k_init is not None:
        p.k_init = _checks.u32("k_init", k_init, 1)
        if mode.startswith("reinforce-ada") and k_step is None:
            p.k_step = p.k_init  # rounds of k_init
    elif mode not in RULE_MODES:
        p.k_init = max(1, min(k, p.k_max))
    if keep_n is not None:
        p.keep_n = _checks.u32("keep_n", keep_n)
    r = (ctypes.c_double * max(1, k))(*rewards)
    adv = (ctypes.c_double * max(1, k))()
    e = _lib.Estimate()
    if fit is not None:
        f = _fit(fit)
        check(lib.v05_eb_estimate(ctypes.byref(p), ctypes.byref(f),
                                  float(prior), r, k, ctypes.byref(e), adv),
              "estimate")
    else:
        check(lib.v05_estimate(ctypes.byref(p), float(prior), r, k,
                               ctypes.byref(e), adv), "estimate")
    keep = ctypes.c_uint64()
    check(lib.v05_keep(ctypes.byref(p), r, k, ctypes.byref(keep)), "keep")
    return {"k": e.k, "mean": e.mean, "delta2": e.delta2, "weight": e.weight,
            "baseline": e.baseline, "sigma": e.sigma,
            "k_target": e.k_target if e.has_target else None,
            "action": {0: "stop", 1: "more", 2: "drop"}[e.action],
            "advantages": list(adv[:k]),
            "keep": [i for i in range(k) if keep.value >> i & 1]}


def _fit(fit) -> "_lib.EbFit":
    """A v05-eb fit, (n0, h, a2, b2) or (n0, h) (then Beta(1, 1))."""
    try:
        vals = [float(x) for x in fit]
    except (TypeError, ValueError):
        raise TypeError(f"fit {fit!r} is not (n0, h, a2, b2)") from None
    if len(vals) == 2:
        vals += [1.0, 1.0]
    if len(vals) != 4:
        raise ValueError(f"fit {fit!r} is not (n0, h, a2, b2) or (n0, h)")
    return _lib.EbFit(*vals)


def eb_first_wave(prior: float, fit: Sequence[float], *,
                  waves: Sequence[int] = (2, 4), cost: Optional[float] = None,
                  k_step: Optional[int] = None, k_max: Optional[int] = None
                  ) -> Tuple[int, float]:
    """v05-eb's first wave under a fit (v05_eb_first_wave): of the sizes
    in `waves`, the one with the least expected final risk for a prompt of
    this prior, and that risk. cost, k_step, k_max at None: v05-eb's
    defaults."""
    c = _lib.Config()
    check(lib.v05_config_init(ctypes.byref(c), ctypes.sizeof(c), 0),
          "eb_first_wave")
    check(lib.v05_config_mode(ctypes.byref(c), MODES["v05-eb"]),
          "eb_first_wave")
    p = c.params
    if cost is not None:
        p.cost = cost
    if k_step is not None:
        p.k_step = _checks.u32("k_step", k_step, 1)
    if k_max is not None:
        p.k_max = _checks.u32("k_max", k_max, 1)
    if isinstance(waves, (str, bytes, int)):
        raise TypeError(f"waves {waves!r} is not a list of first-wave sizes")
    mask = 0
    for k in waves:
        mask |= 1 << _checks.u32("waves", k, 1, 31)
    f = _fit(fit)
    risk = ctypes.c_double()
    k1 = lib.v05_eb_first_wave(ctypes.byref(p), ctypes.byref(f),
                               float(prior), mask, ctypes.byref(risk))
    check(k1, "eb_first_wave")
    return k1, risk.value


def knapsack_plan(p: Sequence[Optional[float]], per_prompt: int = 8,
                  n_up: int = 64) -> List[int]:
    """Knapsack RL's allocation (v05_knapsack_plan): per_prompt samples per
    prompt on average split over prompts of success probabilities p (each
    in [0, 1]) to maximise the expected information, each prompt's share
    in [2, n_up] (docs/RULES.md). A p of None is a prompt with no estimate
    yet: it gets per_prompt, outside the knapsack."""
    n = len(p)
    q = (ctypes.c_double * max(1, n))(
        *[math.nan if x is None else float(x) for x in p])
    for i, x in enumerate(q[:n]):  # the C call reads NaN as "no estimate"
        if math.isnan(x) and p[i] is not None:
            raise ValueError(f"knapsack_plan: p[{i}] is nan; a prompt with "
                             "no estimate is None")
    out = (ctypes.c_uint32 * max(1, n))()
    check(lib.v05_knapsack_plan(q, n, _checks.u32("per_prompt", per_prompt),
                                _checks.u32("n_up", n_up), out),
          "knapsack_plan")
    return list(out[:n])


def eb_fit(groups: Sequence[Tuple[float, Sequence[float]]]
           ) -> Tuple[float, float, float, float]:
    """Mode v05-eb's fitted prior (n0, h, a2, b2) for a batch of (prior,
    rewards) groups, as the plugin's barrier fits it on their first waves
    (a reward r counts (1 + r)/2 of a success): the population's shape
    Beta(a2, b2), then n0 and h."""
    n = len(groups)
    if n == 0:
        raise ValueError("eb_fit needs at least one group")
    pri = (ctypes.c_double * n)()
    ks = (ctypes.c_uint32 * n)()
    ss = (ctypes.c_double * n)()
    for i, (prior, rewards) in enumerate(groups):
        if not 0 <= len(rewards) <= 64:
            raise ValueError("a group has 0..64 rewards")
        pri[i], ks[i] = float(prior), len(rewards)
        ss[i] = sum((1.0 + float(r)) / 2.0 for r in rewards)
    f = _lib.EbFit()
    check(lib.v05_eb_fit(pri, ks, ss, n, ctypes.byref(f)), "eb_fit")
    return f.n0, f.h, f.a2, f.b2
