# SPDX-License-Identifier: MIT
"""ROLL's ``user_defined_rollout_loop_cls: v05.trainers.roll.
V05RolloutLoop`` against a real `v05-vllm serve` with v05's plugin
(docs/SLIME.md, "ROLL"): a prompt's group runs through the group route,
each response scored by ROLL's reward worker (``context.compute_rewards``),
and comes back as ROLL's responses with v05's advantage as the reward
ROLL trains on; a cancelled prompt (the only exception ROLL raises into
the loop) aborts its group on the server; settings that would change
v05's advantages are refused by name; validation prompts go to ROLL's
own loop.

ROLL's RolloutContext is a test double of its interface (it needs ROLL's
scheduler actor); DataProto and postprocess_output_data are ROLL's own
when ``V05_ROLL_SRC`` names a ROLL checkout, else the stand-ins in
tests/servers/standins (docs/SLIME.md says which ran where)."""
import argparse
import asyncio
import contextlib
import os
import sys
import types

import numpy as np
import pytest

# By hand with ROLL's own modules, the test may run in an environment
# that has ROLL's dependencies but no vLLM (docs/SLIME.md): then
# V05_SERVER_BIN names the engine environment's v05-vllm.
SERVER_BIN = os.environ.get("V05_SERVER_BIN")
if not SERVER_BIN:
    pytest.importorskip("vllm", reason="the engine environment "
                        "(scripts/setup-engine) is not this Python")
else:
    # test_vllm_server (whose server helper this file uses) asks for vLLM
    # in this Python; the server runs in the engine environment instead.
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.environ.get("V05_ROLL_SRC")
sys.path.insert(0, REAL or os.path.join(HERE, "standins"))

import v05  # noqa: E402
from v05.demos import tiny  # noqa: E402
from v05.trainers import roll as v05_roll  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402
from v05.trainers.http_groups import ConfigError, kept_samples  # noqa

from roll.distributed.scheduler.protocol import DataProto  # noqa: E402

import test_vllm_server  # noqa: E402
from server_proc import poll  # noqa: E402
from test_vllm_server import PLUGIN, stats, vllm_server  # noqa: E402

PREFIX = f"trl{os.getpid()}"
SEQ = 32          # ROLL's sequence_length: prompt (8, left-padded) + 24
PROMPT_LEN = 8


def test_which_roll():
    import roll
    where = os.path.dirname(os.path.abspath(roll.__file__))
    if REAL:
        assert where.startswith(os.path.abspath(REAL))
    else:
        assert where == os.path.join(HERE, "standins", "roll")
    print(f"roll from {where}")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    if SERVER_BIN:
        test_vllm_server.start_command = lambda: [SERVER_BIN, "serve"]
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def pipeline_config(**kw):
    """The RLVR pipeline settings v05 reads, as v05 wants them."""
    a = dict(adv_estimator="reinforce", norm_mean_type=None,
             norm_std_type=None, is_use_additional_prompts=True,
             whiten_advantages=False, add_token_level_kl=False, gamma=1)
    a.update(kw)
    return argparse.Namespace(**a)


class Context:
    """A double of ROLL's RolloutContext (roll/distributed/scheduler/
    generate_scheduler.py): the prompt's id, its meta_info with the
    generation config, get_request_data once (a left-padded one-row
    request, as ROLL's collate makes it), do_generate_and_reward,
    compute_rewards (a reward worker's answer: response_level_rewards,
    scores, token_level_rewards), and the scheduler's router client with
    the tokenizer's eos and pad ids."""

    EOS, PAD = tiny.EOS, 0

    def __init__(self, prompt_id, prompt, reward, prior=None, cfg=None,
                 is_val=False, max_new_tokens=4):
        self.prompt_id, self.prompt, self.reward = prompt_id, prompt, reward
        self.prior, self.is_val = prior, is_val
        self.pipeline_config = cfg or pipeline_config()
        self.sequence_length, self.prompt_length = SEQ, PROMPT_LEN
        self.meta_info = {"generation_config": {
            "max_new_tokens": max_new_tokens, "temperature": 1.0,
            "top_p": 1.0, "top_k": 50, "num_return_sequences": 4}}
        self._scheduler = types.SimpleNamespace(
            router_client=types.SimpleNamespace(eos_token_id=self.EOS,
                                                pad_token_id=self.PAD))
        self.asked, self.inside, self.scored = 0, False, []

    def get_request_data(self, meta_info):
        self.asked += 1
        pad = PROMPT_LEN - len(self.prompt)
        ids = torch.tensor([[self.PAD] * pad + self.prompt])
        mask = torch.tensor([[0] * pad + [1] * len(self.prompt)])
        cols = {"input_ids": ids, "attention_mask": mask,
                "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
                "domain": np.array(["math"], dtype=object)}
        if self.prior is not None:
            cols["v05_prior"] = np.array([self.prior], dtype=object)
        return DataProto.from_single_dict(cols, meta_info=meta_info), "math"

    @contextlib.asynccontextmanager
    async def do_generate_and_reward(self, max_concurrency):
        self.inside = True
        try:
            yield
        finally:
            self.inside = False

    async def compute_rewards(self, req, domain):
        assert self.inside and domain == "math"
        r = await self.reward(self, req)
        self.scored.append(req)
        rr = torch.tensor([r], dtype=torch.float16)
        return DataProto.from_dict({
            "response_level_rewards": rr, "scores": rr.clone(),
            "token_level_rewards": torch.zeros_like(req.batch["responses"],
                                                    dtype=torch.float16)})


