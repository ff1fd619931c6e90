# SPDX-License-Identifier: MIT
"""Stand-in of slime/rollout/base_types.py at slime 624b824."""
from dataclasses import dataclass
from typing import Any


@dataclass
class RolloutFnTrainOutput:
    samples: list
    metrics: dict | None = None


@dataclass
class RolloutFnEvalOutput:
    data: dict
    metrics: dict | None = None


def call_rollout_fn(fn, *args, evaluation: bool, **kwargs) -> Any:
    # slime wraps a bare return value (its legacy form) in the output type
    out = fn(*args, **kwargs, evaluation=evaluation)
    if not isinstance(out, (RolloutFnTrainOutput, RolloutFnEvalOutput)):
        out = RolloutFnEvalOutput(data=out) if evaluation else \
            RolloutFnTrainOutput(samples=out)
    return out
