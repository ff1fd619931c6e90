# SPDX-License-Identifier: MIT
"""The streamed fill (v05.engines.fill.StreamFill) over the shared driver
with a stand-in engine (a generate function of its own; the real vLLM and
sglang run it in tests/engines-common): a step gets
exactly its target of informative groups, every pulled prompt is
accounted for, what is in flight at the target is aborted or carried as
asked, the skip by prior skips and counts, and cancellation and errors
leave nothing outstanding in the engine, the driver or the plugin."""
import asyncio
import itertools

import pytest

import v05
from v05.core.fill import SkipRule, informative
from v05.core.prior import HistoryPrior
from v05.engines.driver import GroupRollout
from v05.engines.fill import StreamFill

K = 4


def kind(uid):
    """Prompt i's rewards: 0 mixed, 1 all +1, 2 all -1."""
    return int(uid.split("-")[-1]) % 3


def reward(uid, sample):
    k = kind(uid)
    return (1.0 if sample % 2 else -1.0) if k == 0 else \
        (1.0 if k == 1 else -1.0)


def prior_of(uid):
    return {0: 0.0, 1: 1.0, 2: -1.0}[kind(uid)]


class Engine:
    """A stand-in engine: records every request, which are running, and
    which were cancelled; `gate` holds the samples it names until set."""

    def __init__(self, fail_on=None):
        self.started, self.running, self.cancelled = [], set(), []
        self.gate = asyncio.Event()
        self.held = set()       # uids whose samples wait for the gate
        self.fail_on = fail_on  # (uid, sample) whose generate raises

    async def generate(self, prompt, uid, sample, batch):
        assert prompt == f"text of {uid}"
        self.started.append((uid, sample))
        self.running.add((uid, sample))
        try:
            await asyncio.sleep(0)
            if (uid, sample) == self.fail_on:
                raise RuntimeError(f"engine failed on {uid}/{sample}")
            if uid in self.held:
                await self.gate.wait()
            return f"out {uid}/{sample}"
        except asyncio.CancelledError:
            self.cancelled.append((uid, sample))
            raise
        finally:
            self.running.discard((uid, sample))


def source(prefix, n=None, prior=prior_of):
    for i in (range(n) if n is not None else itertools.count()):
        uid = f"{prefix}-{i}"
        yield uid, f"text of {uid}", prior(uid)


def score(uid, sample, out):
    assert out == f"out {uid}/{sample}"
    return reward(uid, sample)


def plugin(segname, mode="dapo", **kw):
    cfg = dict(mode=mode, k_init=K, k_max=K, pad_multiple=1, max_prompts=256,
               max_batches=64)
    cfg.update(kw)
    return v05.Plugin.create(segname, **cfg)


def nothing_left(p, eng, drv):
    st = p.stats()
    assert st["prompts_open"] == 0 and st["prompts_final"] == 0, st
    assert not eng.running
    assert drv._held_by is None and not drv._running
    assert p._uids == {} and p._batch_keys == {}


def check_groups(res, target, mode="dapo"):
    assert len(res.groups) == target
    for uid, r in res.groups.items():
        assert kind(uid) == 0, uid
        k = r.group.k
        assert informative(mode, list(r.group.rewards[:k]))
        assert [o == f"out {uid}/{s}" for s, o in enumerate(r.outputs)] == \
            [True] * k


@pytest.mark.parametrize("wait_on", ["auto", "doorbell"])
@pytest.mark.parametrize("mode", ["dapo", "greso", "grpo"])
def test_abort_fills_exactly_and_leaves_nothing(segname, mode, wait_on):
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True,
                           wait_on=wait_on)
        fill = StreamFill(drv, inflight=12)
        src = source("a")
        pulled = []
        seen = set()

        def counting(it):
            for x in it:
                pulled.append(x[0])
                yield x
        it = counting(src)
        for step in range(3):
            res = await fill.fill(it, 10)
            check_groups(res, 10, mode)
            assert not seen & set(res.groups)
            seen |= set(res.groups)
            # Every prompt submitted is final (informative, dropped or
            # surplus) or aborted; nothing is carried.
            assert res.admitted == res.finished + res.aborted
            assert res.finished == 10 + res.dropped + res.surplus
            assert res.carried == 0 and fill.carried == 0
            assert res.dropped >= 1  # a third of the prompts are all-same
            assert not eng.running
            st = p.stats()
            assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        # Every prompt pulled went in (no skip rule): none waits.
        assert fill.totals["admitted"] == len(pulled)
        assert fill.totals["samples"] == len(eng.started)
        # An aborted prompt's samples never all finished.
        await fill.close()
        drv.close()
        return drv
    with plugin(segname, mode=mode) as p:
        drv = asyncio.run(main(p))
        nothing_left(p, eng, drv)
        assert len(set(eng.started)) == len(eng.started)


