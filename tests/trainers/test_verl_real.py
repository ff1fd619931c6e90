# SPDX-License-Identifier: MIT
"""v05.trainers.verl against the real verl 0.9.1 (build-venv/verl, made by
scripts/setup-trainers): the estimator through verl's own compute_advantage
on a real DataProto whose rows were shuffled and balanced by verl's own
_balance_batch, and the reward managers built by verl's own loaders."""
import asyncio
import os
import subprocess
import sys
import uuid
import zlib

import numpy as np
import pytest

try:
    import torch
    import verl  # noqa: F401
    from omegaconf import OmegaConf
except ImportError as e:  # pragma: no cover - the Debian python has no verl
    pytest.skip(f"verl is not installed ({e}); run scripts/setup-trainers verl and "
                "use build-venv/verl/bin/python", allow_module_level=True)

from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer

import v05
from v05.trainers import verl as vverl

HERE = os.path.dirname(os.path.abspath(__file__))
P, R = 4, 8  # prompt and response widths


def outcome(uid, sample):
    """The stand-in policy's answer for a sample: right (1) or wrong (0)."""
    return 1 if zlib.crc32(f"{uid}/{sample}".encode()) % 3 else 0


def roll_out(plugin, uids, priors):
    """Run the plugin's decisions with rewards outcome(uid, s) mapped as the
    reward managers map them. Returns the rows (uid, sample, score) and the
    final decisions by uid."""
    writer = v05.RewardWriter.attach(plugin.name)
    rows, finals = [], {}
    pending = plugin.submit(list(zip(uids, priors)))
    while len(finals) < len(uids):
        for d in pending:
            if d.kind == "sample":
                for s in d.samples:
                    score = outcome(d.uid, s)
                    rows.append((d.uid, s, score))
                    writer.push(d.uid, s, vverl.score_to_reward(score),
                                gen=d.gen)
            elif d.kind == "final":
                finals[d.uid] = d
        if len(finals) < len(uids):
            assert plugin.wait_blocking(10.0)
            pending = plugin.poll()
    writer.close()
    return rows, finals


def make_data(rows, groups=None, n_pad=0):
    """A verl DataProto of the rows (uid, sample, score): response lengths
    vary (so balancing moves rows), the score at the last response token;
    groups: uid -> plain group numbers, recorded per row as the rollout side
    does. n_pad rows of one fresh uid, zero reward, as verl's v1 padding."""
    n = len(rows) + n_pad
    prompts = torch.randint(3, 100, (n, P))
    responses = torch.randint(3, 100, (n, R))
    attn = torch.zeros(n, P + R, dtype=torch.long)
    attn[:, :P] = 1
    rmask = torch.zeros(n, R, dtype=torch.float32)
    tlr = torch.zeros(n, R, dtype=torch.float32)
    for i in range(n):
        length = 1 + zlib.crc32(str(i).encode()) % R
        attn[i, P:P + length] = 1
        rmask[i, :length] = 1
        if i < len(rows):
            tlr[i, length - 1] = float(rows[i][2])
    pad_uid = f"pad{uuid.uuid4().hex}"
    nt = {"uid": np.array([r[0] for r in rows] + [pad_uid] * n_pad, dtype=object)}
    if groups is not None:
        for f in vverl.ROW_FIELDS:
            nt[f] = np.zeros(n, dtype=np.int64 if f in ("v05_sample", "v05_k")
                             else np.float64)
        for i, (uid, s, _) in enumerate(rows):
            g = groups[uid]
            nt["v05_sample"][i] = s
            nt["v05_k"][i] = g.k
            nt["v05_baseline"][i] = g.baseline
            nt["v05_sigma"][i] = g.sigma
            nt["v05_reward"][i] = g.rewards[s]
            nt["v05_advantage"][i] = g.advantages[s]
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses,
                 "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": attn, "response_mask": rmask,
                 "token_level_rewards": tlr},
        non_tensors=nt)
    data.non_tensor_batch["row"] = np.arange(n)  # to find rows again
    return data


