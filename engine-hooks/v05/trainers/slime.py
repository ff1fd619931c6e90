# SPDX-License-Identifier: MIT
"""slime's rollout function through v05's group route (docs/SLIME.md):

    --rollout-function-path v05.trainers.slime.generate_rollout
    --custom-reward-post-process-path v05.trainers.slime.post_process_rewards
    --advantage-estimator grpo          (or gspo, cispo)
    --custom-config-path v05.yaml       (v05_servers: [host:port, ...])

Read against THUDM/slime 624b824 (docs/SLIME.md names each place).
slime calls ``generate_rollout(args, rollout_id, data_source,
evaluation=False)`` in its rollout manager; each group slime's data source
hands out (``n_samples_per_prompt`` copies of one prompt's ``Sample``)
becomes one ``POST /v05/group`` on one v05 server, which decides the
group's size k. Each sample is scored as it arrives by slime's own reward
(``slime.rollout.rm_hub.async_rm``: ``--custom-rm-path`` or ``--rm-type``),
put on v05's [-1, 1] scale (``v05_reward_range``) and pushed back; the
group's final record puts v05's advantage, baseline and sigma on each
sample (``sample.metadata["v05"]``). ``post_process_rewards`` hands slime
those advantages as the rewards it trains on: with the grpo family of
estimators slime's per-token advantage is the sample's reward
(``get_grpo_returns``), so it is v05's advantage, unchanged.

The rollout runs ``rollout_batch_size`` kept groups, ``over_sampling_
batch_size`` at a time as slime's own function does; groups v05 drops
are replaced, and when the batch is full the groups still running are
aborted (their streams closed: the server stops their requests).
"""

import asyncio
import contextlib
import copy
import logging
import uuid
from typing import Any, Dict, List, Optional

from ..servers.client import V05Client
from .http_groups import (ConfigError, batch_rewards, pick_server,
                          reward_range, server_urls, stream_group, to_unit,
                          unit_prior)

__all__ = ["generate_rollout", "post_process_rewards", "check_args",
           "METADATA_KEY"]

log = logging.getLogger("v05.slime")

METADATA_KEY = "v05"     # sample.metadata[METADATA_KEY]: v05's numbers
_ESTIMATORS = ("grpo", "gspo", "cispo")
_STATUS = {"stop": "COMPLETED", "length": "TRUNCATED", "abort": "ABORTED"}


def check_args(args) -> Dict[str, Any]:
    """slime's settings this function needs, or a ConfigError naming the
    one it cannot honour. Returns the v05 settings."""
    refuse = [
        ("group_rm", "v05 decides a group's size from each sample's reward, "
         "so a reward of the whole group (--group-rm) cannot be used"),
        ("use_rollout_logprobs", "the group route does not return the "
         "engine's log-probabilities (--use-rollout-logprobs)"),
        ("custom_generate_function_path", "the group route generates the "
         "samples; --custom-generate-function-path would be ignored"),
        ("rollout_stop", "the group route takes stop token ids only "
         "(--rollout-stop-token-ids), not stop strings (--rollout-stop)"),
    ]
    for attr, why in refuse:
        if getattr(args, attr, None):
            raise ConfigError(f"{attr}: {why}")
    if getattr(args, "rollout_top_p", 1.0) != 1.0:
        raise ConfigError("rollout_top_p: slime needs the engine's top-p "
                          "token replay for --rollout-top-p below 1, which "
                          "the group route does not return")
    est = getattr(args, "advantage_estimator", "grpo")
    if est not in _ESTIMATORS:
        raise ConfigError(f"advantage_estimator: {est!r}: v05's advantages "
                          "are the per-sample rewards of the grpo family "
                          f"({', '.join(_ESTIMATORS)})")
    external = [i["url"] if isinstance(i, dict) else i.url for i in
                getattr(args, "rollout_external_engine_infos", None) or ()]
    prior = getattr(args, "v05_prior", None)
    timeout = getattr(args, "v05_timeout", None)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, (int, float)) or not timeout > 0):
        raise ConfigError(f"v05_timeout: {timeout!r} is not a number of "
                          "seconds > 0 (null: no limit)")
    try:
        prior = 0.0 if prior is None else unit_prior(prior, "v05_prior")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return {"servers": server_urls(args, "v05_servers", "V05_SLIME_SERVERS",
                                   external),
            "range": reward_range(args, "v05_reward_range",
                                  "V05_REWARD_RANGE"),
            "prior": prior,
            "prior_key": getattr(args, "v05_prior_key", None) or "v05_prior",
            "timeout": timeout,
            "batch_rewards": batch_rewards(args, "v05_batch_rewards",
                                           "V05_SLIME_BATCH_REWARDS")}


