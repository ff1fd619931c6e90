# SPDX-License-Identifier: MIT
"""verl's configuration as v05 reads it, and the score-to-reward mapping
both sides of verl (rollout and trainer) share."""

import os
from typing import Optional, Tuple

from ...core.stats import reward_from_score

__all__ = ["cfg_get", "segment_of", "score_to_reward", "score_range",
           "SCORE_RANGE", "main_ppo_overrides"]

# What verl's scores are expected to be: a verifier's 0/1 (or a success
# probability). algorithm.v05_score_range=[lo,hi] says otherwise.
SCORE_RANGE = (0.0, 1.0)


def cfg_get(config, key, default=None):
    if config is None:
        return default
    try:
        v = config.get(key, default)
    except AttributeError:
        v = getattr(config, key, default)
    return default if v is None else v


def segment_of(config=None, required: bool = True) -> Optional[str]:
    """The segment: config["v05_segment"] (verl's algorithm config, set with
    ``+algorithm.v05_segment=NAME``), else $V05_SEGMENT. Every rollout node
    has its own segment under the same name (shared memory is per host)."""
    name = cfg_get(config, "v05_segment") or os.environ.get("V05_SEGMENT")
    if not name and required:
        raise ValueError("v05: no segment; set +algorithm.v05_segment=NAME "
                         "or $V05_SEGMENT")
    return name or None


def score_range(config=None) -> Tuple[float, float]:
    """The range of verl's scores: algorithm.v05_score_range ([lo, hi],
    added with +), default [0, 1]."""
    rng = cfg_get(config, "v05_score_range")
    if rng is None:
        return SCORE_RANGE
    try:
        lo, hi = (float(x) for x in rng)
    except (TypeError, ValueError):
        raise ValueError(f"v05: algorithm.v05_score_range={rng!r} is not "
                         "[lo, hi]") from None
    reward_from_score(lo, lo, hi)  # refuses a range that is not lo < hi
    return lo, hi


def score_to_reward(score, rng: Tuple[float, float] = SCORE_RANGE, *,
                    what: str = "verl score") -> float:
    """A verl score on [lo, hi] (default [0, 1]) as a reward on [-1, 1]:
    lo -> -1, hi -> 1. NaN, an infinity or a score outside the range
    raises ValueError naming `what` and the value: a verifier that failed
    must not become a reward."""
    return reward_from_score(score, *rng, what=what)


def main_ppo_overrides(segment: str = "v05", plugin: Optional[dict] = None,
                       report: Optional[str] = None,
                       history: Optional[dict] = None,
                       fill: Optional[str] = None,
                       skip: Optional[dict] = None) -> list:
    """The hydra overrides that turn v05 on in verl's ``main_ppo`` (default
    v1 trainer), v05's defaults included: v05's rollout manager and
    estimator, one sample per prompt from verl (v05 decides the rest),
    the checkpoint callback that saves v05's state with verl's checkpoints,
    and verl's own failure path for a failed v05 chunk (its groups are
    refilled with fresh prompts: trainer.v1.sampler.sync_refill_failed_
    groups; without it a step whose every group failed stops the run).
    ``segment`` names the run's segments, ``plugin`` the Plugin.create
    parameters, ``report`` the run report's path, ``history`` a cross-epoch
    rule ({rule, path, seed}), ``fill`` full batches of informative groups
    ("contrast" or "signal": algorithm.v05_fill) and ``skip`` the skip by
    prior (SkipRule's settings: algorithm.v05_skip)."""

    def hydra(v):
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{hydra(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(hydra(x) for x in v) + "]"
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    out = [
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        "v05.trainers.verl.V05AgentLoopManagerTQ",
        "actor_rollout_ref.rollout.n=1",
        "algorithm.adv_estimator=v05",
        "algorithm.use_kl_in_reward=false",
        f"+algorithm.v05_segment={segment}",
        "+trainer.checkpoint_callback_class="
        "v05.trainers.verl.V05CheckpointCallback",
        "trainer.v1.sampler.sync_refill_failed_groups=true",
    ]
    if plugin:
        out.append(f"+algorithm.v05_plugin={hydra(plugin)}")
    if report:
        out.append(f"+algorithm.v05_report={report}")
    if history:
        out.append(f"+algorithm.v05_history={hydra(history)}")
    if fill:
        out.append(f"+algorithm.v05_fill={fill}")
    if skip:
        out.append(f"+algorithm.v05_skip={hydra(skip)}")
    return out
