# SPDX-License-Identifier: MIT
"""The streamed fill (v05.engines.fill.StreamFill) on a real engine (vLLM
or sglang, the same assertions for both): steps of B informative groups
from a prompt source, under abort and carry and with the skip by prior,
in modes dapo and v05-eb; every group counted is informative and whole,
skipped prompts never reach the engine, aborted requests leave it,
carried ones run on between steps and go at close(), and a cancelled fill
leaves nothing in the engine or the plugin."""
import asyncio
import itertools

import pytest

import v05
from v05.core.fill import SkipRule, informative
from v05.demos import tiny
from v05.engines.fill import StreamFill

from engine_kit import SLOTS, rid_uid_sample  # noqa: E402

B = 12
N = 400


@pytest.fixture(scope="module")
def prompts(model_dir):
    ps = tiny.make_prompts(N, seed=5)
    return ps, tiny.success_probs(model_dir, ps)


def source(kit, prompts, prefix, exact=False, extreme_first=False):
    """(uid, prompt, prior): the exact prior 2p - 1 (so the skip rule can
    trust it) or 0."""
    ps, p = prompts
    # extreme_first: the prompts nearest success 0 or 1 come first (the
    # uid's number is still the prompt's index).
    order = sorted(range(N), key=lambda j: -abs(p[j] - 0.5)) \
        if extreme_first else range(N)
    for j in itertools.chain(order, itertools.count(N)):
        i, j = j, j % N
        yield (f"{prefix}-{i}", kit.prompt(ps[j]),
               float(2 * p[j] - 1) if exact else 0.0)


def scorer(kit, prompts):
    ps, _ = prompts

    def score(uid, sample, out):
        j = int(uid.rsplit("-", 1)[1]) % N
        return tiny.reward(ps[j], kit.tokens(out))
    return score


def check_step(kit, res, plugin_mode, k):
    assert len(res.groups) == B and not res.short
    for uid, r in res.groups.items():
        g = r.group
        assert g.k == len(r.outputs) and g.k >= k
        assert all(kit.finished(o) for o in r.outputs)
        assert informative(plugin_mode, [float(x) for x in g.rewards[:g.k]])


@pytest.mark.parametrize("at_target", ["abort", "carry"])
def test_fill_steps(kit, engine_loop, segname, prompts, at_target):
    rec = kit.recorder(engine_loop.engine)
    sampling = kit.sampling(max_tokens=3)

    async def main(plugin):
        ro = kit.rollout(rec, plugin, sampling, score=scorer(kit, prompts),
                         release=True)
        fill = StreamFill(ro, at_target=at_target)
        assert fill.inflight == (SLOTS if at_target == "carry" else 0)
        it = source(kit, prompts, f"f{at_target}")
        out = []
        for _ in range(3):
            res = await fill.fill(it, B)
            check_step(kit, res, "dapo", 4)
            # Every prompt submitted: final, aborted, or carried (a
            # step's finals include what the step before carried).
            out.append(res)
            assert sum(r.admitted for r in out) == sum(
                r.finished + r.aborted for r in out) + res.carried
            if at_target == "abort":
                assert await kit.idle(rec.engine)
                assert res.carried == 0
            else:
                assert res.aborted == 0
        carried = fill.carried
        n = await fill.close()
        assert n == len(fill._flight.prompts) or n <= carried
        assert await kit.idle(rec.engine)
        ro.close()
        return out
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=512) as plugin:
        out = engine_loop.run(main(plugin))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    # Some groups were all-same and replaced; every uid counted once.
    assert sum(r.dropped for r in out) > 0
    seen = [u for r in out for u in r.groups]
    assert len(seen) == len(set(seen))


def test_skip_keeps_prompts_out_of_the_engine(kit, engine_loop, segname,
                                              prompts):
    rec = kit.recorder(engine_loop.engine)
    sampling = kit.sampling(max_tokens=2)
    _, p = prompts
    # The exact prior: a prompt of p within 0.014 of 0 or 1 is skipped.
    assert ((p < 0.013) | (p > 0.987)).sum() > 0

    async def main(plugin):
        ro = kit.rollout(rec, plugin, sampling, score=scorer(kit, prompts),
                         release=True)
        fill = StreamFill(ro, skip=SkipRule(revisit=0.0))
        res = await fill.fill(source(kit, prompts, "sk", exact=True,
                                     extreme_first=True), B)
        check_step(kit, res, "dapo", 4)
        await fill.close()
        ro.close()
        return res
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=512) as plugin:
        res = engine_loop.run(main(plugin))
    assert res.skipped
    requested = {rid_uid_sample(rid)[0] for rid in rec.calls}
    assert not requested & set(res.skipped)
    for uid in res.skipped:
        q = p[int(uid.rsplit("-", 1)[1]) % N]
        assert q < 0.014 or q > 0.986


def test_fill_in_v05_eb(kit, engine_loop, segname, prompts):
    """The default mode: second waves (pad_multiple 1), an all-same group
    final with its fused advantages is not counted under "contrast"."""
    sampling = kit.sampling(max_tokens=2)

    async def main(plugin):
        ro = kit.rollout(engine_loop.engine, plugin, sampling,
                         score=scorer(kit, prompts), release=True)
        fill = StreamFill(ro, at_target="carry")
        it = source(kit, prompts, "eb")
        res = [await fill.fill(it, B) for _ in range(2)]
        await fill.close()
        ro.close()
        return res
    with v05.Plugin.create(segname, mode="v05-eb", pad_multiple=1,
                           eb_cold=16, max_prompts=512) as plugin:
        out = engine_loop.run(main(plugin))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    for res in out:
        check_step(kit, res, "v05-eb", 4)
    assert sum(r.dropped for r in out) > 0
    assert any(r.group.k > 4 for res in out for r in res.groups.values())
    assert engine_loop.run(kit.idle(engine_loop.engine))


@pytest.mark.parametrize("at_target", ["abort", "carry"])
def test_cancelled_fill_leaves_nothing(kit, engine_loop, segname, prompts,
                                       at_target):
    sampling = kit.sampling(max_tokens=40, ignore_eos=True)

    async def main(plugin):
        ro = kit.rollout(engine_loop.engine, plugin, sampling,
                         score=scorer(kit, prompts), release=True)
        fill = StreamFill(ro, at_target=at_target)
        it = source(kit, prompts, f"c{at_target}")
        await fill.fill(it, 4)
        calls = ro.generate_calls
        task = asyncio.ensure_future(fill.fill(it, 200))
        # Cancel once requests of this step are running in the engine.
        while ro.generate_calls < calls + 60:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await kit.idle(engine_loop.engine)
        assert fill.carried == 0
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        res = await fill.fill(it, 4)
        assert len(res.groups) == 4
        await fill.close()
        ro.close()
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=1024) as plugin:
        engine_loop.run(main(plugin))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    assert engine_loop.run(kit.idle(engine_loop.engine))