def generate_rollout(args, rollout_id: int, data_source,
                     evaluation: bool = False):
    """slime's ``--rollout-function-path``: a RolloutFnTrainOutput of
    ``rollout_batch_size`` groups, each of v05's size k."""
    if evaluation:
        # Evaluation draws a fixed number of samples per prompt and trains
        # nothing: slime's own function does it, through the same servers'
        # stock /generate (a v05 server keeps its stock routes).
        from slime.rollout.sglang_rollout import generate_rollout as own
        return own(args, rollout_id, data_source, evaluation=True)
    cfg = check_args(args)
    from slime.rollout.base_types import RolloutFnTrainOutput
    from slime.utils.async_utils import run
    groups, metrics = run(_rollout(args, cfg, rollout_id, data_source))
    return RolloutFnTrainOutput(samples=groups, metrics=metrics)


def post_process_rewards(args, samples):
    """slime's ``--custom-reward-post-process-path``: (raw rewards, the
    rewards slime trains on) = (slime's rewards, v05's advantages)."""
    raw, adv = [], []
    for s in samples:
        meta = s.metadata.get(METADATA_KEY) if isinstance(
            s.metadata, dict) else None
        if meta is None:
            raise ValueError(
                f"sample {s.index} has no v05 advantage: "
                "v05.trainers.slime.post_process_rewards goes with "
                "--rollout-function-path v05.trainers.slime.generate_rollout")
        raw.append(s.get_reward_value(args))
        adv.append(meta["advantage"])
    return raw, adv


class _Batch:
    """One rollout's groups: kept, dropped by v05, aborted, unused."""

    def __init__(self):
        self.kept: List[list] = []
        self.counts = {"dropped": 0, "aborted": 0, "unused": 0}


