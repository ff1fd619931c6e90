# SPDX-License-Identifier: MIT
"""v05.trl against the real TRL 1.16.0: a tiny random Llama (made here, no
hub) trained a few steps on CPU by V05GRPOTrainer; the plugin decides each
prompt's sample count, and the loss uses the plugin's advantages, each row
weighted 1/(P k)."""
import os
import sys

import pytest

try:
    import torch
    import trl  # noqa: F401
    from datasets import Dataset
except ImportError as e:  # pragma: no cover - the Debian python has no trl
    pytest.skip(f"trl is not installed ({e}); run scripts/setup-trainers trl and "
                "use build-venv/trl/bin/python", allow_module_level=True)

import v05

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def reward_even(prompts, completions, **kw):
    """1 when the completion has an even number of characters."""
    return [1.0 if len(c) % 2 == 0 else 0.0 for c in completions]


@pytest.mark.parametrize("steps_per_generation,beta", [(1, 0.0), (2, 0.0), (1, 0.04)])
def test_v05_grpo_trainer_trains_with_plugin_advantages(segname, tmp_path,
                                                        monkeypatch,
                                                        steps_per_generation,
                                                        beta):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.trainers.trl import V05GRPOTrainer

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    data = Dataset.from_dict({
        "prompt": [f"question {i}:" for i in range(8)],
        "v05_prior": [0.8, -0.8, 0.0, 0.5, -0.5, 0.2, -0.2, 0.0],
    })
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
        gradient_accumulation_steps=steps_per_generation,
        steps_per_generation=steps_per_generation, num_generations=2,
        max_completion_length=6, max_steps=3, learning_rate=1e-2,
        logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
        beta=beta, seed=0, temperature=1.0, dataloader_num_workers=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with v05.Plugin.create(segname, max_prompts=64, pad_multiple=1, k_init=2,
                           k_step=2, k_max=8, mode="v05-eb") as plugin:
        # With beta, TRL loads a reference copy from the path.
        trainer = V05GRPOTrainer(model=model if beta == 0 else str(tmp_path / "model"),
                                 reward_funcs=reward_even,
                                 args=args, train_dataset=data,
                                 processing_class=tok, v05_plugin=plugin)
        trainer.train()
        stats = plugin.stats()
        trainer.v05_writer.close()

    # Every generation: P = generation_batch_size / num_generations prompts,
    # each with the k the plugin decided.
    gens = trainer.v05_groups
    assert len(gens) == 3
    P = 4 * steps_per_generation // 2
    ks = [g["k"] for groups in gens for g in groups.values()]
    assert all(len(groups) == P for groups in gens)
    assert stats["rewards_applied"] == sum(ks)
    assert all(2 <= k <= 8 for k in ks)
    assert any(k > 2 for k in ks)  # the plugin asked for more somewhere

    # The loss used exactly the plugin's advantages, each row once per
    # generation, weighted 1/(P k); padding rows weigh 0.
    logs = trainer.v05_loss_log
    assert len(logs) == 3 * steps_per_generation
    for gen, groups in enumerate(gens):
        chunk = logs[gen * steps_per_generation:(gen + 1) * steps_per_generation]
        seen = {}
        for micro in chunk:
            for uid, s, w, a in zip(micro["uid"], micro["sample"], micro["weight"],
                                    micro["advantages"]):
                if uid == "":
                    assert w == 0 and a == 0
                    continue
                g = groups[uid]
                assert a == float(g["advantages"][s])
                assert w == pytest.approx(1.0 / (P * g["k"]))
                seen[(uid, s)] = seen.get((uid, s), 0) + 1
            # First pass over a generation: ratio 1, so the loss is
            # -sum(w * advantage) exactly (per-prompt normalisation); with
            # beta, only before the first update (policy = reference).
            if beta == 0 or gen == 0:
                want = -sum(w * a for w, a in zip(micro["weight"], micro["advantages"]))
                assert micro["loss"] == pytest.approx(want, abs=1e-6)
        assert seen == {(u, s): 1 for u, g in groups.items() for s in range(g["k"])}
        assert sum(w for m in chunk for w in m["weight"]) == pytest.approx(1.0)
    # Training moved the weights.
    changed = [n for n, p in trainer.model.named_parameters()
               if not torch.equal(p.detach().cpu(), before[n])]
    assert changed


