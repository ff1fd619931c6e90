# SPDX-License-Identifier: MIT
"""ROLL's rollout loop through v05's group route (docs/SLIME.md, "ROLL"):

    user_defined_rollout_loop_cls: v05.trainers.roll.V05RolloutLoop
    is_use_additional_prompts: true      (k differs from num_return_sequences)
    adv_estimator: reinforce             (gamma 1; norm_mean_type and
    norm_std_type null)                   norm_std_type null: no group norm)
    V05_ROLL_SERVERS=host:port,...       (environment of ROLL's scheduler)

Read against alibaba/ROLL 8eb27cc (docs/SLIME.md names each place). ROLL's
DynamicSamplingScheduler makes one instance of the class and awaits
``process_new_prompt(context)`` once per prompt as a task it may cancel.
Here each prompt becomes one ``POST /v05/group`` on one v05 server; each
sample comes back as ROLL's response (ROLL's own
``postprocess_output_data``, as its router client's answers do), is scored
by ROLL's reward worker (``context.compute_rewards``), put on [-1, 1]
(``V05_REWARD_RANGE``, default 0,1) and pushed back. At the final record
each kept response's ``response_level_rewards`` becomes v05's advantage
(ROLL's reward kept as ``v05_raw_reward``, with ``v05_advantage``,
``v05_baseline``, ``v05_k``): with ``adv_estimator: reinforce``, gamma 1
and no reward normalisation, ROLL's per-token advantage is that number on
every response token (``compute_reinforce_return``), unchanged. A group
v05 drops, or that the server ended otherwise, is returned as None (ROLL
drops the prompt and schedules another); a cancelled task closes the
group's stream, which aborts the group and its requests on the server.
Validation prompts go through ROLL's own loop.
"""

import copy
import logging
import uuid
from typing import Any, Dict, List, Optional

from ..servers.client import GroupFailed, V05Client
from .http_groups import (ConfigError, batch_rewards, pick_server,
                          reward_range, server_urls, stream_group, to_unit,
                          unit_prior)

__all__ = ["V05RolloutLoop", "check_pipeline_config", "with_v05s_numbers"]

log = logging.getLogger("v05.roll")

PRIOR_KEY = "v05_prior"  # a dataset column: the prompt's prior


def check_pipeline_config(cfg) -> None:
    """ROLL's settings v05's advantages need, or a ConfigError naming the
    one that would change or break them."""
    want = [("adv_estimator", "reinforce", "the advantage must be the "
             "response's reward on every token (grpo's group norm assumes "
             "num_return_sequences samples a prompt)"),
            ("norm_mean_type", None, "v05's advantage is centred already"),
            ("norm_std_type", None, "v05's advantage is scaled already"),
            ("is_use_additional_prompts", True, "ROLL accepts a prompt of "
             "other than num_return_sequences responses only with it"),
            ("whiten_advantages", False, "whitening rescales v05's "
             "advantages over the batch"),
            ("add_token_level_kl", False, "a KL term in the rewards changes "
             "v05's advantages")]
    for attr, value, why in want:
        got = getattr(cfg, attr, value)
        if got != value:
            raise ConfigError(f"{attr}: {got!r}, v05 needs {value!r}: {why}")
    gamma = getattr(cfg, "gamma", 1)
    if gamma != 1:
        raise ConfigError(f"gamma: {gamma!r}, v05 needs 1: the advantage is "
                          "carried unchanged to every response token")


class V05RolloutLoop:
    """ROLL's ``user_defined_rollout_loop_cls``."""

    def __init__(self):
        self.servers = server_urls(None, "V05_ROLL_SERVERS",
                                   "V05_ROLL_SERVERS")
        self.range = reward_range(None, "V05_REWARD_RANGE",
                                  "V05_REWARD_RANGE")
        self.batch_rewards = batch_rewards(None, "V05_ROLL_BATCH_REWARDS",
                                           "V05_ROLL_BATCH_REWARDS")
        self._clients: Dict[str, V05Client] = {}
        self._checked = False

    def _client(self, url: str) -> V05Client:
        # One httpx client per server, made on the scheduler's loop (the
        # one ROLL awaits process_new_prompt on) and kept for its life.
        if url not in self._clients:
            self._clients[url] = V05Client(url,
                                           batch_rewards=self.batch_rewards)
        return self._clients[url]

    async def process_new_prompt(self, context) -> Optional[List[Any]]:
        if context.is_val:
            from roll.distributed.scheduler.user_defined_rollout_loop import \
                UserDefinedRolloutLoop
            return await UserDefinedRolloutLoop().process_new_prompt(context)
        if not self._checked:
            check_pipeline_config(context.pipeline_config)
            self._checked = True
        req, domain = context.get_request_data(meta_info=context.meta_info)
        ids = _prompt_ids(req)
        uid = f"roll-{context.prompt_id}-{uuid.uuid4().hex[:8]}"
        prior = _prior(req, uid)
        gen = context.meta_info["generation_config"]
        client = self._client(pick_server(uid, self.servers))
        n = gen.get("num_return_sequences") or 1
        async with context.do_generate_and_reward(max_concurrency=n):
            return await _Group(self, context, req, domain, uid).run(
                client, ids, prior, _sampling(gen))


