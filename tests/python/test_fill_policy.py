# SPDX-License-Identifier: MIT
"""The one admission policy (v05.core.admission.Admission) and what the
streamed fill does with it: the skip's verdicts are SkipRule's, the
expectation counts contrast as certain and scales the rest by how the
finished groups bore it out, the calibration carries from one fill to the
next through a policy handed in; a step that came back short says so
(FillResult.short), apart from the source running out (exhausted) and
the bound on admissions (capped); the revisit draw goes by the prompt's
name and the visit the caller gives; on_group sees every finished group."""
import asyncio

import pytest

import v05
from v05.core.admission import ADMIT, REVISIT, SKIP, Admission
from v05.core.fill import SkipRule
from v05.engines.driver import GroupRollout
from v05.engines.fill import StreamFill

from test_driver_fill import (Engine, K, check_groups, kind, nothing_left,
                              plugin, score, source)


class _G:
    """A final group's numbers (what Admission reads of a Group)."""

    def __init__(self, rewards, advantages=None):
        self.k = len(rewards)
        self.rewards = list(rewards)
        self.advantages = list(advantages or [0.0] * self.k)
        self.kept = list(range(self.k))


def test_screen_is_the_skip_rule():
    rule = SkipRule(revisit=0.3, seed=7)
    a = Admission("dapo", 4, skip=rule)
    seen = set()
    for i in range(400):
        prior = (-1.0, 1.0, 0.0, 0.99)[i % 4]
        v = a.screen(f"u{i}", prior, visit=i % 3, name=f"n{i}")
        seen.add(v)
        if not rule.would_skip(prior, 4):
            assert v == ADMIT
        else:
            assert v == (SKIP if rule.skip(f"n{i}", prior, 4, visit=i % 3)
                         else REVISIT)
    assert seen == {ADMIT, SKIP, REVISIT}
    assert Admission("dapo", 4).screen("x", 1.0) == ADMIT  # no rule


def test_expectation_and_calibration():
    a = Admission("dapo", 4)
    assert a.admit("a", 0.0) == 1.0 and a.admit("b", 0.0) == 1.0
    assert a.expected() == 2.0 and a.wants(2.0, 3, 0)
    assert not a.wants(2.0, 2, 0)
    # "a" drops: the finished groups bore out half of what was predicted.
    assert not a.finished("a", _G([1, 1, 1, 1]), dropped=True)
    assert a.scale == pytest.approx((1 - 1 / 512) / (2 - 1 / 512))
    assert a.expected() == pytest.approx(a.scale)
    # Two different rewards: "b" counts as certain.
    a.reward("b", 1.0)
    a.reward("b", -1.0)
    assert a.expected() == 1.0
    a.reward("zz", 1.0)  # not in flight: ignored
    assert a.finished("b", _G([1, -1, 1, 1]))
    assert a.expected() == 0.0
    # The floor: fewer than `inflight` samples queued wants more.
    f = Admission("dapo", 4, inflight=8)
    assert f.wants(10.0, 1, 4) and not f.wants(10.0, 1, 8)
    # A skip rule's chance: 1 - P(all same) of the first wave.
    r = SkipRule()
    s = Admission("dapo", 4, skip=r)
    assert s.admit("c", 0.9) == pytest.approx(1 - r.all_same(0.9, 4))
    s.refused("c")
    assert s.expected() == 0.0


def test_counts_and_checks():
    a = Admission("v05", 4, count="signal")
    assert a.counts(_G([1, 1, 1, 1], [0.5, 0.5, 0.5, 0.5]))
    assert not a.counts(_G([1, 1, 1, 1], [0.5] * 4), dropped=True)
    assert not Admission("v05", 4).counts(_G([1, 1, 1, 1], [0.5] * 4))
    for kw, err in [(dict(mode="nope"), ValueError),
                    (dict(count="any"), ValueError),
                    (dict(skip=0.1), TypeError),
                    (dict(history=object()), TypeError),
                    (dict(inflight=-1), ValueError),
                    (dict(k_init=0), ValueError)]:
        args = dict(mode="dapo", k_init=4)
        args.update(kw)
        with pytest.raises(err):
            Admission(args.pop("mode"), args.pop("k_init"), **args)


def test_default_count_follows_the_mode(segname):
    """Left out, count is "signal" for v05-pg (the default mode), whose
    first wave where the prior is sharp is one sample: under "contrast"
    such a group never counts and the fill would throw it away."""
    one = _G([1], [0.7])
    assert Admission("v05-pg", 2).count == "signal"
    assert Admission("v05-pg", 2).counts(one)
    assert not Admission("v05-pg", 2, count="contrast").counts(one)
    for mode in ("v05-eb", "v05", "dapo"):
        assert Admission(mode, 4).count == "contrast"
    # A first wave of 1 in any mode (fixed k = 1): the same reason.
    assert Admission("v05-fixed", 1).count == "signal"
    assert Admission("v05-fixed", 1).counts(one)
    with v05.Plugin.create(segname, max_prompts=16) as p:
        drv = GroupRollout(p, Engine().generate, score=lambda u, s, o: 1.0)
        fill = StreamFill(drv)
        assert p.mode == "v05-pg" and fill.policy.count == "signal"
        drv.close()


