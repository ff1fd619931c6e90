# SPDX-License-Identifier: MIT
"""What a group's baseline and advantages must be, for the real-engine
tests of both engines (tests/engines, tests/engines-sglang): v05's own
estimate on the group's rewards, under the batch's fit (the barrier) or
under the running fit the group finalized with (no barrier)."""
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
