# SPDX-License-Identifier: MIT
"""Counter values by name, as the library names them (Plugin.stats,
Observer.counters and the Prometheus collector share it)."""

from typing import Sequence

from . import _lib
from ._lib import lib

__all__ = ["counters_dict"]


def counters_dict(vals: Sequence[int]) -> dict:
    """Counter values by name; histograms as "k_hist" {k: n} and
    "latency_hist" {bucket: n}."""
    out, khist, lhist = {}, {}, {}
    for i in range(_lib.COUNTER_SLOTS):
        name = lib.v05_counter_name(i)
        if not name:
            continue
        name = name.decode()
        if name.startswith("k_hist_"):
            if vals[i]:
                khist[int(name[7:])] = vals[i]
        elif name.startswith("latency_hist_"):
            if vals[i]:
                lhist[int(name[13:])] = vals[i]
        else:
            out[name] = vals[i]
    out["k_hist"] = khist
    out["latency_hist"] = lhist
    return out
