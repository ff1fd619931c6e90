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
    pytest.skip(f"trl is not installed ({e}); run scripts/setup-trainers and "
                "use build-venv/trainers/bin/python", allow_module_level=True)

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
                           k_step=2, k_max=8) as plugin:
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
                           k_step=2, k_max=4) as plugin:
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
