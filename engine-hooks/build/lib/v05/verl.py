# SPDX-License-Identifier: MIT
"""verl adapter: an advantage estimator and a reward manager.

Targets (verl main, read in verl/trainer/ppo/core_algos.py,
verl/trainer/ppo/ray_trainer.py and verl/workers/reward_manager/):

* ``core_algos.register_adv_est(name)`` registers an estimator; for a
  registered name, ``compute_advantage`` calls it as
  ``fn(token_level_rewards=..., response_mask=..., config=..., index=uids
  [, reward_baselines=...])`` and takes ``(advantages, returns)``, each
  (batch, response_length).
* ``reward_manager.registry.register(name)`` registers a reward manager
  class, built as ``cls(tokenizer, num_examine, compute_score=None,
  reward_fn_key="data_source", **kwargs)`` and called as
  ``manager(data, return_dict=False)`` on a ``DataProto`` (``batch``:
  "prompts", "responses", "attention_mask"; ``non_tensor_batch``:
  "reward_model" {"ground_truth"}, the data-source key, "extra_info",
  "uid"); it returns the token-level reward tensor (the score at the last
  valid response token).

With ``algorithm.adv_estimator=v05`` and ``reward_model.reward_manager=v05``:
the rollout (v05.vllm / v05.sglang) orders each uid's rows by sample index
and adds ``non_tensor_batch["v05_sample"]``; the reward manager pushes every
score the moment it is computed; the estimator reads each group's
advantages from the segment (zero copy, through a Reader in the trainer's
process) and hands the slots back.

Not run against a real verl here: tests/python/test_adapters.py installs a
stand-in ``verl`` with these functions and drives both classes through the
call signatures above.
"""

import os
import time
from collections import defaultdict
from typing import Callable, Optional

import numpy as np

from .writer import Reader, RewardWriter

__all__ = ["compute_v05_advantage", "V05RewardManager", "register_with_verl",
           "segment_of", "score_to_reward"]

ESTIMATOR_NAME = "v05"
REWARD_MANAGER_NAME = "v05"


def segment_of(config=None) -> str:
    """The segment to use: config["v05_segment"] (verl's algorithm config),
    else $V05_SEGMENT."""
    name = None
    if config is not None:
        try:
            name = config.get("v05_segment")
        except AttributeError:
            name = getattr(config, "v05_segment", None)
    name = name or os.environ.get("V05_SEGMENT")
    if not name:
        raise ValueError("v05: no segment; set algorithm.v05_segment or "
                         "$V05_SEGMENT")
    return name


def score_to_reward(score: float) -> float:
    """verl scores are usually 0/1 (or already +-1); v05 wants [-1, 1]."""
    s = float(score)
    if 0.0 <= s <= 1.0:
        return 2.0 * s - 1.0
    return max(-1.0, min(1.0, s))


class _GroupSource:
    """Final groups by uid, from the segment's completion ring."""

    _by_segment = {}

    def __init__(self, name: str):
        self.reader = Reader.open(name)
        self.groups = {}

    @classmethod
    def get(cls, name: str) -> "_GroupSource":
        src = cls._by_segment.get(name)
        if src is None:
            src = cls._by_segment[name] = cls(name)
        return src

    def group(self, uid: str, timeout: float):
        deadline = time.monotonic() + timeout
        while uid not in self.groups:
            g = self.reader.next()
            if g is not None:
                self.groups[g.uid] = g
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"v05: no final group for uid {uid!r} "
                                   f"after {timeout} s")
            time.sleep(0.001)
        return self.groups[uid]

    def done(self, uid: str):
        g = self.groups.pop(uid, None)
        if g is not None:
            self.reader.release(g)


def compute_v05_advantage(token_level_rewards, response_mask, index=None,
                          config=None, timeout: float = 60.0, **kwargs):
    """verl estimator: each row's advantage is its group's, read from the
    plugin's slot. Rows of a uid are its samples in sample order (the v05
    rollout builds them so); their count must be the group's k."""
    import torch

    if index is None:
        raise ValueError("v05 estimator needs the uid index (non_tensor_batch['uid'])")
    src = _GroupSource.get(segment_of(config))
    scores = token_level_rewards.sum(dim=-1)
    adv = torch.zeros_like(scores)
    seen = defaultdict(int)
    for i, uid in enumerate(index):
        uid = str(uid)
        g = src.group(uid, timeout)
        j = seen[uid]
        seen[uid] += 1
        if j >= g.k:
            raise ValueError(f"v05: uid {uid!r} has more rows than its "
                             f"group's k = {g.k}")
        adv[i] = float(g.advantages[j])
    for uid, n in seen.items():
        g = src.groups[uid]
        if n != g.k:
            raise ValueError(f"v05: uid {uid!r} has {n} rows, its group "
                             f"has k = {g.k}")
        src.done(uid)
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


class V05RewardManager:
    """Scores each response with `compute_score` and pushes the reward to
    the plugin at once, keyed by (uid, v05_sample). Returns the token-level
    reward tensor as verl expects."""

    def __init__(self, tokenizer, num_examine: int = 0,
                 compute_score: Optional[Callable] = None,
                 reward_fn_key: str = "data_source", segment: str = None,
                 to_reward: Callable[[float], float] = score_to_reward,
                 **kwargs):
        if compute_score is None:
            raise ValueError("v05 reward manager: pass compute_score")
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.to_reward = to_reward
        self.writer = RewardWriter.attach(segment or segment_of(None))

    def __call__(self, data, return_dict: bool = False):
        import torch

        prompts = data.batch["prompts"]
        responses = data.batch["responses"]
        mask = data.batch["attention_mask"]
        nt = data.non_tensor_batch
        plen = prompts.shape[-1]
        reward = torch.zeros_like(responses, dtype=torch.float32)
        extra = defaultdict(list)
        for i in range(responses.shape[0]):
            n_resp = int(mask[i, plen:].sum())
            text = self.tokenizer.decode(responses[i, :n_resp])
            info = nt["extra_info"][i] if "extra_info" in nt else None
            result = self.compute_score(
                data_source=nt[self.reward_fn_key][i], solution_str=text,
                ground_truth=nt["reward_model"][i]["ground_truth"],
                extra_info=info)
            score = result["score"] if isinstance(result, dict) else result
            if isinstance(result, dict):
                for k, v in result.items():
                    extra[k].append(v)
            if n_resp > 0:
                reward[i, n_resp - 1] = float(score)
            # Pushed as soon as it exists: the plugin may finish this
            # group (and decide) before the rest of the batch is scored.
            self.writer.push(str(nt["uid"][i]), int(nt["v05_sample"][i]),
                             self.to_reward(score))
        if return_dict:
            return {"reward_tensor": reward, "reward_extra_info": dict(extra)}
        return reward


def register_with_verl() -> None:
    """Register the estimator and the reward manager under "v05" (call in
    the trainer's driver and reward processes, e.g. from a verl plugin)."""
    from verl.trainer.ppo.core_algos import register_adv_est
    from verl.workers.reward_manager.registry import register

    register_adv_est(ESTIMATOR_NAME)(compute_v05_advantage)
    register(REWARD_MANAGER_NAME)(V05RewardManager)


def rows_in_sample_order(uids, samples) -> np.ndarray:
    """A permutation putting each uid's rows in sample order (for building
    the batch the estimator expects)."""
    uids = np.asarray(uids)
    samples = np.asarray(samples)
    return np.lexsort((samples, uids))
