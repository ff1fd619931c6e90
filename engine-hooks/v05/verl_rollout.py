# SPDX-License-Identifier: MIT
"""v05's rollout component for verl 0.9.1's agent-loop architecture.

Read against verl 0.9.1 from PyPI (requirements/trainers.txt):

* Both trainers build their rollout with
  ``load_class_from_fqn(actor_rollout_ref.rollout.agent.agent_loop_manager_class)``
  and call ``cls.create(config=, llm_client=, teacher_client=,
  reward_loop_worker_handles=)``. ``llm_client`` is verl's
  ``LLMServerClient`` (its ``generate(request_id, prompt_ids=,
  sampling_params=)`` picks a server through the global load balancer and
  awaits the server actor's ``generate``); the reward loop workers score
  each trajectory as it finishes (``_compute_score``).
* The default trainer (``trainer.use_v1=True``, main_ppo's ``TaskRunnerV1``)
  uses ``AgentLoopManagerTQ``: ``generate_sequences(TensorDict)`` hands
  chunks to ``AgentLoopWorkerTQ`` actors and returns at once; each worker
  puts every finished trajectory into TransferQueue under
  ``{uid}_{session}_{i}`` and tags the prompt's uid ``finished``; the
  trainer takes every key of a finished uid, so a prompt may have any
  number of rows, and pads the batch itself (``_balance_batch``:
  ``pad<hex>`` rows up to ``lcm(dp, ppo_mini_batch_size * rollout.n)``).
  ``V05AgentLoopManagerTQ`` is that path.
* The legacy trainer (``trainer.use_v1=False``, ``RayPPOTrainer``) uses
  ``AgentLoopManager``: ``generate_sequences(DataProto) -> DataProto``.
  ``V05AgentLoopManager`` returns one row per generated sample, padded to a
  multiple with masked rows. ``RayPPOTrainer.fit`` itself then does
  ``batch.repeat(rollout.n).union(output)``, which needs exactly
  ``prompts * n`` rows: the returned batch is for a driver loop that takes
  it as it is (see docs/TRAINERS.md).

What the workers do with a training chunk: submit its prompts to their own
plugin as one batch and run the plugin's decisions with
``v05.rollout.GroupRollout``. A "sample" decision's sample ``s`` is one
``_run_agent_loop(..., session_id=s)`` (the configured agent loop, one n=1
request through ``LLMServerClient``); its reward is the reward loop's score
(``score_to_reward``), which GroupRollout pushes. When every group is final
its rows carry the group's numbers (``v05.verl.tag_rows``: the uid is a
``V05Uid``), so the "v05" estimator finds each row's advantage on any host
without the segment. On any error GroupRollout cancels the outstanding
agent-loop tasks and the batch in the plugin; the worker then raises the
error (legacy) or tags the chunk's uids ``failure`` (TransferQueue).
Requests already sent run to their end in the server: ``LLMServerClient``
awaits a Ray call, and cancelling that await does not cancel the call.
Validation chunks keep verl's own fixed-n path.

Configuration (added with ``+``; verl's dataclasses refuse unknown keys
under ``actor_rollout_ref.rollout``, so they live in ``algorithm``, read
from the raw config): ``algorithm.v05_segment`` (the prefix of the workers'
segment names, default "v05"), ``algorithm.v05_plugin`` (a dict of
``v05.Plugin.create`` parameters), ``algorithm.v05_row_multiple`` (legacy
manager: pad rows to a multiple of this; default lcm(32, the actor's world
size ``trainer.n_gpus_per_node * trainer.nnodes``)).
"""

import asyncio
import atexit
import logging
import math
import os
import uuid
import weakref
from typing import Any, Dict, List, Optional

import numpy as np

from .plugin import Plugin
from .rollout import GroupRollout
from .verl import ROW_FIELDS, V05Uid, _cfg_get, score_to_reward, tag_rows

__all__ = ["V05AgentLoopManager", "V05AgentLoopWorker",
           "V05AgentLoopManagerTQ", "V05AgentLoopWorkerTQ", "pad_rows",
           "row_multiple", "plugin_params", "PAD_FIELD"]

log = logging.getLogger(__name__)

# Plugin.create parameters a config may set (algorithm.v05_plugin).
PLUGIN_KEYS = ("cost", "k_init", "k_step", "k_max", "halt_fraction",
               "pad_multiple", "mode", "schedule", "max_prompts",
               "max_producers", "lane_capacity", "max_batches",
               "stream_deadline_us", "sigma", "paper")
# non_tensor_batch field: True on the padding rows the manager appends.
PAD_FIELD = "v05_padding"
DEFAULT_ROW_MULTIPLE = 32  # the paper's pad