async def by_call_order(ctx, req):
    """1, 0, 1, 0, ... in the order responses are scored: a first wave of
    4 always has two of each, whatever order its samples finish in."""
    return float(len(ctx.scored) % 2 == 0)


def run(coro):
    return asyncio.run(coro)


def settled(url, before):
    poll(lambda: stats(url)["running"] == 0 and stats(url)["requests"] == 0,
         60, "the server to run no group")
    s = stats(url)
    assert s["plugin"]["prompts_open"] == 0
    return {k: s["server"][k] - before[k]
            for k in ("groups", "final", "aborted", "failed",
                      "reward_timeouts")}


@pytest.fixture
def servers(server, monkeypatch):
    monkeypatch.setenv("V05_ROLL_SERVERS", server.url)
    monkeypatch.delenv("V05_REWARD_RANGE", raising=False)
    return server


def test_a_prompts_responses_carry_v05s_advantages(servers, monkeypatch):
    prompt = tiny.make_prompts(1)[0]
    ctx = Context(11, prompt, by_call_order, prior=0.9)
    before = stats(servers.url)["server"]
    recs, group = [], V05Client.group

    async def recorded(self, *a, **kw):
        async for rec in group(self, *a, **kw):
            recs.append(rec)
            yield rec
    monkeypatch.setattr(V05Client, "group", recorded)

    async def main():
        return await v05_roll.V05RolloutLoop().process_new_prompt(ctx)
    out = run(main())
    k = len(out)
    assert k > 4, "the prior and the rewards disagree: a second wave"
    assert ctx.asked == 1 and len(ctx.scored) == k
    raw = [float(r.batch["v05_raw_reward"][0]) for r in out]
    assert sorted(raw) == sorted(float(i % 2 == 0) for i in range(k))
    v = [2 * x - 1 for x in raw]  # ROLL's [0, 1] on v05's [-1, 1]
    want = v05.estimate(0.9, v, mode="v05", cost=PLUGIN["cost"], k_step=2,
                        k_max=16)
    adv = [float(r.batch["response_level_rewards"][0]) for r in out]
    assert adv == pytest.approx(want["advantages"], abs=1e-6)
    for r in out:
        b = r.batch
        assert b["response_level_rewards"].dtype == torch.float32
        assert float(b["v05_advantage"][0]) == float(
            b["response_level_rewards"][0])
        assert float(b["v05_baseline"][0]) == pytest.approx(
            want["baseline"], abs=1e-6)
        assert int(b["v05_k"][0]) == k
        # ROLL's reward worker's own numbers are left as they were.
        assert float(b["scores"][0]) == float(b["v05_raw_reward"][0])
        assert r.non_tensor_batch["domain"].tolist() == ["math"]
    # Each response as ROLL's router client would hand it over: the
    # prompt's row, sample i's tokens padded with ROLL's pad id.
    samples = {x["sample"]: x for x in recs if x["type"] == "sample"}
    assert sorted(samples) == list(range(k)) and recs[-1]["type"] == "final"
    assert recs[-1]["rewards"] == v
    for i, r in enumerate(out):
        toks = samples[i]["token_ids"]
        assert r.batch["prompts"].tolist() == [[0] * 4 + prompt]
        assert r.batch["responses"][0].tolist() == \
            toks + [Context.PAD] * (SEQ - PROMPT_LEN - len(toks))
    assert settled(servers.url, before) == {
        "groups": 1, "final": 1, "aborted": 0, "failed": 0,
        "reward_timeouts": 0}
    if REAL:
        roll_checks(out, want["advantages"])


