# SPDX-License-Identifier: MIT
"""What the tests of v05.trainers.verl's rollout component share
(test_verl_rollout.py: the managers' rows, legacy and into TransferQueue;
test_verl_rollout_rules.py: the cross-epoch rules and the fill): the
environment (Ray, the tiny model, a TinyServer behind verl's load
balancer, verl's RewardLoopWorker), verl's own config with a v05 user's
keys, training chunks as each trainer hands them over, and the checks of
the rows and advantages that come back. Imported after the modules have
checked that verl is installed."""
import collections
import os
import zlib

import numpy as np
import pytest
import ray
import torch
import verl
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

import v05
from v05.trainers import verl as vverl

import tiny

HERE = os.path.dirname(os.path.abspath(__file__))

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
    if ground_truth == "always":  # every sample right: an all-same group by construction
        return 1.0
    # right or wrong by a hash of the sampled text: varied, reproducible
    return 1.0 if zlib.crc32(solution_str.encode()) % 3 else 0.0
'''


def score_of_text(text):
    return 1.0 if zlib.crc32(text.encode()) % 3 else 0.0




def environment(tmp_path_factory):
    """The test modules' `env` fixture (one per module): Ray (4 logical CPUs: TransferQueue's controller and its two storage
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


def tq_prompts(n, tag, step, with_prior=True, priors=None, truths=None):
    """A training chunk as the v1 trainer hands it to the rollout (a
    TensorDict of the prompts' fields at `step`), its uids put into
    TransferQueue as pending prompts; `truths` the prompts' ground truths
    (default "x": scored by the sampled text's hash; "always": every
    sample right). Returns (uids, batch)."""
    import transfer_queue as tq
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    src = prompts(n, tag, priors).non_tensor_batch
    uids = [str(u) for u in src["uid"]]
    fields = {
        "raw_prompt": NonTensorStack(*[NonTensorData(list(m)) for m in src["raw_prompt"]]),
        "uid": NonTensorStack(*[NonTensorData(u) for u in uids]),
        "data_source": NonTensorStack(*[NonTensorData("tiny") for _ in uids]),
        "reward_model": NonTensorStack(*[NonTensorData({"ground_truth": t})
                                         for t in (truths or ["x"] * n)]),
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