def _prompt_ids(req) -> List[int]:
    """The prompt's tokens: ROLL's request is one left-padded row."""
    ids, mask = req.batch["input_ids"], req.batch["attention_mask"]
    if ids.shape[0] != 1:
        raise ValueError(f"a ROLL request of {ids.shape[0]} rows; v05 runs "
                         "one prompt a group")
    return [int(t) for t, m in zip(ids[0].tolist(), mask[0].tolist()) if m]


def _prior(req, uid: str) -> float:
    col = req.non_tensor_batch.get(PRIOR_KEY) if hasattr(
        req.non_tensor_batch, "get") else None
    if col is None:
        return 0.0
    return unit_prior(float(col[0]), f"prompt {uid}: {PRIOR_KEY}")


def _sampling(gen: Dict[str, Any]) -> Dict[str, Any]:
    out = {"max_tokens": gen.get("max_new_tokens"),
           "temperature": gen.get("temperature"),
           "top_p": gen.get("top_p")}
    top_k = gen.get("top_k")
    if top_k is not None and top_k > 0:
        out["top_k"] = top_k
    return {k: v for k, v in out.items() if v is not None}


class _Group:
    """One prompt's group: its responses as they come, scored by ROLL's
    reward worker, and at the final record the kept responses with v05's
    numbers."""

    def __init__(self, loop, context, req, domain, uid):
        self.ctx, self.req, self.domain, self.uid = context, req, domain, uid
        self.range = loop.range
        rc = context._scheduler.router_client  # ROLL's own token ids
        self.eos, self.pad = rc.eos_token_id, rc.pad_token_id

    async def run(self, client, ids, prior, sampling) -> Optional[list]:
        async def score(rec, resp) -> float:
            rewards = await self.ctx.compute_rewards(req=resp,
                                                     domain=self.domain)
            resp.union(rewards)
            return to_unit(float(resp.batch["response_level_rewards"][0]),
                           self.range, "ROLL's reward")

        try:
            rec, kept = await stream_group(
                client, self.uid, prompt_ids=ids, prior=prior,
                sampling=sampling, make=self._response, score=score)
        except GroupFailed as e:
            log.warning("v05: group %s ended %s: %s; the prompt is dropped",
                        self.uid, e.record.get("type"), e.record.get("error"))
            return None
        return None if kept is None else with_v05s_numbers(rec, kept)

    def _response(self, rec):
        """The sample as ROLL's router client hands a response over
        (RouterClient._postprocess_generate), through ROLL's own
        postprocess_output_data."""
        from roll.distributed.scheduler.protocol import DataProto
        from roll.distributed.scheduler.user_defined_rollout_loop import \
            postprocess_output_data
        meta = dict(self.req.meta_info)
        meta.update(finish_reasons=[rec["finish_reason"] or "stop"],
                    output_token_ids=[[int(t) for t in rec["token_ids"]]],
                    output_logprobs=None, eos_token_id=[self.eos, self.pad],
                    pad_token_id=self.pad)
        return postprocess_output_data(copy.deepcopy(self.req),
                                       DataProto(meta_info=meta),
                                       self.ctx.sequence_length)

def with_v05s_numbers(rec, kept: Dict[int, Any]) -> list:
    """The final record's kept responses, each with v05's advantage as
    its response_level_rewards and ROLL's own reward kept beside it."""
    import torch
    out = []
    for i, resp in kept.items():
        b = resp.batch
        b["v05_raw_reward"] = b["response_level_rewards"].clone().float()
        b["response_level_rewards"] = torch.tensor(
            [rec["advantages"][i]], dtype=torch.float32)
        b["v05_advantage"] = torch.tensor([rec["advantages"][i]],
                                          dtype=torch.float32)
        b["v05_baseline"] = torch.tensor([rec["baseline"]],
                                         dtype=torch.float32)
        b["v05_k"] = torch.tensor([rec["k"]], dtype=torch.int64)
        out.append(resp)
    return out
