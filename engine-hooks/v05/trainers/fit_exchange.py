# SPDX-License-Identifier: MIT
"""v05-eb's running fit shared among data-parallel engines, with no barrier.

Each engine (one plugin each, possibly on another host) folds its own
first waves into its own part of the fit (Plugin.eb_state). FitExchange
posts that part to the other engines with one asynchronous all_gather
(torch.distributed, gloo) at a moment the trainer already has (a step
boundary) and, when it has completed, hands the others' sum to the plugin
(Plugin.post_eb_remote: from whatever thread completes the exchange, the
plugin's own thread hands it in at its next poll, since a plugin is used by
one thread at a time): the state is additive, so each engine then decides
under the fit of every engine's first waves. Nothing waits for it: until
an exchange completes, decisions go on under the parts of the last one,
so a slow engine delays only when the others see its part, and a dead one
leaves them deciding on what they have (the exchange reports the error).
"""

from typing import Optional

from ..core.eb_state import EbState
from ..core.plugin import Plugin

__all__ = ["FitExchange"]


class FitExchange:
    """One per engine, over its plugin (v05-eb, schedule "stream")."""

    def __init__(self, plugin: Plugin, group=None):
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
        self.posted = 0             # exchanges posted (start() True)
        self.exchanges = 0          # completed and handed in
        # The others' sum the last completed exchange posted to the plugin.
        self.others: Optional[EbState] = None
        self.error: Optional[BaseException] = None
        self._work = None
        self._out = None

    @property
    def pending(self) -> bool:
        """An exchange is posted and has not completed."""
        return self._work is not None

    def start(self) -> bool:
        """Post this engine's part. False (nothing posted) while the last
        exchange is still pending: the collectives stay in step."""
        import torch

        if self._work is not None:
            return False
        mine = torch.tensor(self.plugin.eb_state_shared().to_list(),
                            dtype=torch.float64)
        self._out = [torch.empty_like(mine) for _ in range(self.world)]
        self._work = self.dist.all_gather(self._out, mine, group=self.group,
                                          async_op=True)
        self.posted += 1
        return True

    def poll(self) -> bool:
        """If the posted exchange has completed, post the others' sum to
        the plugin (its next poll hands it in) and return True; otherwise
        return False at once. Any thread."""
        if self._work is None or not self._work.is_completed():
            return False
        return self._finish()

    def wait(self) -> bool:
        """Block until the posted exchange completes (a trainer that wants
        the merged fit before the next batch); then as poll()."""
        if self._work is None:
            return False
        return self._finish()

    def _finish(self) -> bool:
        work, out = self._work, self._out
        self._work = self._out = None
        try:
            work.wait()
        except RuntimeError as e:  # a peer went away: keep what we have
            self.error = e
            return False
        others = EbState()
        for r, t in enumerate(out):
            if r != self.rank:
                others = others + EbState.from_list(t.tolist())
        self.plugin.post_eb_remote(others)
        self.others = others
        self.exchanges += 1
        return True
