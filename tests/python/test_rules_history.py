# SPDX-License-Identifier: MIT
"""The published rules' cross-epoch state from Python (v05.core.rules):
Knapsack RL's own estimate feeding mode "knapsack", GRESO's filter, and
both surviving a save and load as the trainer's checkpoint would."""
import json

import pytest

import v05
from v05.core.rules import Greso, KnapsackHistory


def test_knapsack_history_example_and_state():
    h = KnapsackHistory()
    assert h.prior(17) is None  # never seen: no estimate
    h.fold(17, 1, [1, 1, 1] + [-1] * 5)
    assert h.estimate(17) == 0.375
    h.fold(17, 2, [1, -1])
    assert h.estimate(17) == 0.4
    h.fold(17, 3, [1] * 5 + [-1] * 15)
    assert h.estimate(17) == 0.25 and h.prior(17) == -0.5
    h.fold("few", 1, [1, -1, 1])
    assert h.prior("few") is None  # fewer than 8 outcomes
    again = KnapsackHistory()
    again.load_state_dict(json.loads(json.dumps(h.state_dict())))
    assert again.estimate(17) == 0.25 and again.prior("few") is None
    with pytest.raises(v05.V05Error, match="before the last one"):
        h.fold(17, 2, [1])
    with pytest.raises(ValueError, match="reward 1 is nan"):
        h.fold(17, 3, [1, float("nan")])
    bad = h.state_dict()
    bad["prompts"][0][6] = 99  # more successes than outcomes
    with pytest.raises(v05.V05Error, match="cannot be"):
        KnapsackHistory().load_state_dict(bad)


def test_knapsack_mode_takes_the_history(segname):
    """Mode knapsack, K4's batch: a prompt with no estimate (None) gets the
    uniform 8, outside the knapsack; the others share the rest."""
    h = KnapsackHistory()
    for pid, wins in (("a", 4), ("b", 1), ("d", 0)):  # p 0.5, 0.1, 0
        h.fold(pid, 1, [1] * wins + [-1] * (10 - wins) if pid != "a"
               else [1] * 4 + [-1] * 4)
    priors = [h.prior(pid) for pid in "abcd"]
    assert priors == [0.0, -0.8, None, -1.0]
    with v05.Plugin.create(segname, mode="knapsack") as p:
        ds = p.submit(list(zip("abcd", priors)))
        assert {d.uid: d.k for d in ds} == {"a": 7, "b": 15, "c": 8, "d": 2}
        p.cancel(ds[0].batch)
    with v05.Plugin.create(segname, mode="v05-fixed") as p, \
            pytest.raises(TypeError, match="only in mode knapsack"):
        p.submit([("c", None)])
    # Under knapsack-prior the prior is a value model's: None is refused.
    with v05.Plugin.create(segname, mode="knapsack-prior") as p, \
            pytest.raises(TypeError, match="runs mode knapsack-prior"):
        p.submit([("c", None)])


def test_knapsack_plan_none_not_nan():
    """knapsack_plan: None is a prompt with no estimate; a float NaN (a
    value model that failed) is refused, not taken for one."""
    assert v05.knapsack_plan([0.5, None], per_prompt=4)[1] == 4
    with pytest.raises(ValueError, match="p\\[1\\] is nan"):
        v05.knapsack_plan([0.5, float("nan")], per_prompt=4)


def test_greso_filter_and_state():
    g = Greso(seed=3)
    assert g.select(range(10), step=1) == list(range(10))  # nothing seen
    assert g.fold(1, [1] * 8) == "easy" and g.run(1) == (1, "easy")
    assert g.fold(1, [1] * 8) == "easy" and g.run(1) == (2, "easy")
    assert g.fold(2, [-1] * 8) == "hard"
    assert g.fold(3, [1, -1] * 4) == "mixed" and g.run(3) == (0, "mixed")
    assert g.keep_p(1) == 0.25 and g.keep_p(2) == 0.5 and g.keep_p(3) == 1
    assert g.counts() == (4, 2, 1)
    # The same draws every time: a rerun skips the same prompts.
    picks = [g.select([1, 2, 3], step=s) for s in range(50)]
    assert picks == [g.select([1, 2, 3], step=s) for s in range(50)]
    assert all(3 in x for x in picks)
    assert 0 < sum(1 in x for x in picks) < 30  # kept about 1/4 of steps
    g.step_end(first_epoch=True)  # the first epoch adapts nothing
    assert (g.p_easy, g.p_hard, g.counts()) == (0.5, 0.5, (0, 0, 0))
    for pid in range(10):
        g.fold(100 + pid, [1] * 8 if pid < 5 else [1, -1] * 4)
    g.step_end()  # half easy: skip easy prompts more
    assert g.p_easy == pytest.approx(0.49) and g.p_hard == pytest.approx(0.51)
    assert Greso.refill(256, 200, 0.6, 384) == (175, True)
    again = Greso()
    again.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert again.run(1) == (2, "easy") and again.p_easy == g.p_easy
    assert [again.skip(1, s) for s in range(20)] == \
        [g.skip(1, s) for s in range(20)]
