# SPDX-License-Identifier: MIT
"""v05-eb's running fit as a value: the additive state (the log-likelihood
over the (n0, h) grid summed over folded first waves) that engines running
v05-eb without a barrier exchange and add (include/v05/stats.h,
struct v05_eb_state)."""

import ctypes
import math
from typing import Sequence, Tuple

from . import _lib
from ._lib import check, lib

__all__ = ["EbState"]

_N = _lib.EB_N0_GRID * _lib.EB_H_GRID


class EbState:
    """One engine's part of the fit, or a sum of parts. Add two with `+`
    (disjoint first waves: the state of both); `fit()` is the grid point
    the plugin would decide under; `to_list()` / `from_list()` carry it as
    _N + 2 floats (the grid, the weight, the count), e.g. in a tensor for
    torch.distributed."""

    SIZE = _N + 2

    def __init__(self):
        self._s = _lib.EbState()
        lib.v05_eb_state_init(ctypes.byref(self._s))

    @classmethod
    def _of(cls, raw: "_lib.EbState") -> "EbState":
        st = cls()
        ctypes.memmove(ctypes.byref(st._s), ctypes.byref(raw),
                       ctypes.sizeof(raw))
        return st

    @property
    def weight(self) -> float:
        """Sum of the folded first waves' weights (forgetting applied)."""
        return self._s.weight

    @property
    def folded(self) -> int:
        """First waves folded in, forgetting aside."""
        return self._s.folded

    def fold(self, prior: float, rewards: Sequence[float],
             keep: float = 1.0) -> "EbState":
        """Fold one first wave (its prior and rewards in [-1, 1]) in, the
        old state weighed by keep first. Returns self."""
        k = len(rewards)
        s = sum((1.0 + float(r)) / 2.0 for r in rewards)
        s = min(max(s, 0.0), float(k))
        check(lib.v05_eb_state_fold(ctypes.byref(self._s), float(keep),
                                    float(prior), k, s), "eb_state_fold")
        return self

    def __add__(self, other: "EbState") -> "EbState":
        if not isinstance(other, EbState):
            return NotImplemented
        out = EbState._of(self._s)
        check(lib.v05_eb_state_add(ctypes.byref(out._s),
                                   ctypes.byref(other._s)), "eb_state_add")
        return out

    def fit(self) -> Tuple[float, float]:
        """(n0, h): the state's best grid point. ValueError when empty."""
        if not self._s.weight > 0:
            raise ValueError("the state holds no first wave yet")
        f = _lib.EbFit()
        check(lib.v05_eb_state_fit(ctypes.byref(self._s), ctypes.byref(f)),
              "eb_state_fit")
        return f.n0, f.h

    def to_list(self) -> list:
        flat = [v for row in self._s.ll for v in row]
        return flat + [self._s.weight, float(self._s.folded)]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> "EbState":
        values = [float(v) for v in values]
        if len(values) != cls.SIZE:
            raise ValueError(f"an EbState is {cls.SIZE} numbers, not "
                             f"{len(values)}")
        if not all(math.isfinite(v) for v in values):
            raise ValueError("an EbState's numbers must be finite")
        if values[-2] < 0 or values[-1] < 0 or values[-1] != int(values[-1]):
            raise ValueError("an EbState's weight and count are >= 0, the "
                             "count whole")
        st = cls()
        for j in range(_lib.EB_N0_GRID):
            for i in range(_lib.EB_H_GRID):
                st._s.ll[j][i] = values[j * _lib.EB_H_GRID + i]
        st._s.weight = values[-2]
        st._s.folded = int(values[-1])
        return st

    @staticmethod
    def grid():
        """Every (n0, h) a fit can be, in the grid's order."""
        return [(lib.v05_eb_n0_at(j), lib.v05_eb_h_at(i))
                for j in range(_lib.EB_N0_GRID)
                for i in range(_lib.EB_H_GRID)]

    def __eq__(self, other) -> bool:
        return isinstance(other, EbState) and \
            bytes(self._s) == bytes(other._s)

    def __repr__(self):
        return f"EbState(folded={self.folded}, weight={self.weight:.6g})"