def plugin_params(config) -> Dict[str, Any]:
    """Plugin.create keyword arguments from algorithm.v05_plugin."""
    algo = _cfg_get(config, "algorithm")
    raw = _cfg_get(algo, "v05_plugin", {}) or {}
    params = dict(raw.items()) if hasattr(raw, "items") else {}
    unknown = sorted(set(params) - set(PLUGIN_KEYS))
    if unknown:
        raise ValueError(f"v05: algorithm.v05_plugin has unknown keys {unknown}; "
                         f"known: {PLUGIN_KEYS}")
    return params


def row_multiple(config) -> int:
    """What the legacy manager pads its rows to: algorithm.v05_row_multiple,
    else lcm(32, actor world size). The data-parallel size divides the world
    size, so the default splits evenly over the actor's ranks."""
    algo = _cfg_get(config, "algorithm")
    m = _cfg_get(algo, "v05_row_multiple")
    if m is None:
        trainer = _cfg_get(config, "trainer")
        world = int(_cfg_get(trainer, "n_gpus_per_node", 1)) * \
            int(_cfg_get(trainer, "nnodes", 1))
        m = math.lcm(DEFAULT_ROW_MULTIPLE, max(world, 1))
    m = int(m)
    if m < 1:
        raise ValueError(f"v05: algorithm.v05_row_multiple must be >= 1, not {m}")
    return m


def pad_rows(data, multiple: int, pad_token_id: int = 0):
    """Append rows to `data` (a DataProto) until len(data) % multiple == 0.

    A padding row is a one-token prompt and a one-token response of
    `pad_token_id` (attended, so no model sees an empty sequence), with
    response_mask all zero (masked out of the loss, the entropy and the KL
    terms), zero rewards and log-probs, one fresh ``pad<hex>`` uid for all
    padding rows (not a v05 uid: v05_k 0, so the estimator gives them 0),
    and ``v05_padding`` True. Non-tensor fields are copied from row 0.
    Returns the padded DataProto (data itself when nothing was needed)."""
    import torch
    from verl import DataProto

    n = len(data)
    if n == 0:
        raise ValueError("v05: no rows to pad")
    nt = data.non_tensor_batch
    if PAD_FIELD not in nt:
        nt[PAD_FIELD] = np.zeros(n, dtype=bool)
    extra = (-n) % multiple
    if extra == 0:
        return data
    tmpl = data.batch[:1]
    pad = {}
    plen = tmpl["prompts"].shape[-1]
    for key, t in tmpl.items():
        if key == "position_ids":
            continue
        if key in ("prompts", "responses", "input_ids"):
            pad[key] = torch.full((extra,) + tuple(t.shape[1:]), pad_token_id,
                                  dtype=t.dtype)
        else:  # masks, scores, log-probs, teacher fields: zero
            pad[key] = torch.zeros((extra,) + tuple(t.shape[1:]), dtype=t.dtype)
    attn = pad["attention_mask"]
    attn[:, plen - 1] = 1  # the prompt's last token (prompts are left-padded)
    attn[:, plen] = 1      # the response's first token (right-padded)
    if "position_ids" in tmpl.keys():
        t = tmpl["position_ids"]
        pos = torch.zeros((extra,) + tuple(t.shape[1:]), dtype=t.dtype)
        pos[..., plen] = 1  # positions 0, 1 (rope's extra dims alike)
        pad["position_ids"] = pos
    pad_uid = f"pad{uuid.uuid4().hex}"
    pad_nt = {}
    for key, v in nt.items():
        if key == "uid":
            col = np.array([pad_uid] * extra, dtype=object)
        elif key in ROW_FIELDS or key == "v05_gen":
            col = np.zeros(extra, dtype=v.dtype)
        elif key == PAD_FIELD:
            col = np.ones(extra, dtype=bool)
        else:
            col = np.empty(extra, dtype=v.dtype)
            for i in range(extra):
                col[i] = v[0]
        pad_nt[key] = col
    padding = DataProto.from_dict(tensors=pad, non_tensors=pad_nt,
                                  meta_info=dict(data.meta_info))
    out = DataProto.concat([data, padding])
    out.meta_info = data.meta_info
    return out


def _actor_base(cls):
    """The plain class behind a @ray.remote class (Ray refuses subclasses
    of actor classes; verl decorates AgentLoopWorkerTQ)."""
    meta = getattr(cls, "__ray_metadata__", None)
    return meta.modified_class.__ray_actor_class__ if meta is not None else cls


