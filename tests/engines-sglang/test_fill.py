# SPDX-License-Identifier: MIT
"""The streamed fill (v05.engines.fill.StreamFill) on the real sglang:
steps of B informative groups under abort and carry, the skip by prior,
and a cancelled fill, each leaving sglang idle and the plugin empty."""
import asyncio
import itertools

import pytest

import v05
from v05.core.fill import SkipRule, informative
from v05.demos import tiny
from v05.engines.fill import StreamFill
from v05.engines.sglang import SGLangRollout

from sgl_helpers import Recorder, rid_uid_sample, sglang_idle  # noqa: E402

B = 10
N = 300


@pytest.fixture(scope="module")
def prompts(model_dir):
    ps = tiny.make_prompts(N, seed=5)
    return ps, tiny.success_probs(model_dir, ps)


def source(prompts, prefix, exact=False, extreme_first=False):
    ps, p = prompts
    # extreme_first: the prompts nearest success 0 or 1 come first (the
    # uid's number is still the prompt's index).
    order = sorted(range(N), key=lambda j: -abs(p[j] - 0.5)) \
        if extreme_first else range(N)
    for j in itertools.chain(order, itertools.count(N)):
        i, j = j, j % N
        yield (f"{prefix}-{i}", ps[j],
               float(2 * p[j] - 1) if exact else 0.0)


def scorer(prompts):
    ps, _ = prompts

    def score(uid, sample, out):
        return tiny.reward(ps[int(uid.rsplit("-", 1)[1]) % N],
                           out["output_ids"])
    return score


def check_step(res):
    assert len(res.groups) == B
    for r in res.groups.values():
        g = r.group
        assert g.k == 4 and all(o is not None for o in r.outputs)
        assert informative("dapo", [float(x) for x in g.rewards[:g.k]])


@pytest.mark.parametrize("at_target", ["abort", "carry"])
def test_fill_steps_on_sglang(engine_loop, segname, prompts, at_target):
    eng = Recorder(engine_loop.engine)
    params = {"temperature": 1.0, "max_new_tokens": 3}

    async def main(plugin):
        ro = SGLangRollout(eng, plugin, params, score=scorer(prompts),
                           release=True)
        fill = StreamFill(ro, at_target=at_target)
        assert fill.inflight == (32 if at_target == "carry" else 0)
        it = source(prompts, f"g{at_target}")
        out = []
        for _ in range(3):
            res = await fill.fill(it, B)
            check_step(res)
            # Every prompt submitted: final, aborted, or carried (a
            # step's finals include what the step before carried).
            out.append(res)
            assert sum(r.admitted for r in out) == sum(
                r.finished + r.aborted for r in out) + res.carried
            if at_target == "abort":
                assert res.carried == 0
                assert await sglang_idle(eng.engine)
        await fill.close()
        assert await sglang_idle(eng.engine)
        ro.close()
        return out
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=512) as plugin:
        out = engine_loop.run(main(plugin))
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    assert sum(r.dropped for r in out) > 0
    seen = [u for r in out for u in r.groups]
    assert len(seen) == len(set(seen))


def test_skip_keeps_prompts_out_of_sglang(engine_loop, segname, prompts):
    eng = Recorder(engine_loop.engine)
    _, p = prompts

    async def main(plugin):
        ro = SGLangRollout(eng, plugin, {"max_new_tokens": 2}, release=True,
                           score=scorer(prompts))
        fill = StreamFill(ro, skip=SkipRule(revisit=0.0))
        res = await fill.fill(source(prompts, "sk", exact=True,
                                      extreme_first=True), B)
        check_step(res)
        await fill.close()
        ro.close()
        return res
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=512) as plugin:
        res = engine_loop.run(main(plugin))
    assert res.skipped
    asked = {rid_uid_sample(c["rid"])[0] for c in eng.calls}
    assert not asked & set(res.skipped)


@pytest.mark.parametrize("at_target", ["abort", "carry"])
def test_cancelled_fill_leaves_sglang_idle(engine_loop, segname, prompts,
                                           at_target):
    params = {"temperature": 1.0, "max_new_tokens": 40, "ignore_eos": True}

    async def main(plugin):
        ro = SGLangRollout(engine_loop.engine, plugin, params,
                           score=scorer(prompts), release=True)
        fill = StreamFill(ro, at_target=at_target)
        it = source(prompts, f"c{at_target}")
        await fill.fill(it, 3)
        calls = ro.generate_calls
        task = asyncio.ensure_future(fill.fill(it, 200))
        while ro.generate_calls < calls + 60:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await sglang_idle(engine_loop.engine)
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        res = await fill.fill(it, 3)
        assert len(res.groups) == 3
        await fill.close()
        ro.close()
    with v05.Plugin.create(segname, mode="dapo", k_init=4, k_max=4,
                           pad_multiple=1, max_prompts=1024) as plugin:
        engine_loop.run(main(plugin))
    assert engine_loop.run(sglang_idle(engine_loop.engine))
