# SPDX-License-Identifier: MIT
"""The workers decide as one: the rollout managers' step-boundary exchange
(v05.trainers.verl.manager.merge_others, what V05ManagerMixin._v05_exchange
hands each worker) gives every worker of 1, 2 or 4 the same running fit,
and so the same decisions as one worker holding that merged state; the
cold start counts the first waves of the whole run. Real plugins, in
process (the exchange's Ray calls run in test_verl_main_ppo.py)."""

import itertools
import os

import pytest

try:
    import verl  # noqa: F401
except ImportError as e:
    pytest.skip(f"verl is not installed ({e}); run scripts/setup-trainers "
                "verl and use its python", allow_module_level=True)

import v05
from plugin_drive import drive, table
from v05.trainers.verl.manager import merge_others

_names = itertools.count()


def _plugin(**params):
    return v05.Plugin.create(f"t35m-{os.getpid()}-{next(_names)}",
                             on_stale="remove", **params)


PARAMS = dict(mode="v05-eb", k_init=2, k_step=2, k_max=8, pad_multiple=1,
              eb_cold=32)
HISTORY = table([f"h{i}" for i in range(48)], seed=1)
PROBE = table([f"q{i}" for i in range(16)], seed=2)


def _workers(n, exchange=True, **extra):
    """n workers' plugins after the history (48 prompts dealt round robin,
    one batch each), their fits merged as the manager merges them."""
    params = dict(PARAMS, **extra)
    plugins = [_plugin(**params) for _ in range(n)]
    try:
        uids = list(HISTORY)
        for i, p in enumerate(plugins):
            drive(p, {u: HISTORY[u] for u in uids[i::n]})
        parts = [p.eb_state().to_list() for p in plugins]
        if exchange and n > 1:
            for p, o in zip(plugins, merge_others(parts)):
                p.set_eb_remote(o)
    except BaseException:
        for p in plugins:
            p.close()
        raise
    return plugins, parts


@pytest.mark.parametrize("n", [1, 2, 4])
def test_workers_decide_as_one_worker_on_the_merged_state(n):
    """Every worker of n decides the probe batch exactly as one worker
    whose own part is the merged state. Without forgetting (eb_window 0):
    with it, a worker's own part decays as it folds the probe's first
    waves and the others' part, handed in at the last exchange, does not
    until the next one (docs/TRAINERS.md)."""
    plugins, parts = _workers(n, eb_window=0)
    total = v05.EbState()
    for q in parts:
        total = total + v05.EbState.from_list(q)
    one = _plugin(**PARAMS, eb_window=0)
    try:
        one.set_eb_own(total)
        want = drive(one, PROBE)
        for p in plugins:
            assert drive(p, PROBE) == want
        assert len(set(want.values())) > 1, "the probe says nothing"
    finally:
        one.close()
        for p in plugins:
            p.close()


def test_no_forgetting_any_split_decides_as_one_worker():
    """Without forgetting (eb_window 0) the merged state is the one
    worker's own: 1, 2 and 4 workers decide the probe alike."""
    got = []
    for n in (1, 2, 4):
        plugins, _ = _workers(n, eb_window=0)
        try:
            got.append([drive(p, PROBE) for p in plugins])
        finally:
            for p in plugins:
                p.close()
    want = got[0][0]
    assert all(d == want for ds in got for d in ds)


def test_cold_start_counts_the_whole_run():
    """48 first waves over 4 workers, eb_cold 32: merged, each worker is
    past its cold start (its probe's second waves differ by prompt); alone,
    each has 12 and is still cold (decides as without the exchange, and
    not as the merged workers)."""
    merged, _ = _workers(4)
    alone, _ = _workers(4, exchange=False)
    try:
        assert all(p.eb_state().folded == 12 for p in alone)
        m = [drive(p, PROBE) for p in merged]
        a = [drive(p, PROBE) for p in alone]
        assert all(x == m[0] for x in m)
        assert all(x != m[0] for x in a)
    finally:
        for p in merged + alone:
            p.close()
