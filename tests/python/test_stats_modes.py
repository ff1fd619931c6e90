# SPDX-License-Identifier: MIT
"""The advantage normaliser (rms default, paper one option away) and mode
v05-eb through the Python API: estimate() and Plugin.create()."""
import math

import numpy as np
import pytest

import v05


def test_sigma_rms_and_paper():
    # Prior 1 not rejected by 3 of 4 right: the baseline is 1.
    rms = v05.estimate(1.0, [1, 1, 1, -1])
    assert rms["baseline"] == 1.0 and rms["sigma"] == 1.0
    assert rms["advantages"] == [0.0, 0.0, 0.0, -2.0]  # |A| <= sqrt(4)
    paper = v05.estimate(1.0, [1, 1, 1, -1], sigma="paper")
    assert paper["sigma"] == 0.01 and paper["advantages"][3] == pytest.approx(-200)
    # Every reward equal to the baseline: all advantages exactly 0.
    assert v05.estimate(-1.0, [-1, -1])["advantages"] == [0.0, 0.0]
    with pytest.raises(ValueError):
        v05.estimate(0.0, [1], sigma="floor")


def test_eb_estimate_needs_fit():
    e = v05.estimate(0.2, [1, 1, -1, 1], mode="v05-eb", fit=(10.0, 0.1))
    assert -1 < e["baseline"] < 1 and 0 < e["weight"] < 1
    assert sum(a * a for a in e["advantages"]) / 4 <= 1 + 1e-12
    # Fractional rewards: two 0s weigh as one +1 and one -1.
    a = v05.estimate(0.4, [0.0, 0.0], mode="v05-eb", fit=(10.0, 0.1))
    b = v05.estimate(0.4, [1.0, -1.0], mode="v05-eb", fit=(10.0, 0.1))
    assert a["baseline"] == b["baseline"]
    with pytest.raises(ValueError):
        v05.estimate(0.2, [1], mode="v05-eb")
    with pytest.raises(ValueError):
        v05.estimate(0.2, [1], fit=(10.0, 0.1))
    with pytest.raises(v05.V05Error):
        v05.estimate(0.2, [1], mode="v05-eb", fit=(10.0, 1.5))


def test_defaults_and_paper(segname, v05ctl):
    import subprocess
    import json
    from v05.core.observer import Observer
    with v05.Plugin.create(segname, max_prompts=8) as p:
        assert p.mode == "v05-pg"
        with Observer(segname) as o:
            assert o.info()["mode"] == "v05-pg"
    with v05.Plugin.create(segname, max_prompts=8, paper=True):
        with Observer(segname) as o:
            assert o.info()["mode"] == "v05"
    out = json.loads(subprocess.run(
        [v05ctl, "sim", "--prompts", "512", "--paper", "--prior-noise", "0.2"],
        capture_output=True, text=True, check=True).stdout)
    assert out["mode"] == "v05" and out["sigma"] == "paper"
    assert out["halt_fraction"] == 0.25 and out["schedule"] == "rounds"
    out = json.loads(subprocess.run(
        [v05ctl, "sim", "--prompts", "512"],
        capture_output=True, text=True, check=True).stdout)
    assert out["mode"] == "v05-eb" and out["sigma"] == "rms"


def test_plugin_v05_eb_two_waves(segname):
    rng = np.random.default_rng(3)
    p_true = rng.uniform(0, 1, 64)
    priors = np.clip(2 * p_true - 1 + rng.normal(0, 0.3, 64), -1, 1)
    with v05.Plugin.create(segname, mode="v05-eb", sigma="paper",
                           max_prompts=64, max_producers=2,
                           pad_multiple=1, cost=0.002) as p:
        ds = p.submit([(f"q{i}", float(priors[i])) for i in range(64)])
        waves, finals = 1, {}
        with v05.RewardWriter.attach(segname) as w:
            while len(finals) < 64:
                again = False
                for d in ds:
                    if d.kind == "sample":
                        i = int(d.uid[1:])
                        for s in d.samples:
                            w.push(d, s, 1.0 if (i * 31 + s * 17) % 100
                                   < 100 * p_true[i] else -1.0)
                        again = again or d.samples[0] >= 4
                    else:
                        finals[d.uid] = d
                waves += again
                if len(finals) < 64:
                    assert p.wait_blocking(5.0)
                    ds = p.poll()
        assert waves <= 2
        assert all(4 <= d.k <= 16 for d in finals.values())
        assert p.stats()["halts"] == 0


def test_eb_first_wave():
    """v05.eb_first_wave picks, of the sizes given, the one whose own risk
    (the same call with that size alone) is least, the smaller on ties;
    a sharp fit confirms its prior with 2, a vague one takes 4; the
    second component's shape changes the risk."""
    chose = set()
    for fit in [(1000.0, 0.005), (100.0, 0.01), (3.0, 0.5), (1.0, 0.9),
                (1.0, 0.9, 0.3, 0.3), (10.0, 0.3, 0.2, 0.6)]:
        for prior in (-0.9, 0.0, 0.5):
            one = {k: v05.eb_first_wave(prior, fit, waves=[k])
                   for k in (2, 3, 4)}
            assert all(one[k][0] == k for k in one)
            k1, risk = v05.eb_first_wave(prior, fit)
            want = 4 if one[4][1] < one[2][1] else 2
            assert (k1, risk) == (want, one[want][1])
            k1, _ = v05.eb_first_wave(prior, fit, waves=[2, 3, 4])
            assert k1 == min(one, key=lambda k: (one[k][1], k))
            chose.add(want)
    assert chose == {2, 4}
    assert v05.eb_first_wave(0.5, (1000.0, 0.005))[0] == 2
    assert v05.eb_first_wave(0.5, (1.0, 0.9))[0] == 4
    assert (v05.eb_first_wave(0.0, (1.0, 0.9, 0.3, 0.3))[1] !=
            v05.eb_first_wave(0.0, (1.0, 0.9))[1])
    with pytest.raises(ValueError, match="waves"):
        v05.eb_first_wave(0.0, (10.0, 0.1), waves=[0])
    with pytest.raises(TypeError, match="waves"):
        v05.eb_first_wave(0.0, (10.0, 0.1), waves=4)
    with pytest.raises(v05.V05Error, match="k_max = 16"):
        v05.eb_first_wave(0.0, (10.0, 0.1), waves=[17])
    with pytest.raises((ValueError, v05.V05Error)):
        v05.eb_first_wave(1.5, (10.0, 0.1))
