# SPDX-License-Identifier: MIT
"""Mode v05-pg with the skip bar at 0.75 (pg=dict(skip=0.75)) in the real
TRL 1.16.0 (V05GRPOTrainer, tiny random Llama, CPU): a prompt in three is
sure to fail and its prior says so (-0.98), the others are a coin (the
completion's parity) with the prior 0. Once the running fit is warm and
32 prompts are in, the plugin skips the sure ones at submit.

- Without the fill: a skipped prompt is in the generation's groups as a
  dropped group of k = 0 and has no row; it still counts in P (every
  other row weighs 1/(P k), so the generation's weights sum to the share
  of prompts rolled out: a skipped prompt is a zero gradient in the mean
  over the generation's prompts, as a DAPO drop is); the rows trained on
  are exactly the other groups' samples with the plugin's advantages.
- With the fill (count "signal"): a skipped prompt is replaced, every
  generation trains on P groups, and the fill's log counts the plugin's
  skips (not rolled out) apart from the groups that were."""
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

N = 48


def _sure(i):
    return i % 3 == 0


def _reward(prompts, completions, v05_id, **kw):
    return [0.0 if _sure(i) else float(len(c) % 2 == 0)
            for i, c in zip(v05_id, completions)]


def _trainer(segname, tmp_path, plugin, steps, **v05_kw):
    from tiny import llama, tokenizer
    from trl import GRPOConfig

    from v05.trainers.trl import V05GRPOTrainer

    tok = tokenizer(str(tmp_path / "tok"))
    model = llama(str(tmp_path / "model"), len(tok))
    data = Dataset.from_dict({
        "prompt": [f"question {i}:" for i in range(N)],
        "v05_id": list(range(N)),
        "v05_prior": [-0.98 if _sure(i) else 0.0 for i in range(N)]})
    # 16 prompts a generation (32 rows of num_generations 2).
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=32,
        num_generations=2, max_completion_length=4, max_steps=steps,
        learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", seed=0, dataloader_num_workers=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = V05GRPOTrainer(model=model, reward_funcs=_reward, args=args,
                             train_dataset=data, processing_class=tok,
                             v05_plugin=plugin, **v05_kw)
    return trainer, before


def _plugin(segname):
    return v05.Plugin.create(segname, mode="v05-pg", pg=dict(skip=0.75),
                             pad_multiple=1, eb_cold=8, max_prompts=256)


def test_v05_pg_skipped_prompts_have_no_rows(segname, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    steps, P = 6, 16
    with _plugin(segname) as plugin:
        trainer, before = _trainer(segname, tmp_path, plugin, steps)
        trainer.train()
        st = plugin.stats()
        # A generation of sure prompts only, every one of them skipped: no
        # sample, so no row; the batch is one padding row of weight 0,
        # and its loss is 0.
        trainer.model.train()
        sure = [trainer.train_dataset[i] for i in range(N) if _sure(i)]
        batch = trainer._generate_and_score_completions(
            [x for x in sure for _ in range(2)])
        empty = trainer.v05_groups.pop()
        loss = trainer._compute_loss(trainer.model, batch)
        trainer.v05_loss_log.pop()
        assert plugin.stats()["prompts_skipped"] == \
            st["prompts_skipped"] + len(sure)
        trainer.v05_writer.close()
    assert len(empty) == len(sure) and \
        all(g["k"] == 0 and g["dropped"] for g in empty.values())
    assert batch["v05_uid"] == [""] and batch["v05_weight"].tolist() == [0.0]
    assert int(batch["completion_mask"].sum()) == 0 and loss.item() == 0.0
    assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    gens = trainer.v05_groups
    assert len(gens) == steps and all(len(g) == P for g in gens)
    skipped = [(n, u) for n, groups in enumerate(gens)
               for u, g in groups.items() if g["k"] == 0]
    assert st["prompts_skipped"] == len(skipped) > 0
    # Cold, and the warm fit's first 32 prompts: nothing skipped.
    assert not [n for n, _ in skipped if n < 3]
    for n, u in skipped:
        g = gens[n][u]
        assert g["dropped"] and _sure(g["prompt"]) and g["kept"] == []
    ks = [g["k"] for groups in gens for g in groups.values()]
    assert st["rewards_applied"] == sum(ks) and max(ks) <= 16
    assert 1 in ks  # a first wave of one, its advantage the prior's

    logs = trainer.v05_loss_log
    assert len(logs) == steps
    for groups, micro in zip(gens, logs):
        rows = {}
        for uid, s, w, a in zip(micro["uid"], micro["sample"],
                                micro["weight"], micro["advantages"]):
            assert uid != ""  # steps_per_generation 1: no padding row
            g = groups[uid]
            assert g["k"] > 0 and a == float(g["advantages"][s])
            assert torch.isfinite(torch.tensor(a))
            assert w == pytest.approx(1.0 / (P * g["k"]))
            rows[(uid, s)] = rows.get((uid, s), 0) + 1
        assert rows == {(u, s): 1 for u, g in groups.items()
                        for s in range(g["k"])}
        taken = sum(1 for g in groups.values() if g["k"])
        assert sum(micro["weight"]) == pytest.approx(taken / P)
        # The first pass: ratio 1, the loss is -sum(w A).
        want = -sum(w * a for w, a in zip(micro["weight"],
                                          micro["advantages"]))
        assert micro["loss"] == pytest.approx(want, abs=1e-6)
    changed = [n for n, p in trainer.model.named_parameters()
               if not torch.equal(p.detach().cpu(), before[n])]
    assert changed


def test_v05_pg_under_the_fill(segname, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from v05.core.fill import informative

    steps, P = 6, 16
    with _plugin(segname) as plugin:
        trainer, _ = _trainer(segname, tmp_path, plugin, steps,
                              v05_fill="signal")
        trainer.train()
        st = plugin.stats()
        trainer.v05_writer.close()
    assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    logs = trainer.v05_fill_log
    assert len(logs) == steps and all(x["informative"] == P for x in logs)
    assert sum(x["plugin_skipped"] for x in logs) == \
        st["prompts_skipped"] > 0
    for gen, (groups, log) in enumerate(zip(trainer.v05_groups, logs)):
        trained = {u for u in trainer.v05_loss_log[gen]["uid"] if u}
        assert len(trained) == P
        skipped = {u for u, g in groups.items() if g["k"] == 0}
        assert len(skipped) == log["plugin_skipped"]
        assert not trained & skipped
        assert all(_sure(groups[u]["prompt"]) for u in skipped)
        for u in trained:
            g = groups[u]
            assert informative("v05-pg", [float(r) for r in
                                          g["rewards"][:g["k"]]],
                               advantages=[float(a) for a in
                                           g["advantages"][:g["k"]]],
                               count="signal")
        # Every prompt submitted: a group (skips among them) or cancelled.
        assert log["rolled_out"] == len(groups) + log["cancelled"]
        assert sum(trainer.v05_loss_log[gen]["weight"]) == \
            pytest.approx(1.0)
