# SPDX-License-Identifier: MIT
"""Batch-wide halt across data-parallel engines.

Each engine (one segment each, possibly on another node) holds part of a
batch. The paper's halt rule is batch-wide: halt when fewer than
halt_fraction of the batch's prompts need more. So every engine's plugin
runs with external_halt=True: at a round barrier it reports how many of its
prompts need more and waits. HaltCoordinator sums, over all engines, with
one torch.distributed all_reduce (gloo) per round:

    [prompts needing more, prompts in the batch, engines done]

and every engine computes the same verdict from the same sums, so all halt
(or all release) the same batch at the same round. An engine whose share is
already final keeps taking part in the rounds (contributing zeros) until
every engine is done, which keeps the collectives in step.
"""

from ..core.decision import Decision
from ..core.plugin import Plugin

__all__ = ["HaltCoordinator"]


class HaltCoordinator:
    """One per engine, over its own plugin: the halt fraction is the
    plugin's (every engine's plugin is configured alike), never a second
    copy that could disagree with it."""

    def __init__(self, plugin: Plugin, group=None):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("v05.trainers.distributed: call torch.distributed."
                               "init_process_group('gloo', ...) first")
        self.dist = dist
        self.halt_fraction = plugin.halt_fraction
        self.group = group
        self.world = dist.get_world_size(group)
        self.log = []  # (batch, round, needing more, batch size, halted)
        self._round = {}

    def _sum(self, more: int, size: int, done: int):
        import torch

        t = torch.tensor([float(more), float(size), float(done)],
                         dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM, group=self.group)
        return int(t[0]), int(t[1]), int(t[2])

    def _verdict(self, batch, more, size):
        r = self._round.get(batch, 0) + 1
        self._round[batch] = r
        halt = more < self.halt_fraction * size
        self.log.append((batch, r, more, size, halt))
        return halt

    def barrier(self, plugin: Plugin, d: Decision) -> bool:
        """Answer a "barrier" decision with the batch-wide verdict."""
        more, size, done = self._sum(d.k, d.batch_size, 0)
        halt = self._verdict(d.batch, more, size)
        plugin.resolve(d.batch, halt)
        return halt

    async def abarrier(self, plugin: Plugin, d: Decision) -> bool:
        """barrier() for asyncio code: the collective runs in a thread."""
        import asyncio

        loop = asyncio.get_running_loop()
        more, size, done = await loop.run_in_executor(
            None, self._sum, d.k, d.batch_size, 0)
        halt = self._verdict(d.batch, more, size)
        plugin.resolve(d.batch, halt)
        return halt

    def finish(self, batch: int, local_size: int) -> None:
        """This engine's share of `batch` is final: take part in the
        remaining rounds until every engine is done."""
        while True:
            more, size, done = self._sum(0, local_size, 1)
            if done == self.world:
                return
            # The same verdict the engines at the barrier compute; after a
            # halt they finalize and report done in the next sum.
            self._verdict(batch, more, size)
