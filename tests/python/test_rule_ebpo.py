# SPDX-License-Identifier: MIT
"""EBPO from Python (docs/RULES.md): the worked example through
v05.core.rules.Ebpo, its state surviving a save and load, and mode "ebpo"
through a plugin, where each final group's baseline is the one the same
statistics give over the groups finished before it and itself."""
import json
import math

import pytest

import v05
from v05.core.rules import Ebpo

G = ([1, 1, -1, -1], [1, 1, 1, -1], [-1, -1, -1, -1])


def test_ebpo_worked_example_and_state():
    e = Ebpo()
    assert e.estimate(G[1])["baseline"] == 0.5  # nothing folded: its mean
    for g in G:
        e.fold(g)
    assert e.groups == 3 and e.mean == pytest.approx(-1 / 6)
    assert e.shrinkage(4) == pytest.approx(1 / 3)
    out = e.estimate(G[2])
    # All failures: baseline -13/18, not -1, so a penalty where GRPO has 0.
    assert out["baseline"] == pytest.approx(-13 / 18)
    assert out["sigma"] == pytest.approx(math.sqrt(7) / 3)
    assert out["advantages"] == pytest.approx(
        [(-5 / 18) / (math.sqrt(7) / 3 + 1e-6)] * 4)
    again = Ebpo()
    again.load_state_dict(json.loads(json.dumps(e.state_dict())))
    assert again.estimate(G[2]) == out
    bad = e.state_dict()
    bad["stats"][2] = -1.0  # a negative sum of squares
    with pytest.raises(v05.V05Error, match="cannot be"):
        Ebpo().load_state_dict(bad)
    with pytest.raises(v05.V05Error, match="not in \\[2, 64\\]"):
        e.fold([1.0])
    with pytest.raises(ValueError, match="reward 1 is nan"):
        e.fold([1.0, float("nan")])
    # The per-group estimate has no statistics to give: refused.
    with pytest.raises(v05.V05Error, match="running global statistics"):
        v05.estimate(0.0, [1, -1], mode="ebpo")


def test_ebpo_mode_in_plugin(segname):
    """Eight prompts of one wave of 4; pushed one group at a time, each
    final baseline is Ebpo's after folding that group (window 3: keep
    2/3)."""
    rewards = [[1 if (i * 5 + s * 3) % (i + 2) == 0 else -1 for s in range(4)]
               for i in range(8)]
    rewards[6] = [-1] * 4
    ref = Ebpo(window=3)
    with v05.Plugin.create(segname, mode="ebpo", k_init=4, k_max=4,
                           ebpo_window=3, max_prompts=8) as p, \
            v05.RewardWriter.attach(segname) as w:
        assert p.mode == "ebpo" and p.config.ebpo_window == 3
        ds = {d.uid: d for d in p.submit([(f"q{i}", 0.0) for i in range(8)])}
        assert all(d.k == 4 and d.samples == [0, 1, 2, 3] for d in ds.values())
        for i in (3, 0, 7, 1, 5, 2, 4, 6):
            for s in range(4):
                w.push(ds[f"q{i}"], s, float(rewards[i][s]))
            assert p.wait_blocking(5.0)
            (d,) = p.poll()
            assert d.kind == "final" and d.uid == f"q{i}"
            ref.fold(rewards[i])
            want = ref.estimate(rewards[i])
            g = p.group(d)
            assert g.baseline == want["baseline"]
            assert list(g.advantages) == pytest.approx(want["advantages"],
                                                       rel=1e-6)
            del g
            p.release(d)
    with pytest.raises(ValueError, match="ebpo_window"):
        v05.Plugin.create(segname, mode="ebpo", ebpo_window=-1)


def test_ebpo_in_sim(v05ctl):
    """v05ctl sim --mode ebpo: one wave of G, no extra samples, every
    group with an advantage; with no prior its shrinkage beats the plain
    group mean (GRPO) at the same G."""
    import subprocess

    def sim(*args):
        return json.loads(subprocess.run(
            [v05ctl, "sim", "--prompts", "2048", "--no-prior", "--seed", "5",
             "--k", "4", *args],
            capture_output=True, text=True, check=True).stdout)

    e, g = sim("--mode", "ebpo"), sim("--mode", "grpo")
    assert e["rollouts_per_prompt"] == 4 and e["max_waves"] == 1
    assert e["nonzero_share"] == 1.0 and g["nonzero_share"] < 0.8
    assert e["mse"] < 0.8 * g["mse"]
