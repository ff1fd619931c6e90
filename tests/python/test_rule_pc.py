# SPDX-License-Identifier: MIT
"""Pilot-Commit from Python (docs/RULES.md): the trainer's record
(v05.core.rules.PilotCommit) over epochs and through a save and load, and
mode "pilot-commit" through a plugin with its band set from Python: the
pilots in the band get their commit, the others drop."""
import json

import pytest

import v05
from v05.core.rules import PilotCommit


def test_pilot_commit_record_and_state():
    pc = PilotCommit(pilot=4)
    assert not pc.skip("a", 0)
    # Only the pilot (the first 4) counts: 1 of 4 is in the band.
    assert pc.fold("a", 0, [1, -1, -1, -1] + [1] * 12) == "commit"
    assert pc.skip("a", 0) and not pc.skip("a", 1)  # once per epoch
    assert pc.fold("b", 0, [1] * 4) == "solved"
    assert pc.fold("c", 0, [-1] * 4) == "too_hard"
    assert pc.fold("d", 0, [1, 1, 1, 1]) == "solved"
    assert pc.select("abcde", 1) == ["a", "c", "e"]  # solved ones never
    assert sorted(pc.evicted()) == ["b", "d"]
    assert pc.last("c") == "too_hard" and pc.last("e") is None
    again = PilotCommit(pilot=4)
    again.load_state_dict(json.loads(json.dumps(pc.state_dict())))
    assert again.select("abcde", 1) == ["a", "c", "e"]
    with pytest.raises(ValueError, match="another pilot"):
        PilotCommit(pilot=8).load_state_dict(pc.state_dict())
    never = PilotCommit(pilot=4, evict=None)
    assert never.fold("b", 0, [1] * 4) == "too_easy"
    assert not never.skip("b", 1)
    assert pc.fold("a", 2, [1, 1, -1, -1]) == "commit"
    with pytest.raises(v05.V05Error, match="before the prompt's last"):
        pc.fold("a", 1, [1] * 4)
    with pytest.raises(ValueError, match="fewer than the pilot"):
        pc.fold("z", 3, [1, 1])
    with pytest.raises(v05.V05Error, match="commits nothing"):
        PilotCommit(lower=0.9)
    with pytest.raises(v05.V05Error, match="evict"):
        PilotCommit(evict=0.5)  # inside the band


def test_pilot_commit_mode_in_plugin(segname):
    """Pilots of 4 with 0..4 successes, commit 12, band [0.5, 0.75] from
    Python: 2 and 3 of 4 commit (one "sample" decision of samples 4..15,
    then a final group of 16), the rest drop at 4."""
    wins = [0, 1, 2, 3, 4]
    with v05.Plugin.create(segname, mode="pilot-commit", k_init=4,
                           k_step=12, k_max=16, pc_lower=0.5,
                           max_prompts=8) as p, \
            v05.RewardWriter.attach(segname) as w:
        assert p.config.pc_lower == 0.5 and p.config.pc_upper == 0.25
        ds = p.submit([(f"q{i}", 0.0) for i in range(5)])
        out = {}
        while len(out) < 5:
            for d in ds:
                i = int(d.uid[1:])
                if d.kind == "sample":
                    if d.samples[0] == 4:
                        assert d.samples == list(range(4, 16))
                    for s in d.samples:
                        w.push(d, s, 1.0 if s < wins[i] or
                               (s >= 4 and s % 2) else -1.0)
                else:
                    out[i] = (d.kind, d.k)
                    p.release(d)
            if len(out) < 5:
                assert p.wait_blocking(5.0)
                ds = p.poll()
    assert out == {0: ("drop", 4), 1: ("drop", 4), 2: ("final", 16),
                   3: ("final", 16), 4: ("drop", 4)}
    with pytest.raises(ValueError, match="pc_lower"):
        v05.Plugin.create(segname, mode="pilot-commit", pc_lower=1.5)
    with pytest.raises(v05.V05Error, match="must be the pilot"):
        v05.Plugin.create(segname, mode="pilot-commit", k_step=8)


