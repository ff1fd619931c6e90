# SPDX-License-Identifier: MIT
"""verl's configuration as v05 reads it, and the score-to-reward mapping
both sides of verl (rollout and trainer) share."""

import os
from typing import Optional

__all__ = ["cfg_get", "segment_of", "score_to_reward"]


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


def score_to_reward(score: float) -> float:
    """verl scores are usually 0/1 (or already in [-1, 1]); v05 wants
    [-1, 1]: [0, 1] maps to 2s - 1, anything else is clamped."""
    s = float(score)
    if 0.0 <= s <= 1.0:
        return 2.0 * s - 1.0
    return max(-1.0, min(1.0, s))