def roll_checks(out, adv):
    """With ROLL's own modules: its RLVR pipeline's reward and advantage
    steps (roll/utils/functionals.py) on the prompt's responses, under
    the settings v05 asks for, give every response token v05's
    advantage."""
    from roll.utils.functionals import (compute_advantage,
                                        expand_to_token_level,
                                        reward_postprocess)
    data = DataProto.concat(out)
    cfg = pipeline_config(reward_clip=None, actor_infer=argparse.Namespace(
        generating_args=argparse.Namespace(num_return_sequences=4)))
    data, _ = reward_postprocess(data, cfg, running_ctrl={})
    data.batch["token_level_rewards"] = expand_to_token_level(data)
    data = compute_advantage(data, gamma=1, lambd=0.95,
                             adv_estimator="reinforce", pipeline_config=cfg)
    mask = data.batch["response_mask"][:, 1:].bool()
    for i, a in enumerate(adv):
        got = data.batch["advantages"][i][mask[i]]
        assert got.numel() == int(out[i].batch["response_mask"].sum())
        assert torch.allclose(got, torch.full_like(got, a), atol=1e-6)
        assert not data.batch["advantages"][i][~mask[i]].any()


def test_rewards_on_a_range_and_the_prior_default(servers, monkeypatch):
    """V05_REWARD_RANGE=-1,1 takes ROLL's rewards as they are; a dataset
    without a v05_prior column gives the prior 0. With
    V05_ROLL_BATCH_REWARDS=server (each URL one server) the loop's clients
    gather rewards per server."""
    monkeypatch.setenv("V05_REWARD_RANGE", "-1,1")
    monkeypatch.setenv("V05_ROLL_BATCH_REWARDS", "server")

    async def minus_one(ctx, req):
        return -1.0
    ctx = Context(12, tiny.make_prompts(2)[1], minus_one)

    async def main():
        loop = v05_roll.V05RolloutLoop()
        return loop, await loop.process_new_prompt(ctx)
    loop, out = run(main())
    assert [c.batch_rewards for c in loop._clients.values()] == ["server"]
    want = v05.estimate(0.0, [-1.0] * len(out), mode="v05",
                        cost=PLUGIN["cost"], k_step=2, k_max=16)
    assert [float(r.batch["response_level_rewards"][0]) for r in out] == \
        pytest.approx(want["advantages"], abs=1e-6)


def test_a_cancelled_prompt_aborts_its_group(servers):
    """ROLL cancels a prompt's task (its only exception into the loop):
    here while the group's first reward is held, so the group is running
    on the server when the cancel lands. The stream is closed, the server
    aborts the group and ends idle with no prompt open."""
    before = stats(servers.url)["server"]

    async def main():
        called = asyncio.Event()

        async def hold(ctx, req):
            called.set()
            await asyncio.Event().wait()
        ctx = Context(13, tiny.make_prompts(3)[2], hold)
        task = asyncio.ensure_future(
            v05_roll.V05RolloutLoop().process_new_prompt(ctx))
        await called.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ctx
    ctx = run(main())
    assert not ctx.inside   # ROLL's context was left as ROLL requires
    assert settled(servers.url, before) == {
        "groups": 1, "final": 0, "aborted": 1, "failed": 0,
        "reward_timeouts": 0}


def test_a_reward_outside_the_range_fails_naming_it(servers):
    async def two(ctx, req):
        return 2.0
    ctx = Context(14, tiny.make_prompts(4)[3], two)
    before = stats(servers.url)["server"]

    async def main():
        return await v05_roll.V05RolloutLoop().process_new_prompt(ctx)
    with pytest.raises(RuntimeError, match=r"group roll-14-\w+ sample \d: "
                       r"ValueError: ROLL's reward: the reward 2\.0 is "
                       r"outside the reward range \[0, 1\]"):
        run(main())
    assert settled(servers.url, before)["aborted"] == 1


