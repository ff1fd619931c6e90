# SPDX-License-Identifier: MIT
"""v05-eb's running fit shared among data-parallel engines, with no barrier.

Each engine (one plugin each, possibly on another host) folds its own
first waves into its own part of the fit (Plugin.eb_state). FitExchange
posts that part to the other engines with asynchronous all_gathers
(torch.distributed, gloo) at a moment the trainer already has (a step
boundary) and, when they have completed, hands the others' sum to the
plugin (Plugin.post_eb_remote: from whatever thread completes the
exchange, the plugin's own thread hands it in at its next poll, since a
plugin is used by one thread at a time): the state is additive, so each
engine then decides under the fit of every engine's first waves. Nothing
waits for it: until an exchange completes, decisions go on under the parts
of the last one, so a slow engine delays only when the others see its
part, and a dead one leaves them deciding on what they have (the exchange
reports the error).

An exchange is two gathers. First a header of HEADER integers, the same
size in every version of this protocol: which protocol, how long a part
is, the grid it is over (its sizes and a hash of its values), the sender's
eb_window and rank, its library's version. Every rank sees every header,
so all agree on the length of the second gather (a part of another length
can never reach gloo, whose mismatched sizes abort the process), and each
refuses the parts of ranks whose build or config cannot be merged with its
own, naming the rank and the difference. Then the parts: each is checked
on its own (the library's checks: finite, a weight in [0, folded], every
value within what that weight of groups can give, each row concave in h;
and here, the weight what the count of first waves weighs under the
sender's eb_window); a part that fails is refused and counted for its rank
(FitExchange.refused), and the others' valid parts are summed and handed
in: one bad rank never stops the healthy ones. The error (FitPartRefused,
a ValueError, in FitExchange.error) names every rank refused and why.
"""

import hashlib
import struct
from typing import Dict, Optional

from ..core import _lib
from ..core._lib import lib
from ..core.eb_state import EbState
from ..core.plugin import Plugin

__all__ = ["FitExchange", "FitPartRefused", "HEADER", "PROTOCOL"]

HEADER = 8                 # int64s in a header, in every protocol version
PROTOCOL = 1
_MAGIC = 0x76303566697478  # "v05fitx"
_MAX_PART = 1 << 20        # the longest part any grid could give


class FitPartRefused(ValueError):
    """Other ranks' parts refused by one exchange: `reasons` maps each
    refused rank to why; the message names them all."""

    def __init__(self, exchange: int, reasons: Dict[int, str]):
        self.exchange = exchange
        self.reasons = dict(reasons)
        super().__init__(f"fit exchange {exchange}: " + "; ".join(
            f"rank {r}'s part refused: {why}"
            for r, why in sorted(reasons.items())))


def _grid_hash() -> int:
    """A 62-bit hash of the grid's values (every shape, n0 and h): two
    builds' parts add only if their grids are the same points."""
    h = hashlib.blake2b(digest_size=8)
    for point in EbState.grid():
        h.update(struct.pack("<dddd", *point))
    return int.from_bytes(h.digest(), "little") >> 2


def _grid_dims() -> int:
    """The grid's sizes in one number: shapes << 16 | n0 points << 8 | h
    points (a part of 0.5, one shape implied, is 31 << 8 | 24)."""
    return (_lib.EB_SHAPES << 16) | (_lib.EB_N0_GRID << 8) | _lib.EB_H_GRID


def _dims_text(dims: int) -> str:
    return (f"{max(1, dims >> 16)} shapes x {(dims >> 8) & 0xff} x "
            f"{dims & 0xff} points")


def _version() -> int:
    major, minor, patch = (int(x) for x in
                           lib.v05_version().decode().split(".")[:3])
    return (major << 32) | (minor << 16) | patch


def _expected_weight(folded: int, window: int) -> float:
    """What `folded` first waves weigh under eb_window `window`: each
    fold multiplies the weight by 1 - 1/window and adds 1."""
    if window == 0:
        return float(folded)
    return window * (1.0 - (1.0 - 1.0 / window) ** folded)


