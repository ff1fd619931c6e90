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


# ---- issue 43: regimes, the paper's normaliser, `default`, curves,
# checkpoints, and the paired analysis ------------------------------------

import json  # noqa: E402

import analysis  # noqa: E402
import pages  # noqa: E402
import regimes  # noqa: E402
import report  # noqa: E402
import summary  # noqa: E402


def _run(warm, name, steps=3, **kw):
    state, heldout = warm
    tr = T.Trainer(T.mode_specs()[name], 0, state, heldout, record=True,
                   lr=2e-3, **kw)
    try:
        asyncio.run(tr.train(steps * T.BUDGET))
    finally:
        tr.close()
    return tr


def _weights(tr):
    return np.concatenate([p.detach().numpy().ravel()
                           for p in tr.policy.parameters()])


@pytest.mark.parametrize("name", ["v05-eb", "fixed-2"])
def test_evaluation_schedule_does_not_change_training(warm, name):
    """The same seed evaluated every 256 rollouts and only at both ends
    trains identically: every step's allocation, baseline and gradient
    norm, and the final weights, bit for bit."""
    a = _run(warm, name, eval_rollouts=256)
    b = _run(warm, name, eval_every=10 ** 6)
    assert len(a.evals) > len(b.evals) == 2
    assert [s["k"] for s in a.log] == [s["k"] for s in b.log]
    assert [s["baseline"] for s in a.log] == [s["baseline"] for s in b.log]
    assert [s["grad_norm"] for s in a.log] == [s["grad_norm"] for s in b.log]
    np.testing.assert_array_equal(_weights(a), _weights(b))
    assert a.evals[-1]["acc"] == b.evals[-1]["acc"]


def test_sparse_regime_draws_long_prompts(warm):
    reg = regimes.get("sparse")
    held = reg.heldout(36)
    assert {len(d) for _, d in held} == {5, 6, 7}
    state, _ = warm
    tr = T.Trainer(T.mode_specs()["fixed-4"], 0, state, held, regime=reg)
    try:
        got = tr.stream.take(200)
    finally:
        tr.close()
    assert {len(d) for _, d in got} == {5, 6, 7}
    assert not set(got) & set(held)
    # today's lengths leave the held-out set of the earlier pages as it was
    assert regimes.get("today").heldout(90) == task.heldout_set(90)
    with pytest.raises(ValueError, match="regime 'nope'"):
        regimes.get("nope")


def test_prior_regimes(warm):
    """no-prior: every prior 0 (p = 0.5); noisy-prior: the value model's
    prediction moved in logit space, the same draw for the same prompt."""
    tr = _run(warm, "fixed-4", regime=regimes.get("no-prior"))
    assert tr.prior is None and {u["prior"] for u in tr.used} == {0.0}
    noisy = regimes.get("noisy-prior").predict(0)
    ctx = ["copy 12", "rev 345", "sort 4321", "copy 9876"] * 4
    lab = [0.9, 0.5, 0.1, 0.2] * 4
    tg = ["copy 55", "rev 123456", "sort 31"]
    clean = np.array(regimes.valueprior.predict(ctx, lab, tg))
    a, b = np.array(noisy(ctx, lab, tg)), np.array(noisy(ctx, lab, tg))
    np.testing.assert_array_equal(a, b)
    assert np.all(np.abs(a - clean) > 1e-6)
    other = np.array(regimes.get("noisy-prior").predict(1)(ctx, lab, tg))
    assert np.all(np.abs(other - a) > 1e-6)   # another seed, another draw


def test_paper_normaliser_switch(warm):
    """sigma="paper" reaches the fused modes' slots: their advantages are
    the statistics core's with the paper's normaliser, which differ from
    rms's on some group."""
    tr = _run(warm, "fixed-2", steps=2, sigma="paper")
    differ = 0
    for u in tr.used:
        paper = v05.estimate(u["prior"], u["rewards"], mode="v05-fixed",
                             sigma="paper")["advantages"]
        rms = v05.estimate(u["prior"], u["rewards"], mode="v05-fixed")["advantages"]
        np.testing.assert_allclose(u["slot"], paper, rtol=1e-5, atol=1e-5)
        differ += not np.allclose(paper, rms, rtol=1e-5, atol=1e-5)
    assert differ > 0


def test_default_is_the_librarys_default(warm):
    from v05.core.config import make_config
    from v05.core.names import MODES
    spec = T.mode_specs()["default"]
    c = make_config("x")
    assert MODES[spec.mode] == c.params.mode and spec.k == c.params.k_init
    tr = _run(warm, "default", steps=2)
    assert all(u["mode"] == spec.mode for u in tr.used)


def test_checkpoints_hold_policy_and_adam(warm, tmp_path):
    tr = _run(warm, "fixed-4", steps=3, checkpoints=[256, 512],
              ckpt_dir=str(tmp_path))
    ck = torch.load(tmp_path / "512.pt")
    assert ck["at"] == 512 and ck["step"] == 2 and ck["rollouts"] == 512
    assert set(ck["policy"]) == set(tr.policy.state_dict())
    st = ck["opt"]["state"]
    assert len(st) == len(list(tr.policy.parameters()))
    assert all(float(x["step"]) == 2 and x["exp_avg_sq"].abs().sum() > 0
               for x in st.values())
    assert (tmp_path / "256.pt").exists()


