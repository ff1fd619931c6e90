# SPDX-License-Identifier: MIT
"""v05.trainers.verl's rollout component (agent-loop manager and workers)
against the real verl 0.9.1: verl's own trainer config (hydra,
ppo_trainer.yaml plus the keys a user adds), verl's AgentLoopWorker
machinery and SingleTurnAgentLoop, verl's LLMServerClient and global load
balancer, verl's RewardLoopWorker as a Ray actor, verl's TransferQueue,
and verl's advantage functions.

The server behind the load balancer is tests/trainers/tiny.py's TinyServer:
verl's server interface backed by a random tiny Llama, because verl's own
server (vLLMHttpServer) needs vLLM in verl's environment, and vLLM's CPU
build cannot be installed next to verl's torch (docs/TRAINERS.md)."""
import asyncio
import collections
import os
import sys
import zlib

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
from verl.trainer.ppo import ray_trainer

import v05
from v05.trainers import verl as vverl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny  # noqa: E402

PROMPT_LEN, RESPONSE_LEN = 24, 6
# The workers' segments are named <prefix>-w<i> (made by a manager) or
# <prefix>-<pid>-<hex> (a worker made alone).
SEG_PREFIX = f"vr{os.getpid()}"
ROW_MULTIPLE = 8
PLUGIN = {"k_init": 2, "k_step": 2, "k_max": 8, "pad_multiple": 1,
          "halt_fraction": 0.0, "mode": "v05", "sigma": "paper",
          "max_prompts": 64}

SCORE_PY = '''
import zlib
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    # right or wrong by a hash of the sampled text: varied, reproducible
    return 1.0 if zlib.crc32(solution_str.encode()) % 3 else 0.0
'''


