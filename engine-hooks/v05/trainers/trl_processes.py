# SPDX-License-Identifier: MIT
"""V05GRPOTrainer (v05.trainers.trl) with several processes (``accelerate
launch`` or ``torchrun``, DDP): the checks that every process's plugin is
configured alike and that nothing in the setup runs collectives the
processes would call unequally, and the exchange of v05-eb's running fits
(FitExchange on a gloo group of the trainer's own) at each generation and
at the end of train(). v05.trainers.trl's text says what is supported."""

import warnings
from typing import Optional

import torch

from .fit_exchange import FitExchange

__all__ = ["TrlProcesses"]


class TrlProcesses:
    """V05GRPOTrainer's part for several processes (module text); the
    trainer's attributes it uses: v05 (the plugin), v05_history,
    v05_exchange, v05_fit_log, and TRL's own."""

    def _v05_processes(self, merge: bool) -> Optional[FitExchange]:
        """Checks for several processes (module text), and the exchange of
        the running fits on a gloo group of its own (so that it never
        interleaves with DDP's collectives). Every process constructs the
        trainer, so the group's creation and the settings' check, both
        collectives, run on all."""
        from accelerate.utils import DistributedType
        import torch.distributed as dist

        dt = self.accelerator.distributed_type
        if dt in (DistributedType.FSDP, DistributedType.DEEPSPEED,
                  DistributedType.XLA, DistributedType.MEGATRON_LM):
            raise NotImplementedError(
                f"V05GRPOTrainer: several processes under {dt.value}: its "
                "generation runs collectives, which v05's processes call "
                "unequally (each generates what its plugin decides); use "
                "DDP")
        if self.use_vllm:
            raise NotImplementedError(
                "V05GRPOTrainer: several processes with vLLM generation "
                "(TRL gathers every process's prompts at each call, which "
                "v05's processes make unequally)")
        if self.v05_history is not None:
            raise NotImplementedError(
                "V05GRPOTrainer: a cross-epoch history with several "
                "processes (each would fold only the prompts it rolls out)")
        group = dist.new_group(backend="gloo")
        try:
            self.v05.eb_state_shared()  # this thread owns the plugin
            mine = True
        except ValueError:
            mine = False  # no running fit in this mode
        info = self._v05_settings()
        info["merge"] = merge
        info["running_fit"] = mine
        everyone = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, info, group=group)
        for rank, other in enumerate(everyone):
            if other != everyone[0]:
                diff = {k: (everyone[0].get(k), other.get(k))
                        for k in sorted(set(other) | set(everyone[0]))
                        if other.get(k) != everyone[0].get(k)}
                raise ValueError(
                    f"V05GRPOTrainer: the processes' plugins must be "
                    f"configured alike; process {rank} differs from "
                    f"process 0 in (process 0's, its): {diff}")
        if not (merge and mine):
            return None
        return FitExchange(self.v05, group)

    def _v05_settings(self) -> dict:
        """What the plugin decides by (the processes must agree)."""
        from ..core.observer import Observer
        with Observer(self.v05.name) as o:
            i = o.info()
        out = {k: i[k] for k in ("mode", "schedule", "k_init", "k_step",
                                 "k_max", "cost", "halt_fraction",
                                 "pad_multiple")}
        cfg = self.v05.config
        if cfg is not None:
            out.update(eb_window=cfg.eb_window, eb_cold=cfg.eb_cold,
                       eb_early=cfg.eb_early)
        return out

    def _v05_exchange_step(self) -> None:
        """At a generation's start: the last exchange, if it has completed,
        is posted to the plugin (the submit hands it in), and this
        process's part, as of now, is posted for the next one. Neither
        waits."""
        x = self.v05_exchange
        if x is None:
            return
        x.poll()
        x.start()
        if x.error is not None:
            warnings.warn(f"v05: the exchange of the running fits failed "
                          f"({x.error}); this process decides under the "
                          "parts it has")
            x.error = None
        own = self.v05.eb_state().folded
        rem = x.others.folded if x.others is not None else 0
        self.v05_fit_log.append({"step": self.state.global_step,
                                 "own": own, "others": rem,
                                 "exchange": x.exchanges, "posted": x.posted})
        self._metrics["train"]["v05/fit_folded"].append(float(own + rem))

    def _v05_exchange_end(self) -> None:
        """Every process's exchanges in step at the end of train(): a
        process posts its next part only when its last exchange has
        completed, so one may have posted one more than another. The
        counts are compared (over the training's own process group), a
        process one behind posts once more, and all wait: nothing is left
        pending (a pending collective would hold the process at exit)."""
        x = self.v05_exchange
        if x is None:
            return
        posted = torch.tensor([x.posted], device=self.accelerator.device)
        most = int(self.accelerator.gather(posted).max().item())
        if x.posted < most:
            x.wait()
            x.start()
        x.wait()
