# SPDX-License-Identifier: MIT
"""The gradient probe of bench/train (issue 43, bench/train/PROBE.md):
its per-sequence gradients are torch's, its samples are the policy's and
a function of their key, a rule's batch gradient is exactly the
trainer's (the slot's advantages through the real plugin), and the
reference's true gradient is exact."""
import asyncio
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))

import grads  # noqa: E402
import model as M  # noqa: E402
import probe_ref  # noqa: E402
import probe_rules as PR  # noqa: E402
import probe_stats as PS  # noqa: E402
import regimes  # noqa: E402
import task  # noqa: E402
import trainer as T  # noqa: E402


@pytest.fixture(scope="module")
def warm():
    torch.set_num_threads(1)
    heldout = task.heldout_set(90)
    torch.manual_seed(0)
    m = M.TinyLM()
    M.warmup(m, task.PromptStream(heldout, seed=7), 60, lr=1e-2, seed=0)
    return m, heldout


def test_per_sequence_gradients_are_torchs(warm):
    m, held = warm
    ps = task.PromptStream(held, seed=3).take(24)
    outs = grads.sample_from_uniforms(
        m, ps, np.random.default_rng(0).random((24, task.MAX_ANSWER)))
    # answers too: teacher-forced sequences of every length
    ps2 = ps + ps[:6]
    outs2 = outs + [task.answer(p) for p in ps[:6]]
    assert grads.check_against_autograd(m, ps2, outs2) < 1e-4


