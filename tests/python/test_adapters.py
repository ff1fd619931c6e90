# SPDX-License-Identifier: MIT
"""Contract tests: the vLLM, sglang and verl adapters driven through
stand-ins with the upstream method names and signatures (read from vLLM's
vllm/v1/engine/async_llm.py, sglang's srt/entrypoints/engine.py, verl's
trainer/ppo/core_algos.py, ray_trainer.py and workers/reward_manager/).
No real vLLM, sglang or verl runs here."""
import asyncio
import copy
import multiprocessing as mp
import os
import sys
import tomllib
import types
import zlib

import numpy as np
import torch

import v05

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def outcome(uid, sample):
    """The stand-in model's answer quality for a sample: +1 or -1."""
    return 1.0 if zlib.crc32(f"{uid}/{sample}".encode()) % 3 else -1.0


# ---- vLLM -----------------------------------------------------------------

class SamplingParams:
    """vllm.SamplingParams as far as the adapter uses it."""

    def __init__(self, n=1, temperature=1.0, seed=None):
        self.n, self.temperature, self.seed = n, temperature, seed

    def clone(self):
        return copy.copy(self)


class CompletionOutput:
    def __init__(self, text):
        self.text, self.token_ids = text, list(text.encode())


class RequestOutput:
    def __init__(self, request_id, text, finished):
        self.request_id = request_id
        self.outputs = [CompletionOutput(text)]
        self.finished = finished


class AsyncLLM:
    """vllm.v1.engine.async_llm.AsyncLLM.generate, same signature."""

    def __init__(self):
        self.calls = []

    async def generate(self, prompt, sampling_params, request_id, *,
                       prompt_text=None, lora_request=None,
                       tokenization_kwargs=None, trace_headers=None,
                       priority=0, data_parallel_rank=None, session_id=None,
                       reasoning_ended=None, reasoning_parser_kwargs=None):
        assert sampling_params.n == 1, "v05 sends single samples"
        self.calls.append((prompt, request_id, sampling_params.seed))
        await asyncio.sleep(0)
        yield RequestOutput(request_id, "partial", False)
        yield RequestOutput(request_id, f"{prompt}#{request_id}", True)


def run_rollout(segname, make, items, **kw):
    async def main():
        with v05.Plugin.create(segname, max_prompts=64, pad_multiple=1, mode="v05",
                               **kw) as plugin:
            ro = make(plugin)
            results = await ro.generate(items)
            checked = {}
            for uid, res in results.items():
                rw = [float(r) for r in res.group.rewards]
                assert rw == [outcome(uid, s) for s in range(res.group.k)]
                est = v05.estimate(dict((u, p) for u, _, p in items)[uid], rw)
                assert res.group.baseline == est["baseline"]
                assert np.array_equal(res.group.advantages,
                                      np.array(est["advantages"], dtype=np.float32))
                checked[uid] = (res.group.k, len(res.outputs))
                res.group = None  # drop the views before the slot goes
                plugin.release(res.decision)
            calls = ro.generate_calls
            ro.close()
            return checked, calls
    return asyncio.run(main())


def test_vllm_rollout(segname):
    from v05.vllm import VLLMRollout

    engine = AsyncLLM()
    items = [(f"v{i}", f"prompt {i}", 0.9 if i % 2 else -0.9) for i in range(12)]
    score = lambda uid, s, out: outcome(uid, s)
    checked, calls = run_rollout(
        segname, lambda p: VLLMRollout(engine, p, SamplingParams(n=8, seed=100),
                                       score=score), items)
    # One n=1 generate per sample the plugin asked for, k per group.
    assert calls == len(engine.calls) == sum(k for k, _ in checked.values())
    assert all(k == n for k, n in checked.values())
    ids = [rid for _, rid, _ in engine.calls]
    assert len(set(ids)) == len(ids)
    for uid, prompt, _ in items:
        mine = [(p, seed) for p, rid, seed in engine.calls if rid.startswith(f"v05-{uid}-")]
        assert {p for p, _ in mine} == {prompt}  # same prompt: prefix cache
        assert len({s for _, s in mine}) == len(mine)  # a seed per sample
    assert any(k > 4 for k, _ in checked.values())  # the plugin asked for more


