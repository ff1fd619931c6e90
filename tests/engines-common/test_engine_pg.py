# SPDX-License-Identifier: MIT
"""Mode v05-pg with the skip bar at 0.75 (pg=dict(skip=0.75); docs/
STATISTICS.md, "Mode v05-pg") on a real engine (vLLM or sglang, the same
assertions for both), on the tiny model's prompts with their exact
priors (2p - 1, p the model's success probability at temperature 1):

- run batch by batch (the driver's run()): the first batch, before the
  running fit is warm, takes the preset's two samples a prompt and skips
  nothing; after it, first waves of 1, 2 or 4, at most one second wave,
  and the prompts whose p is near 0 or 1 skipped at submit (never the
  first 32 prompts of the warm fit): each comes back a dropped group of
  k = 0 with its prior as the baseline, no request of it ever reaches the
  engine, it is counted (prompts_skipped), its slot is freed; every other
  group holds the rewards scored and the advantages v05's estimate gives
  (the paper's normaliser, the prior fused alone at one sample);
- with a noisy value model and a cheap rollout (pg_between 0.01), first
  waves of several sizes and second waves;
- under the streamed fill: a skipped prompt is admitted, comes back as a
  drop and is replaced, every step is B informative groups, and every
  prompt admitted is final, dropped or carried."""
import collections
import itertools
import math

import numpy as np
import pytest

import v05
from v05.core.fill import informative
from v05.demos import tiny
from v05.engines.fill import StreamFill

from engine_kit import record_decisions, rid_uid_sample  # noqa: E402
from group_expect import GRID  # noqa: E402

PG = dict(skip=0.75)
N = 64          # prompts a batch
BATCHES = 3     # the first warms the fit, the second skips past 32
WARM = 32       # prompts the warm fit takes before it skips (rule_pg.c)


@pytest.fixture(scope="module")
def prompts(model_dir):
    ps = tiny.make_prompts(N * BATCHES, seed=5)
    return ps, tiny.success_probs(model_dir, ps)


def pg_estimate(prior, saw, base, tried):
    """v05's estimate for a v05-pg group: the prior fused with the rewards
    while the fit is cold, else v05-eb's under the running fit the group
    finalized with (searched on the fit grid, the fits found so far
    first); both with the paper's normaliser, v05-pg's preset's. None if
    none gives `base`."""
    est = v05.estimate(prior, saw, mode="v05", sigma="paper")
    if est["baseline"] == base:
        return est
    for f in tried + GRID:
        est = v05.estimate(prior, saw, mode="v05-eb", sigma="paper", fit=f)
        if est["baseline"] == base:
            if f not in tried:
                tried.insert(0, f)
            return est
    return None


