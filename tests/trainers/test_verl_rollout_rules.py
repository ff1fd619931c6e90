# SPDX-License-Identifier: MIT
"""v05.trainers.verl's rollout component against the real verl 0.9.1
(test_verl_rollout.py says with what): the rules with a cross-epoch state
(+algorithm.v05_history: GRESO, Knapsack RL, Pilot-Commit, through the
legacy manager and through TransferQueue) and the fill
(+algorithm.v05_fill and v05_skip handing verl's replay buffer what to
refill)."""
import collections
import os
import sys

import pytest

try:
    import ray  # noqa: F401
    import verl  # noqa: F401
except ImportError as e:  # pragma: no cover - the Debian python has no verl
    pytest.skip(f"verl is not installed ({e}); run scripts/setup-trainers verl and "
                "use build-venv/verl/bin/python", allow_module_level=True)

from omegaconf import OmegaConf

import v05
from v05.trainers import verl as vverl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verl_rollout_kit import (PLUGIN, client, config, environment,  # noqa: E402
                              groups_of, history_manager, step_prompts,
                              tq_prompts)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from environment(tmp_path_factory)


# ---- the rules with a cross-epoch state (algorithm.v05_history) -------------

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
        # Prompts 1, 5, 9: every sample right, so their groups are all-same
        # whatever the model samples (the others' are by the text's hash).
        truths = ["always" if i % 4 == 1 else "x" for i in range(P)]
        uids, batch = tq_prompts(P, "f", 1, priors=priors, truths=truths)
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
        all_same = [u for i, u in enumerate(uids) if i % 4 == 1]
        assert set(skipped) | set(all_same) <= set(failed)
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