@pytest.mark.parametrize("bad, words", [
    (None, "no reward function scored"),
    (float("nan"), "no reward function scored"),
    (float("inf"), "reward is inf: not finite"),
    (1.5, "reward is 1.5: outside [0, 1]"),
])
def test_bad_reward_fails_the_step_and_leaves_nothing(segname, tmp_path,
                                                      monkeypatch, bad, words):
    """A reward function's None/NaN for a sample no other function scores,
    or a sum outside [0, 1]: the generation step raises, naming the prompt
    and the sample (TRL itself would train on 0, or on the value); the
    plugin keeps nothing of the step, and the next step trains."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.trainers.trl import V05GRPOTrainer

    state = {"calls": 0}

    def reward(prompts, completions, **kw):
        state["calls"] += 1
        out = [1.0 if len(c) % 2 == 0 else 0.0 for c in completions]
        if state["calls"] == 1:  # the first call of the first step
            out[1] = bad
        return out

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    data = Dataset.from_dict({"prompt": [f"question {i}:" for i in range(8)]})
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
        num_generations=2, max_completion_length=4, max_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", seed=0,
        dataloader_num_workers=0)
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1, k_init=2,
                           k_step=2, k_max=4, mode="v05-eb") as plugin:
        trainer = V05GRPOTrainer(model=model, reward_funcs=reward, args=args,
                                 train_dataset=data, processing_class=tok,
                                 v05_plugin=plugin)
        with pytest.raises((TypeError, ValueError)) as e:
            trainer.train()
        assert words in str(e.value) and "sample" in str(e.value)
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        assert st["prompts_cancelled"] > 0
        trainer.train()  # the next step: no fault this time
        assert plugin.stats()["prompts_open"] == 0
        trainer.v05_writer.close()


def _history_trainer(tmp_path, plugin, reward, history, max_steps, **extra):
    """4 prompts with stable ids, 2 per generation (2 generations an
    epoch), completions of up to 4 tokens."""
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.trainers.trl import V05GRPOTrainer

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    data = Dataset.from_dict({"prompt": [f"question {i}:" for i in range(4)],
                              "v05_id": list(range(4))})
    cfg = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
               num_generations=2, max_completion_length=4,
               max_steps=max_steps, report_to="none", use_cpu=True,
               save_strategy="no", seed=0, dataloader_num_workers=0)
    cfg.update(extra)
    return V05GRPOTrainer(model=model, reward_funcs=reward,
                          args=GRPOConfig(**cfg), train_dataset=data,
                          processing_class=tok, v05_plugin=plugin,
                          v05_history=history)


def _by_prompt(prompts, completions, v05_id, **kw):
    """Prompt 0 always succeeds, prompt 1 never; the others by parity."""
    return [1.0 if i == 0 else 0.0 if i == 1 else float(len(c) % 2 == 0)
            for i, c in zip(v05_id, completions)]


def test_knapsack_history_gives_the_priors(segname, tmp_path, monkeypatch):
    """Mode knapsack with a KnapsackHistory: epoch 0 has no estimates (every
    prompt the uniform 8); each group is folded by its prompt's id; epoch 1
    plans each generation from those estimates; a checkpoint carries the
    history and a resume reads it back."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from v05.core.rules import KnapsackHistory
    from v05.trainers.trl import V05GRPOTrainer

    h = KnapsackHistory()
    with v05.Plugin.create(segname, mode="knapsack", max_prompts=64,
                           pad_multiple=1) as plugin:
        with pytest.raises(ValueError, match="v05_prior must be None"):
            V05GRPOTrainer(model=None, v05_plugin=plugin, v05_history=h,
                           v05_prior=lambda x: 0.0)
        with v05.Plugin.create(segname + "f", mode="v05-fixed") as fixed, \
                pytest.raises(ValueError, match="needs mode knapsack"):
            V05GRPOTrainer(model=None, v05_plugin=fixed, v05_history=h)
        trainer = _history_trainer(tmp_path, plugin, _by_prompt, h, 4,
                                   save_strategy="steps", save_steps=2)
        trainer.train()
        trainer.v05_writer.close()
    gens = trainer.v05_groups
    assert len(gens) == 4
    ks = [[g["k"] for g in groups.values()] for groups in gens]
    assert ks[0] == ks[1] == [8, 8]  # epoch 0: no estimate yet
    # Every prompt was seen once in epoch 0 (8 outcomes: an estimate).
    seen = {}
    for groups in gens[:2]:
        for g in groups.values():
            seen.setdefault(g["prompt"], []).extend(g["rewards"][:g["k"]])
    assert sorted(seen) == [0, 1, 2, 3]
    # Epoch 1: each generation's plan is the knapsack of its estimates.
    for groups in gens[2:]:
        est = [sum(r > 0 for r in seen[g["prompt"]]) / 8
               for g in groups.values()]
        got = sorted(zip(est, [g["k"] for g in groups.values()]))
        assert got == sorted(zip(est, v05.knapsack_plan(est, per_prompt=8)))
    assert h.estimate(0) == 1.0 and h.estimate(1) == 0.0
    # The checkpoint has the history; a resume reads it back.
    path = tmp_path / "out" / "checkpoint-4" / "v05_history.json"
    assert path.exists()
    again = KnapsackHistory()
    with v05.Plugin.create(segname + "r", mode="knapsack", max_prompts=64,
                           pad_multiple=1) as plugin:
        t2 = _history_trainer(tmp_path, plugin, _by_prompt, again, 4)
        t2.train(resume_from_checkpoint=str(path.parent))
        t2.v05_writer.close()
    assert again.state_dict() == h.state_dict()