def run_pg(kit, engine_loop, segname, prompts, priors, pg):
    """BATCHES batches of N prompts (priors: one per prompt) through the
    engine, one plugin in mode v05-pg with `pg`; every group checked: each
    generate call one issued sample, nothing left in the engine or the
    plugin, a skipped prompt a dropped group of k = 0 with its prior as
    baseline and no request, every other group's rewards the scored ones
    and its advantages v05.estimate's (the paper normaliser). Returns
    (per batch the first waves' sizes, the skipped (batch, index, p),
    uid -> its waves' sizes, the plugin's counters)."""
    ps, p = prompts
    rewards = {}
    rec = kit.recorder(engine_loop.engine)
    sampling = kit.sampling(max_tokens=2)

    def score(uid, sample, out):
        r = tiny.reward(ps[int(uid.split("-")[1])], kit.tokens(out))
        rewards[(uid, sample)] = r
        return r

    async def main(plugin):
        out = []
        with kit.rollout(rec, plugin, sampling, score=score) as ro:
            for b in range(BATCHES):
                items = [(f"b{b}-{i}", kit.prompt(ps[i]), float(priors[i]))
                         for i in range(b * N, (b + 1) * N)]
                res = await ro.generate(items)
                groups = {}
                for uid, r in res.items():
                    g = r.group
                    groups[uid] = dict(
                        k=g.k, rewards=g.rewards.copy(),
                        advantages=g.advantages.copy(), baseline=g.baseline,
                        outputs=r.outputs, dropped=r.dropped,
                        decision_k=r.decision.k)
                    r.group = None
                    plugin.release(r.decision)
                out.append((items, groups))
        return out, await kit.idle(engine_loop.engine)

    with v05.Plugin.create(segname, mode="v05-pg", pg=pg, pad_multiple=1,
                           max_prompts=256) as plugin:
        assert plugin.config.pg_skip == round(1000 * pg["skip"])
        seen = record_decisions(plugin)
        out, idle = engine_loop.run(main(plugin))
        st = plugin.stats()

    assert idle, f"{kit.name} still has requests"
    assert not rec.aborted
    assert st["prompts_open"] == 0 and st["prompts_final"] == 0
    # Each generate call is one sample the plugin issued, once.
    called = collections.Counter(rid_uid_sample(rid) for rid in rec.calls)
    assert set(called.values()) == {1}
    issued = {(d.uid, s) for call in seen for d in call if d.kind == "sample"
              for s in d.samples}
    assert set(called) == issued
    waves = collections.defaultdict(list)  # uid -> its sample decisions
    for call in seen:
        for d in call:
            if d.kind == "sample":
                waves[d.uid].append(len(d.samples))
    requested = {u for u, _ in called}

    skipped, tried, sizes, total = [], [], [set() for _ in out], 0
    for b, (items, groups) in enumerate(out):
        assert set(groups) == {u for u, _, _ in items}  # every prompt back
        for j, (uid, _, prior) in enumerate(items):
            g = groups[uid]
            if g["k"] == 0:  # skipped at submit
                skipped.append((b, j, p[b * N + j]))
                assert g["dropped"] and g["decision_k"] == 0
                assert g["outputs"] == [] and uid not in requested
                assert g["baseline"] == pytest.approx(prior)
                continue
            total += g["k"]
            sizes[b].add(waves[uid][0])
            assert len(waves[uid]) <= 2 and sum(waves[uid]) == g["k"] <= 16
            assert len(g["outputs"]) == g["k"]
            assert all(kit.finished(o) for o in g["outputs"])
            saw = [rewards[(uid, s)] for s in range(g["k"])]
            assert g["rewards"].tolist() == saw
            est = pg_estimate(prior, saw, g["baseline"], tried)
            assert est is not None, f"{uid}: no fit gives {g['baseline']}"
            np.testing.assert_array_equal(
                g["advantages"], np.array(est["advantages"], np.float32))
            assert np.isfinite(g["advantages"]).all()
            # The paper's normaliser: (r - mu) / sqrt(1 - mu^2).
            mu = g["baseline"]
            np.testing.assert_allclose(
                g["advantages"], (np.array(saw) - mu) / math.sqrt(1 - mu * mu),
                rtol=1e-5)
    assert st["samples_issued"] == total == len(rec.calls)
    assert st["prompts_skipped"] == len(skipped)
    assert st["prompts_submitted"] == BATCHES * N
    # Cold: the preset's two a prompt. Warm: 1, 2 or 4.
    assert sizes[0] == {2}
    assert sizes[1] | sizes[2] <= {1, 2, 4}
    return sizes, skipped, waves, st


def test_v05_pg_skips_on_the_engine(kit, engine_loop, segname, prompts):
    """Exact priors: first waves of one once warm, the prompts near p = 0
    or 1 skipped."""
    p = prompts[1]
    sizes, skipped, _, _ = run_pg(kit, engine_loop, segname, prompts,
                                  2 * p - 1, PG)
    assert 1 in sizes[1] | sizes[2]
    assert skipped
    assert not [s for s in skipped if s[0] == 0 or (s[0] == 1 and s[1] < WARM)]
    # Those skipped carry next to no gradient: p near 0 or 1, every one
    # of them more extreme than every prompt in the middle half.
    assert all(4 * q * (1 - q) < 0.75 ** 2 for _, _, q in skipped)
    assert max(abs(q - 0.5) for _, _, q in skipped) > 0.45