# ---- sglang -----------------------------------------------------------------

class SGLangEngine:
    """sglang Engine.async_generate, the keyword arguments v05 uses."""

    def __init__(self):
        self.calls = []

    async def async_generate(self, prompt=None, sampling_params=None,
                             input_ids=None, image_data=None, audio_data=None,
                             video_data=None, return_logprob=False,
                             logprob_start_len=None, top_logprobs_num=None,
                             token_ids_logprob=None, lora_path=None,
                             custom_logit_processor=None,
                             return_hidden_states=False, stream=False,
                             bootstrap_host=None, bootstrap_port=None,
                             bootstrap_room=None, routed_dp_rank=None,
                             external_trace_header=None, rid=None,
                             session_params=None, priority=None):
        assert stream is False and sampling_params["n"] == 1
        self.calls.append((prompt, rid, dict(sampling_params)))
        await asyncio.sleep(0)
        return {"text": f"{prompt}#{rid}", "meta_info": {"id": rid}}


def test_sglang_rollout(segname):
    from v05.sglang import SGLangRollout

    engine = SGLangEngine()
    items = [(f"s{i}", f"q {i}", 0.5 - 0.1 * i) for i in range(10)]
    score = lambda uid, s, out: outcome(uid, s)
    checked, calls = run_rollout(
        segname, lambda p: SGLangRollout(engine, p,
                                         {"temperature": 1.0, "sampling_seed": 7},
                                         score=score), items)
    assert calls == len(engine.calls) == sum(k for k, _ in checked.values())
    seeds = {}
    for prompt, rid, params in engine.calls:
        assert params["temperature"] == 1.0
        seeds.setdefault(prompt, []).append(params["sampling_seed"])
    assert all(len(set(v)) == len(v) for v in seeds.values())


# ---- entry points -------------------------------------------------------------

def _child_role(q):
    from v05 import vllm
    q.put(vllm.is_frontend())


def test_entry_points_inert_outside_frontend(monkeypatch):
    from v05 import sglang, vllm

    with open(os.path.join(ROOT, "engine-hooks", "pyproject.toml"), "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"]
    assert eps["vllm.general_plugins"]["v05"] == "v05.vllm:register"
    assert eps["sglang.srt.plugins"]["v05"] == "v05.sglang:register"
    monkeypatch.delenv("V05_ROLE", raising=False)
    assert vllm.is_frontend()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_role, args=(q,))
    p.start()
    assert q.get(timeout=30) is False  # a process vLLM would have spawned
    p.join()
    monkeypatch.setenv("V05_ROLE", "worker")
    assert not vllm.is_frontend()
    assert vllm.register() is None and sglang.register() is None


# ---- verl -----------------------------------------------------------------------

def install_fake_verl(monkeypatch):
    """A stand-in verl with the two registries (same names, same use)."""
    adv_registry, rm_registry = {}, {}

    def register_adv_est(name):
        def deco(fn):
            adv_registry[name] = fn
            return fn
        return deco

    def register(name):
        def deco(cls):
            rm_registry[name] = cls
            return cls
        return deco

    mods = {}
    for name in ("verl", "verl.trainer", "verl.trainer.ppo",
                 "verl.trainer.ppo.core_algos", "verl.workers",
                 "verl.workers.reward_manager",
                 "verl.workers.reward_manager.registry"):
        mods[name] = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mods[name])
    mods["verl.trainer.ppo.core_algos"].register_adv_est = register_adv_est
    mods["verl.workers.reward_manager.registry"].register = register
    return adv_registry, rm_registry


class DataProto:
    """verl.DataProto as the reward manager reads it."""

    def __init__(self, batch, non_tensor_batch):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

    def __len__(self):
        return self.batch["responses"].shape[0]