def test_carry_keeps_what_is_in_flight_and_generates_it_once(segname):
    eng = Engine()
    # Prompts 30..59 wait at the gate: in flight when the first target is
    # reached. The 10 mixed prompts among 0..29 make the first step; the
    # 10 among 30..59 the second.
    eng.held = {f"c-{i}" for i in range(30, 60)}

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, at_target="carry", inflight=200)
        it = source("c", 60)
        res1 = await fill.fill(it, 10)
        check_groups(res1, 10)
        assert set(res1.groups) == {f"c-{i}" for i in range(0, 30, 3)}
        assert res1.aborted == 0 and res1.aborted_samples == 0
        held_in = {u for u, _ in eng.running}
        assert held_in and held_in <= eng.held
        assert res1.carried >= len(held_in) and fill.carried >= res1.carried
        assert res1.admitted == res1.finished + res1.carried
        # The carried requests are still running, none cancelled, and the
        # driver refuses a batch of its own meanwhile.
        assert not eng.cancelled
        with pytest.raises(RuntimeError, match="streamed fill holds"):
            await drv.run([("x", "text of x", 0.0)])
        eng.gate.set()
        res2 = await fill.fill(it, 10)
        check_groups(res2, 10)
        assert set(res2.groups) == {f"c-{i}" for i in range(30, 60, 3)}
        assert not eng.cancelled
        # Every prompt of the source went in once, across both steps.
        assert res1.admitted + res2.admitted == 60
        await fill.close()
        drv.close()
        return drv
    with plugin(segname) as p:
        drv = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert len(set(eng.started)) == len(eng.started)