def test_greso_filter_skips_before_the_plugin(segname, tmp_path, monkeypatch):
    """Mode greso with a Greso filter over 4 epochs: each generation rolls
    out exactly what the filter, fed the same groups, selects at that
    step (so only a prompt with a run of all-same groups is ever skipped);
    the always-easy or always-hard prompt gets skipped."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from v05.core.rules import Greso

    with v05.Plugin.create(segname, mode="greso", max_prompts=64,
                           pad_multiple=1) as plugin:
        trainer = _history_trainer(tmp_path, plugin, _by_prompt, Greso(seed=1),
                                   8)
        trainer.train()
        trainer.v05_writer.close()
    log = trainer.v05_filter_log
    assert len(log) == len(trainer.v05_groups) == 8
    shadow = Greso(seed=1)
    skipped = set()
    for entry, groups in zip(log, trainer.v05_groups):
        cands = entry["kept"] + entry["skipped"]
        assert len(cands) == 2
        want = shadow.select(cands, step=entry["step"]) or cands[:1]
        assert sorted(entry["kept"]) == sorted(want)
        assert sorted(g["prompt"] for g in groups.values()) == \
            sorted(entry["kept"])
        for g in groups.values():
            assert g["k"] == 8
            shadow.fold(g["prompt"], list(g["rewards"][:8]))
        shadow.step_end(first_epoch=entry["epoch"] == 0)
        skipped.update(entry["skipped"])
    assert {0, 1} & skipped  # the always-same prompts, skipped at times
    assert trainer.v05_history.state_dict() == shadow.state_dict()


def test_pilot_commit_record_evicts_solved(segname, tmp_path, monkeypatch):
    """Mode pilot-commit (pilot 4, commit 4) with a PilotCommit record
    over 4 epochs: prompt 0 always succeeds, so its first pilot is solved
    and it is never drawn again; prompt 1 never does: too hard, dropped
    at 4 and drawn every epoch; each generation rolls out what the record,
    fed the same groups, selects; a group in the band has 8 samples."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from v05.core.rules import PilotCommit
    from v05.trainers.trl import V05GRPOTrainer

    with v05.Plugin.create(segname, mode="pilot-commit", k_init=4, k_step=4,
                           k_max=8, max_prompts=64) as plugin:
        with v05.Plugin.create(segname + "f", mode="greso") as other, \
                pytest.raises(ValueError, match="needs mode pilot-commit"):
            V05GRPOTrainer(model=None, v05_plugin=other,
                           v05_history=PilotCommit(pilot=4))
        trainer = _history_trainer(tmp_path, plugin, _by_prompt,
                                   PilotCommit(pilot=4), 8)
        trainer.train()
        trainer.v05_writer.close()
    shadow = PilotCommit(pilot=4)
    drawn = []
    for entry, groups in zip(trainer.v05_filter_log, trainer.v05_groups):
        cands = entry["kept"] + entry["skipped"]
        want = shadow.select(cands, entry["epoch"]) or cands[:1]
        assert sorted(entry["kept"]) == sorted(want)
        for g in groups.values():
            cls = shadow.fold(g["prompt"], entry["epoch"],
                              list(g["rewards"][:g["k"]]))
            assert g["k"] == (8 if cls == "commit" else 4)
            assert g["dropped"] == (cls != "commit")
            drawn.append((entry["epoch"], g["prompt"]))
    assert [e for e, pid in drawn if pid == 0] == [0]  # evicted after
    assert [e for e, pid in drawn if pid == 1] == [0, 1, 2, 3]
    assert shadow.last(0) == "solved" and shadow.last(1) == "too_hard"
    assert trainer.v05_history.state_dict() == shadow.state_dict()


