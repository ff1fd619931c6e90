# SPDX-License-Identifier: MIT
"""verl's side of v05 refuses what would train silently wrong (without verl
installed; the real verl runs in tests/trainers): a score that is NaN,
infinite or outside its range raises, naming the row; uids of different
types that print alike are refused; rows that get no v05 advantage are
warned about with their count and why, and counted."""
import logging
import pickle

import numpy as np
import pytest
import torch

import v05
from v05.trainers import verl as vverl
from v05.trainers.verl import estimator


def test_score_to_reward_maps_and_refuses():
    f = vverl.score_to_reward
    assert (f(0), f(1), f(0.5), f(True), f(False)) == (-1.0, 1.0, 0.0, 1.0, -1.0)
    assert f(-0.25, (-1.0, 1.0)) == -0.25 and f(3.0, (0.0, 4.0)) == 0.5
    for bad, words in ((float("nan"), "is nan: not finite"),
                       (float("-inf"), "is -inf: not finite"),
                       (1.5, "is 1.5: outside [0, 1]"),
                       (-0.01, "is -0.01: outside [0, 1]")):
        with pytest.raises(ValueError) as e:
            f(bad, what="verl score of uid 'u' sample 3")
        assert f"verl score of uid 'u' sample 3 {words}" in str(e.value)
    with pytest.raises(TypeError, match="is None"):
        f(None)
    assert vverl.config.score_range({"v05_score_range": [-1, 1]}) == (-1.0, 1.0)
    with pytest.raises(ValueError, match="v05_score_range"):
        vverl.config.score_range({"v05_score_range": "x"})
    with pytest.raises(ValueError, match="not lo < hi"):
        vverl.config.score_range({"v05_score_range": [1, 0]})


def rows_of_a_group(uid="g", k=4):
    """k rows carrying group numbers (V05Uid), scores 0/1 alternating."""
    rewards = [1.0 if s % 2 else -1.0 for s in range(k)]
    adv = [r * 0.5 for r in rewards]
    index = np.array([vverl.V05Uid(uid, s, k, 0.0, 1.0, rewards[s], adv[s])
                      for s in range(k)], dtype=object)
    tlr = torch.zeros(k, 3)
    tlr[:, -1] = torch.tensor([(r + 1) / 2 for r in rewards])
    return index, tlr, torch.ones(k, 3), adv


def test_nan_score_of_a_v05_row_raises_naming_it():
    index, tlr, mask, adv = rows_of_a_group()
    got, _ = vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    assert got[:, 0].tolist() == adv
    tlr[2, -1] = float("nan")
    with pytest.raises(ValueError, match="verl score of a row of uid 'g' is nan"):
        vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    tlr[2, -1] = 2.0  # outside the default range [0, 1]
    with pytest.raises(ValueError, match="outside"):
        vverl.compute_v05_advantage(tlr, mask, index=index, config={})


