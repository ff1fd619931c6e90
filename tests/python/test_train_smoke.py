# SPDX-License-Identifier: MIT
"""Smoke version of bench/train (the small-scale RL experiment): a few
training steps of grpo and v05 through the real plugin. The loss must use
exactly the advantages in the plugin's slots, those must be the statistics
core's answer on the rewards the verifier gave, and every rollout counted
must be one generate call."""
import asyncio
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))

import v05  # noqa: E402

import model as M  # noqa: E402
import task  # noqa: E402
import trainer as T  # noqa: E402


@pytest.fixture(scope="module")
def warm():
    torch.set_num_threads(1)
    heldout = task.heldout_set(90)
    torch.manual_seed(0)
    m = M.TinyLM()
    M.warmup(m, task.PromptStream(heldout, seed=7), 60, lr=1e-2, seed=0)
    return m.state_dict(), heldout


def three_steps(warm, spec, **kw):
    """A recording run of three steps' budget: the trainer (closed) and
    the samples its plugin issued."""
    state, heldout = warm
    tr = T.Trainer(spec, 0, state, heldout, record=True, **kw)
    try:
        issued0 = tr.plugin.stats()["samples_issued"]
        asyncio.run(tr.train(3 * T.BUDGET))
        issued = tr.plugin.stats()["samples_issued"] - issued0
    finally:
        tr.close()
    return tr, issued


@pytest.mark.parametrize("name", ["grpo-16", "v05"])
def test_train_steps_use_the_plugins_advantages(warm, name):
    spec = T.mode_specs()[name]
    tr, issued = three_steps(warm, spec)
    assert tr.step_no >= 2
    # Every rollout counted is one generate call, and one sample issued.
    assert tr.rollouts == tr.sampler.calls == tr.rollout.generate_calls
    assert tr.rollouts == issued
    assert tr.rollouts == sum(sum(s["k"]) for s in tr.log)
    assert len(tr.used) == sum(s["kept"] for s in tr.log)
    assert sum(len(u["rewards"]) for u in tr.used) == tr.rollouts
    # Some signal: neither all right nor all wrong.
    rewards = np.concatenate([u["rewards"] for u in tr.used])
    assert 0 < (rewards > 0).sum() < len(rewards)
    for u in tr.used:
        # The loss used the slot's advantages, bit for bit ...
        assert u["loss_adv"] == u["slot"]
        # ... and they are the statistics core's on the verifier's rewards.
        est = v05.estimate(u["prior"], u["rewards"], mode=u["mode"])
        np.testing.assert_allclose(u["slot"], est["advantages"], rtol=1e-5, atol=1e-5)
    if spec.mode == "grpo":
        assert all(u["k"] == 16 for u in tr.used)
        assert all(s["prompts"] == 16 for s in tr.log)
    else:
        assert all(4 <= u["k"] <= 16 for u in tr.used)
        # After the first step the prior comes from the fitted value model,
        # not the default (p = 0.5, prior 0), and it differs across prompts.
        later = [u["prior"] for u in tr.used if not u["uid"].startswith("0:")]
        assert len(set(later)) > 3
    assert all(np.isfinite(s["grad_norm"]) and s["grad_norm"] > 0 for s in tr.log)


def test_v05_eb_is_a_run_entry_or_skipped_with_a_reason(warm):
    state, heldout = warm
    spec = T.mode_specs()["v05-eb"]
    try:
        tr = T.Trainer(spec, 0, state, heldout)
    except ValueError as e:
        assert "v05-eb" in str(e)
        return
    tr.close()