BAD = [
    (dict(adv_estimator="grpo"), "adv_estimator: 'grpo', v05 needs "
     "'reinforce'"),
    (dict(norm_mean_type="group"), "norm_mean_type: 'group'"),
    (dict(norm_std_type="batch"), "norm_std_type: 'batch'"),
    (dict(is_use_additional_prompts=False), "is_use_additional_prompts: "
     "False, v05 needs True"),
    (dict(whiten_advantages=True), "whiten_advantages: True"),
    (dict(add_token_level_kl=True), "add_token_level_kl: True"),
    (dict(gamma=0.99), "gamma: 0.99, v05 needs 1"),
]


@pytest.mark.parametrize("bad,match", BAD)
def test_settings_that_change_v05s_advantages_are_refused(monkeypatch, bad,
                                                          match):
    """Refused at the first prompt, before its data is asked for or any
    request is sent (the server named does not exist)."""
    monkeypatch.setenv("V05_ROLL_SERVERS", "127.0.0.1:9")

    async def never(ctx, req):
        raise AssertionError("scored")
    ctx = Context(1, [1, 2], never, cfg=pipeline_config(**bad))

    async def main():
        return await v05_roll.V05RolloutLoop().process_new_prompt(ctx)
    with pytest.raises(ConfigError, match=match):
        run(main())
    assert ctx.asked == 0


@pytest.mark.parametrize("env,match", [
    (None, "V05_ROLL_SERVERS: no v05 server given"),
    ("ftp://x:1", r"V05_ROLL_SERVERS\[0\]: 'ftp://x:1'"),
])
def test_servers_are_required_when_roll_makes_the_loop(monkeypatch, env,
                                                       match):
    if env is None:
        monkeypatch.delenv("V05_ROLL_SERVERS", raising=False)
    else:
        monkeypatch.setenv("V05_ROLL_SERVERS", env)
    with pytest.raises(ConfigError, match=match):
        v05_roll.V05RolloutLoop()


def test_a_bad_reward_range_is_refused(monkeypatch):
    monkeypatch.setenv("V05_ROLL_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("V05_REWARD_RANGE", "1,1")
    with pytest.raises(ConfigError, match=r"V05_REWARD_RANGE: \[1.0, 1.0\]"):
        v05_roll.V05RolloutLoop()


def test_a_bad_batch_key_is_refused(monkeypatch):
    monkeypatch.setenv("V05_ROLL_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("V05_ROLL_BATCH_REWARDS", "prompt")
    with pytest.raises(ConfigError, match="V05_ROLL_BATCH_REWARDS: 'prompt' "
                       "is not one of origin, group, server, off"):
        v05_roll.V05RolloutLoop()


def test_validation_prompts_go_to_rolls_own_loop(monkeypatch):
    monkeypatch.setenv("V05_ROLL_SERVERS", "127.0.0.1:9")
    import roll.distributed.scheduler.user_defined_rollout_loop as udrl
    seen = []

    class Own:
        async def process_new_prompt(self, context):
            seen.append(context)
            return ["ROLL's own loop"]
    monkeypatch.setattr(udrl, "UserDefinedRolloutLoop", Own)
    ctx = Context(2, [1, 2], None, is_val=True)

    async def main():
        return await v05_roll.V05RolloutLoop().process_new_prompt(ctx)
    assert run(main()) == ["ROLL's own loop"] and seen == [ctx]


def test_a_group_v05_dropped_gives_none_and_kept_ones_only():
    """The final record's dropped flag and keep list (reinforce-ada), on
    responses as the loop holds them."""
    def resp(r):
        return DataProto.from_dict({"response_level_rewards": torch.tensor(
            [r], dtype=torch.float16)})
    rec = {"uid": "u", "k": 3, "dropped": True, "kept": [0, 1, 2],
           "advantages": [0.5, -0.5, 0.0], "baseline": 0.1}
    assert kept_samples(rec, {i: resp(1.0) for i in range(3)}) is None
    rec.update(dropped=False, kept=[0, 2])
    kept = kept_samples(rec, {i: resp(float(i)) for i in range(3)})
    out = v05_roll.with_v05s_numbers(rec, kept)
    assert [float(r.batch["response_level_rewards"][0]) for r in out] == \
        [0.5, 0.0]
    assert [float(r.batch["v05_raw_reward"][0]) for r in out] == [0.0, 2.0]
    assert [int(r.batch["v05_k"][0]) for r in out] == [3, 3]
    with pytest.raises(RuntimeError, match=r"final k = 3 but samples "
                       r"\[0, 1\] came"):
        kept_samples(rec, {i: resp(0.0) for i in range(2)})
