# SPDX-License-Identifier: MIT
"""verl adapter: an advantage estimator and reward managers, for verl 0.9.1.

Read against verl 0.9.1 from PyPI (requirements/trainers.txt):

* Estimator. ``verl.trainer.ppo.core_algos.register_adv_est(name)`` fills
  ``ADV_ESTIMATOR_REGISTRY``; for a name other than gae/grpo,
  ``ray_trainer.compute_advantage(data, adv_estimator, ..., config)`` calls
  ``get_adv_estimator_fn(name)(token_level_rewards=..., response_mask=...,
  config=algorithm config, index=non_tensor_batch["uid"]
  [, reward_baselines=batch["reward_baselines"]])`` and takes
  ``(advantages, returns)``. That is all a registered estimator sees: not
  the rest of ``non_tensor_batch``. Both trainers (the legacy
  ``RayPPOTrainer`` and the default ``trainer.use_v1=True`` one, whose
  ``_compute_advantage`` fetches only uid, response_mask, rm_scores and
  log-probs from TransferQueue) reorder rows first (``_balance_batch``),
  and the v1 trainer appends padding rows of a fresh ``pad<hex>`` uid.
* Reward loop (the default reward path): ``verl.experimental.reward_loop.
  reward_manager.register(name)`` fills ``REWARD_MANAGER``; a
  ``RewardLoopWorker`` (a Ray actor) builds the class with
  ``verl.trainer.ppo.reward.load_reward_manager(config, tokenizer,
  reward_router_address=..., reward_model_tokenizer=...)`` as
  ``cls(config=, tokenizer=, compute_score=, **kwargs)`` and awaits
  ``run_single(data)`` on one-row DataProtos, expecting
  ``{"reward_score": float, "reward_extra_info": dict}``. Selected by
  ``reward.reward_manager.name=v05`` (source "register").
* Legacy registry: ``verl.workers.reward_manager.register(name)``; classes
  built as ``cls(tokenizer, num_examine, compute_score, reward_fn_key,
  **kwargs)`` and called as ``manager(data, return_dict=False)``.
* ``VERL_USE_EXTERNAL_MODULES=v05.trainers.verl`` (or the older name
  ``v05.verl``), or the ``verl.plugins`` entry point: ``import verl``
  imports this module in every process (driver and Ray actors); importing
  it registers the estimator and both managers.

The rollout component (verl's agent-loop managers that follow the plugin)
is in ``agent_loop*.py`` beside this file: ``agent_loop_tq`` for the
default trainer, ``agent_loop_legacy`` for ``trainer.use_v1=False``, both
reachable from here by name (``v05.trainers.verl.V05AgentLoopManagerTQ``).

How a row finds its advantage, whatever the row order. The plugin's
advantage is a function of the sample's reward within its group
((r - baseline) / sigma; GRPO modes: (r - mean) / (std + eps), 0 for an
all-equal group), so each row's advantage comes from its own reward and its
group, never from its position. A group is found by uid, from (first hit):

1. the rows themselves: per-row numbers the rollout side recorded in
   ``non_tensor_batch`` (``ROW_FIELDS``: sample index, k, baseline, sigma,
   reward, advantage). They reach the estimator either as the
   ``non_tensor_batch=`` argument (callers of our own) or inside the uid
   itself: ``tag_rows(data)`` turns each uid into a ``V05Uid``, a ``str``
   equal to the plain uid that carries the numbers, so they travel through
   verl's ``compute_advantage`` (which passes ``index``), DataProto
   reorder/select/concat/chunk and Ray's pickling. This is the path for a
   trainer on another host than the segment: plain per-row numbers.
2. groups recorded in this process (``record_group``), and
3. the segment, when it is on this host: a ``Reader`` takes final groups
   off the completion ring (zero copy) and hands each slot back once its
   rows are computed (a plain copy is kept for later calls).

Every source is checked against the rows: the uid's row count is k, the
samples are 0..k-1 once each (when known), and each row's reward
(``score_to_reward`` of its token-level reward sum) is its sample's reward
in the group; a mismatch raises. Rows of uids no source knows (validation
batches, verl's padding rows, prompts v05 did not roll out) get verl's own
GRPO advantages (``core_algos.compute_grpo_outcome_advantage``, honouring
``norm_adv_by_std_in_grpo``); ``algorithm.v05_unknown=zero`` gives them 0
and ``=error`` raises instead. Padding rows have zero reward and get 0.
"""

import importlib.util
import os

from .config import main_ppo_overrides, score_to_reward, segment_of
from .estimator import ESTIMATOR_NAME, compute_v05_advantage, fallback_counts
from .groups import attach_reader, record_group
from .reward_managers import (REWARD_MANAGER_NAME, legacy_reward_manager_cls,
                              reward_loop_manager_cls)
from .rows import ROW_FIELDS, V05Uid, rows_in_sample_order, tag_rows

__all__ = ["compute_v05_advantage", "register_with_verl", "segment_of",
           "score_to_reward", "V05Uid", "tag_rows", "record_group",
           "ROW_FIELDS", "legacy_reward_manager_cls",
           "reward_loop_manager_cls", "rows_in_sample_order",
           "attach_reader", "fallback_counts", "main_ppo_overrides"]

# The rollout component's names (agent_loop_manager_class=
# v05.trainers.verl.V05AgentLoopManagerTQ), from the modules that define
# them, on first use: its classes subclass verl's agent loop, so building
# them needs verl and ray. Not in __all__, so a star import of this module
# stays possible without verl.
_ROLLOUT = {"V05AgentLoopManagerTQ": "agent_loop_tq",
            "V05AgentLoopWorkerTQ": "agent_loop_tq",
            "V05AgentLoopManager": "agent_loop_legacy",
            "V05AgentLoopWorker": "agent_loop_legacy",
            "pad_rows": "padding", "PAD_FIELD": "padding",
            "row_multiple": "agent_loop", "plugin_params": "agent_loop",
            "V05CheckpointCallback": "checkpoint",
            "reclaim_run": "run", "run_segments": "run"}


def __getattr__(name):
    mod = _ROLLOUT.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def register_with_verl() -> None:
    """Register the estimator and both reward managers under "v05" (done
    on import when verl is installed: VERL_USE_EXTERNAL_MODULES=v05.verl
    makes every verl process, Ray actors included, do it)."""
    from verl.experimental.reward_loop import reward_manager as loop_rm
    from verl.trainer.ppo.core_algos import register_adv_est
    from verl.workers import reward_manager as legacy_rm

    register_adv_est(ESTIMATOR_NAME)(compute_v05_advantage)
    loop_rm.register(REWARD_MANAGER_NAME)(reward_loop_manager_cls())
    legacy_rm.register(REWARD_MANAGER_NAME)(legacy_reward_manager_cls())


# VERL_USE_EXTERNAL_MODULES=v05.verl imports this module from verl's own
# __init__; register then (and on any import where verl is installed).
def _verl_installed() -> bool:
    try:
        return importlib.util.find_spec("verl") is not None
    except ValueError:  # a module without a spec (a test's stand-in)
        return False


if os.environ.get("V05_VERL_AUTOREGISTER", "1") != "0" and _verl_installed():
    register_with_verl()