def test_knapsack_plans_from_its_own_history(warm):
    """knapsack-4 on a fixed training set of 32 prompts (each step of 64
    prompts is two epochs): the first epoch has no estimate (4 each), the
    later ones plan from each prompt's own past rewards: the same 256
    rollouts per step, spread unevenly."""
    state, heldout = warm
    spec = T.mode_specs()["knapsack-4"]
    with pytest.raises(ValueError, match="--train-set"):
        T.Trainer(spec, 0, state, heldout)
    tr = T.Trainer(spec, 0, state, heldout, record=True, train_set=32)
    try:
        asyncio.run(tr.train(3 * T.BUDGET))
    finally:
        tr.close()
    first = [u for u in tr.used if u["uid"].startswith("0:")][:32]
    assert all(u["prior"] is None and u["k"] == 4 for u in first)
    assert all(sum(s["k"]) == T.BUDGET for s in tr.log)
    later = [u for u in tr.used if not u["uid"].startswith("0:")]
    assert any(u["prior"] is not None for u in later)
    assert len({u["k"] for u in later}) > 1
    assert len(tr.history) == 32
    # Its estimates are the prompts' own success rates so far.
    for pid in range(32):
        p = tr.history.estimate(pid)
        assert p is None or 0.0 <= p <= 1.0


def test_greso_filters_its_training_set(warm):
    """greso-8 on 16 prompts (a step of 32 is two epochs): every group is
    8 samples, the filter skips candidates (this seeded run: the tiny
    model's prompts soon give zero-variance runs), each one it skips was
    in a zero-variance run when it did, none outside one, and the rates
    stay within their bounds."""
    state, heldout = warm
    spec = T.mode_specs()["greso-8"]
    tr = T.Trainer(spec, 0, state, heldout, train_set=16)
    asked = []  # (run length z at the call, skipped)
    skip = tr.history.skip

    def skip_seen(pid, step):
        z, _ = tr.history.run(pid)
        out = skip(pid, step)
        asked.append((z, out))
        return out

    tr.history.skip = skip_seen
    try:
        asyncio.run(tr.train(4 * T.BUDGET))
    finally:
        tr.close()
    assert all(set(s["k"]) == {8} for s in tr.log)
    assert all(s["prompts"] == 32 for s in tr.log)
    assert tr.skipped > 0 and tr.skipped == sum(out for _, out in asked)
    assert all(z > 0 for z, out in asked if out)
    assert any(z > 0 and not out for z, out in asked)  # a draw, not a rule
    assert 0.05 <= tr.history.p_easy <= 0.95
    assert 0.05 <= tr.history.p_hard <= 0.95
    assert tr.log[-1]["skipped"] == tr.skipped


@pytest.mark.parametrize("name", ["dapo-16-fill", "pilot-commit-4-12",
                                  "v05-eb-fill", "ebpo-8"])
def test_fill_steps_train_b_informative_groups(warm, name):
    """Issue 38's modes on a training set of 64: a mode with a fill trains
    exactly B informative groups each step (rewards not all equal: the
    shared rule, v05.core.fill) and nothing else, while every rollout,
    dropped groups' included, is counted; pilot-commit's trained groups
    are pilot + commit, its dropped ones their pilot alone, and its record
    knows every prompt piloted; EBPO trains every group, all-same ones
    included, with the plugin's advantages."""
    spec = T.mode_specs()[name]
    tr, issued = three_steps(warm, spec, train_set=64)
    assert tr.rollouts == tr.sampler.calls == issued
    assert tr.rollouts == sum(sum(s["k"]) for s in tr.log)
    assert len(tr.used) == sum(s["kept"] for s in tr.log)
    for u in tr.used:
        assert u["loss_adv"] == u["slot"]
    mixed = [len(set(u["rewards"])) > 1 for u in tr.used]
    if spec.fill:
        assert all(s["kept"] == spec.fill for s in tr.log)
        assert all(mixed)  # only informative groups are trained on
        assert any(s["prompts"] > s["kept"] for s in tr.log)
    else:
        assert all(s["kept"] == s["prompts"] == 32 for s in tr.log)
        assert not all(mixed)  # all-same groups trained too ...
        assert any(any(a != 0.0 for a in u["slot"])  # ... with a signal
                   for u, m in zip(tr.used, mixed) if not m)
    if name == "pilot-commit-4-12":
        assert all(u["k"] == 16 for u in tr.used)
        ks = [k for s in tr.log for k in s["k"]]
        assert set(ks) == {4, 16} and ks.count(16) == len(tr.used)
        assert len(tr.history) == min(64, len(ks))