class FitExchange:
    """One per engine, over its plugin (v05-eb, schedule "stream").

    eb_window: the plugin's, when it was taken over (its config is not
    known here otherwise); every rank must run the same. max_growth: if
    given, the most first waves a rank can fold between two exchanges (a
    rank's folded count may not grow by more per exchange since its last
    accepted part); without a window (eb_window 0) that is the only bound
    on how much a rank's part can weigh."""

    def __init__(self, plugin: Plugin, group=None, *,
                 eb_window: Optional[int] = None,
                 max_growth: Optional[int] = None):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("v05.trainers.fit_exchange: call torch."
                               "distributed.init_process_group('gloo', ...) "
                               "first")
        # ValueError now if the plugin has no running fit; the first call
        # on the plugin's thread (create FitExchange there), after which
        # start() may run on any thread.
        plugin.eb_state_shared()
        self.dist = dist
        self.plugin = plugin
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if eb_window is None and plugin.config is not None:
            eb_window = plugin.config.eb_window
        self.eb_window = eb_window
        self.max_growth = max_growth
        self.posted = 0             # exchanges posted (start() True)
        self.exchanges = 0          # completed and handed in
        # The others' sum the last completed exchange posted to the plugin.
        self.others: Optional[EbState] = None
        self.error: Optional[BaseException] = None
        # Parts refused, per rank, and the last reason for each.
        self.refused: Dict[int, int] = {}
        self.refused_why: Dict[int, str] = {}
        self._accepted: Dict[int, tuple] = {}   # rank -> (exchange, folded)
        self._grid = _grid_hash()
        self._work = None
        self._out = None
        self._phase = None
        self._mine = None
        self._bad: Dict[int, str] = {}

    @property
    def pending(self) -> bool:
        """An exchange is posted and has not completed."""
        return self._work is not None

    def _header(self):
        import torch

        window = -1 if self.eb_window is None else int(self.eb_window)
        return torch.tensor([_MAGIC, PROTOCOL, EbState.SIZE, _grid_dims(),
                             self._grid, window, _version(), self.rank],
                            dtype=torch.int64)

    def start(self) -> bool:
        """Post this engine's part. False (nothing posted) while the last
        exchange is still pending: the collectives stay in step."""
        import torch

        if self._work is not None:
            return False
        self._mine = self.plugin.eb_state_shared().to_list()
        self._out = [torch.empty(HEADER, dtype=torch.int64)
                     for _ in range(self.world)]
        self._work = self.dist.all_gather(self._out, self._header(),
                                          group=self.group, async_op=True)
        self._phase = "header"
        self.posted += 1
        return True

    def poll(self) -> bool:
        """If the posted exchange has completed, post the others' valid
        parts' sum to the plugin (its next poll hands it in) and return
        True; otherwise return False at once. Any thread."""
        while self._work is not None and self._work.is_completed():
            if self._phase == "header":
                if not self._post_parts():
                    return False
                continue
            return self._finish()
        return False

    def wait(self) -> bool:
        """Block until the posted exchange completes (a trainer that wants
        the merged fit before the next batch); then as poll()."""
        if self._work is None:
            return False
        if self._phase == "header" and not self._post_parts():
            return False
        return self._finish()

    def _completed(self):
        """The posted gather's result, or None (a peer went away: the
        error kept, the exchange over; decisions go on with what the
        plugin has)."""
        work, out = self._work, self._out
        self._work = self._out = None
        try:
            work.wait()
        except RuntimeError as e:
            self.error = e
            self._phase = None
            return None
        return out

    def _header_fault(self, r: int, h) -> Optional[str]:
        """Why rank r's header says its part cannot be merged with this
        one's, or None."""
        magic, proto, size, dims, grid, window, version, rank = h
        if magic != _MAGIC or proto != PROTOCOL:
            return (f"it speaks another exchange protocol (magic {magic:#x}, "
                    f"version {proto}; this rank: {_MAGIC:#x}, {PROTOCOL})")
        if rank != r:
            return f"its header says it is rank {rank}"
        if size != EbState.SIZE or dims != _grid_dims() or grid != self._grid:
            return (f"it runs another build: its part is {size} numbers over "
                    f"a grid of {_dims_text(dims)} (hash {grid:#x}), this "
                    f"rank's {EbState.SIZE} over {_dims_text(_grid_dims())} "
                    f"({self._grid:#x}) (library {version >> 32}."
                    f"{(version >> 16) & 0xffff}.{version & 0xffff} there, "
                    f"{lib.v05_version().decode()} here): use the same v05 "
                    "on every rank")
        if window >= 0 and self.eb_window is not None and \
                window != self.eb_window:
            return (f"its eb_window is {window}, this rank's "
                    f"{self.eb_window}: every rank must run the same config")
        return None

    def _post_parts(self) -> bool:
        """The headers are in: agree on the parts' length, note the ranks
        whose parts cannot be merged, post the parts' gather."""
        import torch

        out = self._completed()
        if out is None:
            return False
        heads = [[int(x) for x in t.tolist()] for t in out]
        self._bad = {}
        for r, h in enumerate(heads):
            if r != self.rank:
                why = self._header_fault(r, h)
                if why:
                    self._bad[r] = why
        # Every rank computes this from the same headers: the same length.
        lengths = [h[2] for h in heads
                   if h[0] == _MAGIC and h[1] == PROTOCOL and
                   0 < h[2] <= _MAX_PART]
        self._len = max(lengths + [EbState.SIZE])
        mine = torch.zeros(self._len, dtype=torch.float64)
        mine[:EbState.SIZE] = torch.tensor(self._mine, dtype=torch.float64)
        self._out = [torch.empty(self._len, dtype=torch.float64)
                     for _ in range(self.world)]
        self._work = self.dist.all_gather(self._out, mine, group=self.group,
                                          async_op=True)
        self._phase = "part"
        return True

    def _part_fault(self, r: int, values: list, window: Optional[int]):
        """(EbState, None) for rank r's valid part, else (None, why)."""
        try:
            st = EbState.from_list(values)
            EbState() + st     # the library's checks of a state
        except (ValueError, OSError) as e:
            return None, str(e)
        if window is not None:
            want = _expected_weight(st.folded, window)
            if abs(st.weight - want) > 1e-9 * max(want, 1.0):
                return None, (f"its weight {st.weight!r} is not what "
                              f"{st.folded} first waves weigh under "
                              f"eb_window {window} ({want!r})")
        last = self._accepted.get(r)
        if self.max_growth is not None and last is not None and \
                st.folded > last[1] + self.max_growth * \
                (self.exchanges + 1 - last[0]):
            return None, (f"its count grew from {last[1]} to {st.folded} "
                          f"first waves in {self.exchanges + 1 - last[0]} "
                          f"exchanges, more than max_growth "
                          f"{self.max_growth} per exchange")
        return st, None

    def _finish(self) -> bool:
        out = self._completed()
        if out is None:
            return False
        self._phase = None
        window = self.eb_window
        others = EbState()
        refused = {}
        for r, t in enumerate(out):
            if r == self.rank:
                continue
            why = self._bad.get(r)
            st = None
            if why is None:
                st, why = self._part_fault(r, t[:EbState.SIZE].tolist(),
                                           window)
            if why is not None:
                refused[r] = why
                self.refused[r] = self.refused.get(r, 0) + 1
                self.refused_why[r] = why
                continue
            others = others + st
            self._accepted[r] = (self.exchanges + 1, st.folded)
        self.plugin.post_eb_remote(others)
        self.others = others
        self.exchanges += 1
        if refused:
            self.error = FitPartRefused(self.exchanges, refused)
        return True