def test_samples_are_the_policys_and_their_keys(warm):
    m, held = warm
    ps = task.PromptStream(held, seed=4).take(8)
    U = np.random.default_rng(1).random((8, task.MAX_ANSWER))
    a = grads.sample_from_uniforms(m, ps, U)
    b = grads.sample_from_uniforms(m, ps[3:5], U[3:5])
    assert a[3:5] == b                  # whatever batch it is drawn in
    # The answer comes up as often as its exact probability says.
    p0 = ps[0]
    n = 3000
    U = np.random.default_rng(2).random((n, task.MAX_ANSWER))
    outs = grads.sample_from_uniforms(m, [p0] * n, U)
    hit = np.mean([o == task.answer(p0) for o in outs])
    p = float(M.success_prob(m, [p0])[0])
    assert abs(hit - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-3


def _collect(m, held, pool, name, r, burn=1):
    """One replicate batch of `name` at the frozen state, after `burn`."""
    sampler = PR.PoolSampler(pool, 0)
    PR.ProbeTrainer.pool = pool
    tr = PR.ProbeTrainer(PR.probe_spec(T.mode_specs()[name]), 0,
                         m.state_dict(), held, sampler=sampler)
    sampler.trainer = tr

    async def go():
        tr.stream = task.PromptStream(held, seed="burn")
        for _ in range(burn):
            await tr.collect()
            tr.step_no += 1
        tr.stream = PR.ReplicateStream(pool, r)
        sampler.replicate = r
        return await tr.collect()
    try:
        b = asyncio.run(go())
    finally:
        tr.close()
    return tr, b


@pytest.mark.parametrize("name", ["fixed-2", "v05-eb", "reinforce-ada",
                                  "dapo-16"])
def test_a_rules_batch_gradient_is_the_trainers(warm, name):
    """At a frozen state: the probe's `trained` gradient (its coefficients
    x per-sequence gradients) equals the gradient of the trainer's own
    loss on the same batch (Trainer.sequences, as Trainer.update takes
    it: -(1/K) sum w a l over the samples kept)."""
    m, held = warm
    pool = PR.Pool("test-" + name, m, held, task.LENGTHS)
    tr, b = _collect(m, held, pool, name, 0)
    co, rec = PR.coefficients(b, tr.pids, 0)
    keys = sorted(co["trained"])
    assert rec["rollouts"] >= len(keys) > 0
    G = grads.per_seq_grads(m, [pool.prompt(k[0], k[1]) for k in keys],
                            pool.sample(keys))
    g = torch.tensor([co["trained"][k] for k in keys]) @ G
    seqs = T.Trainer.sequences(b["trained"])
    ps, os_, a, w = zip(*seqs)
    m.zero_grad()
    lp, _ = M.seq_logprob(m, list(ps), list(os_))
    loss = -(torch.tensor(w) * torch.tensor(a) * lp).sum() / len(b["trained"])
    loss.backward()
    ref = -torch.cat([q.grad.reshape(-1) for q in m.parameters()])
    m.zero_grad()
    assert float((g - ref).norm() / ref.norm()) < 1e-4
    assert set(co["oracle"]) == set(co["trained"]) == set(co["raw"])


def test_trained_coefficients_follow_the_slots(warm):
    """The coefficients are w * A / K with the slot's advantages; raw and
    oracle replace A by r - baseline and r - (2p - 1)."""
    m, held = warm
    pool = PR.Pool("test2", m, held, task.LENGTHS)
    tr, b = _collect(m, held, pool, "fixed-4", 0, burn=0)
    co, rec = PR.coefficients(b, tr.pids, 0)
    K = len(b["trained"])
    assert K == rec["kept"] == 64
    for e in b["trained"]:
        j = tr.pids[e["uid"]]
        for s in range(4):
            assert co["trained"][(0, j, s)] == pytest.approx(
                float(e["adv"][s]) / (4 * K))
            assert co["raw"][(0, j, s)] == pytest.approx(
                (e["rewards"][s] - e["baseline"]) / (4 * K))
            assert co["oracle"][(0, j, s)] == pytest.approx(
                (e["rewards"][s] - (2 * e["true_p"] - 1)) / (4 * K))
    # oracle-4 at the same replicate: the same prompts and samples
    # (common random numbers: each drawn once).
    oc, orec = PR.oracle_k(pool, 4, 0)
    assert set(oc["trained"]) == set(co["trained"])
    np.testing.assert_allclose([oc["trained"][k] for k in sorted(oc["trained"])],
                               [co["oracle"][k] for k in sorted(oc["trained"])],
                               rtol=1e-6)
    assert pool.sampled == len(pool.outputs) == 256


def test_reference_true_gradient_is_exact(warm):
    """R0 is the gradient of the mean of 2 p(x) over the reference's
    prompts (autograd of p = pi(answer | x) itself), and the statistics
    are finite with a positive within-prompt variance."""
    m, held = warm
    adam = dict(v=torch.zeros(M.n_params(m), dtype=torch.float64), t=1.0,
                beta2=0.999, eps=1e-8)
    ref = probe_ref.reference(m, adam, held, task.LENGTHS, "reftest", 24, 3,
                              chunk=10)
    ps = task.PromptStream(held, seed="reftest-ref").take(24)
    m.zero_grad()
    lp, n = M.seq_logprob(m, ps, [task.answer(p) for p in ps])
    (2 * torch.exp(lp * n).mean()).backward()
    exact = torch.cat([q.grad.reshape(-1) for q in m.parameters()]).double()
    m.zero_grad()
    assert float((ref["R0"] - exact).norm() / exact.norm()) < 1e-4
    st = ref["stats"]
    for label in ("I", "D"):
        assert st[label]["Vw"] > 0 and st[label]["S"] > 0
        assert np.isfinite(st[label]["Vb"]) and st[label]["var_ref"] > 0
    assert sum(b["n"] for b in st["I"]["bins"] if b) <= 24


def test_metrics_and_prediction():
    """Error and cosines of made-up gradients; the prediction of an
    oracle batch is (Vb + Vw / k) / B with flat bins."""
    R1 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    ref = dict(R1=R1, R0=torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64),
               R2=R1.clone(), D=torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64))
    G = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    U = G * ref["D"]
    m = PS.metrics(G, U, ref)
    np.testing.assert_allclose(m["err"], [1.0, 2.0])
    np.testing.assert_allclose(m["cos"], [1.0, 0.0])
    np.testing.assert_allclose(m["cos0"], [1 / np.sqrt(2), 1 / np.sqrt(2)])
    np.testing.assert_allclose(m["errD"], [1.0, 5.0])
    flat = [dict(n=10, p=0.5, Vb=2.0, Vw=8.0, S=3.0, H=1.0)] * \
        (len(probe_ref.P_BINS) - 1)
    stats = {"I": dict(bins=flat), "D": dict(bins=flat)}
    rec = dict(kept=64, p=[0.3] * 64, n=[4] * 64, e=[0.5] * 64)
    assert PS.predict(stats, rec, oracle=True)["I"] == pytest.approx((2 + 8 / 4) / 64)
    assert PS.predict(stats, rec, oracle=False)["I"] == pytest.approx(
        (2 + 8 / 4 + 0.25 * ((3 - 1) / 4 + 1)) / 64)
