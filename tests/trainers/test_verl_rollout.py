# SPDX-License-Identifier: MIT
"""v05.trainers.verl's rollout component (agent-loop manager and workers)
against the real verl 0.9.1: verl's own trainer config (hydra,
ppo_trainer.yaml plus the keys a user adds), verl's AgentLoopWorker
machinery and SingleTurnAgentLoop, verl's LLMServerClient and global load
balancer, verl's RewardLoopWorker as a Ray actor, verl's TransferQueue,
and verl's advantage functions: the legacy manager's rows, the default
trainer's rows into TransferQueue, errors. The cross-epoch rules and the
fill: test_verl_rollout_rules.py; what both share: verl_rollout_kit.py.

The server behind the load balancer is tests/trainers/tiny.py's TinyServer:
verl's server interface backed by a random tiny Llama, because verl's own
server (vLLMHttpServer) needs vLLM in verl's environment, and vLLM's CPU
build cannot be installed next to verl's torch (docs/TRAINERS.md)."""
import asyncio
import collections
import os
import sys
import time

import numpy as np
import pytest

try:
    import ray
    import torch
    import verl  # noqa: F401
except ImportError as e:  # pragma: no cover - the Debian python has no verl
    pytest.skip(f"verl is not installed ({e}); run scripts/setup-trainers verl and "
                "use build-venv/verl/bin/python", allow_module_level=True)

from omegaconf import OmegaConf
from verl import DataProto

from v05.trainers import verl as vverl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny  # noqa: E402
from verl_rollout_kit import (PLUGIN, RESPONSE_LEN, ROW_MULTIPLE, SCORE_PY,  # noqa: E402
                              advantages_match, algo, check_rows, client,
                              config, environment, prompts, tq_prompts)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from environment(tmp_path_factory)


# ---- the legacy manager: a batch of rows -------------------------------------

def test_manager_rows_k_padding_advantages(env):
    """V05AgentLoopManager built the way verl builds it (load_class_from_fqn
    on the configured name, then create(config=, llm_client=, ...)), its
    worker a Ray actor running verl's SingleTurnAgentLoop against the server
    through verl's LLMServerClient, rewards from verl's RewardLoopWorker."""
    from verl.utils.import_utils import load_class_from_fqn

    cfg = env["config"]
    cls = load_class_from_fqn(
        cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "AgentLoopManager")
    assert cls is vverl.V05AgentLoopManager
    manager = cls.create(config=cfg, llm_client=client(env), teacher_client=None,
                         reward_loop_worker_handles=[env["reward"]])
    (worker,) = manager.agent_loop_workers
    calls0 = ray.get(env["server"].num_calls.remote())
    P = 10
    # The server's samples depend on how many calls came before (its seed
    # is its call count), so the rewards are whatever they are here. The
    # paper's rule at k_init 2 stops a prompt of prior 0.6 unless both of
    # its rewards are 0 (1 in 9 here: a reward is 1 for 2 texts in 3), and
    # asks more of one of prior -0.9 unless both are 0: five of each give
    # different k's but with odds of 3 in 10^5 (at +-0.6 alone, 3 in 100).
    out = manager.generate_sequences(
        prompts(P, "m", priors=[0.6 if i % 2 else -0.9 for i in range(P)]))
    rows, pad, ks = check_rows(out, env["tok"], P)
    st = ray.get(worker.v05_stats.remote())
    # Every issued sample is one row, generated once, its reward pushed once
    # (by the driver: the "v05" reward manager sees no v05_sample and does
    # not push again), and nothing is left in the plugin.
    assert rows == st["samples_issued"] == st["rewards_applied"] == sum(ks.values())
    assert ray.get(env["server"].num_calls.remote()) - calls0 == rows
    assert len(out) % ROW_MULTIPLE == 0 and pad == len(out) - rows < ROW_MULTIPLE
    assert out.meta_info["v05_rows"] == rows and out.meta_info["v05_padding_rows"] == pad
    assert len(set(ks.values())) > 1, ks  # the plugin's k, per prompt
    assert st["prompts_open"] == st["prompts_final"] == st["prompts_held"] == 0
    assert st["releases"] == P
    advantages_match(out, dp=2, seed=1)
    # A second step through the same worker (slots reused).
    out2 = manager.generate_sequences(prompts(P, "n"))
    try:
        rows2, _, ks2 = check_rows(out2, env["tok"], P)
        assert ray.get(worker.v05_stats.remote())["releases"] == 2 * P
        advantages_match(out2, dp=4, seed=2)
    finally:
        manager.v05_close()
    assert ray.get(worker.v05_stats.remote()) == {}  # closed: segment removed


