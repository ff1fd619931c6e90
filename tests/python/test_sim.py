# SPDX-License-Identifier: MIT
"""The simulated engine and the demo built on it."""
import subprocess
import sys

import numpy as np
import pytest

import v05
from v05.demos import demo
from v05.demos.sim import Latency, SimEngine, make_prompts, sim_reward


def test_make_prompts():
    a = make_prompts(4000, seed=1, noise=0.1, hallucination=0.0)
    assert a == make_prompts(4000, seed=1, noise=0.1, hallucination=0.0)
    p = np.array([x.p for x in a])
    prior = np.array([x.prior for x in a])
    mu = 2 * p - 1
    assert 0.45 < p.mean() < 0.55 and p.min() >= 0 and p.max() <= 1
    assert np.all(np.abs(prior) <= 1)
    inner = np.abs(mu) < 0.7  # away from the clipping
    assert np.std(prior[inner] - mu[inner]) == pytest.approx(0.1, rel=0.1)
    h = make_prompts(4000, seed=1, noise=0.0, hallucination=0.3)
    wild = np.mean([x.prior != np.clip(x.mu, -1, 1) for x in h])
    assert 0.27 < wild < 0.33
    with pytest.raises(ValueError):
        make_prompts(10, hallucination=2)


def test_sim_reward():
    assert sim_reward("u", 3, 0.5, 7) == sim_reward("u", 3, 0.5, 7)
    r = [sim_reward("u", s, 0.3, 1) for s in range(4000)]
    assert set(r) == {-1.0, 1.0}
    assert np.mean(np.array(r) > 0) == pytest.approx(0.3, abs=0.03)


def test_latency():
    rng = np.random.default_rng(0)
    assert Latency("const:2").sample(rng) == 0.002
    x = [Latency("lognormal:3:0.5").sample(rng) for _ in range(2000)]
    assert np.median(x) == pytest.approx(0.003, rel=0.1)
    for bad in ("const", "gauss:1", "exp:-1", "uniform:1:x"):
        with pytest.raises(ValueError):
            Latency(bad)


@pytest.mark.parametrize("schedule", ["rounds", "stream"])
def test_sim_engine_run(segname, schedule):
    prompts = make_prompts(96, seed=3, noise=0.2, hallucination=0.3)
    # mode v05: every group is checked against the per-group core below.
    with v05.Plugin.create(segname, max_prompts=128, schedule=schedule,
                           pad_multiple=8, mode="v05") as p:
        with SimEngine(p, prompts, workers=3, latency="uniform:0:1",
                       seed=3) as eng:
            res = eng.run(keep_groups=True)
        assert res.prompts == 96 and np.all(res.k >= 4) and np.all(res.k <= 16)
        assert res.samples == int(res.k.sum())
        assert res.stats["rewards_applied"] == res.samples
        assert res.stats["prompts_open"] == 0
        # Every group is what the statistics core says of its rewards, and
        # every reward is the simulated one for its sample.
        for pr in prompts:
            k, base, rw, adv, halted = eng.groups[pr.uid]
            assert list(rw) == [sim_reward(pr.uid, s, pr.p, 3) for s in range(k)]
            est = v05.estimate(pr.prior, list(rw.astype(float)))
            assert base == est["baseline"]
            assert np.array_equal(adv, np.array(est["advantages"], dtype=np.float32))
            assert halted or est["action"] == "stop"


def test_demo_table(capsys):
    assert demo.main(["--prompts", "48", "--no-progress", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    for label in ("v05 (OSLA)", "v05-fixed k=4", "grpo G=16", "dapo G=16"):
        assert label in out
    assert "baseline MSE" in out and "lat p99 us" in out


def test_demo_runs_the_default_mode(capsys):
    """v05-pg, the library's default, is one of the demo's modes: one
    batch, its fit cold, so two samples a prompt."""
    assert demo.main(["--prompts", "48", "--no-progress", "--workers", "2",
                      "--modes", "v05-pg"]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines()
               if x.startswith("v05-pg (the default)"))
    assert row.split()[3:6] == ["96", "2.00", "2"]


def test_demo_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "v05.demos", "--modes", "ppo"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--modes" in r.stderr and r.stdout == ""
    r = subprocess.run([sys.executable, "-m", "v05.demos", "--latency", "x:1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--latency" in r.stderr