class Tokenizer:
    def decode(self, ids):
        return bytes(int(i) for i in ids).decode()


def make_batch(rows):
    """rows: (uid, sample, answer text, ground truth)."""
    P, R = 4, 8
    prompts = torch.ones(len(rows), P, dtype=torch.long)
    responses = torch.zeros(len(rows), R, dtype=torch.long)
    mask = torch.zeros(len(rows), P + R, dtype=torch.long)
    mask[:, :P] = 1
    for i, (_, _, text, _) in enumerate(rows):
        b = text.encode()
        responses[i, :len(b)] = torch.tensor(list(b))
        mask[i, P:P + len(b)] = 1
    nt = {"uid": np.array([r[0] for r in rows], dtype=object),
          "v05_sample": np.array([r[1] for r in rows]),
          "reward_model": np.array([{"ground_truth": r[3]} for r in rows],
                                   dtype=object),
          "data_source": np.array(["math"] * len(rows), dtype=object)}
    return DataProto({"prompts": prompts, "responses": responses,
                      "attention_mask": mask}, nt)


def test_verl_reward_manager_and_estimator(segname, monkeypatch):
    from v05 import verl as vverl

    adv_registry, rm_registry = install_fake_verl(monkeypatch)
    vverl.register_with_verl()
    assert adv_registry["v05"] is vverl.compute_v05_advantage
    assert rm_registry["v05"] is vverl.V05RewardManager
    monkeypatch.setenv("V05_SEGMENT", segname)

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if solution_str == ground_truth else 0.0

    uids = [f"r{i}" for i in range(6)]
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1) as plugin:
        # The trainer's reader is there before groups finish (as in a run).
        vverl._GroupSource.get(segname)
        manager = rm_registry["v05"](Tokenizer(), 0, compute_score=compute_score)
        pending = plugin.submit([(u, 0.0 if i % 2 else 0.9) for i, u in enumerate(uids)])
        finals = {}
        all_rows = []
        while len(finals) < len(uids):
            rows = [(d.uid, s, "yes" if outcome(d.uid, s) > 0 else "no", "yes")
                    for d in pending if d.kind == "sample" for s in d.samples]
            if rows:
                data = make_batch(rows)
                reward = manager(data)
                all_rows += rows
                for i, (uid, s, text, _) in enumerate(rows):
                    assert reward[i, len(text) - 1] == (1.0 if text == "yes" else 0.0)
                    assert reward[i].sum() == reward[i, len(text) - 1]
            for d in pending:
                if d.kind == "final":
                    finals[d.uid] = d
            if len(finals) < len(uids):
                assert plugin.wait_blocking(5.0)
                pending = plugin.poll()
        assert plugin.stats()["rewards_applied"] == len(all_rows)
        # The trainer's batch: each uid's rows in sample order.
        order = vverl.rows_in_sample_order([r[0] for r in all_rows],
                                           [r[1] for r in all_rows])
        rows = [all_rows[i] for i in order]
        data = make_batch(rows)
        # verl's token-level rewards; the estimator only takes their shape
        # (calling the manager again would push every reward twice).
        tlr = torch.zeros(len(rows), 8)
        expect = {}
        for d in finals.values():
            g = plugin.group(d)
            expect[d.uid] = g.advantages.copy()
            del g
        adv, ret = adv_registry["v05"](
            token_level_rewards=tlr,
            response_mask=data.batch["attention_mask"][:, 4:].float(),
            config={"v05_segment": segname},
            index=data.non_tensor_batch["uid"])
        for i, (uid, s, text, _) in enumerate(rows):
            n = len(text)
            assert torch.all(adv[i, :n] == float(expect[uid][s]))
            assert torch.all(adv[i, n:] == 0)
        assert torch.equal(adv, ret)
        # The estimator handed every slot back through the reader; the
        # plugin applies the releases at its next poll.
        plugin.poll()
        assert plugin.stats()["releases"] == len(uids)
        manager.writer.close()
        vverl._GroupSource._by_segment.pop(segname).reader.close()