def _synthetic():
    """Four modes x 10 seeds with piecewise-linear curves whose AUCs are
    known: the reference rises 0.2 -> 0.3 over the budget (AUC 0.25);
    mode a is ahead by d_s = 0.01 + 0.001 (s - 4.5) (AUC difference
    exactly d_s), b behind by 0.01 flat, c equal to the reference."""
    budget = 1000
    s = {}
    for m, off in (("default", lambda sd: 0.0),
                   ("a", lambda sd: 0.01 + 0.001 * (sd - 4.5)),
                   ("b", lambda sd: -0.01), ("c", lambda sd: 0.0)):
        cs = [[[0, 0.2 + off(sd)], [500, 0.25 + off(sd)],
               [1000, 0.3 + off(sd)], [1024, 0.3 + off(sd)]]
              for sd in range(10)]
        s[m] = dict(seeds=list(range(10)), curves=cs)
        s[m]["start"], s[m]["final"], s[m]["auc"] = summary.endpoints(cs, budget)
    return s, budget


def test_analysis_on_a_synthetic_input():
    s, budget = _synthetic()
    np.testing.assert_allclose(s["default"]["auc"], 0.25)
    res = analysis.compare(s, "default", budget,
                           target={sd: 0.3 for sd in range(10)})
    a = res["rows"]["a"]["auc"]
    d = 0.01 + 0.001 * (np.arange(10) - 4.5)
    se = d.std(ddof=1) / np.sqrt(10)
    assert a["n"] == 10
    np.testing.assert_allclose(a["mean"], 0.01)
    # t(0.975, 9) = 2.262157
    np.testing.assert_allclose([a["lo"], a["hi"]],
                               [0.01 - 2.262157 * se, 0.01 + 2.262157 * se],
                               rtol=1e-6)
    assert res["rows"]["b"]["auc"]["mean"] == pytest.approx(-0.01)
    assert res["rows"]["c"]["auc"]["p"] == 1.0
    # Holm over the three modes: the smallest p times 3, the next times 2,
    # never below the one before.
    ps = [res["rows"][m]["auc"]["p"] for m in "abc"]
    hs = [res["rows"][m]["auc"]["p_holm"] for m in "abc"]
    assert hs == analysis.holm(ps)
    assert analysis.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # Rollouts to T = 0.3: the reference reaches it at 1000; b never does
    # (counted as the budget, not reached); a before.
    assert res["share"] == {"default": 1.0, "a": 1.0, "b": 0.0, "c": 1.0}
    r = res["rows"]["a"]["reach"]
    assert r["ratio"] < 1.0 and r["ahead"] == 10
    assert res["rows"]["b"]["reach"]["mean"] == 0.0


def test_a_curve_that_ends_at_its_target_reaches_it():
    """grpo-16's rollouts to its own final accuracy: the budget, reached
    (the interpolation used to round past the budget in some seeds)."""
    budget = 20480
    for i in range(40):
        c = [[0, 0.2], [budget - 512, 0.3 + 0.001 * i],
             [budget, 0.4 + 0.01 * i]]
        t = summary.final_of(c, budget)
        assert summary.to_target(c, t) == budget
        s = {"g": dict(seeds=[0], curves=[c])}
        out, got = analysis.reach(s, "g", {0: t}, budget)
        assert got[0] and out[0] == budget


def test_page_endpoints_come_back_from_the_summary(tmp_path):
    """A page's summary has each run's curve: --from recomputes every
    endpoint from them and writes the same analysis."""
    s, budget = _synthetic()
    ctx = dict(page="SYN", files=[], summary=s, times=dict(
        generate=1, rollout=2, update=3, prior=0, eval=0, true_p=0),
        target={"T": None, "rows": [], "grid": None}, wall_in_runs=6,
        n_runs=40, report_commit="x", inputs=["x.json"], command="c",
        commit="x", walls=[6], wall=6, warmup_seconds=0, steps=1,
        budget_per_step=budget, seeds=list(range(10)), params=1, lr=0.002,
        heldout=360, skipped={}, regime="today", sigma="rms",
        eval_rollouts=512, default_mode="v05-eb", target_acc=0.3)
    for x in s.values():
        for k in ("gnorm", "gstd", "ent_late", "greedy", "gain"):
            x[k] = np.zeros(10)
        x.update(n=10, mse=0.0, prior_mse=0.0, rollouts_per_prompt=1.0,
                 waves=1.0, halts=0.0, dropped=0.0, nonzero=None,
                 wall=1.0, fill_waves=0.0)
    pages.render(ctx, str(tmp_path / "a.md"))
    path = tmp_path / "SYN.json"
    path.write_text(json.dumps({**ctx, "summary": {
        m: {k: (v.tolist() if hasattr(v, "tolist") else v)
            for k, v in x.items() if k not in ("start", "final", "auc")}
        for m, x in s.items()}}))
    report.from_file(str(path), str(tmp_path / "b.md"))
    a, b = (tmp_path / "a.md").read_text(), (tmp_path / "b.md").read_text()
    assert a == b and "## Paired against the default" in a
    # a's AUC difference and its t-interval, 0.01 -+ 2.262157 * 0.000957
    assert "| a | 10 | +0.0100 [+0.0078, +0.0122] |" in a
    assert "| b | 10 | -0.0100 [-0.0100, -0.0100] |" in a
    assert "(< 10)" not in a and "reached T" in a
    row_b = next(x for x in a.splitlines() if x.startswith("| b | 10 |"))
    assert "| 0% |" in row_b   # b never reaches T = 0.3