def _sampling_params(rollout_config) -> Dict[str, Any]:
    """The training sampling parameters, as verl's workers build them."""
    return dict(temperature=rollout_config.temperature,
                top_p=rollout_config.top_p, top_k=rollout_config.top_k,
                repetition_penalty=1.0,
                logprobs=rollout_config.calculate_log_probs)


def _score_of(out) -> float:
    final = out[-1] if isinstance(out, list) else out
    score = getattr(final, "reward_score", None)
    if score is None:
        raise RuntimeError(
            "v05: a trajectory came back without a reward score. v05 decides "
            "from each sample's reward during the rollout, so the reward "
            "loop must score in the agent loop (verl does when there is no "
            "reward model, or the reward model has its own resource pool: "
            "reward.reward_model.enable_resource_pool=True)")
    return score_to_reward(score)


class _V05Core:
    """The part both workers share: one plugin per worker process (its own
    segment, created on first use in the actor's event loop) and the
    GroupRollout that runs its decisions."""

    def _v05_init(self):
        algo = _cfg_get(self.config, "algorithm")
        self._v05_prefix = _cfg_get(algo, "v05_segment") or \
            os.environ.get("V05_SEGMENT") or "v05"
        self._v05_params = plugin_params(self.config)
        self.v05_plugin: Optional[Plugin] = None
        self._v05_driver: Optional[GroupRollout] = None
        self._v05_lock: Optional[asyncio.Lock] = None

    async def _v05_run(self, items):
        """One chunk through the plugin. A plugin has one driver, which runs
        one batch at a time: a chunk that comes while another runs (Ray
        runs an async actor's calls concurrently; the v1 trainer submits
        without waiting) waits for it."""
        if self._v05_lock is None:
            self._v05_lock = asyncio.Lock()
        async with self._v05_lock:
            return await self._v05_rollout().run(items)

    def _v05_rollout(self) -> GroupRollout:
        if self._v05_driver is None:
            # One segment per worker: several workers share a host, and a
            # segment has one owner. The rows carry their numbers, so the
            # trainer never needs to find it by name.
            name = f"{self._v05_prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.v05_plugin = Plugin.create(name, **self._v05_params)
            # Best effort for an orderly exit; a killed worker leaves its
            # segment (v05.unlink(name) removes it).
            atexit.register(_close_quietly, weakref.ref(self))
            self._v05_driver = GroupRollout(
                self.v05_plugin, self._v05_generate_one,
                score=lambda uid, s, out: _score_of(out), release=True)
        return self._v05_driver

    async def _v05_generate_one(self, prompt, uid, sample, batch):
        sampling_params, trajectory, kwargs = prompt
        trajectory = dict(trajectory, rollout_n=sample)
        return await self._run_agent_loop(dict(sampling_params), trajectory,
                                          trace=False, session_id=sample,
                                          **kwargs)

    def _v05_items(self, prompts: List[Dict[str, Any]], sampling_params,
                   trajectories) -> list:
        """(uid, (sampling params, trajectory, kwargs), prior) per prompt."""
        items, seen = [], set()
        for kwargs, traj in zip(prompts, trajectories):
            kwargs = dict(kwargs)
            prior = float(kwargs.pop("v05_prior", 0.0))
            kwargs.pop("__rollout_n__", None)
            kwargs.pop("__do_sample__", None)
            uid = str(kwargs["uid"])
            if uid in seen:
                raise ValueError(
                    f"v05: uid {uid!r} appears twice in a chunk: v05 decides "
                    "each prompt's number of samples, so set "
                    "actor_rollout_ref.rollout.n=1")
            seen.add(uid)
            kwargs["uid"] = uid
            items.append((uid, (sampling_params, traj, kwargs), prior))
        return items

    def v05_close(self):
        if self._v05_driver is not None:
            self._v05_driver.close()
            self._v05_driver = None
        if self.v05_plugin is not None:
            self.v05_plugin.close()
            self.v05_plugin = None

    def v05_stats(self) -> dict:
        """The plugin's counters (a test reads them through the actor)."""
        return {} if self.v05_plugin is None else self.v05_plugin.stats()


def _close_quietly(ref):
    worker = ref()
    if worker is not None:
        try:
            worker.v05_close()
        except Exception:  # exiting anyway
            pass


def _row_fields(res, s) -> Dict[str, Any]:
    g = res.group
    # v05_gen: the prompt instance, which a reward pushed for the row
    # (the "v05" reward manager, on the segment's host) must carry.
    return {"v05_sample": s, "v05_gen": res.decision.gen, "v05_k": g.k,
            "v05_baseline": g.baseline,
            "v05_sigma": g.sigma, "v05_reward": float(g.rewards[s]),
            "v05_advantage": float(g.advantages[s])}


