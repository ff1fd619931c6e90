# SPDX-License-Identifier: MIT
"""Paired analysis of the training bench (issue 43): every mode against
a reference mode (the library's default), seed by seed.

Endpoints, from each run's held-out curve (summary.py): AUC, the mean
held-out accuracy over the budget (primary); the rollouts to reach a
stated target accuracy T, a miss counted as the budget (secondary, with
the share of runs that reach it); final accuracy (secondary). For each
mode and endpoint: the mean paired difference (mode minus reference), its
95% t-interval, the two-sided p-value of the paired t-test, and that
p-value after Holm's correction over the modes compared (per endpoint);
for the rollouts, also the ratio mode / reference as the geometric mean
of the per-seed ratios with its t-interval. The smallest difference the
seeds can resolve (two-sided 5%, power 80%) is printed beside AUC.

Student's t is computed here (numpy only): the CDF through the
regularised incomplete beta function, the quantile by bisection.
"""

import math
from typing import Dict, List, Optional, Sequence

import numpy as np


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified
    Lentz), converging for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(q: float, df: float) -> float:
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q} is not in (0, 1)")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def paired(d: Sequence[float], level: float = 0.95) -> dict:
    """Mean of paired differences, its t-interval, the two-sided p of
    the paired t-test, and the smallest true difference the test detects
    with power 0.8 at 5% (two-sided). n < 2: no interval."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    m = float(d.mean()) if n else float("nan")
    if n < 2:
        return dict(n=n, mean=m, lo=float("nan"), hi=float("nan"),
                    p=float("nan"), mde=float("nan"), sd=float("nan"))
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    tq = t_quantile(0.5 + level / 2.0, n - 1)
    if se == 0.0:
        p = 0.0 if m != 0.0 else 1.0
    else:
        p = 2.0 * (1.0 - t_cdf(abs(m) / se, n - 1))
    mde = (t_quantile(0.975, n - 1) + t_quantile(0.8, n - 1)) * se
    return dict(n=n, mean=m, lo=m - tq * se, hi=m + tq * se, p=p, mde=mde,
                sd=sd)


def holm(ps: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN, counted out)."""
    idx = [i for i, p in enumerate(ps) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: ps[i])
    m = len(order)
    out = [float("nan")] * len(ps)
    run = 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (m - rank) * ps[i]))
        out[i] = run
    return out


def _pairs(s, mode, ref, key):
    """Seeds both have, and the two modes' values on them."""
    a = dict(zip(s[mode]["seeds"], s[mode][key]))
    b = dict(zip(s[ref]["seeds"], s[ref][key]))
    seeds = [x for x in s[mode]["seeds"] if x in b]
    return seeds, np.array([a[x] for x in seeds]), np.array([b[x] for x in seeds])


def reach(s: dict, mode: str, target: Dict[int, float], budget: float):
    """Per seed of the mode: rollouts to the seed's target (a miss: the
    budget), and whether it was reached."""
    from summary import to_target
    out, got = [], []
    for sd, c in zip(s[mode]["seeds"], s[mode]["curves"]):
        x = to_target(c, target[sd]) if sd in target else None
        out.append(budget if x is None else min(x, budget))
        got.append(x is not None and x <= budget)
    return np.array(out), np.array(got)


def compare(s: dict, ref: str, budget: float,
            target: Optional[Dict[int, float]] = None) -> dict:
    """Every mode of `s` against `ref`, paired by seed: per endpoint the
    paired statistics and Holm's p over the modes compared."""
    modes = [m for m in s if m != ref]
    rows = {m: {} for m in modes}
    curves = all(s[m].get("curves") for m in s)
    if curves and target:
        for m in list(s):
            s[m]["reach"], s[m]["reached"] = reach(s, m, target, budget)
    for key in ("auc", "final") + (("reach",) if curves and target else ()):
        ps = []
        for m in modes:
            seeds, a, b = _pairs(s, m, ref, key)
            st = paired(a - b)
            if key == "reach":
                # The ratio mode / reference: geometric mean of the per-seed
                # ratios, its interval from the log ratios' t-interval.
                lr = paired(np.log(np.maximum(a, 1.0) / np.maximum(b, 1.0)))
                st.update(ratio=math.exp(lr["mean"]), ratio_lo=math.exp(lr["lo"]),
                          ratio_hi=math.exp(lr["hi"]), p_ratio=lr["p"])
            st["ahead"] = int((a > b).sum()) if key != "reach" else int((a < b).sum())
            rows[m][key] = st
            ps.append(st["p"])
        for m, ph in zip(modes, holm(ps)):
            rows[m][key]["p_holm"] = ph
    share = {m: float(np.mean(s[m]["reached"])) for m in s} \
        if curves and target else {}
    return dict(ref=ref, rows=rows, share=share, target=target)
