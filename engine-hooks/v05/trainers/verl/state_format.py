# SPDX-License-Identifier: MIT
"""The format of v05's state in verl's checkpoints (v05_state.json,
checkpoint.py): what a saved state holds, and the refusal of one this v05
cannot resume from. Format 2 (v05 0.6): each worker's part of v05-eb's
running fit over the population's shape (EbState.SIZE numbers), with the
grid's sizes named. Format 1 (v05 0.5 and before, no "eb_state"): a part
of one hallucination component over 31 x 24 points, which no later fit
can be made from."""

from typing import Optional

from ...core import _lib
from ...core.eb_state import EbState

__all__ = ["FORMAT", "state_record", "check_saved"]

FORMAT = 2


def version() -> str:
    return _lib.lib.v05_version().decode()


def _grid() -> dict:
    return {"shapes": _lib.EB_SHAPES, "n0": _lib.EB_N0_GRID,
            "h": _lib.EB_H_GRID, "size": EbState.SIZE}


def state_record(workers: list, history: Optional[dict]) -> dict:
    """What v05_state.json holds: the workers' states (own and remote
    parts as EbState lists), the rule history, the format and grid."""
    return {"version": FORMAT, "library": version(), "eb_state": _grid(),
            "workers": workers, "history": history}


def check_saved(state: dict, where: str) -> None:
    """ValueError, saying what to do, for a saved state this v05 cannot
    resume from (another format, another grid)."""
    fmt = state.get("version") if isinstance(state, dict) else None
    remedy = ("v05 cannot convert it: resume with the v05 that saved it, "
              f"or remove {where} (the workers then start with an empty "
              "running fit, deciding as at a cold start until eb_cold first "
              "waves are in)")
    if fmt == 1:
        raise ValueError(
            f"v05: {where} was saved by v05 0.5 or earlier (format 1): its "
            "running fit has one hallucination component over 31 x 24 "
            f"points, this v05 ({version()}) fits the population's shape "
            f"as well ({EbState.SIZE} numbers per part); " + remedy)
    if fmt != FORMAT:
        raise ValueError(f"v05: {where} is of format {fmt!r}, this v05 "
                         f"({version()}) reads format {FORMAT}; " + remedy)
    grid = state.get("eb_state")
    if grid != _grid():
        raise ValueError(
            f"v05: {where} holds a running fit over {grid!r}, this v05 "
            f"({version()}) one over {_grid()!r} (saved by v05 "
            f"{state.get('library')!r}); " + remedy)
