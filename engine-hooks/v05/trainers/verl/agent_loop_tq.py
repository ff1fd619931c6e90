# SPDX-License-Identifier: MIT
"""The default trainer's path (trainer.use_v1=True): V05AgentLoopManagerTQ
and its workers, each finished group's rows put into TransferQueue."""

import asyncio
import logging

from ..report import report
from .agent_loop import V05Core, actor_base, lazy_classes, row_fields, \
    sampling_params
from .rows import ROW_FIELDS, V05Uid

__all__ = ["V05AgentLoopManagerTQ", "V05AgentLoopWorkerTQ"]

log = logging.getLogger(__name__)


def _worker_tq_cls():
    from verl.experimental.agent_loop.agent_loop import get_trajectory_info
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    base = actor_base(AgentLoopWorkerTQ)

    class V05AgentLoopWorkerTQ(V05Core, base):
        """verl's AgentLoopWorkerTQ whose training chunks follow the plugin:
        a chunk's uids are tagged "running", its samples generated and
        scored as the plugin decides, and when every group is final each
        sample goes into TransferQueue (key {uid}_{sample}_{i}, uid a
        V05Uid) and its uid is tagged "finished"; on an error the plugin's
        batch is cancelled and the uids are tagged "failure"."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._v05_init()
            self._v05_live = set()  # uids whose samples wait for their group

        async def generate_sequences(self, batch):
            from tensordict import NonTensorData, NonTensorStack
            import torch

            if "validate" in batch and bool(batch["validate"]):
                return await super().generate_sequences(batch)
            batch.pop("validate", None)
            if "agent_name" not in batch:
                batch["agent_name"] = NonTensorData(
                    self.config.actor_rollout_ref.rollout.agent.default_agent_loop)
            trajectories = await get_trajectory_info(
                batch["global_steps"], batch["index"], False)
            prompts = []
            for i in range(len(batch)):
                p = {}
                for k, v in batch.items():
                    if isinstance(v, torch.Tensor):
                        p[k] = v[i]
                    elif isinstance(v, NonTensorStack):
                        p[k] = v[i].data
                    elif isinstance(v, NonTensorData):
                        p[k] = v.data
                prompts.append(p)
            items = self._v05_items(
                prompts, sampling_params(self.config.actor_rollout_ref.rollout),
                trajectories)
            step = batch["global_steps"]
            task = asyncio.create_task(self._v05_chunk(
                items, int(getattr(step, "data", step))))
            self.background_tasks.add(task)
            task.add_done_callback(self.background_tasks.discard)

        async def v05_drain(self):
            """Wait for the chunks in flight (a test's synchronisation
            point; the trainer itself waits on TransferQueue's tags)."""
            while self.background_tasks:
                await asyncio.gather(*list(self.background_tasks),
                                     return_exceptions=True)

        async def _v05_chunk(self, items, step):
            import transfer_queue as tq

            uids = [uid for uid, _, _ in items]
            for uid in uids:
                await tq.async_kv_put(key=uid, partition_id="train",
                                      tag={"status": "running"})
            self._v05_live.update(uids)
            try:
                results = await self._v05_run(items, step)
                for uid, (_, _, kwargs), _ in items:
                    res = results.get(uid)  # None: skipped (greso, v05_skip)
                    good = self.v05_informative(res)
                    if good:
                        for s in res.group.kept:  # samples trained on
                            f = row_fields(res, s)
                            tagged = V05Uid(uid, *(f[k] for k in ROW_FIELDS))
                            await base._agent_loop_postprocess(
                                self, res.outputs[s], False,
                                **dict(kwargs, uid=tagged, session_id=s, **f))
                    # Under algorithm.v05_fill, a prompt that gives no
                    # informative group is a failure verl's replay buffer
                    # refills (sync_refill_failed_groups).
                    status = "failure" if self._v05_fill is not None and \
                        not good else "finished"
                    await tq.async_kv_put(key=uid, partition_id="train",
                                          tag={"status": status})
            except BaseException as e:
                # verl's failure path: the uids tagged "failure" with no
                # rows, which the v1 trainer's replay buffer refills
                # (trainer.v1.sampler.sync_refill_failed_groups, v05's
                # default) or trains without. A cancellation too: a uid
                # left "running" would stall the step for good.
                log.error("v05: rollout of a chunk of %d prompts failed "
                          "(%s: %s); its batch is cancelled and its uids "
                          "tagged failure", len(uids), type(e).__name__, e,
                          exc_info=not isinstance(e, asyncio.CancelledError))
                report(self._v05_report, {
                    "kind": "failed", "worker": self._v05_index,
                    "step": step, "uids": uids,
                    "error": f"{type(e).__name__}: {e}"})
                for uid in uids:
                    await tq.async_kv_put(key=uid, partition_id="train",
                                          tag={"status": "failure"})
                if not isinstance(e, Exception):
                    raise
            finally:
                self._v05_live.difference_update(uids)

        async def _agent_loop_postprocess(self, output, validate, **kwargs):
            # A v05 sample: scored now (its reward drives the plugin), put
            # into TransferQueue once its group is final (with its numbers).
            if not validate and kwargs.get("uid") in self._v05_live:
                outputs = output if isinstance(output, list) else [output]
                await self._compute_score(outputs, kwargs=kwargs)
                return outputs
            return await base._agent_loop_postprocess(self, output, validate,
                                                      **kwargs)

    V05AgentLoopWorkerTQ.__module__ = __name__
    V05AgentLoopWorkerTQ.__qualname__ = "V05AgentLoopWorkerTQ"
    return V05AgentLoopWorkerTQ


def _manager_tq_cls():
    import ray
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

    from .manager import V05ManagerMixin

    class V05AgentLoopManagerTQ(V05ManagerMixin, AgentLoopManagerTQ):
        """actor_rollout_ref.rollout.agent.agent_loop_manager_class=
        v05.verl_rollout.V05AgentLoopManagerTQ (the default trainer,
        trainer.use_v1=True)."""

        def __init__(self, *args, **kwargs):
            # After super(): AgentLoopManagerTQ.__init__ sets its own
            # worker class; the workers are made later, by create().
            super().__init__(*args, **kwargs)
            self.agent_loop_workers_class = ray.remote(
                __getattr__("V05AgentLoopWorkerTQ"))


        def generate_sequences(self, prompts):
            # A step boundary (or a refill): every worker's part of the
            # running fit merged into every other's first.
            if not ("validate" in prompts and bool(prompts["validate"])):
                self._v05_exchange()
            return super().generate_sequences(prompts)

    V05AgentLoopManagerTQ.__module__ = __name__
    V05AgentLoopManagerTQ.__qualname__ = "V05AgentLoopManagerTQ"
    return V05AgentLoopManagerTQ


__getattr__ = lazy_classes(globals(), {"V05AgentLoopWorkerTQ": _worker_tq_cls,
                                       "V05AgentLoopManagerTQ": _manager_tq_cls})