def _fill_reward(prompts, completions, v05_id, **kw):
    """Prompts 3i+1 always succeed, 3i+2 never: all-same groups; the others
    by the completion's parity."""
    return [1.0 if i % 3 == 1 else 0.0 if i % 3 == 2 else
            float(len(c) % 2 == 0) for i, c in zip(v05_id, completions)]


@pytest.mark.parametrize("skip", [False, True])
def test_fill_trains_on_informative_groups_only(segname, tmp_path,
                                                monkeypatch, skip):
    """v05_fill: every generation trains on exactly P informative groups;
    the all-same ones are released and replaced from the train dataset
    (or, with a skip rule and priors of +-1, never rolled out); nothing
    is left in the plugin."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.core.fill import SkipRule, informative
    from v05.trainers.trl import V05GRPOTrainer

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    n = 30
    data = Dataset.from_dict({
        "prompt": [f"question {i}:" for i in range(n)], "v05_id": list(range(n)),
        "v05_prior": [0.0 if i % 3 == 0 else 1.0 if i % 3 == 1 else -1.0
                      for i in range(n)]})
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
        num_generations=2, max_completion_length=6, max_steps=3,
        learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", seed=0, dataloader_num_workers=0)
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           max_prompts=256, pad_multiple=1) as plugin:
        trainer = V05GRPOTrainer(
            model=model, reward_funcs=_fill_reward, args=args,
            train_dataset=data, processing_class=tok, v05_plugin=plugin,
            v05_fill="contrast",
            v05_skip=SkipRule(revisit=0.0) if skip else None)
        trainer.train()
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        trainer.v05_writer.close()
    P = 8 // 2
    logs = trainer.v05_fill_log
    assert len(logs) == 3 and all(x["informative"] == P for x in logs)
    for gen, groups in enumerate(trainer.v05_groups):
        rows = [m for m in trainer.v05_loss_log[gen:gen + 1]]
        trained = {u for m in rows for u in m["uid"] if u}
        assert len(trained) == P
        for u in trained:
            g = groups[u]
            assert informative("dapo", [float(r) for r in g["rewards"][:4]])
            assert g["prompt"] % 3 == 0
        bad = [u for u, g in groups.items() if g["prompt"] % 3]
        assert all(u not in trained for u in bad)
        log = logs[gen]
        assert log["rolled_out"] == len(groups) + log["cancelled"]
        if skip:
            assert not bad and log["skipped"] > 0
        else:
            assert log["not_informative"] >= len(bad) > 0
    assert sum(w for m in trainer.v05_loss_log[:1] for w in m["weight"]) == \
        pytest.approx(1.0)


def test_fill_settings_are_checked(segname, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.core.fill import SkipRule
    from v05.trainers.trl import V05GRPOTrainer

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    data = Dataset.from_dict({"prompt": ["q"] * 4})
    args = GRPOConfig(output_dir=str(tmp_path / "out"),
                      per_device_train_batch_size=4, num_generations=2,
                      report_to="none", use_cpu=True, save_strategy="no")
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4) as plugin:
        for kw, err in [(dict(v05_fill="all"), ValueError),
                        (dict(v05_fill="contrast", v05_skip=0.1), TypeError),
                        (dict(v05_skip=SkipRule()), ValueError),
                        (dict(v05_fill="contrast", v05_fill_max=0),
                         ValueError)]:
            with pytest.raises(err):
                V05GRPOTrainer(model=model, reward_funcs=_fill_reward,
                               args=args, train_dataset=data,
                               processing_class=tok, v05_plugin=plugin, **kw)


def _replay(ranks_params, own, others, gen):
    """One fresh plugin (one process's) whose own part of the running fit
    is `own` plus `others` (lists), fed the generation's prompts in their
    submit order with the rewards their groups got: each prompt's k (None
    when it asked for a sample the run never generated: it decided
    otherwise)."""
    from plugin_drive import drive

    name = f"t35p-{os.getpid()}-{len(_replayed)}"
    _replayed.append(name)
    with v05.Plugin.create(name, **ranks_params) as p:
        st = v05.EbState.from_list(own)
        if others is not None:
            st = st + v05.EbState.from_list(others)
        p.set_eb_own(st)
        try:
            return drive(p, {g["uid"]: (g["prior"], g["rewards"])
                             for g in gen})
        except IndexError:
            return None


_replayed = []


def _processes(tmp_path, prefix, *args):
    """torchrun --standalone --nproc-per-node 2 trl_processes.py: its exit
    code and output; the processes' segments removed if one was left."""
    import subprocess

    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", os.path.join(HERE, "trl_processes.py"),
           "--out", str(tmp_path), "--prefix", prefix, *args]
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900)
        return r.returncode, r.stdout, _leftovers(prefix)
    finally:
        for i in range(2):  # a process that died leaves its segment
            try:
                v05.unlink(f"{prefix}-r{i}")
            except OSError:
                pass