class OpenAt(Engine):
    """An engine whose gate opens by itself once `n` samples have
    started: every prompt admitted is then in flight together, and the
    groups finish in one burst (no timing: the count decides)."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    async def generate(self, prompt, uid, sample, batch):
        if len(self.started) + 1 >= self.n:
            self.gate.set()
        return await super().generate(prompt, uid, sample, batch)


def test_carry_takes_the_surplus_first(segname):
    """Under carry, informative groups final beyond a step's target (a
    burst: 20 of 60 prompts informative, all finishing together, target
    10) are kept, and the next step takes them first: it returns them
    without generating anything again (issue 45: the carry test gated its
    held prompts, so no surplus ever existed and a fill that forgot the
    surplus passed)."""
    eng = OpenAt(60 * K)
    eng.held = {f"s-{i}" for i in range(60)}

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        # Room for every sample of the 60 prompts at once.
        fill = StreamFill(drv, at_target="carry", inflight=60 * K)
        it = source("s", 60)
        res1 = await fill.fill(it, 10)
        check_groups(res1, 10)
        assert res1.surplus > 0 and not eng.running
        assert fill.carried == res1.surplus
        started = len(eng.started)
        res2 = await fill.fill(it, res1.surplus)
        check_groups(res2, res1.surplus)
        # The surplus, not new work: nothing generated, nothing admitted.
        assert len(eng.started) == started and res2.admitted == 0
        assert not set(res2.groups) & set(res1.groups)
        assert set(res1.groups) | set(res2.groups) == \
            {f"s-{i}" for i in range(0, 60, 3)}
        await fill.close()
        drv.close()
        return drv
    with plugin(segname) as p:
        drv = asyncio.run(main(p))
        nothing_left(p, eng, drv)


def test_carry_then_abort_at_close(segname):
    eng = Engine()
    eng.held = {f"d-{i}" for i in range(12, 40)}

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, at_target="carry", inflight=120)
        res = await fill.fill(source("d", 40), 4)
        assert res.carried > 0
        n = await fill.close()
        assert n == res.carried
        # close() is final; a closed fill refuses to run.
        with pytest.raises(RuntimeError, match="closed"):
            await fill.fill(source("e", 5), 1)
        # The driver is free again.
        out = await drv.run([("z-0", "text of z-0", 0.0)])
        assert list(out) == ["z-0"]
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert {u for u, _ in eng.cancelled} and \
        all(u in eng.held for u, _ in eng.cancelled)


def test_skip_by_prior_is_counted_and_never_generated(segname):
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, skip=SkipRule(revisit=0.0), inflight=8)
        res = await fill.fill(source("s", 300), 12)
        check_groups(res, 12)
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    # Every all-same prompt (prior +-1) pulled was skipped, none rolled out.
    assert res.skipped and all(kind(u) != 0 for u in res.skipped)
    assert res.dropped == 0 and res.revisited == 0
    assert not {u for u, _ in eng.started} & set(res.skipped)
    # Pulled in order: the skipped are exactly the all-same among the
    # first admitted + skipped prompts.
    n = res.admitted + len(res.skipped)
    assert sorted(res.skipped) == sorted(f"s-{i}" for i in range(n)
                                         if i % 3)


def test_skip_revisit_and_history(segname):
    eng = Engine()
    hist = HistoryPrior()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        # No prior information (every prior 0): only the history can
        # skip, and it needs many all-same outcomes first.
        fill = StreamFill(drv, skip=SkipRule(revisit=0.0, strength=2.0),
                          history=hist, inflight=8)
        uids = [f"h-{i}" for i in range(9)]
        out = []
        for step in range(40):
            items = iter([(u, f"text of {u}", 0.0) for u in uids])
            res = await fill.fill(items, 1)
            out.append(res)
        await fill.close()
        drv.close()
        return drv, out
    with plugin(segname) as p:
        drv, out = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    skipped = [u for r in out for u in r.skipped]
    assert skipped and all(kind(u) != 0 for u in skipped)
    # Beta(1, 1 + n) after n failures: P(4 all-same) = (1 + n) / (5 + n)
    # reaches 0.95 at n = 75 trials, 19 groups of 4: a skipped prompt
    # had at least those (and then no more: it is no longer rolled out).
    for u in set(skipped):
        assert 76 <= hist.counts(u)[1] < 76 + K, (u, hist.counts(u))
    assert hist.counts("h-0")[0] > 0 and "h-0" not in skipped


def test_revisit_draw_rolls_out_a_share(segname):
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, skip=SkipRule(revisit=0.5, seed=3),
                          inflight=8)
        res = await fill.fill(source("r", 600), 20)
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    rule = SkipRule(revisit=0.5, seed=3)
    # Of the all-same prompts pulled (prior +-1), those the draw keeps
    # were rolled out (and dropped, unless aborted), the others skipped.
    pulled = res.admitted + len(res.skipped)
    same = [f"r-{i}" for i in range(pulled) if i % 3]
    kept = [u for u in same if rule.revisited(u, 1)]
    assert res.revisited == len(kept) > 0
    assert sorted(res.skipped) == sorted(set(same) - set(kept))
    assert {u for u, _ in eng.started if kind(u)} <= set(kept)
    assert res.dropped <= res.revisited


def test_exhausted_source(segname):
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, inflight=4)
        res = await fill.fill(source("x", 9), 10)  # 3 mixed prompts only
        await fill.close()
        drv.close()
        return drv, res
    with plugin(segname) as p:
        drv, res = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert res.exhausted and len(res.groups) == 3
    assert res.admitted == 9 and res.dropped == 6


@pytest.mark.parametrize("at_target", ["abort", "carry"])
@pytest.mark.parametrize("moment", [0, 1, 5, 20])
def test_cancellation_leaves_nothing(segname, at_target, moment):
    """The caller cancels a fill after `moment` turns of the loop (in
    the second step, with a carried state under carry): CancelledError,
    nothing outstanding, and the fill runs again. A fill cancelled before
    it ever ran (moment 0) changed nothing: what the step before carried
    is still carried."""
    eng = Engine()
    eng.held = {f"k-{i}" for i in range(20, 40)}

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, at_target=at_target, inflight=60)
        it = source("k")
        await fill.fill(it, 3)
        before = fill.carried
        task = asyncio.ensure_future(fill.fill(it, 30))
        for _ in range(moment):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if moment == 0 and at_target == "carry":
            assert before > 0 and fill.carried == before
        else:
            assert not eng.running
            assert fill.carried == 0 and drv._held_by is None
            st = p.stats()
            assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        eng.gate.set()
        res = await fill.fill(it, 5)
        check_groups(res, 5)
        await fill.close()
        drv.close()
        return drv
    with plugin(segname) as p:
        drv = asyncio.run(main(p))
        nothing_left(p, eng, drv)


@pytest.mark.parametrize("at_target", ["abort", "carry"])
@pytest.mark.parametrize("fault", ["score", "generate", "nan"])
def test_errors_leave_nothing(segname, at_target, fault):
    eng = Engine(fail_on=("f-7", 2) if fault == "generate" else None)

    def bad_score(uid, sample, out):
        if (uid, sample) == ("f-7", 1):
            if fault == "score":
                raise ValueError("verifier crashed")
            if fault == "nan":
                return float("nan")
        return reward(uid, sample)

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=bad_score, release=True)
        fill = StreamFill(drv, at_target=at_target, inflight=40)
        with pytest.raises((ValueError, RuntimeError)) as ei:
            await asyncio.wait_for(fill.fill(source("f"), 50), 30)
        assert not eng.running and fill.carried == 0
        st = p.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        res = await fill.fill(source("g"), 5)
        check_groups(res, 5)
        await fill.close()
        drv.close()
        return drv, ei.value
    with plugin(segname) as p:
        drv, err = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert "f-7" in str(err) or "verifier crashed" in str(err)


@pytest.mark.parametrize("item, err, words", [
    (("a-1", "text of a-1"), TypeError, "not a (uid, prompt, prior)"),
    ((7, "text", 0.0), TypeError, "a uid is a str or bytes"),
    (("", "text", 0.0), ValueError, "is 0 bytes"),
    (("a-1", "text of a-1", 1.5), ValueError, "prior of uid 'a-1'"),
    (("a-1", "text of a-1", float("nan")), ValueError, "not finite"),
    (("a-1", "text of a-1", None), TypeError, "only in mode knapsack"),
    (("a-0", "text of a-0", 0.0), ValueError, "again"),
    (None, ValueError, "again"),  # a uid final and held for this step
])
def test_source_items_are_checked(segname, item, err, words):
    eng = Engine()

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, inflight=40)
        eng.held = {"a-0"}
        # a-0 is in flight (held at the gate) when the last item comes;
        # item None: the uid of a group final and held for this step.

        def src():
            yield ("a-0", "text of a-0", 0.0)
            n = itertools.count(3)
            while item is None and not fill._held:
                i = next(n)
                yield (f"a-{i}", f"text of a-{i}", 0.0)
            if item is None:
                u = next(iter(fill._held))
                yield (u, f"text of {u}", 0.0)
            else:
                yield item
        with pytest.raises(err, match=words.replace("(", r"\(")
                           .replace(")", r"\)")):
            await asyncio.wait_for(fill.fill(src(), 30), 30)
        assert not eng.running
        await fill.close()
        drv.close()
        return drv
    with plugin(segname) as p:
        drv = asyncio.run(main(p))
        nothing_left(p, eng, drv)


def test_settings_are_checked(segname):
    eng = Engine()
    with plugin(segname) as p:
        drv = GroupRollout(p, eng.generate, score=score)
        for kw, err in [(dict(at_target="keep"), ValueError),
                        (dict(count="any"), ValueError),
                        (dict(skip=0.05), TypeError),
                        (dict(history=object()), TypeError),
                        (dict(inflight=-1), ValueError),
                        (dict(inflight=2.5), TypeError)]:
            with pytest.raises(err):
                StreamFill(drv, **kw)
        with pytest.raises(TypeError):
            StreamFill(object())
        fill = StreamFill(drv)
        with pytest.raises(ValueError, match="already has a streamed fill"):
            StreamFill(drv)

        async def bad_target():
            for t, e in [(0, ValueError), (1.0, TypeError), (2**21, ValueError)]:
                with pytest.raises(e):
                    await fill.fill(source("t", 5), t)
            with pytest.raises(TypeError, match="not an iterable"):
                await fill.fill(5, 1)
            await fill.close()
        asyncio.run(bad_target())
        drv.close()
    with v05.Plugin.create(segname + "b", mode="v05-eb", pad_multiple=32) as p:
        drv = GroupRollout(p, eng.generate, score=score)
        with pytest.raises(ValueError, match="pad_multiple=1"):
            StreamFill(drv)
        drv.close()


def test_v05_eb_and_signal_count(segname):
    """v05-eb (second waves, pad 1): a full step of informative groups
    by contrast; under count "signal" an all-same group whose prior
    disagreed counts too."""
    eng = Engine()

    def wrong_prior(uid):  # all +1 prompts told -1, and the reverse
        return {0: 0.0, 1: -0.9, 2: 0.9}[kind(uid)]

    async def main(p):
        drv = GroupRollout(p, eng.generate, score=score, release=True)
        fill = StreamFill(drv, inflight=16)
        res = await fill.fill(source("e", prior=wrong_prior), 8)
        check_groups(res, 8, "v05-eb")
        await fill.close()
        sig = StreamFill(drv, count="signal", inflight=16)
        res2 = await sig.fill(source("f", prior=wrong_prior), 8)
        await sig.close()
        drv.close()
        return drv, res, res2
    with v05.Plugin.create(segname, mode="v05-eb", pad_multiple=1,
                           eb_cold=8) as p:
        drv, res, res2 = asyncio.run(main(p))
        nothing_left(p, eng, drv)
    assert res.dropped > 0
    assert any(kind(u) != 0 for u in res2.groups)
