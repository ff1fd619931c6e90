# SPDX-License-Identifier: MIT
"""The published rules through the Python API (docs/RULES.md): each mode's
defaults come with it, Reinforce-Ada's rounds and keep set reach Group,
knapsack-prior's first dispatch is v05.knapsack_plan of the priors, and a
setting that would break a rule is refused with the reason."""
import asyncio

import numpy as np
import pytest

import v05
from v05.engines.driver import GroupRollout


def test_estimate_reinforce_ada_worked_example():
    # E1: successes at 0 and 3 of a first round of 8.
    r = [1, -1, -1, 1, -1, -1, -1, -1]
    e = v05.estimate(0.0, r, mode="reinforce-ada")
    assert e["action"] == "stop" and e["baseline"] == -0.5
    assert e["keep"] == [0, 1, 2, 3]
    assert e["advantages"] == [1.5, -0.5, -0.5, 1.5, 0, 0, 0, 0]
    # One success is enough for the positive exit, not for the balanced.
    one = [-1] * 5 + [1] + [-1] * 2
    assert v05.estimate(0.0, one, mode="reinforce-ada")["action"] == "more"
    assert v05.estimate(0.0, one, mode="reinforce-ada-pos")["action"] == "stop"


def test_knapsack_plan_worked_example():
    assert v05.knapsack_plan([0.5, 0.1, 1.0, 0.0], 8, 16) == [7, 16, 2, 7]
    # K4: a prompt without an estimate (None) gets the uniform 8.
    assert v05.knapsack_plan([0.5, 0.1, None, 0.0], 8, 64) == [7, 15, 8, 2]
    with pytest.raises(v05.V05Error, match="not in"):
        v05.knapsack_plan([1.5], 4)


def test_mode_defaults_and_refusals(segname):
    with v05.Plugin.create(segname, mode="reinforce-ada") as p:
        c = p.config
        assert (c.params.k_init, c.params.k_step, c.params.k_max) == (8, 8, 32)
        assert c.pad_multiple == 1 and c.halt_fraction == 0.0
    with pytest.raises(v05.V05Error, match="pad_multiple 1"):
        v05.Plugin.create(segname, mode="reinforce-ada", pad_multiple=32)
    with pytest.raises(v05.V05Error, match="only reinforce-ada"):
        v05.Plugin.create(segname, mode="v05-eb", keep_n=2)


def test_reinforce_ada_through_the_driver(segname):
    """E2 (a success at 11 and at 17): three rounds, 24 samples, the two
    successes and the first two failures kept."""
    async def main():
        with v05.Plugin.create(segname, mode="reinforce-ada",
                               schedule="stream") as p:
            async def generate(prompt, uid, sample, batch):
                return sample

            ro = GroupRollout(p, generate, release=True,
                              score=lambda uid, s, out: 1.0 if out in (11, 17)
                              else -1.0)
            try:
                res = await ro.run([("a", None, 0.0)])
            finally:
                ro.close()
            return res["a"], ro.generate_calls
    res, calls = asyncio.run(main())
    g = res.group
    assert calls == 24 and g.k == 24
    assert g.kept == [0, 1, 11, 17]
    b = -20 / 24
    want = np.zeros(24, dtype=np.float32)
    want[[0, 1]] = -1 - b
    want[[11, 17]] = 1 - b
    assert np.allclose(g.advantages, want, atol=1e-6)


def test_knapsack_prior_first_dispatch(segname):
    priors = [-0.96, -0.4, 1.0, 1.0, 1.0, 1.0, 0.8, 0.2]
    plan = v05.knapsack_plan([(1 + v) / 2 for v in priors], 8, 64)
    with v05.Plugin.create(segname, mode="knapsack-prior") as p:
        ds = p.submit([(f"u{i}", v) for i, v in enumerate(priors)])
        assert [len(d.samples) for d in ds] == plan
        assert sum(plan) == 64
        p.cancel(ds[0].batch)


def test_verl_config_takes_keep_n_and_names_the_default_mode():
    """verl's side without verl: algorithm.v05_plugin takes Reinforce-Ada's
    keep_n, and a history that needs another mode names the mode a plugin
    without one runs (the library's default), not a fixed name."""
    from v05.trainers.verl.agent_loop import plugin_params
    from v05.trainers.verl.history import history_config

    params = plugin_params({"algorithm": {"v05_plugin": {
        "mode": "reinforce-ada", "keep_n": 2}}})
    assert params == {"mode": "reinforce-ada", "keep_n": 2}
    with pytest.raises(ValueError, match="v05_plugin.mode is v05-pg"):
        history_config({"v05_history": {"rule": "knapsack"}}, {})
