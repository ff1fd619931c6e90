# SPDX-License-Identifier: MIT
"""v05-eb's running fit as a value: the additive state (per shape of the
second component, the population's log-likelihood and the log-likelihood
over the (n0, h) grid, summed over folded first waves) that engines
running v05-eb without a barrier exchange and add (include/v05/stats.h,
struct v05_eb_state)."""

import ctypes
import math
from typing import Sequence, Tuple

from . import _lib
from ._lib import check, lib

__all__ = ["EbState"]

_J, _NN, _NH = _lib.EB_SHAPES, _lib.EB_N0_GRID, _lib.EB_H_GRID
_N = _J * _NN * _NH


class EbState:
    """One engine's part of the fit, or a sum of parts. Add two with `+`
    (disjoint first waves: the state of both); `fit()` is the grid point
    the plugin would decide under; `to_list()` / `from_list()` carry it as
    SIZE floats (the grid per shape, the population's per shape, the
    weight, the count), e.g. in a tensor for torch.distributed."""

    SIZE = _N + _J + 2

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

    def fit(self) -> Tuple[float, float, float, float]:
        """(n0, h, a2, b2): the state's fit (the population's shape
        Beta(a2, b2), then its best grid point). ValueError when empty."""
        if not self._s.weight > 0:
            raise ValueError("the state holds no first wave yet")
        f = _lib.EbFit()
        check(lib.v05_eb_state_fit(ctypes.byref(self._s), ctypes.byref(f)),
              "eb_state_fit")
        return f.n0, f.h, f.a2, f.b2

    def to_list(self) -> list:
        flat = [v for plane in self._s.ll for row in plane for v in row]
        return flat + list(self._s.pop) + [self._s.weight,
                                           float(self._s.folded)]

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
        for c in range(_J):
            for j in range(_NN):
                for i in range(_NH):
                    st._s.ll[c][j][i] = values[(c * _NN + j) * _NH + i]
        for c in range(_J):
            st._s.pop[c] = values[_N + c]
        st._s.weight = values[-2]
        st._s.folded = int(values[-1])
        return st

    @staticmethod
    def shapes():
        """Every second component Beta(a2, b2) a fit can have, in order."""
        out = []
        for c in range(_J):
            a, b = ctypes.c_double(), ctypes.c_double()
            check(lib.v05_eb_shape_at(c, ctypes.byref(a), ctypes.byref(b)),
                  "eb_shape_at")
            out.append((a.value, b.value))
        return out

    @staticmethod
    def grid():
        """Every fit (n0, h, a2, b2) there can be, in the state's order
        (shape, n0, h)."""
        return [(lib.v05_eb_n0_at(j), lib.v05_eb_h_at(i), a, b)
                for a, b in EbState.shapes()
                for j in range(_NN) for i in range(_NH)]

    def __eq__(self, other) -> bool:
        return isinstance(other, EbState) and \
            bytes(self._s) == bytes(other._s)

    def __repr__(self):
        return f"EbState(folded={self.folded}, weight={self.weight:.6g})"
