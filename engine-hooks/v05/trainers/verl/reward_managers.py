# SPDX-License-Identifier: MIT
"""verl's reward managers "v05" (the reward loop's and the legacy
registry's): score as verl does, and push each v05 row's reward into this
host's segment the moment it exists."""

import collections
import logging
import os
from typing import Dict, Optional

from ...core import _checks
from ...core.writer import RewardWriter
from .config import SCORE_RANGE, cfg_get, score_range, score_to_reward, \
    segment_of

__all__ = ["reward_loop_manager_cls", "legacy_reward_manager_cls",
           "REWARD_MANAGER_NAME"]

log = logging.getLogger(__name__)

REWARD_MANAGER_NAME = "v05"


class _Writers:
    """One reward lane per process and segment, opened on first push."""

    def __init__(self):
        self.by_segment: Dict[str, Optional[RewardWriter]] = {}
        self.pid = os.getpid()

    def get(self, segment) -> Optional[RewardWriter]:
        if os.getpid() != self.pid:
            self.__init__()
        if segment not in self.by_segment:
            try:
                self.by_segment[segment] = RewardWriter.attach(segment)
            except OSError as e:
                # Not on this host: the rollout side pushes the score it
                # gets back (reward_extra_info["v05_pushed"] is False).
                log.info("v05: segment %s not on this host (%s); rewards "
                         "go back to the rollout", segment, e)
                self.by_segment[segment] = None
        return self.by_segment[segment]


_writers = _Writers()


def _push(segment, nt, i, reward) -> bool:
    """Push row i's reward if the row is a v05 sample and the segment is on
    this host. Rows without v05_sample (validation) are only scored. A v05
    row carries v05_gen too (the gen of the decision that issued it: the
    prompt's instance); one without it is refused, not guessed."""
    if segment is None or "v05_sample" not in nt or "uid" not in nt:
        return False
    if "v05_gen" not in nt:
        raise ValueError("v05: a row with v05_sample but no v05_gen (the "
                         "issuing decision's gen); the rollout side must "
                         "put both into non_tensor_batch")
    w = _writers.get(segment)
    if w is None:
        return False
    w.push(str(nt["uid"][i]), int(nt["v05_sample"][i]), reward,
           gen=int(nt["v05_gen"][i]))
    return True


def _row_reward(nt, i, score, to_reward):
    """Row i's score as a v05 reward. For a v05 row (one the rollout side
    tagged with v05_sample) it is checked: a score that is NaN, infinite or
    outside the configured range raises, naming the row's uid and sample,
    and so does a to_reward result outside [-1, 1]. Other rows (validation)
    are not v05's: NaN, neither pushed nor used."""
    if "v05_sample" not in nt or "uid" not in nt:
        return float("nan")
    what = (f"verl score of uid {str(nt['uid'][i])!r} sample "
            f"{int(nt['v05_sample'][i])}")
    return _checks.unit_interval(what + " as a v05 reward",
                                 to_reward(score, what))


_classes = {}


def reward_loop_manager_cls():
    """The reward-loop manager class (a NaiveRewardManager that also pushes
    each score to the plugin the moment it exists)."""
    if "loop" in _classes:
        return _classes["loop"]
    from verl.experimental.reward_loop.reward_manager.naive import \
        NaiveRewardManager

    class V05RewardLoopManager(NaiveRewardManager):
        """reward.reward_manager.name=v05. Scores one row as verl's naive
        manager does; for a v05 row (non_tensor_batch has uid and
        v05_sample) pushes score_to_reward(score) into this host's segment
        (algorithm.v05_score_range, default [0, 1], is the scores' range; a
        score outside it, NaN or infinite raises, naming the row).
        reward_extra_info gets v05_reward (NaN for a row that is not v05's)
        and v05_pushed (False: the segment is elsewhere, the rollout side
        pushes)."""

        def __init__(self, config, tokenizer, compute_score,
                     reward_router_address=None, reward_model_tokenizer=None,
                     **kwargs):
            super().__init__(config, tokenizer, compute_score,
                             reward_router_address=reward_router_address,
                             reward_model_tokenizer=reward_model_tokenizer)
            algo = cfg_get(config, "algorithm")
            self.segment = segment_of(algo, required=False)
            rng = score_range(algo)
            self.to_reward = lambda s, what: score_to_reward(s, rng, what=what)

        async def run_single(self, data):
            result = await super().run_single(data)
            last = len(data) - 1  # naive scores the last row
            reward = _row_reward(data.non_tensor_batch, last,
                                 result["reward_score"], self.to_reward)
            pushed = _push(self.segment, data.non_tensor_batch, last, reward)
            result["reward_extra_info"]["v05_reward"] = reward
            result["reward_extra_info"]["v05_pushed"] = pushed
            return result

    _classes["loop"] = V05RewardLoopManager
    return V05RewardLoopManager