def test_v05_pg_waves_on_the_engine(kit, engine_loop, segname, prompts):
    """A noisy value model (noise 0.3, a third of the priors at random)
    and a small between-prompt variance (pg_between 0.01): a rollout is
    cheap next to the baseline's error, so the warm first waves are of
    several sizes and prompts whose first wave left the baseline unsure
    get a second wave (at most two waves, checked for every group)."""
    p = prompts[1]
    priors = tiny.noisy_priors(p, 0.3, 0.3, seed=1)
    sizes, _, waves, _ = run_pg(kit, engine_loop, segname, prompts, priors,
                                dict(PG, between=0.01))
    assert len(sizes[1] | sizes[2]) >= 2
    assert any(len(w) == 2 for w in waves.values()), "no second wave"


B = 16


def test_v05_pg_under_the_fill(kit, engine_loop, segname, prompts):
    """The streamed fill in mode v05-pg (skip 0.75) on exact priors, the
    extreme prompts coming round again and again (count "signal": a group
    of one counts by its advantage): the skipped are admitted
    and dropped (never informative, never in the engine) and others take
    their place; each step has B informative groups whose advantages are
    finite and written; every prompt admitted is accounted for."""
    ps, p = prompts
    rec = kit.recorder(engine_loop.engine)
    sampling = kit.sampling(max_tokens=2)
    n = len(ps)

    def score(uid, sample, out):
        return tiny.reward(ps[int(uid.split("-")[1]) % n], kit.tokens(out))

    def source():
        for i in itertools.count():
            yield (f"f-{i}", kit.prompt(ps[i % n]),
                   float(2 * p[i % n] - 1))

    async def main(plugin):
        ro = kit.rollout(rec, plugin, sampling, score=score, release=True)
        # The fill's default count for v05-pg is "signal": a group of one
        # sample (its usual first wave with a sharp prior) has an
        # advantage from its fused baseline, but no contrast, and
        # "contrast" would throw it away.
        fill = StreamFill(ro, at_target="carry")
        assert fill.policy.count == "signal"
        it = source()
        res = [await fill.fill(it, B) for _ in range(6)]
        carried = fill.carried
        await fill.close()
        ro.close()
        return res, carried, await kit.idle(engine_loop.engine)

    # The fit warm after 16 first waves (eb_cold), the skip after 32
    # prompts more: the skips come in the later steps.
    with v05.Plugin.create(segname, mode="v05-pg", pg=PG, pad_multiple=1,
                           eb_cold=16, max_prompts=512) as plugin:
        drops = []
        real_on_poll = plugin.poll

        def poll(*a, **kw):
            ds = real_on_poll(*a, **kw)
            drops.extend(d.uid for d in ds if d.kind == "drop")
            return ds
        plugin.poll = poll
        out, carried, idle = engine_loop.run(main(plugin))
        st = plugin.stats()
    assert idle and st["prompts_open"] == 0 and st["prompts_final"] == 0
    requested = {rid_uid_sample(rid)[0] for rid in rec.calls}
    skipped = [u for u in drops if u not in requested]
    assert st["prompts_skipped"] == len(skipped) > 0
    for uid in skipped:
        q = p[int(uid.split("-")[1]) % n]
        assert 4 * q * (1 - q) < 0.75 ** 2
    for res in out:
        assert len(res.groups) == B and not res.short
        for uid, r in res.groups.items():
            g = r.group
            assert uid in requested and g.k == len(r.outputs) >= 1
            assert informative("v05-pg", [float(x) for x in g.rewards[:g.k]],
                               advantages=[float(x) for x in
                                           g.advantages[:g.k]],
                               count="signal")
            assert np.isfinite(g.advantages).all() and \
                np.abs(g.advantages).max() > 0
    admitted = sum(r.admitted for r in out)
    assert admitted == st["prompts_submitted"]
    # Every prompt admitted: a group handed out, a drop (skips among
    # them) or not informative, or carried at the last step's end.
    assert admitted == sum(r.finished for r in out) + out[-1].carried
    assert sum(r.dropped for r in out) >= len(skipped)