class _Balancer:
    """What RayPPOTrainer._balance_batch reads from its trainer: the actor's
    data-parallel size (from the worker group) and no prefix grouper."""

    def __init__(self, dp):
        self.dp = dp

    def _get_dp_size(self, worker_group, role):
        return self.dp

    actor_rollout_wg = None


def shuffle_and_balance(data, dp, seed):
    """A random permutation, then verl's own balancing across dp ranks."""
    g = torch.Generator().manual_seed(seed)
    data.reorder(torch.randperm(len(data), generator=g))
    before = data.non_tensor_batch["row"].copy()
    metrics = {}
    ray_trainer.RayPPOTrainer._balance_batch(_Balancer(dp), data, metrics)
    assert "global_seqlen/min" in metrics  # verl's balancing ran
    assert not np.array_equal(before, data.non_tensor_batch["row"])
    return data


def expected_advantages(plugin, finals):
    out = {}
    for uid, d in finals.items():
        g = plugin.group(d)
        out[uid] = (g.k, g.baseline, g.sigma, g.rewards.copy(), g.advantages.copy())
        del g
    return out


class _G:  # plain group numbers, as a rollout on another host has them
    def __init__(self, k, baseline, sigma, rewards, advantages):
        self.k, self.baseline, self.sigma = k, baseline, sigma
        self.rewards, self.advantages = rewards, advantages


def check(data, rows, expect, pad_rows):
    adv = data.batch["advantages"]
    assert torch.equal(adv, data.batch["returns"])
    mask = data.batch["response_mask"]
    for pos, row in enumerate(data.non_tensor_batch["row"]):
        if row >= len(rows):
            assert torch.all(adv[pos] == 0), "a padding row got an advantage"
            continue
        uid, s, _ = rows[row]
        want = torch.tensor(float(expect[uid][4][s]))
        assert torch.equal(adv[pos], want * mask[pos]), (uid, s)
    assert pad_rows == sum(1 for r in data.non_tensor_batch["row"] if r >= len(rows))


def algo(**kw):
    return OmegaConf.create({"adv_estimator": "v05", "norm_adv_by_std_in_grpo": True,
                             "gamma": 1.0, "lam": 1.0, "use_kl_in_reward": False,
                             **kw})


def test_registered_in_every_registry():
    from verl.experimental.reward_loop.reward_manager import \
        get_reward_manager_cls as loop_cls
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl.workers.reward_manager import get_reward_manager_cls as legacy_cls

    assert core_algos.get_adv_estimator_fn("v05") is vverl.compute_v05_advantage
    assert loop_cls("v05") is vverl.reward_loop_manager_cls()
    assert legacy_cls("v05") is vverl.legacy_reward_manager_cls()
    # What RewardManagerConfig.__post_init__ asserts for source "register".
    assert "v05" in REWARD_MANAGER


def test_estimator_rows_shuffled_balanced_plain_numbers(segname):
    """Trainer on another host: rows carry their group's numbers (V05Uid);
    no segment is reachable. Rows shuffled, balanced over 4 ranks, and 3
    padding rows of an unknown uid (as verl's v1 trainer appends)."""
    uids = [f"u{i}" for i in range(10)]
    with v05.Plugin.create(segname, max_prompts=32, pad_multiple=1,
                           mode="v05-eb") as plugin:
        rows, finals = roll_out(plugin, uids, [0.6 if i % 2 else -0.4 for i in range(10)])
        expect = expected_advantages(plugin, finals)
        for d in finals.values():
            plugin.release(d)
    assert any(e[0] > 4 for e in expect.values())  # k varies
    n_pad = (-len(rows)) % 4 or 4
    data = make_data(rows, {u: _G(*e) for u, e in expect.items()}, n_pad=n_pad)
    vverl.tag_rows(data)
    data = shuffle_and_balance(data, dp=4, seed=1)
    out = ray_trainer.compute_advantage(data, adv_estimator="v05", config=algo())
    check(out, rows, expect, n_pad)


