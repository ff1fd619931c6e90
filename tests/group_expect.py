# SPDX-License-Identifier: MIT
"""What a group's baseline and advantages must be, for the real-engine
tests of both engines (tests/engines-common): v05's own
estimate on the group's rewards, under the batch's fit (the barrier) or
under the running fit the group finalized with (no barrier); and how
many waves a batch and a prompt took."""
import collections

import numpy as np

import v05

GRID = v05.EbState.grid()


def expected(prior, saw, params, mode, base, fit=None, running=False,
             tried=None):
    """v05.estimate's answer for this group. running (v05-eb without a
    barrier): the fit is the running one when the group finalized, which
    depends on the order first waves came in, so the grid point whose
    estimate gives `base` is searched, the fits already found (`tried`, a
    list kept by the caller) first; None if no grid point gives it."""
    kw = dict(mode=mode, cost=params["cost"], k_step=params["k_step"],
              k_max=params["k_max"])
    if not running:
        return v05.estimate(prior, saw, fit=fit, **kw)
    for f in tried + GRID:
        est = v05.estimate(prior, saw, fit=f, **kw)
        if est["baseline"] == base:
            if f not in tried:
                tried.insert(0, f)
            return est
    return None


def waves(seen):
    """Dispatch waves per batch: the calls that handed out its samples."""
    n = collections.Counter()
    for call in seen:
        for b in {d.batch for d in call if d.kind == "sample"}:
            n[b] += 1
    return n


def check_eb_waves(out, seen, k_init, barrier):
    """v05-eb: at most two waves per prompt, some prompt got a second, and
    with the barrier every batch's second waves went out together."""
    if barrier:
        assert max(waves(seen).values()) == 2
    per_prompt = collections.Counter(d.uid for call in seen for d in call
                                     if d.kind == "sample")
    assert max(per_prompt.values()) == 2
    ks = [g[0] for _, groups, _ in out for g in groups.values()]
    assert max(ks) > k_init, "no prompt got a second wave"


# Reinforce-Ada's parameters in the engine tests (mode "reinforce-ada").
ADA = dict(k_init=4, k_step=4, k_max=12, halt_fraction=0.0)


def check_ada_run(out, rewards, stats):
    """Reinforce-Ada in rounds of 4 up to 12 (ADA) on an engine: each
    prompt's k is the first round end where its exit holds (or 12); the
    slot holds v05.estimate's baseline, keep set and advantages; nothing
    was padded. out: (items, uid -> (k, rewards, advantages, baseline,
    outputs, dropped), issued) per batch; rewards: (uid, sample) -> the
    reward the test's scorer gave."""
    assert stats["samples_padded"] == 0
    rule = dict(mode="reinforce-ada", k_init=4, k_max=12)
    for _, groups, _ in out:
        for uid, (k, rw, adv, base, outputs, dropped) in groups.items():
            saw = [rewards[(uid, s)] for s in range(k)]
            assert k in (4, 8, 12) and rw.tolist() == saw
            assert not dropped and all(o is not None for o in outputs)
            for end in range(4, k, 4):  # no exit at an earlier round
                assert v05.estimate(0.0, saw[:end], **rule)["action"] == \
                    "more"
            est = v05.estimate(0.0, saw, **rule)
            assert k == 12 or est["action"] == "stop"
            assert base == est["baseline"] and len(est["keep"]) == 2
            np.testing.assert_array_equal(
                adv, np.array(est["advantages"], dtype=np.float32))