# ---- the legacy path: generate_sequences(DataProto) -> DataProto ----------

def _worker_cls():
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    class V05AgentLoopWorker(_V05Core, AgentLoopWorker):
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
            items = self._v05_items(prompts, _sampling_params(self.rollout_config),
                                    trajectories)
            results = await self._v05_run(items)
            return self._v05_batch(items, results, batch.meta_info)

        def _v05_batch(self, items, results, meta_info):
            """One row per sample of each final group, in (prompt, sample)
            order, with the prompt's fields and the group's numbers."""
            outputs, cols = [], {}
            for uid, (_, _, kwargs), _ in items:
                res = results[uid]
                if res.dropped:  # no signal (mode dapo): no rows
                    continue
                for s in range(res.group.k):
                    outputs.append(res.outputs[s])
                    row = dict(kwargs, uid=uid, **_row_fields(res, s))
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

    class V05AgentLoopManager(AgentLoopManager):
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

        def v05_close(self):
            """Close every worker's plugin (removes their segments)."""
            ray.get([w.v05_close.remote() for w in self.agent_loop_workers])

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


# ---- the default (v1) path: rows into TransferQueue -------------------------

def _worker_tq_cls():
    from verl.experimental.agent_loop.agent_loop import get_trajectory_info
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    base = _actor_base(AgentLoopWorkerTQ)

    class V05AgentLoopWorkerTQ(_V05Core, base):
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
                prompts, _sampling_params(self.config.actor_rollout_ref.rollout),
                trajectories)
            task = asyncio.create_task(self._v05_chunk(items))
            self.background_tasks.add(task)
            task.add_done_callback(self.background_tasks.discard)

        async def v05_drain(self):
            """Wait for the chunks in flight (a test's synchronisation
            point; the trainer itself waits on TransferQueue's tags)."""
            while self.background_tasks:
                await asyncio.gather(*list(self.background_tasks),
                                     return_exceptions=True)

        async def _v05_chunk(self, items):
            import transfer_queue as tq

            uids = [uid for uid, _, _ in items]
            for uid in uids:
                await tq.async_kv_put(key=uid, partition_id="train",
                                      tag={"status": "running"})
            self._v05_live.update(uids)
            try:
                results = await self._v05_run(items)
                for uid, (_, _, kwargs), _ in items:
                    res = results[uid]
                    if not res.dropped:
                        for s in range(res.group.k):
                            f = _row_fields(res, s)
                            tagged = V05Uid(uid, *(f[k] for k in ROW_FIELDS))
                            await base._agent_loop_postprocess(
                                self, res.outputs[s], False,
                                **dict(kwargs, uid=tagged, session_id=s, **f))
                    await tq.async_kv_put(key=uid, partition_id="train",
                                          tag={"status": "finished"})
            except Exception:
                log.exception("v05: rollout of a chunk of %d prompts failed; "
                              "its batch is cancelled", len(uids))
                for uid in uids:
                    await tq.async_kv_put(key=uid, partition_id="train",
                                          tag={"status": "failure"})
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

    class V05AgentLoopManagerTQ(AgentLoopManagerTQ):
        """actor_rollout_ref.rollout.agent.agent_loop_manager_class=
        v05.verl_rollout.V05AgentLoopManagerTQ (the default trainer,
        trainer.use_v1=True)."""

        def __init__(self, *args, **kwargs):
            # After super(): AgentLoopManagerTQ.__init__ sets its own
            # worker class; the workers are made later, by create().
            super().__init__(*args, **kwargs)
            self.agent_loop_workers_class = ray.remote(
                __getattr__("V05AgentLoopWorkerTQ"))

        def v05_close(self):
            """Close every worker's plugin (removes their segments)."""
            ray.get([w.v05_close.remote() for w in self.agent_loop_workers])

    V05AgentLoopManagerTQ.__module__ = __name__
    V05AgentLoopManagerTQ.__qualname__ = "V05AgentLoopManagerTQ"
    return V05AgentLoopManagerTQ


# The classes need verl (and, for the TQ pair, transfer_queue) at import;
# load_class_from_fqn imports this module and takes the attribute.
_LAZY = {"V05AgentLoopWorker": _worker_cls,
         "V05AgentLoopManager": _manager_cls,
         "V05AgentLoopWorkerTQ": _worker_tq_cls,
         "V05AgentLoopManagerTQ": _manager_tq_cls}


def __getattr__(name):
    # Also called by name from the module's own code (a global lookup does
    # not reach a module __getattr__).
    if name in globals():
        return globals()[name]
    make = _LAZY.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = make()
    globals()[name] = cls
    return cls
