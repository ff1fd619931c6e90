# SPDX-License-Identifier: MIT
"""v05-eb without a barrier from Python: EbState folds, adds and fits as
the C functions do; a plugin's own part and the other engines' part; an
engine given the others' part decides as one engine with every first wave
would; bad states are refused with a message."""
import random

import pytest

import v05


def first_waves(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        mu = rng.uniform(-1, 1)
        prior = max(-1.0, min(1.0, mu + rng.gauss(0, 0.2)))
        out.append((prior, [1.0 if rng.random() < (1 + mu) / 2 else -1.0
                            for _ in range(4)]))
    return out


def test_fold_add_fit_agree_with_the_batch_fit():
    waves = first_waves(200, 1)
    a, b, both = v05.EbState(), v05.EbState(), v05.EbState()
    for i, (prior, r) in enumerate(waves):
        (a if i % 2 else b).fold(prior, r)
        both.fold(prior, r)
    assert (a + b).fit() == both.fit() == v05.eb_fit(waves)
    assert (a + b).folded == 200 and both.weight == 200.0
    assert v05.EbState.from_list(both.to_list()) == both
    with pytest.raises(ValueError, match="no first wave"):
        v05.EbState().fit()
    with pytest.raises(ValueError, match="numbers"):
        v05.EbState.from_list([0.0] * 3)
    with pytest.raises(ValueError, match="finite"):
        v05.EbState.from_list([float("nan")] * v05.EbState.SIZE)


def run_first_waves(plugin, waves, tag):
    """Submit the waves' prompts and feed their first waves in order;
    returns {uid: decision kind, extra samples}."""
    items = [(f"{tag}{i}", prior) for i, (prior, _r) in enumerate(waves)]
    first = {d.uid: d for d in plugin.submit(items)}
    out = {}
    with v05.RewardWriter.attach(plugin.name) as w:
        for i, (_prior, r) in enumerate(waves):
            uid = f"{tag}{i}"
            for s, x in enumerate(r):
                w.push(uid, s, x, gen=first[uid].gen)
            w.flush()
            for d in plugin.poll():
                out[d.uid] = (d.kind, len(d.samples))
                if d.kind != "sample":
                    plugin.release(d)
    return out


def test_engine_with_the_others_part_decides_as_one_engine(segname):
    waves = first_waves(64, 2)
    mine, theirs = waves[1::2], waves[0::2]
    kw = dict(mode="v05-eb", schedule="stream", eb_window=0, eb_cold=1,
              pad_multiple=1, max_prompts=64)
    # One engine with every first wave: theirs first, then mine.
    with v05.Plugin.create(segname, **kw) as one:
        run_first_waves(one, theirs, "t")
        want = run_first_waves(one, mine, "m")
    # Two engines: B folds theirs; A gets B's part, then decides mine.
    with v05.Plugin.create(segname + "-b", **kw) as b:
        run_first_waves(b, theirs, "t")
        part = b.eb_state()
    assert part.folded == len(theirs)
    with v05.Plugin.create(segname + "-a", **kw) as a:
        a.set_eb_remote(part)
        got = run_first_waves(a, mine, "m")
        assert a.eb_state().folded == len(mine)
        a.set_eb_remote(part)           # again: replaces, adds nothing
        assert a.eb_state().folded == len(mine)
        with pytest.raises(TypeError, match="EbState"):
            a.set_eb_remote(part.to_list())
    assert got == want
    assert {k for k, _ in got.values()} == {"final", "sample"}


def test_own_part_restored_decides_as_before(segname):
    """A resumed run: a fresh plugin given a saved own part (set_eb_own)
    holds that state exactly and decides as the plugin it came from."""
    waves = first_waves(64, 3)
    before, after = waves[:32], waves[32:]
    kw = dict(mode="v05-eb", schedule="stream", eb_cold=1, pad_multiple=1,
              max_prompts=64)
    with v05.Plugin.create(segname, **kw) as one:
        run_first_waves(one, before, "b")
        saved = v05.EbState.from_list(one.eb_state().to_list())
        want = run_first_waves(one, after, "a")
    with v05.Plugin.create(segname + "-r", **kw) as again:
        again.set_eb_own(saved)
        assert again.eb_state() == saved
        got = run_first_waves(again, after, "a")
        with pytest.raises(TypeError, match="EbState"):
            again.set_eb_own(saved.to_list())
    assert got == want
    assert {k for k, _ in got.values()} == {"final", "sample"}


def test_other_schedules_have_no_running_fit(segname):
    with v05.Plugin.create(segname, mode="v05-eb", schedule="rounds") as p:
        with pytest.raises(ValueError, match="stream schedule"):
            p.eb_state()