def test_rows_of_a_reinforce_ada_group_are_its_kept_samples():
    """A reinforce-ada group of 8 keeps samples 0, 1, 3 and 6: those four
    rows get their advantages; a row of a sample not kept, or one row
    missing, is refused."""
    k, keep = 8, 0b01001011
    rewards = [1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
    b = sum(rewards) / k
    kept = [s for s in range(k) if keep >> s & 1]

    def rows(samples):
        index = np.array([vverl.V05Uid("ra", s, k, b, 1.0, rewards[s],
                                       rewards[s] - b, keep)
                          for s in samples], dtype=object)
        tlr = torch.zeros(len(samples), 2)
        tlr[:, -1] = torch.tensor([(rewards[s] + 1) / 2 for s in samples])
        return index, tlr, torch.ones(len(samples), 2)

    index, tlr, mask = rows(kept)
    got, _ = vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    assert got[:, 0].tolist() == [rewards[s] - b for s in kept]
    index, tlr, mask = rows([0, 1, 2, 3])  # 2 is not kept
    with pytest.raises(ValueError, match="not kept"):
        vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    # The same group recorded in this process, rows without numbers: the
    # row count must be the kept count.
    vverl.record_group("rb", k, b, 1.0, rewards,
                       [rewards[s] - b if keep >> s & 1 else 0.0
                        for s in range(k)], keep)
    plain = np.array(["rb"] * 3, dtype=object)
    with pytest.raises(ValueError, match="of which 4 are trained on"):
        vverl.compute_v05_advantage(tlr[:3], mask[:3], index=plain,
                                    config={})
    plain = np.array(["rb"] * 4, dtype=object)
    tlr4 = torch.zeros(4, 2)
    tlr4[:, -1] = torch.tensor([(rewards[s] + 1) / 2 for s in kept])
    got, _ = vverl.compute_v05_advantage(tlr4, torch.ones(4, 2), index=plain,
                                         config={})
    assert sorted(got[:, 0].tolist()) == sorted(rewards[s] - b for s in kept)
    assert pickle.loads(pickle.dumps(index[0])).v05[6] == keep
    # Rows written without a keep mask (0: the field unset) keep every
    # sample, as before the field existed.
    assert vverl.V05Uid("x", 0, 4, 0.0, 1.0, 1.0, 0.0, 0).v05[6] == 0b1111
    assert vverl.V05Uid("x", 0, 64, 0.0, 1.0, 1.0, 0.0).v05[6] == 2**64 - 1


def test_uids_of_different_types_refused():
    index = np.array(["7", 7, "8"], dtype=object)
    tlr = torch.zeros(3, 2)
    with pytest.raises(ValueError) as e:
        vverl.compute_v05_advantage(tlr, torch.ones(3, 2), index=index,
                                    config={"v05_unknown": "zero"})
    assert "uids '7' (str) and 7 (int)" in str(e.value)
    # The same uid as str and as a V05Uid carrying numbers is one uid.
    index = np.array([vverl.V05Uid("x", 0, 1, 0.0, 1.0, 1.0, 0.0), "x"],
                     dtype=object)
    vverl.compute_v05_advantage(torch.zeros(2, 2), torch.ones(2, 2),
                                index=index, config={"v05_unknown": "zero"})


def test_fallback_is_warned_and_counted(caplog):
    k = 3
    index = np.array(["a"] * k + ["b"] * k + ["pad"] * 2, dtype=object)
    tlr = torch.zeros(len(index), 2)
    mask = torch.ones(len(index), 2)
    mask[-2:] = 0  # padding rows: masked, not counted
    before = vverl.fallback_counts()
    with caplog.at_level(logging.WARNING, logger=estimator.__name__):
        adv, _ = vverl.compute_v05_advantage(tlr, mask, index=index,
                                             config={"v05_unknown": "zero"})
    assert torch.equal(adv, torch.zeros_like(adv))
    after = vverl.fallback_counts()
    assert after["rows"] - before["rows"] == 2 * k
    assert after["calls"] - before["calls"] == 1
    (rec,) = [r for r in caplog.records if "v05 estimator" in r.message]
    assert "6 rows of 3 uids (a, b, pad) have no v05 group and get zero" in rec.message
    assert "no segment is configured" in rec.message
    with pytest.raises(KeyError, match="no group for uids"):
        vverl.compute_v05_advantage(tlr, mask, index=index,
                                    config={"v05_unknown": "error"})


def test_reader_attached_first_sees_groups_released_before_the_estimator(segname):
    """The order docs/TRAINERS.md asks for: the trainer's reader attached,
    then the rollout side may release its groups at once."""
    with v05.Plugin.create(segname, mode="grpo", k_init=2, k_max=2,
                           pad_multiple=1, max_prompts=8) as plugin:
        vverl.attach_reader(segname)
        try:
            (d,) = plugin.submit([("q", 0.0)])
            with v05.RewardWriter.attach(segname) as w:
                w.push(d, 0, 1.0)
                w.push(d, 1, -1.0)
            assert plugin.wait_blocking(5.0)
            (f,) = plugin.poll()
            g = plugin.group(f)
            want = g.advantages.tolist()
            del g
            plugin.release(f)  # the rollout side is done with it
            tlr = torch.tensor([[1.0], [0.0]])
            adv, _ = vverl.compute_v05_advantage(
                tlr, torch.ones(2, 1), index=np.array(["q", "q"], dtype=object),
                config={"v05_segment": segname, "v05_unknown": "error"})
            assert adv[:, 0].tolist() == pytest.approx(want, abs=0)
        finally:
            vverl.groups.groups.close()
            vverl.groups.groups.records.clear()
    with pytest.raises(FileNotFoundError, match="not on this host"):
        vverl.attach_reader(segname)