def test_worker_error_cancels_batch(env):
    """A failed generate (the server refuses) cancels the chunk: the
    error comes out, nothing of the batch is left in the plugin; the next
    chunk runs."""
    cfg = env["config"]

    async def run():
        w = vverl.V05AgentLoopWorker(cfg, client(env), None, [env["reward"]])
        try:
            base = await env["server"].num_calls.remote()
            await env["server"].set_fail_after.remote(base + 7)
            with pytest.raises(RuntimeError, match="injected failure"):
                await w.generate_sequences(prompts(5, "e"))
            st = w.v05_stats()
            assert st["prompts_cancelled"] > 0
            assert st["prompts_open"] == st["prompts_held"] == st["prompts_final"] == 0
            await env["server"].set_fail_after.remote(None)
            out = await w.generate_sequences(prompts(5, "f"))
            rows, _, ks = check_rows(out, env["tok"], 5)
            st = w.v05_stats()
            assert st["prompts_open"] == st["prompts_final"] == 0
            return rows
        finally:
            await env["server"].set_fail_after.remote(None)
            w.v05_close()
    assert asyncio.run(run()) > 0


def test_cancelled_samples_are_cancelled_in_the_server(env):
    """A batch given up (one request fails) cancels its other samples, and
    each of their calls is cancelled in verl's server actor too (Ray
    cancels the actor's task: a real server's engine aborts the request
    there, tiny.EngineServer and vLLM's AsyncLLM alike), not left to run
    to its end."""
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    cfg = env["config"]
    server = ray.remote(tiny.HangServer).remote(fail_at=6)
    balancer = get_router_handle(servers={"hang:0": server})

    async def run():
        w = vverl.V05AgentLoopWorker(
            cfg, LLMServerClient(config=cfg, load_balancer_handle=balancer),
            None, [env["reward"]])
        try:
            with pytest.raises(RuntimeError, match="injected failure"):
                await w.generate_sequences(prompts(3, "h"))
            st = w.v05_stats()
            assert st["prompts_open"] == st["prompts_final"] == 0
        finally:
            w.v05_close()
    asyncio.run(run())
    calls = ray.get(server.num_calls.remote())
    assert calls >= 6
    # Ray's cancellation reaches the actor after the worker gave up: wait
    # for it (a guard, not a timing: without it nothing ever arrives).
    deadline = time.monotonic() + 60
    while ray.get(server.num_cancelled.remote()) < calls - 1 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(server.num_cancelled.remote()) == calls - 1


def test_worker_without_streamed_scores_fails_clearly(env):
    """No reward loop workers handed to the agent loop (verl's legacy
    trainer with a colocated reward model): the first trajectory has no
    score, the chunk stops with an error that says why, and nothing of it
    stays in the plugin."""
    cfg = env["config"]

    async def run():
        w = vverl.V05AgentLoopWorker(cfg, client(env), None, None)
        try:
            with pytest.raises(RuntimeError, match="without a reward score"):
                await w.generate_sequences(prompts(3, "s"))
            st = w.v05_stats()
            assert st["prompts_cancelled"] == 3 and st["rewards_applied"] == 0
            assert st["prompts_open"] == st["prompts_held"] == st["prompts_final"] == 0
        finally:
            w.v05_close()
    asyncio.run(run())


def test_worker_refuses_repeated_uids(env):
    """rollout.n > 1 (the trainer repeats each prompt): refused, v05 sets k."""
    cfg = env["config"]

    async def run():
        w = vverl.V05AgentLoopWorker(cfg, client(env), None, [env["reward"]])
        try:
            data = prompts(2, "r").repeat(2, interleave=True)
            with pytest.raises(ValueError, match="rollout.n=1"):
                await w.generate_sequences(data)
        finally:
            w.v05_close()
    asyncio.run(run())