def test_pilot_commit_under_verl_config():
    """verl's side without verl: algorithm.v05_plugin passes the band
    through; algorithm.v05_history={rule: pilot-commit} takes the pilot
    and band from the plugin's keys, needs mode pilot-commit, and its
    RuleHistory skips the solved prompts at later steps and folds pilots
    as the library does."""
    from v05.trainers.verl.agent_loop import plugin_params
    from v05.trainers.verl.history import RuleHistory, history_config

    cfg = {"algorithm": {"v05_plugin": {"mode": "pilot-commit", "k_init": 4,
                                        "k_step": 4, "k_max": 8,
                                        "pc_lower": 0.25}}}
    params = plugin_params(cfg)
    assert params["pc_lower"] == 0.25
    assert plugin_params({"algorithm": {"v05_plugin": {
        "mode": "ebpo", "ebpo_window": 256}}})["ebpo_window"] == 256
    h = history_config({"v05_history": {"rule": "pilot-commit", "evict": 1.0}},
                       params)
    assert h["pc"] == {"pilot": 4, "lower": 0.25, "upper": 0.25, "evict": 1.0}
    with pytest.raises(ValueError, match="mode pilot-commit"):
        history_config({"v05_history": {"rule": "pilot-commit"}},
                       {"mode": "grpo"})
    with pytest.raises(ValueError, match="Pilot-Commit's"):
        history_config({"v05_history": {"rule": "greso", "evict": 1.0}},
                       params)
    with pytest.raises(v05.V05Error, match="evict"):
        history_config({"v05_history": {"rule": "pilot-commit",
                                        "evict": 0.5}}, params)
    rh = RuleHistory("pilot-commit", pc=h["pc"])
    assert rh.plan(3, [0, 1, 2]) == [True, True, True]
    rh.fold(3, [(0, [1.0] * 8), (1, [-1.0] * 8), (2, [1.0, -1.0] * 4)])
    assert rh.plan(4, [0, 1, 2]) == [False, True, True]  # 0 solved
    shadow = PilotCommit(**h["pc"])
    for pid, r in ((0, [1.0] * 8), (1, [-1.0] * 8), (2, [1.0, -1.0] * 4)):
        shadow.fold(pid, 3, r)
    assert rh.state()["state"] == shadow.state_dict()


def test_pilot_commit_in_sim(v05ctl):
    """v05ctl sim --mode pilot-commit: a pilot of 8, a commit of 24 for
    the prompts in the band, the rest dropped at 8; over epochs, prompts
    whose pilot was solved are evicted (every prompt at p = 1: all of them
    after the first epoch), and 'never' keeps them."""
    import subprocess

    def sim(*args):
        return json.loads(subprocess.run(
            [v05ctl, "sim", "--prompts", "512", "--mode", "pilot-commit",
             "--seed", "3", *args],
            capture_output=True, text=True, check=True).stdout)

    d = sim("--no-prior")
    assert d["k"] == 8 and d["k_max"] == 32 and d["max_waves"] == 2
    committed = 512 - d["dropped"]
    assert d["rollouts_per_prompt"] == pytest.approx(
        (8 * 512 + 24 * committed) / 512)
    assert 0 < d["dropped"] < 512
    d = sim("--p", "1", "--epochs", "3")
    assert d["skipped"] == 2 * 512 and d["dropped"] == 512
    d = sim("--p", "1", "--epochs", "3", "--pc-evict", "never")
    assert d["skipped"] == 0 and d["dropped"] == 3 * 512
    d = sim("--p", "0.5", "--pc-lower", "0.5", "--pc-upper", "0.5")
    assert 0 < d["dropped"] < 512  # only pilots of exactly 4 of 8 commit