def legacy_reward_manager_cls():
    """The legacy manager class (verl.workers.reward_manager)."""
    if "legacy" in _classes:
        return _classes["legacy"]
    import torch
    from verl.workers.reward_manager.abstract import AbstractRewardManager

    class V05RewardManager(AbstractRewardManager):
        """reward_model.reward_manager=v05 in the legacy path: scores each
        row with compute_score (verl's default_compute_score if None),
        pushes v05 rows' rewards into this host's segment, returns the
        token-level reward tensor (score at the last valid token). Scores
        map onto rewards from score_range (default [0, 1]), or through
        to_reward(score) -> reward on [-1, 1]; either way a bad one raises,
        naming the row's uid and sample."""

        def __init__(self, tokenizer, num_examine=0, compute_score=None,
                     reward_fn_key="data_source", segment=None,
                     to_reward=None, score_range=SCORE_RANGE, **kwargs):
            if compute_score is None:
                from verl.utils.reward_score import default_compute_score
                compute_score = default_compute_score
            self.tokenizer = tokenizer
            self.num_examine = num_examine
            self.compute_score = compute_score
            self.reward_fn_key = reward_fn_key
            rng = tuple(score_range)
            self.to_reward = (
                (lambda s, what: score_to_reward(s, rng, what=what))
                if to_reward is None else (lambda s, what: to_reward(s)))
            self.segment = segment or segment_of(None, required=False)

        def __call__(self, data, return_dict=False):
            pre = self._extract_reward_from_rm_scores(data, return_dict)
            if pre is not None:  # the reward loop scored (and pushed) already
                return pre
            prompts = data.batch["prompts"]
            responses = data.batch["responses"]
            mask = data.batch["attention_mask"]
            nt = data.non_tensor_batch
            plen = prompts.shape[-1]
            reward = torch.zeros_like(responses, dtype=torch.float32)
            extra = collections.defaultdict(list)
            for i in range(responses.shape[0]):
                n_resp = int(mask[i, plen:].sum())
                text = self.tokenizer.decode(responses[i, :n_resp],
                                             skip_special_tokens=True)
                info = nt["extra_info"][i] if "extra_info" in nt else None
                result = self.compute_score(
                    data_source=nt[self.reward_fn_key][i], solution_str=text,
                    ground_truth=nt["reward_model"][i]["ground_truth"],
                    extra_info=info)
                score = result["score"] if isinstance(result, dict) else result
                if isinstance(result, dict):
                    for key, v in result.items():
                        extra[key].append(v)
                if n_resp > 0:
                    reward[i, n_resp - 1] = float(score)
                r = _row_reward(nt, i, score, self.to_reward)
                extra["v05_reward"].append(r)
                # Pushed as soon as it exists: the plugin may finish this
                # group (and decide) before the rest is scored.
                extra["v05_pushed"].append(_push(self.segment, nt, i, r))
            if return_dict:
                return {"reward_tensor": reward,
                        "reward_extra_info": dict(extra)}
            return reward

    _classes["legacy"] = V05RewardManager
    return V05RewardManager