def test_pad_rows_without_padding_needed():
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(4, 2, dtype=torch.long),
                 "responses": torch.ones(4, 3, dtype=torch.long),
                 "attention_mask": torch.ones(4, 5, dtype=torch.long),
                 "response_mask": torch.ones(4, 3)},
        non_tensors={"uid": np.array(list("abcd"), dtype=object)})
    out = vverl.pad_rows(data, 4)
    assert len(out) == 4 and not out.non_tensor_batch[vverl.PAD_FIELD].any()
    out = vverl.pad_rows(data, 3)
    assert len(out) == 6
    assert out.batch["attention_mask"][4:].sum(1).tolist() == [2, 2]
    assert out.batch["response_mask"][4:].sum() == 0


ENGINE_PYTHON = os.environ.get("V05_ENGINE_PYTHON") or os.path.join(
    os.path.dirname(os.path.dirname(HERE)), "build-venv", "engine", "bin", "python")


def test_manager_against_real_vllm(env, tmp_path):
    """The same manager with a real vLLM AsyncLLM (vLLM's CPU build, the
    engine environment) behind verl's load balancer: tiny.EngineServer, the
    server interface in this environment, the engine in a child process
    of the engine environment's Python (vLLM cannot be installed next to
    verl's torch). The model: a random Llama with heads of 32 (vLLM's CPU
    attention) and the byte tokenizer, made here."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    if not os.access(ENGINE_PYTHON, os.X_OK):
        pytest.skip(f"no engine environment at {ENGINE_PYTHON} (scripts/setup-engine)")
    tok = tiny.model_dir(str(tmp_path / "model"), heads=2)
    (tmp_path / "score.py").write_text(SCORE_PY)
    cfg = config(tmp_path)
    server = ray.remote(tiny.EngineServer).remote(ENGINE_PYTHON, str(tmp_path / "model"),
                                                  RESPONSE_LEN)
    try:
        balancer = get_router_handle(servers={"vllm:0": server})
        reward = ray.remote(RewardLoopWorker).remote(cfg)
        manager = vverl.V05AgentLoopManager.create(
            config=cfg, llm_client=LLMServerClient(config=cfg, load_balancer_handle=balancer),
            teacher_client=None, reward_loop_worker_handles=[reward])
        try:
            (worker,) = manager.agent_loop_workers
            P = 8
            out = manager.generate_sequences(prompts(P, "v"))
            rows, pad, ks = check_rows(out, tok, P)
            st = ray.get(worker.v05_stats.remote())
            assert rows == st["samples_issued"] == st["rewards_applied"] == sum(ks.values())
            assert ray.get(server.num_calls.remote()) == rows
            assert len(out) % ROW_MULTIPLE == 0 and pad < ROW_MULTIPLE
            assert st["prompts_open"] == st["prompts_final"] == 0 and st["releases"] == P
            advantages_match(out, dp=2, seed=3)
        finally:
            manager.v05_close()
    finally:
        assert ray.get(server.close.remote()) == 0  # the engine shut down cleanly


# ---- the default (v1) trainer's manager: rows into TransferQueue -------------

def test_manager_tq_rows_into_transfer_queue(env):
    """V05AgentLoopManagerTQ: the v1 trainer's submit (prompt keys tagged
    pending), generate_sequences (returns at once), then every uid is
    tagged finished and has exactly k rows in TransferQueue; the v1
    trainer's advantage path (the fields _compute_advantage fetches, its
    DataProto conversion, compute_advantage_for_multi_trajectories with
    adv_estimator v05) gives each row the plugin's advantage."""
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
    from verl.utils.import_utils import load_class_from_fqn

    # The name configurations written before the package had folders use:
    # it must keep loading, and load the same class.
    cfg = config(env["dir"], manager="v05.verl_rollout.V05AgentLoopManagerTQ")
    tq.init()
    manager = None
    try:
        cls = load_class_from_fqn(
            cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "AgentLoopManager")
        assert cls is vverl.V05AgentLoopManagerTQ
        manager = cls.create(config=cfg, llm_client=client(env), teacher_client=None,
                             reward_loop_worker_handles=[env["reward"]])
        (worker,) = manager.agent_loop_workers
        P = 8
        # Prompts 0 and 1 right in every sample: prompt 0's group
        # contradicts its prior (-0.6) and goes on to k_max, prompt 1's
        # confirms its prior (+0.6) and stops at k_init, so the groups'
        # sizes differ whatever the model samples.
        uids, batch = tq_prompts(P, "t", 1,
                                 truths=["always", "always"] + ["x"] * (P - 2))
        # Two submissions before either is done (as the v1 trainer may):
        # the worker runs them one after the other.
        manager.generate_sequences(batch[:5])
        manager.generate_sequences(batch[5:])
        ray.get(worker.v05_drain.remote())  # the chunks' background tasks
        listing = tq.kv_list()["train"]
        assert all(listing[u]["status"] == "finished" for u in uids)
        keys = sorted(k for k in listing if k.split("_")[0] in uids and k not in uids)
        st = ray.get(worker.v05_stats.remote())
        assert len(keys) == st["samples_issued"] == st["rewards_applied"]
        assert st["prompts_open"] == st["prompts_final"] == 0 and st["releases"] == P
        assert st["batches_submitted"] == st["batches_done"] == 2
        # verl's own replay buffer (the v1 trainer's sampler) selects the
        # finished uids and takes exactly their rows.
        from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
        rb = ReplayBuffer(trainer_mode="sync", trainer_config=cfg,
                          max_off_policy_threshold=None, max_off_policy_strategy="drop",
                          sampler_kwargs=OmegaConf.create({}))
        meta, _ = rb.sample(global_steps=1, partition_id="train", batch_size=P)
        assert sorted(meta.keys) == keys
        keys = list(meta.keys)
        # The v1 trainer's _compute_advantage, step by step, on those keys.
        td = tq.kv_batch_get(keys=keys, partition_id="train",
                             select_fields=["uid", "response_mask", "rm_scores"])
        data = DataProto(batch=td.to_padded_tensor())
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        ks = collections.Counter(str(u) for u in data.non_tensor_batch["uid"])
        assert all(data.non_tensor_batch["uid"][i].v05[1] == ks[str(u)]
                   for i, u in enumerate(data.non_tensor_batch["uid"]))
        assert ks[uids[0]] == PLUGIN["k_max"] and ks[uids[1]] == PLUGIN["k_init"], ks
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator="v05", config=algo())
        for i, u in enumerate(out.non_tensor_batch["uid"]):
            want = torch.tensor(u.v05[5], dtype=torch.float32)
            got = out.batch["advantages"][i]
            assert torch.equal(got, want * out.batch["response_mask"][i].to(got.dtype))
        # A failing chunk: its uids are tagged failure, nothing of it is
        # left in the plugin.
        base = ray.get(env["server"].num_calls.remote())
        ray.get(env["server"].set_fail_after.remote(base + 3))
        fuids = [f"tf-{i}" for i in range(4)]
        fb = batch[:4].clone()
        fb["uid"] = NonTensorStack(*[NonTensorData(u) for u in fuids])
        fb["global_steps"] = NonTensorData(2)
        tq.kv_batch_put(keys=fuids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": 2}] * 4)
        manager.generate_sequences(fb)
        ray.get(worker.v05_drain.remote())
        ray.get(env["server"].set_fail_after.remote(None))
        listing = tq.kv_list()["train"]
        assert all(listing[u]["status"] == "failure" for u in fuids)
        assert not [k for k in listing if k.split("_")[0] in fuids and k not in fuids]
        st = ray.get(worker.v05_stats.remote())
        assert st["prompts_cancelled"] > 0 and st["prompts_open"] == st["prompts_final"] == 0
    finally:
        ray.get(env["server"].set_fail_after.remote(None))
        if manager is not None:
            manager.v05_close()
        tq.close()