def _leftovers(prefix):
    from v05.trainers.verl.run import shm_dir
    return [f for f in os.listdir(shm_dir()) if f.startswith(f"v05-{prefix}-")]


def test_processes_decide_as_one(tmp_path):
    """Two processes launched by torchrun (CPU, gloo), each generating its
    own share with its own plugin (v05-eb, the default mode): every
    generation of each is decided exactly as one process would decide it
    holding the merged state (its own part plus the others' part it had
    been handed: a fresh plugin replays the generation's prompts and
    rewards); what was handed in is exactly the other process's part as
    it posted it; the cold start counts both processes' first waves; DDP
    kept the two models equal; nothing of either is left in /dev/shm."""
    import json

    eb_cold, steps = 20, 6
    rc, out, left = _processes(tmp_path, f"t35p-{os.getpid()}", "--steps",
                               str(steps), "--eb-cold", str(eb_cold))
    assert rc == 0, out[-4000:]
    assert left == []
    runs = [json.loads((tmp_path / f"rank{i}.json").read_text())
            for i in range(2)]
    params = dict(mode="v05-eb", k_init=2, k_step=2, k_max=8, pad_multiple=1,
                  eb_window=0, eb_cold=eb_cold, max_prompts=256)
    # DDP kept the replicas equal.
    assert runs[0]["checksum"] == runs[1]["checksum"]
    for me in runs:
        st = me["stats"]
        assert st["samples_issued"] == st["rewards_applied"] > 0
        assert st["prompts_open"] == 0
        assert sum(v for k, v in st.items() if k.startswith("rejected_")) == 0
        assert len(me["generations"]) == len(me["states"]) == steps
        assert all(w == pytest.approx(1.0) for w in me["weight_sums"])
        # Every exchange posted completed; none is left pending.
        assert me["exchange"]["posted"] == me["exchange"]["exchanges"]
        assert not me["exchange"]["pending"]
    for g0, g1 in zip(runs[0]["generations"], runs[1]["generations"]):
        # Each process generates its own share of the generation batch.
        assert len(g0) == len(g1) == 4
        assert not {g["prompt"] for g in g0} & {g["prompt"] for g in g1}
    differs = 0
    for me, other in (runs, runs[::-1]):
        for gen, state in zip(me["generations"], me["states"]):
            e = state["exchange"]
            if e == 0:
                assert state["others"] is None
            else:
                # What was handed in is the other process's own part as it
                # posted it for exchange e.
                h = next(i for i, s in enumerate(other["states"])
                         if s["posted"] == e)
                assert state["others"] == other["states"][h]["own"]
            want = _replay(params, state["own"], state["others"], gen)
            assert {g["uid"]: g["k"] for g in gen} == want
            if state["others"] is not None and \
                    _replay(params, state["own"], None, gen) != want:
                differs += 1
        # The cold start counts both processes' first waves: a generation
        # decided warm under the merged count whose own count is cold.
        own = [s["own"][-1] for s in me["states"]]
        merged = [s["own"][-1] + (s["others"][-1] if s["others"] else 0)
                  for s in me["states"]]
        warm = [i for i, n in enumerate(merged) if n >= eb_cold]
        alone = [i for i, n in enumerate(own) if n >= eb_cold]
        assert warm and own[warm[0]] < eb_cold
        print(f"process {me['rank']}: first generation decided warm "
              f"(eb_cold {eb_cold}, 4 prompts a generation): merged "
              f"{warm[0]}, alone {alone[0] if alone else 'after the run'}")
    # The others' part changed some decision (else this run could not
    # tell a merged state from none).
    assert differs > 0


def test_processes_configured_unlike_are_refused(tmp_path):
    """The processes' plugins must decide by the same settings: one with
    another k_max is refused by every process at construction (the check
    is a collective: none is left waiting), naming the difference."""
    rc, out, left = _processes(tmp_path, f"t35q-{os.getpid()}", "--steps",
                               "1", "--k-max-last", "6")
    assert rc != 0
    assert "must be configured alike" in out and "'k_max': (8, 6)" in out
    assert not (tmp_path / "rank0.json").exists()
    assert left == []
