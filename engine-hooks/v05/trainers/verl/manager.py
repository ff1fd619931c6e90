# SPDX-License-Identifier: MIT
"""What both rollout managers do for the run as a whole (in the trainer's
process, where verl's manager lives): name the workers, merge their running
fits at each step boundary, save and restore v05's state with verl's
checkpoints, close the workers' plugins."""

import logging
import os
from typing import List, Optional

from verl.utils.ray_utils import auto_await

from ...core.eb_state import EbState
from ..report import report
from .checkpoint import STATE_FILE, read_state, resume_folder, write_state
from .config import cfg_get
from .state_format import check_saved, state_record

__all__ = ["V05ManagerMixin", "merge_others"]

log = logging.getLogger(__name__)


def merge_others(parts: List[list]) -> List[EbState]:
    """For each worker's part (EbState lists), the sum of the others'."""
    states = [EbState.from_list(p) for p in parts]
    out = []
    for i in range(len(states)):
        acc = EbState()
        for j, st in enumerate(states):
            if j != i:
                acc = acc + st
        out.append(acc)
    return out


class V05ManagerMixin:
    """Mixed into V05AgentLoopManagerTQ and V05AgentLoopManager (verl's
    manager classes, whose workers are self.agent_loop_workers)."""

    v05_exchanges = 0

    @classmethod
    @auto_await
    async def create(cls, *args, **kwargs):
        """verl's create (the trainers build the manager with it), then
        _v05_start once the workers exist."""
        instance = cls(*args, **kwargs)
        await instance._init_agent_loop_workers()
        instance._v05_start()
        return instance

    def _v05_algo(self):
        return cfg_get(self.config, "algorithm")

    def _v05_start(self) -> None:
        """After the workers exist: name them (segment <prefix>-w<i>;
        a dead run's segments of the same names are reclaimed), then give
        them back a checkpoint's state when verl resumes from one."""
        import ray

        self._v05_report = cfg_get(self._v05_algo(), "v05_report") or None
        self.v05_segments = ray.get([
            w.v05_setup.remote(i)
            for i, w in enumerate(self.agent_loop_workers)])
        folder = resume_folder(self.config)
        state = read_state(folder)
        if state is not None:
            check_saved(state, os.path.join(folder, STATE_FILE))
            self._v05_restore(state, folder)
        elif folder:
            log.warning("v05: verl resumes from %s, which holds no v05 state "
                        "(saved without +trainer.checkpoint_callback_class="
                        "v05.trainers.verl.V05CheckpointCallback): the "
                        "workers start with an empty running fit", folder)

    def _v05_exchange(self) -> None:
        """Each worker gets the sum of the others' parts of v05-eb's
        running fit (a step boundary: no batch waits for it; a worker in
        the middle of a chunk takes it between two of its polls, on its
        own event loop). Nothing to do with one worker, or when the plugins
        keep no running fit (another mode, or schedule rounds)."""
        import ray

        workers = self.agent_loop_workers
        if len(workers) < 2:
            return
        parts = ray.get([w.v05_eb_part.remote() for w in workers])
        if any(p is None for p in parts):
            return
        others = merge_others(parts)
        ray.get([w.v05_eb_others.remote(o.to_list())
                 for w, o in zip(workers, others)])
        self.v05_exchanges += 1

    def v05_state(self) -> dict:
        import ray

        states = ray.get([w.v05_state.remote()
                          for w in self.agent_loop_workers])
        hist = None
        workers = self.agent_loop_workers
        if workers:
            hist = ray.get(workers[0].v05_history_state.remote())
        return state_record(states, hist)

    def v05_save(self, checkpoint_dir: str, global_step: int) -> str:
        """Write v05's state into verl's checkpoint directory."""
        state = self.v05_state()
        state["global_step"] = int(global_step)
        path = write_state(checkpoint_dir, state)
        report(self._v05_report, {"kind": "state", "step": int(global_step),
                                  "path": path})
        return path

    def _v05_restore(self, state: dict, folder: str) -> None:
        import ray

        workers = self.agent_loop_workers
        saved = state.get("workers", [])
        if len(saved) != len(workers):
            # Another number of workers: the whole fit goes to worker 0.
            total = EbState()
            for s in saved:
                if s.get("own") is not None:
                    total = total + EbState.from_list(s["own"])
            saved = [{"own": total.to_list(), "remote": None}] + \
                [{"own": None, "remote": None}] * (len(workers) - 1)
            log.warning("v05: %s was saved with %d workers, this run has %d: "
                        "the saved running fit goes to worker 0",
                        folder, len(state.get("workers", [])), len(workers))
        ray.get([w.v05_restore.remote(s) for w, s in zip(workers, saved)])
        if state.get("history") is not None and workers:
            ray.get(workers[0].v05_history_restore.remote(state["history"]))
        report(self._v05_report, {"kind": "restore", "path": folder,
                                  "step": state.get("global_step")})

    def v05_close(self):
        """Close every worker's plugin (removes their segments)."""
        import ray
        ray.get([w.v05_close.remote() for w in self.agent_loop_workers])