def test_exhausted_is_not_short(segname):
    """The source's last prompt pulled on the way to a full step: the
    step is whole (short False) though the source ran out (exhausted)."""
    eng = Engine()
    # Mixed, all-same, mixed, mixed: three informative groups exist.
    items = [(f"e-{i}", f"text of e-{i}", 0.0) for i in (0, 1, 3, 6)]

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv)
        res = await fill.fill(iter(items), 3)
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    check_groups(res, 3)
    assert res.exhausted and not res.short and not res.capped
    assert res.admitted == 4 and res.dropped == 1


def test_short_steps_say_why(segname):
    """Short by the source (exhausted) or by max_admitted (capped)."""
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, inflight=4)
        ran_out = await fill.fill(source("x", 9), 10)  # 3 mixed only
        capped = await fill.fill(source("y"), 10, max_admitted=7)
        full = await fill.fill(source("z"), 2, max_admitted=64)
        await fill.close()
        drv.close()
        return drv, ran_out, capped, full
    with plugin(segname) as p:
        drv, ran_out, capped, full = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert ran_out.short and ran_out.exhausted and not ran_out.capped
    assert len(ran_out.groups) == 3
    assert capped.short and capped.capped and not capped.exhausted
    assert capped.admitted == 7 and len(capped.groups) == 3
    assert not (full.short or full.exhausted or full.capped)
    check_groups(full, 2)


def test_visit_and_prompt_name_drive_the_revisit_draw(segname):
    """The draw goes by (prompt_name, visit): the caller's step and a
    name stable across uids (TRL's uids change every generation)."""
    eng = Engine()
    rule = SkipRule(revisit=0.5, seed=11)

    def name(uid, prompt):
        return "name of " + uid

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, skip=rule, prompt_name=name, inflight=8)
        res = await fill.fill(source("v", 300), 8, visit=41)
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    pulled = res.admitted + len(res.skipped)
    same = [f"v-{i}" for i in range(pulled) if i % 3]
    kept = [u for u in same if rule.revisited("name of " + u, 41)]
    assert res.revisited == len(kept) > 0
    assert sorted(res.skipped) == sorted(set(same) - set(kept))


def test_on_group_sees_every_finished_group(segname):
    eng = Engine()
    seen = {}

    def on_group(d, g, counts):
        assert d.kind in ("final", "drop") and d.uid == g.uid
        seen[d.uid] = ([float(x) for x in g.rewards[:g.k]], counts,
                       d.kind == "drop")

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, on_group=on_group)
        res = await fill.fill(source("o"), 6)
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert len(seen) == res.finished
    assert {u for u, (_, c, _) in seen.items() if c} >= set(res.groups)
    assert sum(not c for _, c, _ in seen.values()) == res.dropped
    for u, (rw, c, dropped) in seen.items():
        assert c == (kind(u) == 0) == (not dropped) and len(rw) == K


def test_policy_carries_its_calibration(segname):
    """A policy handed to fill after fill (one fill object per step, as
    TRL makes them) keeps what the finished groups taught it."""
    eng = Engine()

    async def main(p):
        policy = Admission(p.mode, K)
        out = []
        for step in range(2):
            drv = GroupRollout(p, eng.generate, score=score, release=True)
            fill = StreamFill(drv, policy=policy)
            assert fill.policy is policy and fill.inflight == 0
            before = policy.scale
            out.append((await fill.fill(source(f"c{step}"), 6), before))
            await fill.close()
            drv.close()
        with pytest.raises(ValueError, match="not both"):
            StreamFill(GroupRollout(p, eng.generate, score=score),
                       policy=policy, inflight=4)
        with pytest.raises(TypeError, match="not an Admission"):
            StreamFill(GroupRollout(p, eng.generate, score=score),
                       policy=object())
        with pytest.raises(ValueError, match="k_init"):
            StreamFill(GroupRollout(p, eng.generate, score=score),
                       policy=Admission(p.mode, K + 1))
        return out
    with plugin(segname) as p:
        (first, s1), (second, s2) = asyncio.run(main(p))
    # A third of the prompts are informative: the second step starts
    # from what the first taught the policy, not from 1.
    assert s1 == 1.0 and s2 < 0.7
    check_groups(first, 6)
    check_groups(second, 6)