def test_estimator_segment_zero_copy_plain_uids(segname):
    """Trainer on the segment's host, rows with plain uids only (what the
    v1 trainer fetches from TransferQueue): groups come from the segment's
    completion ring through a reader, rows matched by reward; the reader
    hands every slot back. Through verl's v1 advantage function."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    uids = [f"z{i}" for i in range(8)]
    with v05.Plugin.create(segname, max_prompts=32, pad_multiple=1,
                           mode="v05-eb") as plugin:
        # The trainer's reader exists before groups finish, as in a run.
        assert vverl.groups.groups.from_segment(segname, "none-yet", 0.0) is None
        rows, finals = roll_out(plugin, uids, [0.2 * (i - 4) for i in range(8)])
        expect = expected_advantages(plugin, finals)
        # The rollout side is done with the groups: it releases its hold;
        # each slot stays until the trainer's reader releases it too.
        for d in finals.values():
            plugin.release(d)
        data = make_data(rows)
        data = shuffle_and_balance(data, dp=2 if len(rows) % 2 == 0 else 1, seed=2)
        keys = [f"{u}_0_{i}" for i, u in enumerate(data.non_tensor_batch["uid"])]
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator="v05",
            config=algo(v05_segment=segname))
        check(out, rows, expect, 0)
        plugin.poll()  # applies the reader's releases
        st = plugin.stats()
        assert st["reader_releases"] == len(uids) == st["releases"]
        # A second call finds the groups in the kept copies.
        again = ray_trainer.compute_advantage(make_data(rows), adv_estimator="v05",
                                              config=algo(v05_segment=segname))
        check(again, rows, expect, 0)
    vverl.groups.groups.close()


def test_estimator_refuses_rows_that_are_not_the_group(segname):
    uids = ["m0", "m1"]
    with v05.Plugin.create(segname, max_prompts=8, pad_multiple=1,
                           mode="v05-eb") as plugin:
        rows, finals = roll_out(plugin, uids, [0.0, 0.0])
        expect = expected_advantages(plugin, finals)
        for d in finals.values():
            plugin.release(d)
    groups = {u: _G(*e) for u, e in expect.items()}
    # A row lost: the uid's row count is not k.
    data = make_data(rows[1:], groups)
    vverl.tag_rows(data)
    with pytest.raises(ValueError, match="rows|samples"):
        ray_trainer.compute_advantage(data, adv_estimator="v05", config=algo())
    # A row whose reward is not its sample's.
    bad = [(u, s, 1 - sc) if i == 0 else (u, s, sc) for i, (u, s, sc) in enumerate(rows)]
    data = make_data(bad, groups)
    vverl.tag_rows(data)
    with pytest.raises(ValueError, match="reward"):
        ray_trainer.compute_advantage(data, adv_estimator="v05", config=algo())


def test_estimator_unknown_uids_get_verl_grpo():
    """Rows of uids v05 never saw (validation, another estimator's data):
    verl's own GRPO advantages; v05_unknown=zero and =error as documented."""
    rows = [(f"val{i // 3}", i % 3, outcome("val", i)) for i in range(9)]
    data = make_data(rows)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_rewards"], data.batch["response_mask"],
        data.non_tensor_batch["uid"])
    out = ray_trainer.compute_advantage(data, adv_estimator="v05", config=algo())
    assert torch.equal(out.batch["advantages"], ref)
    assert ref.abs().sum() > 0
    out = ray_trainer.compute_advantage(make_data(rows), adv_estimator="v05",
                                        config=algo(v05_unknown="zero"))
    assert torch.all(out.batch["advantages"] == 0)
    with pytest.raises(KeyError, match="no group"):
        ray_trainer.compute_advantage(make_data(rows), adv_estimator="v05",
                                      config=algo(v05_unknown="error"))