async def _rollout(args, cfg, rollout_id: int, data_source):
    target = args.rollout_batch_size
    step = getattr(args, "over_sampling_batch_size", None) or target
    sampling = _sampling(args)
    tok = _Tokenizer(args)
    batch, pending = _Batch(), {}
    # With a partial rollout, aborted prompts go back to the data source
    # as they came (a group's copies are filled in as samples arrive).
    keep = copy.deepcopy if getattr(args, "partial_rollout", False) else \
        (lambda g: g)
    async with contextlib.AsyncExitStack() as stack:
        clients = {u: await stack.enter_async_context(
            V05Client(u, timeout=cfg["timeout"],
                      batch_rewards=cfg["batch_rewards"]))
            for u in cfg["servers"]}
        try:
            while len(batch.kept) < target:
                while len(batch.kept) + len(pending) < target:
                    for g in data_source.get_samples(step):
                        uid = _uid(rollout_id, g[0])
                        c = clients[pick_server(uid, cfg["servers"])]
                        t = asyncio.ensure_future(_group(
                            c, args, cfg, uid, g, tok, sampling))
                        pending[t] = keep(g)
                done, _ = await asyncio.wait(
                    pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    pending.pop(t)
                    group = t.result()  # a failed group fails the rollout
                    if group is None:
                        batch.counts["dropped"] += 1
                    elif len(batch.kept) < target:
                        batch.kept.append(group)
                    else:
                        batch.counts["unused"] += 1
        finally:
            # The batch is full, or a group failed: the groups still
            # running are aborted (their streams closed).
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            for t in pending:
                if t.cancelled():
                    batch.counts["aborted"] += 1
                elif t.exception() is None and t.result() is not None:
                    batch.counts["unused"] += 1  # ended as it was aborted
    aborted = [g for t, g in pending.items() if t.cancelled()]
    if aborted and getattr(args, "partial_rollout", False):
        # v05 groups cannot resume: their prompts go back whole.
        data_source.add_samples(aborted)
    batch.kept.sort(key=lambda g: g[0].index)
    return batch.kept, _metrics(args, batch)


def _metrics(args, batch: _Batch) -> Dict[str, float]:
    ks = [len(g) for g in batch.kept]
    n = sum(ks)
    out = {"v05/groups": len(ks), "v05/samples": n,
           "v05/k_mean": n / len(ks) if ks else 0.0,
           "v05/k_max": max(ks, default=0)}
    out.update({f"v05/groups_{k}": v for k, v in batch.counts.items()})
    gbs = getattr(args, "global_batch_size", None)
    if gbs:
        # slime's step split keeps whole steps of global_batch_size
        # rollouts (one per sample here) and drops the rest.
        out["v05/samples_past_last_step"] = n % gbs
        if n % gbs:
            log.warning("v05: %d samples of %d fill no whole training step "
                        "of --global-batch-size %d; slime drops them",
                        n % gbs, n, gbs)
    return out


def _uid(rollout_id: int, s) -> str:
    return f"slime-{rollout_id}-{s.group_index}-{uuid.uuid4().hex[:8]}"


def _sampling(args) -> Dict[str, Any]:
    out = {"max_tokens": getattr(args, "rollout_max_response_len", None),
           "temperature": getattr(args, "rollout_temperature", None),
           "top_k": getattr(args, "rollout_top_k", None),
           "stop_token_ids": getattr(args, "rollout_stop_token_ids", None)}
    if out["top_k"] == -1:
        del out["top_k"]  # slime's "no limit" is the engines' default
    return {k: v for k, v in out.items() if v is not None}


class _Tokenizer:
    """A prompt's token ids as slime's own generate makes them: the
    sample's tokens when it has them, else its text encoded without
    special tokens by --hf-checkpoint's tokenizer (loaded once)."""

    def __init__(self, args):
        self.path = getattr(args, "hf_checkpoint", None)
        self.tok = None

    def ids(self, s) -> List[int]:
        if getattr(s, "multimodal_inputs", None) and any(
                v is not None for v in s.multimodal_inputs.values()):
            raise ValueError(f"sample {s.index}: multimodal prompts are not "
                             "supported by the group route")
        if s.tokens:
            return [int(t) for t in s.tokens]
        if not isinstance(s.prompt, str) or not s.prompt:
            raise ValueError(f"sample {s.index}: the prompt is "
                             f"{type(s.prompt).__name__}, not text (use "
                             "--apply-chat-template)")
        if self.tok is None:
            if not self.path:
                raise ConfigError("hf_checkpoint: needed to tokenize the "
                                  "prompts")
            from transformers import AutoTokenizer
            self.tok = AutoTokenizer.from_pretrained(self.path,
                                                     trust_remote_code=True)
        return list(self.tok.encode(s.prompt, add_special_tokens=False))


async def _group(client: V05Client, args, cfg, uid: str, templates: list,
                 tok: _Tokenizer, sampling) -> Optional[list]:
    """One group to its final record: its kept samples with v05's
    numbers, or None when v05 dropped it. Raises when the group ended
    otherwise (GroupFailed) or a reward failed or was refused."""
    from slime.rollout.rm_hub import async_rm
    first = templates[0]
    ids = tok.ids(first)
    meta = first.metadata if isinstance(first.metadata, dict) else {}
    prior = unit_prior(meta.get(cfg["prior_key"], cfg["prior"]),
                       f"sample {first.index}: {cfg['prior_key']}")
    pristine = copy.deepcopy(first)  # for samples past slime's copies

    async def score(rec, s) -> float:
        s.reward = await async_rm(args, s)
        r = to_unit(s.get_reward_value(args), cfg["range"], "slime's reward")
        s.metadata[METADATA_KEY]["reward"] = r
        return r

    rec, kept = await stream_group(
        client, uid, prompt_ids=ids, prior=prior, sampling=sampling,
        make=lambda rec: _sample(templates, pristine, ids, rec), score=score)
    if kept is None:
        return None
    for i, s in kept.items():
        s.metadata[METADATA_KEY].update(
            k=rec["k"], advantage=rec["advantages"][i],
            baseline=rec["baseline"], sigma=rec["sigma"])
    return list(kept.values())


def _sample(templates: list, pristine, ids: List[int], rec):
    """Sample `rec["sample"]` of the group: slime's copy of the prompt for
    it, or past n_samples_per_prompt a new copy of the prompt as slime
    handed it out (the first copy's index), with the response."""
    from slime.utils.types import Sample
    j = rec["sample"]
    s = templates[j] if j < len(templates) else copy.deepcopy(pristine)
    out = [int(t) for t in rec["token_ids"]]
    s.tokens = list(ids) + out
    s.response = rec.get("text") or ""
    s.response_length = len(out)
    s.loss_mask = [1] * len(out)
    s.rollout_log_probs = None
    s.status = getattr(Sample.Status,
                       _STATUS.get(rec.get("finish_reason"), "COMPLETED"))
    s.session_id = rec["uid"]
    s.prefix_cache_info.cached_tokens += int(rec.get("cached_tokens") or 0)
    s.prefix_cache_info.total_prompt_tokens += int(rec.get("prompt_tokens")
                                                   or len(ids))
    s.metadata = dict(s.metadata or {})
    s.metadata[METADATA_KEY] = {"uid": rec["uid"], "sample": j}
    return s