def score_of_text(text):
    return 1.0 if zlib.crc32(text.encode()) % 3 else 0.0


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Ray (4 logical CPUs: TransferQueue's controller and its two storage
    units ask one each), the model directory, the score file, a TinyServer
    actor behind verl's load balancer, and verl's RewardLoopWorker."""
    d = tmp_path_factory.mktemp("verl-rollout")
    tok = tiny.model_dir(str(d / "model"))
    (d / "score.py").write_text(SCORE_PY)
    env_vars = {"PYTHONPATH": os.pathsep.join(
        [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if "V05_LIB" in os.environ:
        env_vars["V05_LIB"] = os.environ["V05_LIB"]
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env_vars})
    try:
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
        from verl.workers.rollout.router import get_router_handle

        cfg = config(d)
        server = ray.remote(tiny.TinyServer).remote(str(d / "model"), RESPONSE_LEN)
        balancer = get_router_handle(servers={"tiny:0": server})
        reward = ray.remote(RewardLoopWorker).remote(cfg)
        ray.get(server.num_calls.remote())
        yield {"dir": d, "tok": tok, "config": cfg, "server": server,
               "balancer": balancer, "reward": reward}
    finally:
        ray.shutdown()
        left = leftover_segments()
        for name in left:  # a failed test's workers
            v05.unlink(name)
        assert not left, f"segments left behind: {left}"


def leftover_segments():
    return sorted(f[len("v05-"):] for f in os.listdir("/dev/shm")
                  if f.startswith(f"v05-{SEG_PREFIX}-") and ":" not in f)


def config(d, manager="v05.trainers.verl.V05AgentLoopManager", **extra):
    """verl's own ppo_trainer config with what a v05 user adds."""
    from hydra import compose, initialize_config_dir

    conf_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    plugin = "{" + ",".join(f"{k}:{v}" for k, v in PLUGIN.items()) + "}"
    overrides = [
        f"actor_rollout_ref.model.path={d / 'model'}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.prompt_length={PROMPT_LEN}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={manager}",
        "algorithm.adv_estimator=v05",
        f"+algorithm.v05_segment={SEG_PREFIX}",
        f"+algorithm.v05_plugin={plugin}",
        f"+algorithm.v05_row_multiple={ROW_MULTIPLE}",
        "reward.reward_manager.name=v05",
        f"reward.custom_reward_function.path={d / 'score.py'}",
        "reward.custom_reward_function.name=compute_score",
    ]
    with initialize_config_dir(config_dir=conf_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    return cfg


def prompts(n, tag, priors=None):
    """A training chunk as the legacy trainer hands it to the rollout
    (_get_gen_batch: raw_prompt, uid, data_source, reward_model, index)."""
    priors = priors if priors is not None else [0.6 if i % 2 else -0.6 for i in range(n)]
    nt = {
        "raw_prompt": np.empty(n, dtype=object),
        "uid": np.array([f"{tag}-{i}" for i in range(n)], dtype=object),
        "data_source": np.array(["tiny"] * n, dtype=object),
        "reward_model": np.array([{"ground_truth": "x"}] * n, dtype=object),
        "index": np.arange(n),
        "v05_prior": np.array(priors, dtype=np.float64),
    }
    for i in range(n):
        nt["raw_prompt"][i] = [{"role": "user", "content": f"q{tag}{i}?"}]
    data = DataProto.from_dict(non_tensors=nt)
    data.meta_info["global_steps"] = 1
    return data


def algo():
    return OmegaConf.create({"adv_estimator": "v05", "norm_adv_by_std_in_grpo": True,
                             "gamma": 1.0, "lam": 1.0, "use_kl_in_reward": False})


def client(env):
    from verl.workers.rollout.llm_server import LLMServerClient
    return LLMServerClient(config=env["config"], load_balancer_handle=env["balancer"])


def check_rows(out, tok, n_prompts):
    """Rows of real samples: per uid exactly samples 0..k-1, k the group's;
    each row's reward is the reward loop's score of its own text; padding
    rows are masked. Returns (rows, padding rows, k by uid)."""
    nt = out.non_tensor_batch
    pad = nt[vverl.PAD_FIELD].astype(bool)
    by_uid = collections.defaultdict(list)
    for i in np.flatnonzero(~pad):
        by_uid[str(nt["uid"][i])].append(i)
    assert len(by_uid) == n_prompts
    ks = {}
    for uid, rows in by_uid.items():
        k = int(nt["v05_k"][rows[0]])
        assert sorted(int(nt["v05_sample"][i]) for i in rows) == list(range(k)), uid
        assert all(isinstance(nt["uid"][i], vverl.V05Uid) for i in rows)
        ks[uid] = k
    plen = out.batch["prompts"].shape[1]
    for i in np.flatnonzero(~pad):
        n_resp = int(out.batch["attention_mask"][i, plen:].sum())
        text = tok.decode(out.batch["responses"][i, :n_resp], skip_special_tokens=True)
        score = float(out.batch["rm_scores"][i].sum())
        assert score == score_of_text(text)
        assert vverl.score_to_reward(score) == pytest.approx(float(nt["v05_reward"][i]))
        assert out.batch["response_mask"][i].sum() > 0
    for i in np.flatnonzero(pad):
        assert torch.all(out.batch["response_mask"][i] == 0)
        assert torch.all(out.batch["rm_scores"][i] == 0)
        assert str(nt["uid"][i]).startswith("pad")
        assert not isinstance(nt["uid"][i], vverl.V05Uid)
    return int((~pad).sum()), int(pad.sum()), ks


def advantages_match(out, dp, seed):
    """verl's compute_advantage (adv_estimator v05) after verl's own
    _balance_batch over dp ranks: each row gets the plugin's advantage for
    its sample (the number the worker copied out of the plugin's group),
    padding rows 0."""
    from test_verl_real import _Balancer

    out.batch["token_level_rewards"] = out.batch["rm_scores"].clone()
    g = torch.Generator().manual_seed(seed)
    out.reorder(torch.randperm(len(out), generator=g))
    ray_trainer.RayPPOTrainer._balance_batch(_Balancer(dp), out, {})
    res = ray_trainer.compute_advantage(out, adv_estimator="v05", config=algo())
    adv, mask = res.batch["advantages"], res.batch["response_mask"]
    nt = res.non_tensor_batch
    for i in range(len(res)):
        want = torch.tensor(float(nt["v05_advantage"][i]), dtype=torch.float32)
        assert torch.equal(adv[i], want * mask[i]), i
    return res


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

def tq_prompts(n, tag, step, with_prior=True, priors=None):
    """A training chunk as the v1 trainer hands it to the rollout (a
    TensorDict of the prompts' fields at `step`), its uids put into
    TransferQueue as pending prompts. Returns (uids, batch)."""
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    src = prompts(n, tag, priors).non_tensor_batch
    uids = [str(u) for u in src["uid"]]
    fields = {
        "raw_prompt": NonTensorStack(*[NonTensorData(list(m)) for m in src["raw_prompt"]]),
        "uid": NonTensorStack(*[NonTensorData(u) for u in uids]),
        "data_source": NonTensorStack(*[NonTensorData("tiny") for _ in uids]),
        "reward_model": NonTensorStack(*[NonTensorData({"ground_truth": "x"}) for _ in uids]),
        "index": NonTensorStack(*[NonTensorData(i) for i in range(n)]),
    }
    if with_prior:
        fields["v05_prior"] = NonTensorStack(
            *[NonTensorData(float(p)) for p in src["v05_prior"]])
    batch = TensorDict(fields, batch_size=n)
    batch["global_steps"] = NonTensorData(step)
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": step}] * n)
    return uids, batch


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
        uids, batch = tq_prompts(P, "t", 1)
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
        assert len(set(ks.values())) > 1, ks
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


# ---- the rules with a cross-epoch state (algorithm.v05_history) -------------

def history_manager(env, tmp_path, rule, mode, **plugin):
    """The legacy manager with +algorithm.v05_history={rule, path, seed: 1}
    and the plugin in `mode`."""
    from omegaconf import open_dict

    cfg = config(env["dir"])
    with open_dict(cfg):
        cfg.algorithm.v05_plugin = dict(PLUGIN, mode=mode, **plugin)
        cfg.algorithm.v05_history = {"rule": rule, "seed": 1,
                                     "path": str(tmp_path / "history.json")}
    return vverl.V05AgentLoopManager.create(
        config=cfg, llm_client=client(env), teacher_client=None,
        reward_loop_worker_handles=[env["reward"]])


def step_prompts(n, tag, step, with_prior=False):
    data = prompts(n, tag)
    if not with_prior:
        del data.non_tensor_batch["v05_prior"]
    data.meta_info["global_steps"] = step
    return data


def groups_of(out):
    """index -> the group's rewards by sample, from the rows."""
    nt = out.non_tensor_batch
    pad = nt[vverl.PAD_FIELD].astype(bool)
    by = collections.defaultdict(dict)
    for i in np.flatnonzero(~pad):
        by[int(nt["index"][i])][int(nt["v05_sample"][i])] = \
            float(nt["v05_reward"][i])
    return {p: [r[s] for s in sorted(r)] for p, r in by.items()}


def test_history_greso_skips_and_persists(env, tmp_path):
    """Greso under verl: the saved state (prompts 0-4 with runs of 5
    all-success groups) is loaded; a step rolls out exactly the prompts the
    filter, from that state, keeps (the others have no rows); the next step
    ends the first (the rates adapt) and filters again; the file saved at
    the end holds what the library, fed the same groups, holds."""
    import json

    from v05.core.rules import Greso

    shadow = Greso(seed=1)
    for _ in range(5):
        for pid in range(5):
            shadow.fold(pid, [1.0] * 8)
    (tmp_path / "history.json").write_text(json.dumps({
        "rule": "greso", "step": 6, "first_epoch": False,
        "state": shadow.state_dict()}))
    # The filter over mode grpo's groups: grpo drops none, so every prompt
    # rolled out has its rows (mode greso would drop an all-same group,
    # and the rows could not tell it from a skip).
    manager = history_manager(env, tmp_path, "greso", "grpo", k_init=8,
                              k_max=8)
    try:
        out = manager.generate_sequences(step_prompts(10, "g", 7))
        got = groups_of(out)
        shadow.step_end()  # the file's step 6 ends as step 7 begins
        want = shadow.select(range(10), step=7)
        assert sorted(got) == want and len(want) < 10  # some were skipped
        assert set(range(5, 10)) <= set(want)  # no run: never skipped
        for pid in want:
            assert len(got[pid]) == 8
            shadow.fold(pid, got[pid])
        shadow.step_end()  # step 8's first chunk ends step 7
        got = groups_of(manager.generate_sequences(step_prompts(10, "h", 8)))
        assert sorted(got) == shadow.select(range(10), step=8)
        for pid, r in got.items():
            shadow.fold(pid, r)
    finally:
        manager.v05_close()
    # Saved at close: both steps' groups folded as the library folds them.
    saved = json.loads((tmp_path / "history.json").read_text())
    assert saved["step"] == 8 and saved["first_epoch"] is False
    assert saved["state"] == json.loads(json.dumps(shadow.state_dict()))


def test_history_knapsack_plans_from_the_estimates(env, tmp_path):
    """Knapsack under verl: prompts with 8 past outcomes each (0 to 8
    successes, from a saved history) get the knapsack of their estimates
    at 4 per prompt; their groups are folded at the step; a data column
    v05_prior next to the history is refused."""
    import json

    from v05.core.rules import KnapsackHistory

    h = KnapsackHistory()
    est = {}
    for pid in range(9):
        h.fold(pid, 0, [1.0] * pid + [-1.0] * (8 - pid))
        est[pid] = pid / 8
    (tmp_path / "history.json").write_text(json.dumps({
        "rule": "knapsack", "step": 0, "first_epoch": False,
        "state": h.state_dict()}))
    manager = history_manager(env, tmp_path, "knapsack", "knapsack",
                              k_init=4, k_max=64)
    try:
        out = manager.generate_sequences(step_prompts(9, "k", 1))
        got = groups_of(out)
        plan = v05.knapsack_plan([est[p] for p in range(9)], per_prompt=4)
        assert {p: len(r) for p, r in got.items()} == dict(enumerate(plan))
        with pytest.raises(ValueError, match="v05_prior column"):
            manager.generate_sequences(step_prompts(9, "j", 2, with_prior=True))
    finally:
        manager.v05_close()
    saved = json.loads((tmp_path / "history.json").read_text())
    for pid, r in got.items():
        h.fold(pid, 1, r)
    assert saved["state"] == json.loads(json.dumps(h.state_dict()))


def test_history_greso_through_transfer_queue(env, tmp_path):
    """The default trainer's manager with +algorithm.v05_history (greso's
    filter, here over mode grpo's groups):
    the prompts the filter skips are tagged finished with no rows in
    TransferQueue, the others have their rows; the filter's choice is the
    library's from the saved state."""
    import json

    import transfer_queue as tq
    from omegaconf import open_dict

    from v05.core.rules import Greso

    shadow = Greso(seed=1)
    for pid in range(4):
        shadow.fold(pid, [1.0] * 8)
    (tmp_path / "history.json").write_text(json.dumps({
        "rule": "greso", "step": 2, "first_epoch": False,
        "state": shadow.state_dict()}))
    cfg = config(env["dir"], manager="v05.trainers.verl.V05AgentLoopManagerTQ")
    with open_dict(cfg):
        # GRESO's filter over GRPO's groups (any mode takes the filter;
        # grpo drops no group, so every kept prompt has its 8 rows).
        cfg.algorithm.v05_plugin = dict(PLUGIN, mode="grpo", k_init=8,
                                        k_max=8)
        cfg.algorithm.v05_history = {"rule": "greso", "seed": 1,
                                     "path": str(tmp_path / "history.json")}
    tq.init()
    manager = None
    try:
        manager = vverl.V05AgentLoopManagerTQ.create(
            config=cfg, llm_client=client(env), teacher_client=None,
            reward_loop_worker_handles=[env["reward"]])
        (worker,) = manager.agent_loop_workers
        P = 8
        uids, batch = tq_prompts(P, "q", 3, with_prior=False)
        manager.generate_sequences(batch)
        ray.get(worker.v05_drain.remote())
        shadow.step_end()  # the file's step 2 ends as step 3 begins
        want = shadow.select(range(P), step=3)
        assert 0 < len(want) < P
        listing = tq.kv_list()["train"]
        assert all(listing[u]["status"] == "finished" for u in uids)
        rows = collections.Counter(k.split("_")[0] for k in listing
                                   if k.split("_")[0] in uids and k not in uids)
        assert sorted(rows) == sorted(uids[i] for i in want)
        assert set(rows.values()) == {8}
    finally:
        if manager is not None:
            manager.v05_close()
        tq.close()


def test_history_pilot_commit_skips_the_solved(env, tmp_path):
    """Pilot-Commit under verl: a saved record with prompts 0-4 solved at
    step 0; at step 1 those have no rows and are not piloted again, the
    others are (each folded at step 1). The band is [0, 0.9999], so only
    a solved pilot (8 of 8, odds (2/3)^8 = 0.04 a prompt with this server's
    rewards) drops: the chunk has rows unless all five do (1 in 10^7), and
    each prompt with rows has its pilot of 8 and commit of 4."""
    import json

    from v05.core.rules import PilotCommit

    pc = dict(pilot=8, lower=0.0, upper=0.0001, evict=1.0)
    shadow = PilotCommit(**pc)
    for pid in range(5):
        shadow.fold(pid, 0, [1.0] * 8)
    (tmp_path / "history.json").write_text(json.dumps({
        "rule": "pilot-commit", "step": 0, "first_epoch": True,
        "state": shadow.state_dict()}))
    manager = history_manager(env, tmp_path, "pilot-commit", "pilot-commit",
                              k_init=8, k_step=4, k_max=12, pc_lower=0.0,
                              pc_upper=0.0001)
    try:
        got = groups_of(manager.generate_sequences(step_prompts(10, "p", 1)))
    finally:
        manager.v05_close()
    assert got and not set(got) & set(range(5))
    assert all(len(r) == 12 for r in got.values())  # committed: 8 + 4
    saved = json.loads((tmp_path / "history.json").read_text())
    epochs = {pid: epoch for pid, epoch, _ in saved["state"]["prompts"]}
    assert epochs == {**{p: 0 for p in range(5)}, **{p: 1 for p in range(5, 10)}}
    for pid in got:
        assert PilotCommit(**pc).fold(pid, 1, got[pid]) == "commit"


def test_fill_hands_verls_replay_buffer_what_to_refill(env):
    """+algorithm.v05_fill=contrast and +algorithm.v05_skip under the
    default trainer's manager (mode grpo, groups of 4): every informative
    group has its rows and is tagged finished; a prompt whose group is
    all-same, or whose prior (here +1) the skip rule trusts, is tagged
    failure with no rows (a skipped one without a sample); verl's own sync
    ReplayBuffer with sync_refill_failed_groups evicts exactly those and
    asks its refill for exactly as many prompts, and samples the
    informative ones. (The refill itself, verl's trainer dispatching new
    prompts, is not run here: its prompts would go the same way.)"""
    import transfer_queue as tq
    from omegaconf import open_dict
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from v05.core.fill import informative

    cfg = config(env["dir"], manager="v05.trainers.verl.V05AgentLoopManagerTQ")
    with open_dict(cfg):
        # grpo drops nothing: the fill's own classification decides.
        cfg.algorithm.v05_plugin = dict(PLUGIN, mode="grpo", k_init=4,
                                        k_max=4)
        cfg.algorithm.v05_fill = "contrast"
        cfg.algorithm.v05_skip = {"revisit": 0.0}
    tq.init()
    manager = None
    try:
        manager = vverl.V05AgentLoopManagerTQ.create(
            config=cfg, llm_client=client(env), teacher_client=None,
            reward_loop_worker_handles=[env["reward"]])
        (worker,) = manager.agent_loop_workers
        P = 12
        priors = [1.0 if i % 4 == 0 else 0.0 for i in range(P)]
        uids, batch = tq_prompts(P, "f", 1, priors=priors)
        manager.generate_sequences(batch)
        ray.get(worker.v05_drain.remote())
        listing = tq.kv_list()["train"]
        rows = collections.Counter(k.split("_")[0] for k in listing
                                   if k.split("_")[0] in uids and k not in uids)
        status = {u: listing[u]["status"] for u in uids}
        skipped = [u for i, u in enumerate(uids) if i % 4 == 0]
        assert all(status[u] == "failure" and u not in rows for u in skipped)
        for u in uids:
            assert (status[u] == "finished") == (u in rows)
            if u in rows:
                assert rows[u] == 4
        failed = [u for u in uids if status[u] == "failure"]
        assert len(failed) > len(skipped)  # all-same groups too
        st = ray.get(worker.v05_stats.remote())
        # Skipped prompts never reached the plugin or the engine.
        assert st["samples_issued"] == 4 * (P - len(skipped))
        assert st["prompts_open"] == st["prompts_final"] == 0
        # The rows of a finished prompt are an informative group.
        td = tq.kv_batch_get(
            keys=[k for k in listing if k.split("_")[0] in rows
                  and k not in uids], partition_id="train",
            select_fields=["uid", "rm_scores"])
        by = collections.defaultdict(list)
        for u, sc in zip(td["uid"], td["rm_scores"]):
            by[str(u)].append(float(sc.sum()))
        assert len(by) == len(rows)
        assert all(informative("dapo", [2 * x - 1 for x in v])
                   for v in by.values())

        # verl's replay buffer: the failures are evicted and exactly as
        # many prompts are asked of its refill; the finished ones stay.
        class Refill(Exception):
            pass

        asked = []

        def refill(n):
            asked.append(n)
            raise Refill

        rb = ReplayBuffer(trainer_mode="sync", trainer_config=cfg,
                          max_off_policy_threshold=None,
                          max_off_policy_strategy="drop",
                          sampler_kwargs=OmegaConf.create({}),
                          poll_interval=0.05, refill_fn=refill,
                          sync_refill_failed_groups=True, gen_batch_size=1,
                          train_batch_size=P)
        with pytest.raises(Refill):
            rb.sample(global_steps=1, partition_id="train", batch_size=P)
        assert asked == [len(failed)]
        left = tq.kv_list()["train"]
        assert not [u for u in failed if u in left]
        assert all(left[u]["status"] == "finished" for u in rows)
        # With as many informative groups as asked for, it samples them.
        rb.refill_fn = None
        meta, _ = rb.sample(global_steps=1, partition_id="train",
                            batch_size=len(rows))
        assert {k.split("_")[0] for k in meta.keys} == set(rows)
    finally:
        if manager is not None:
            manager.v05_close()
        tq.close()


def test_fill_settings_are_checked():
    from v05.trainers.verl import main_ppo_overrides
    from v05.trainers.verl.agent_loop import fill_config

    ov = main_ppo_overrides(fill="contrast", skip={"margin": 0.1, "seed": 3})
    assert "+algorithm.v05_fill=contrast" in ov
    assert "+algorithm.v05_skip={margin:0.1,seed:3}" in ov
    assert "trainer.v1.sampler.sync_refill_failed_groups=true" in ov

    assert fill_config(OmegaConf.create({})) == (None, None)
    fill, rule = fill_config(OmegaConf.create(
        {"v05_fill": "signal", "v05_skip": {"margin": 0.1, "seed": 3}}))
    assert fill == "signal" and rule.margin == 0.1 and rule.seed == 3
    for bad in ({"v05_fill": "all"}, {"v05_skip": {"margin": 0.1}},
                {"v05_fill": "contrast", "v05_skip": {"width": 1}},
                {"v05_fill": "contrast", "v05_skip": {"margin": 2}}):
        with pytest.raises(ValueError):
            fill_config(OmegaConf.create(bad))