# ---- reward managers, built by verl's loaders ---------------------------------

SCORE_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    if ground_truth in ("nan", "big"):  # a verifier that failed, or misscales
        return {"nan": float("nan"), "big": 1.5}[ground_truth]
    return 1.0 if solution_str == ground_truth else 0.0
'''


def trainer_config(tmp_path, segname):
    from tiny import tokenizer
    tokenizer(str(tmp_path / "tok"))
    (tmp_path / "score.py").write_text(SCORE_PY)
    return OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": str(tmp_path / "tok"),
                                        "tokenizer_path": None}},
        "algorithm": {"adv_estimator": "v05", "v05_segment": segname},
        "reward": {
            "num_workers": 1,
            "reward_manager": {"source": "register", "name": "v05",
                               "module": {"path": None, "name": None}},
            "custom_reward_function": {"path": str(tmp_path / "score.py"),
                                       "name": "compute_score",
                                       "reward_kwargs": {}},
            "reward_model": {"enable": False},
            "sandbox_fusion": {"url": None},
        },
    })


def one_row(tok, uid, sample, text, truth, gen=0):
    """A one-row DataProto as verl's agent loop sends to the reward loop."""
    p = torch.tensor(tok("q?")["input_ids"])
    r = torch.tensor(tok(text)["input_ids"])
    ids = torch.cat([p, r])
    return DataProto.from_dict(
        tensors={"prompts": p[None], "responses": r[None], "input_ids": ids[None],
                 "attention_mask": torch.ones_like(ids)[None]},
        non_tensors={"uid": np.array([uid], dtype=object),
                     "v05_sample": np.array([sample]),
                     "v05_gen": np.array([gen]),
                     "data_source": np.array(["test"], dtype=object),
                     "reward_model": np.array([{"ground_truth": truth}], dtype=object)})


def test_reward_loop_worker_builds_and_pushes(segname, tmp_path, monkeypatch):
    """verl's RewardLoopWorker (the reward loop's Ray actor class, run in
    this process) loads "v05" with load_reward_manager; each score reaches
    the plugin and the groups finish."""
    sys.path.insert(0, HERE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    cfg = trainer_config(tmp_path, segname)
    uids = ["a", "b", "c"]

    async def run(plugin):
        # The manager binds the event loop it is built in (as in its actor).
        worker = RewardLoopWorker(cfg)
        assert type(worker.reward_manager) is vverl.reward_loop_manager_cls()
        tok = worker.input_tokenizer
        pending = plugin.submit([(u, 0.0) for u in uids])
        finals, pushed = {}, 0
        while len(finals) < len(uids):
            rows = [(d.uid, s, d.gen) for d in pending if d.kind == "sample"
                    for s in d.samples]
            results = await asyncio.gather(*[worker.compute_score(
                one_row(tok, u, s, "yes" if outcome(u, s) else "no", "yes", g))
                for u, s, g in rows])
            for (u, s, _), res in zip(rows, results):
                assert res["reward_score"] == outcome(u, s)
                assert res["reward_extra_info"]["v05_pushed"] is True
                assert res["reward_extra_info"]["v05_reward"] == (1.0 if outcome(u, s) else -1.0)
                pushed += 1
            finals.update((d.uid, d) for d in pending if d.kind == "final")
            if len(finals) < len(uids):
                assert plugin.wait_blocking(10.0)
                pending = plugin.poll()
        assert plugin.stats()["rewards_applied"] == pushed
        for d in finals.values():
            g = plugin.group(d)
            assert list(g.rewards) == [1.0 if outcome(d.uid, s) else -1.0 for s in range(g.k)]
            del g
            plugin.release(d)
        # A validation row (no v05_sample) is scored, not pushed.
        row = one_row(tok, "val", 0, "yes", "yes")
        row.non_tensor_batch.pop("v05_sample")
        res = await worker.compute_score(row)
        assert res["reward_score"] == 1.0 and res["reward_extra_info"]["v05_pushed"] is False
        assert plugin.stats()["rewards_applied"] == pushed

    with v05.Plugin.create(segname, max_prompts=8, pad_multiple=1,
                           mode="v05-eb") as plugin:
        asyncio.run(run(plugin))


@pytest.mark.parametrize("truth, words", [("nan", "is nan: not finite"),
                                           ("big", "is 1.5: outside [0, 1]")])
def test_reward_loop_bad_score_raises_naming_the_row(segname, tmp_path,
                                                    monkeypatch, truth, words):
    """A v05 row's score that is NaN or outside the scores' range: verl's
    reward loop raises with the row's uid and sample, and nothing reaches
    the plugin; a validation row with the same score is only scored."""
    sys.path.insert(0, HERE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    cfg = trainer_config(tmp_path, segname)

    async def run(plugin):
        worker = RewardLoopWorker(cfg)
        tok = worker.input_tokenizer
        (d,) = plugin.submit([("bad", 0.0)])
        with pytest.raises(ValueError) as e:
            await worker.compute_score(one_row(tok, "bad", 2, "yes", truth, d.gen))
        assert f"verl score of uid 'bad' sample 2 {words}" in str(e.value)
        row = one_row(tok, "val", 0, "yes", truth)
        row.non_tensor_batch.pop("v05_sample")
        res = await worker.compute_score(row)
        assert res["reward_extra_info"]["v05_pushed"] is False
        assert np.isnan(res["reward_extra_info"]["v05_reward"])
        plugin.poll()
        st = plugin.stats()
        assert st["rewards_applied"] == 0
        assert st["rejected_nonfinite"] == st["rejected_range"] == 0

    with v05.Plugin.create(segname, max_prompts=8, pad_multiple=1,
                           mode="v05-eb") as plugin:
        asyncio.run(run(plugin))


def test_estimator_grpo_fallback_is_warned_and_counted(caplog):
    """Rows of uids v05 has no group for get verl's own GRPO advantages, with
    a warning saying how many and why, and a count."""
    import logging

    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    index = np.array(["x"] * 3 + ["y"] * 3, dtype=object)
    tlr = torch.zeros(6, 4)
    tlr[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    mask = torch.ones(6, 4)
    before = vverl.fallback_counts()
    with caplog.at_level(logging.WARNING):
        adv, _ = vverl.compute_v05_advantage(tlr, mask, index=index, config=algo())
    want, _ = compute_grpo_outcome_advantage(tlr, mask, index=index)
    assert torch.equal(adv, want)
    assert vverl.fallback_counts()["rows"] - before["rows"] == 6
    assert any("6 rows of 2 uids (x, y) have no v05 group and get verl's GRPO "
               "advantages" in r.message for r in caplog.records)


def test_reward_loop_manager_elsewhere_does_not_push(tmp_path, monkeypatch):
    """No segment on this host: the manager scores and says so
    (v05_pushed False), for the rollout side to push."""
    sys.path.insert(0, HERE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils import hf_tokenizer

    cfg = trainer_config(tmp_path, f"absent-{os.getpid()}")
    tok = hf_tokenizer(str(tmp_path / "tok"))

    async def run():
        manager = load_reward_manager(cfg, tok)
        return await manager.run_single(one_row(tok, "x", 0, "yes", "yes"))
    res = asyncio.run(run())
    assert res["reward_score"] == 1.0
    assert res["reward_extra_info"]["v05_pushed"] is False


def test_legacy_manager_built_by_registry(segname, tmp_path):
    sys.path.insert(0, HERE)
    from tiny import tokenizer
    from verl.workers.reward_manager import get_reward_manager_cls

    tok = tokenizer(str(tmp_path / "tok"))

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if solution_str == ground_truth else 0.0

    with v05.Plugin.create(segname, max_prompts=8, pad_multiple=1,
                           mode="v05-eb") as plugin:
        manager = get_reward_manager_cls("v05")(tok, 0, compute_score, "data_source",
                                                segment=segname)
        ds = plugin.submit([("L0", 0.0), ("L1", 0.0)])
        rows = [(d.uid, s) for d in ds for s in d.samples]
        gens = [d.gen for d in ds for s in d.samples]
        # Rows of different lengths: pad as verl does (right-padded responses).
        texts = ["yes" if outcome(u, s) else "no" for u, s in rows]
        p = torch.tensor(tok("q?")["input_ids"])
        resp = torch.zeros(len(rows), 3, dtype=torch.long)
        attn = torch.zeros(len(rows), len(p) + 3, dtype=torch.long)
        attn[:, :len(p)] = 1
        for i, t in enumerate(texts):
            ids = tok(t)["input_ids"]
            resp[i, :len(ids)] = torch.tensor(ids)
            attn[i, len(p):len(p) + len(ids)] = 1
        data = DataProto.from_dict(
            tensors={"prompts": p.repeat(len(rows), 1), "responses": resp,
                     "attention_mask": attn},
            non_tensors={"uid": np.array([u for u, _ in rows], dtype=object),
                         "v05_sample": np.array([s for _, s in rows]),
                         "v05_gen": np.array(gens),
                         "data_source": np.array(["t"] * len(rows), dtype=object),
                         "reward_model": np.array([{"ground_truth": "yes"}] * len(rows),
                                                  dtype=object)})
        out = manager(data, return_dict=True)
        for i, t in enumerate(texts):
            assert out["reward_tensor"][i].sum() == (1.0 if t == "yes" else 0.0)
            assert out["reward_tensor"][i, len(t) - 1] == out["reward_tensor"][i].sum()
        assert all(out["reward_extra_info"]["v05_pushed"])
        plugin.poll()
        assert plugin.stats()["rewards_applied"] == len(rows)


# ---- registration through verl's external-module mechanism ---------------------

PROBE = r'''
import verl
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY
print(sorted(n for n in ("v05",) if n in ADV_ESTIMATOR_REGISTRY and
             n in REWARD_MANAGER and n in REWARD_MANAGER_REGISTRY))
