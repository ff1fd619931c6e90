# SPDX-License-Identifier: MIT
"""bench/train's runs summarised per mode: each run's held-out curve and
the endpoints computed from it (start, final accuracy, AUC, rollouts to a
target), and the step logs' means. A page's committed summary keeps the
curves, so every endpoint can be recomputed from it (report.py --from)."""

import numpy as np

ORDER = ["grpo-16", "dapo-16", "grpo-4", "fixed-1", "fixed-2", "fixed-4", "fixed-8",
         "v05", "v05-nohalt", "v05-eb", "v05-pg", "v05-pg-paper", "v05-pg-rms",
         "v05-pg-s750",
         "reinforce-ada", "reinforce-ada-pos",
         "knapsack-prior-4", "knapsack-prior-8", "knapsack-4", "knapsack-8",
         "dapo-8", "greso-8", "dapo-16-fill", "greso-8-fill", "ebpo-8",
         "ebpo-4", "pilot-commit-4-12", "v05-eb-fill", "default"]
# The published rules (issue 28, docs/RULES.md), compared with v05's modes.
RULES = ["reinforce-ada", "reinforce-ada-pos", "knapsack-prior-4",
         "knapsack-prior-8", "knapsack-4", "knapsack-8", "greso-8"]
# Issue 38's modes: a report holding one of them is the fill report.
FILL = ["dapo-16-fill", "greso-8-fill", "ebpo-8", "ebpo-4",
        "pilot-commit-4-12", "v05-eb-fill"]


def by_mode(runs):
    out = {}
    for r in runs:
        out.setdefault(r["mode"], []).append(r)
    # The modes in ORDER's order, then any other (never dropped).
    names = [m for m in ORDER if m in out] + sorted(set(out) - set(ORDER))
    return {m: sorted(out[m], key=lambda r: r["seed"]) for m in names}


def curve(run):
    """[[rollouts, held-out accuracy], ...] of a run, in order."""
    return [[e["rollouts"], round(e["acc"], 6)] for e in run["evals"]]


def acc_on_grid(run, grid):
    x = [e["rollouts"] for e in run["evals"]]
    y = [e["acc"] for e in run["evals"]]
    return np.interp(grid, x, y)


def final_of(c, budget):
    """Held-out accuracy at the budget: linear between the evaluations
    either side of it (a run ends with the step that passes the budget)."""
    x, y = zip(*c)
    return float(np.interp(budget, x, y))


def auc_of(c, budget):
    """Mean held-out accuracy over [0, budget]: the integral of the curve
    (linear between evaluations) divided by the budget."""
    x = np.array([r for r, _ in c], dtype=float)
    y = np.array([a for _, a in c], dtype=float)
    inside = x < budget
    xs = np.concatenate([x[inside], [budget]])
    ys = np.concatenate([y[inside], [np.interp(budget, x, y)]])
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / budget)


def endpoints(curves, budget):
    """Per run: start, final and AUC arrays."""
    return (np.array([c[0][1] for c in curves]),
            np.array([final_of(c, budget) for c in curves]),
            np.array([auc_of(c, budget) for c in curves]))


def to_target(c, target):
    """Rollouts at which the held-out accuracy first reaches `target`
    (linear between evaluations; 0 if it starts there), or None. `c` is a
    curve or a run."""
    if isinstance(c, dict):
        c = curve(c)
    prev = None
    for r, a in c:
        if a >= target:
            if prev is None:
                return 0.0
            if a == target:
                # exactly at an evaluation (grpo-16 at its own final):
                # the interpolation below can round past it, and past
                # the budget
                return float(r)
            r0, a0 = prev
            return r0 + (r - r0) * (target - a0) / (a - a0)
        prev = (r, a)
    return None


def from_summary(x, budget):
    """A committed summary's mode entry back as summarize() made it: the
    per-seed figures as arrays, and the endpoints recomputed from the
    curves where it has them."""
    x = {k: np.array(v) if isinstance(v, list) and k not in ("curves", "seeds")
         else v for k, v in x.items()}
    if x.get("curves"):
        x["start"], x["final"], x["auc"] = endpoints(x["curves"], budget)
        x["gain"] = x["final"] - x["start"]
    return x


def summarize(mruns, budget):
    s = {}
    for m, runs in mruns.items():
        curves = [curve(r) for r in runs]
        start, fin, auc = endpoints(curves, budget)
        g = [np.array([x["grad_norm"] for x in r["log"]]) for r in runs]
        ent = [np.array([x["entropy"] for x in r["log"]]) for r in runs]
        half = [len(x) // 2 for x in ent]
        logs = [x for r in runs for x in r["log"]]
        tp = np.concatenate([x["true_p"] for x in logs])
        bl = np.concatenate([x["baseline"] for x in logs])
        pr = np.concatenate([x["prior"] for x in logs])
        ks = np.concatenate([x["k"] for x in logs])
        s[m] = dict(
            n=len(runs), start=start, final=fin, gain=fin - start, auc=auc,
            curves=curves,
            greedy=np.array([r["final_greedy"] for r in runs]),
            gnorm=np.array([x.mean() for x in g]),
            gstd=np.array([x.std() for x in g]),
            ent_late=np.array([e[h:].mean() for e, h in zip(ent, half)]),
            mse=float(np.mean((bl - (2 * tp - 1)) ** 2)),
            prior_mse=float(np.mean((pr - (2 * tp - 1)) ** 2)),
            mean_k=float(ks.mean()),
            rollouts_per_prompt=float(sum(x["spent"] for x in logs) /
                                      sum(x["prompts"] for x in logs)),
            waves=float(np.mean([x["waves"] for x in logs])),
            halts=float(np.mean([x["halts"] for x in logs])),
            dropped=float(sum(x["dropped"] for x in logs) /
                          sum(x["prompts"] for x in logs)),
            # groups with a trained advantage that is not 0 (recorded
            # since the published rules; None for older runs)
            nonzero=(float(sum(x["nonzero"] for x in logs) /
                           sum(x["prompts"] for x in logs))
                     if all("nonzero" in x for x in logs) else None),
            steps=float(np.mean([r["steps"] for r in runs])),
            # The fill's skip by prior: of the prompts pulled, the share
            # skipped (the log's count is cumulative).
            skipped_prior=float(
                sum(r["log"][-1].get("skipped_prior", 0) for r in runs) /
                max(1, sum(r["log"][-1].get("skipped_prior", 0) +
                           sum(x["prompts"] for x in r["log"]) for r in runs))),
            fill_waves=float(np.mean([x.get("fill_waves", 0) for x in logs])),
            seeds=[r["seed"] for r in runs],
            rollouts=float(np.mean([r["rollouts"] for r in runs])),
            wall=float(np.mean([r["wall"] for r in runs])),
            tp=tp, bl=bl, pr=pr)
    return s


def fmt(a, d=3):
    a = np.asarray(a, dtype=float)
    if len(a) == 1:
        return f"{a[0]:.{d}f}"
    return f"{a.mean():.{d}f} [{a.min():.{d}f}, {a.max():.{d}f}]"


