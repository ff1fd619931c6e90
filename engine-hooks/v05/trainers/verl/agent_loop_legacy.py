# SPDX-License-Identifier: MIT
"""The legacy trainer's path (trainer.use_v1=False): V05AgentLoopManager and
its workers, generate_sequences(DataProto) -> DataProto with one row per
generated sample, padded with masked rows."""

import asyncio

import numpy as np

from .agent_loop import (V05Core, lazy_classes, row_fields, row_multiple,
                         sampling_params)
from .padding import PAD_FIELD, pad_rows
from .rows import ROW_FIELDS, tag_rows

__all__ = ["V05AgentLoopManager", "V05AgentLoopWorker"]


def _worker_cls():
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    class V05AgentLoopWorker(V05Core, AgentLoopWorker):
        """verl's AgentLoopWorker whose training chunks follow the plugin."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._v05_init()

        async def generate_sequences(self, batch):
            if batch.meta_info.get("validate", False):
                return await super().generate_sequences(batch)
            from verl.experimental.agent_loop.agent_loop import \
                get_trajectory_info

            nt = batch.non_tensor_batch
            if "agent_name" not in nt:
                nt["agent_name"] = np.array(
                    [self.rollout_config.agent.default_agent_loop] * len(batch),
                    dtype=object)
            index = nt["index"] if "index" in nt else np.arange(len(batch))
            trajectories = await get_trajectory_info(
                batch.meta_info.get("global_steps", -1), index.tolist(), False)
            prompts = [{k: v[i] for k, v in nt.items()}
                       for i in range(len(batch))]
            items = self._v05_items(prompts, sampling_params(self.rollout_config),
                                    trajectories)
            results = await self._v05_run(
                items, batch.meta_info.get("global_steps", -1))
            return self._v05_batch(items, results, batch.meta_info)

        def _v05_batch(self, items, results, meta_info):
            """One row per sample trained on of each final group (all k but
            under reinforce-ada), in (prompt, sample) order, with the
            prompt's fields and the group's numbers."""
            outputs, cols = [], {}
            for uid, (_, _, kwargs), _ in items:
                res = results.get(uid)
                # Skipped (v05_history greso, v05_skip) or no signal (mode
                # dapo; under v05_fill, not informative): no rows (the
                # legacy trainer refills nothing: its step is smaller).
                if not self.v05_informative(res):
                    continue
                for s in res.group.kept:
                    outputs.append(res.outputs[s])
                    row = dict(kwargs, uid=uid, **row_fields(res, s))
                    for key, v in row.items():
                        cols.setdefault(key, []).append(v)
            if not outputs:
                raise RuntimeError("v05: every group of the chunk was dropped")
            data = self._postprocess(outputs, input_non_tensor_batch=None,
                                     validate=False)
            for key, vals in cols.items():
                if key in data.non_tensor_batch and key != "uid" and \
                        key not in ROW_FIELDS:
                    continue  # the agent loop's own field wins
                # The group's numbers always win: the "v05" reward manager
                # also reports a v05_reward (its own score) per row.
                if key in ("v05_sample", "v05_k", "v05_gen"):
                    col = np.asarray(vals, dtype=np.int64)
                elif key == "v05_keep":  # all 64 bits (k = 64 keeps all)
                    col = np.asarray(vals, dtype=np.uint64)
                elif key in ROW_FIELDS:
                    col = np.asarray(vals, dtype=np.float64)
                else:
                    col = np.empty(len(vals), dtype=object)
                    col[:] = vals
                data.non_tensor_batch[key] = col
            data.non_tensor_batch[PAD_FIELD] = np.zeros(len(data), dtype=bool)
            tag_rows(data)
            data.meta_info.update({k: v for k, v in meta_info.items()
                                   if k not in data.meta_info})
            return data

    V05AgentLoopWorker.__module__ = __name__
    V05AgentLoopWorker.__qualname__ = "V05AgentLoopWorker"
    return V05AgentLoopWorker


def _manager_cls():
    import ray
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.utils.ray_utils import auto_await

    from .manager import V05ManagerMixin

    class V05AgentLoopManager(V05ManagerMixin, AgentLoopManager):
        """actor_rollout_ref.rollout.agent.agent_loop_manager_class=
        v05.verl_rollout.V05AgentLoopManager (trainer.use_v1=False).
        generate_sequences returns one row per generated sample (each
        prompt's k from the plugin), padded with masked rows to a multiple
        of row_multiple(config)."""

        def __init__(self, *args, **kwargs):
            self.agent_loop_workers_class = ray.remote(
                __getattr__("V05AgentLoopWorker"))
            super().__init__(*args, **kwargs)
            self.v05_row_multiple = row_multiple(self.config)


        @auto_await
        async def generate_sequences(self, prompts):
            if prompts.meta_info.get("validate", False):
                return await super().generate_sequences(prompts)
            self._v05_exchange()  # a step boundary: the fits merged
            if "priority" not in prompts.non_tensor_batch:
                prompts.non_tensor_batch["priority"] = np.arange(
                    len(prompts), dtype=np.int64)
            chunks = prompts.chunk(len(self.agent_loop_workers))
            outputs = await asyncio.gather(*[
                w.generate_sequences.remote(c)
                for w, c in zip(self.agent_loop_workers, chunks, strict=True)])
            output = DataProto.concat(outputs)
            metrics = [o.meta_info.pop("metrics") for o in outputs]
            timing = self._performance_metrics(metrics, output)
            output.meta_info = {"timing": timing, **outputs[0].meta_info}
            n_rows = len(output)
            output = pad_rows(output, self.v05_row_multiple,
                              self._pad_token_id())
            output.meta_info["v05_rows"] = n_rows
            output.meta_info["v05_padding_rows"] = len(output) - n_rows
            return output

        def _pad_token_id(self) -> int:
            from verl.utils import hf_tokenizer
            if not hasattr(self, "_v05_pad_id"):
                tok = hf_tokenizer(self.model_config.get("tokenizer_path") or
                                   self.model_config.path)
                pid = tok.pad_token_id
                self._v05_pad_id = int(pid if pid is not None else
                                       (tok.eos_token_id or 0))
            return self._v05_pad_id

    V05AgentLoopManager.__module__ = __name__
    V05AgentLoopManager.__qualname__ = "V05AgentLoopManager"
    return V05AgentLoopManager


__getattr__ = lazy_classes(globals(), {"V05AgentLoopWorker": _worker_cls,
                                       "V05AgentLoopManager": _manager_cls})