'''


@pytest.mark.parametrize("module", ["v05.trainers.verl", "v05.verl"])
def test_verl_use_external_modules_registers(module):
    """The module's name, and the older name configurations already use."""
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES=module,
               VERL_USE_EXTERNAL_PLUGINS="none")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['v05']"
    env.pop("VERL_USE_EXTERNAL_MODULES")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[]"  # it is that variable


def test_verl_plugins_entry_point_registers():
    """Installed as a distribution (scripts/setup-trainers), v05 is in verl's
    "verl.plugins" entry-point group: `import verl` registers it with no
    variable set (VERL_USE_EXTERNAL_PLUGINS defaults to "auto")."""
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="verl.plugins") if ep.name == "v05"]
    if not eps:
        pytest.skip("v05 is not installed in this environment (scripts/setup-trainers)")
    assert eps[0].value == "v05.trainers.verl"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['v05']"


def test_registered_inside_a_ray_actor():
    """A Ray actor started with VERL_USE_EXTERNAL_MODULES in its runtime
    environment has "v05" in all three registries after `import verl`."""
    ray = pytest.importorskip("ray")
    env_vars = {k: os.environ[k] for k in ("PYTHONPATH", "V05_LIB") if k in os.environ}
    env_vars.update(VERL_USE_EXTERNAL_MODULES="v05.trainers.verl",
                    VERL_USE_EXTERNAL_PLUGINS="none")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env_vars})
    try:
        @ray.remote
        class Probe:
            def registered(self):
                ns = {}
                exec(PROBE.replace("print(", "result = ("), ns)
                return ns["result"]

        assert ray.get(Probe.remote().registered.remote(), timeout=300) == ["v05"]
    finally:
        ray.shutdown()
