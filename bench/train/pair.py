# SPDX-License-Identifier: MIT
"""bench/train/pair.py A.json MODE B.json MODE2,MODE3,...: one mode of a
committed summary against modes of another, paired by seed (runs that
cannot share a page: the same regime and seeds, recorded under different
settings, e.g. LEADERS.json's runs from before the normaliser was
recorded per mode). Mean AUC and final-accuracy differences, 95% paired
t-intervals, Holm's correction over the modes compared, seeds ahead."""

import json
import sys

import numpy as np
from scipy import stats


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 4:
        raise SystemExit(__doc__)
    a_path, mode, b_path, others = argv
    A = json.load(open(a_path))
    B = json.load(open(b_path))
    for k in ("regime", "steps", "budget_per_step", "lr", "heldout"):
        if A.get(k) != B.get(k):
            raise SystemExit(f"pair: {k} differs ({A.get(k)} and {B.get(k)})")
    a = A["summary"][mode]
    rows = []
    for m in others.split(","):
        b = B["summary"][m]
        if list(a["seeds"]) != list(b["seeds"]):
            raise SystemExit(f"pair: {mode} and {m} ran other seeds")
        x = np.array(a["auc"]) - np.array(b["auc"])
        n = len(x)
        half = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)
        fin = np.mean(np.array(a["final"]) - np.array(b["final"]))
        rows.append([m, n, x.mean(), half, stats.ttest_1samp(x, 0).pvalue,
                     int((x > 0).sum()), fin])
    # Holm: the i-th smallest p times (k - i), kept monotone.
    worst = 0.0
    for i, r in enumerate(sorted(rows, key=lambda r: r[4])):
        worst = max(worst, min(1.0, (len(rows) - i) * r[4]))
        r.append(worst)
    print(f"{mode} ({a_path}) against {b_path}, regime {A.get('regime')}, "
          f"seeds {a['seeds'][0]}-{a['seeds'][-1]}")
    print("| mode | seeds | AUC diff | p (Holm) | ahead | final diff |")
    print("|---|---|---|---|---|---|")
    for m, n, mu, half, p, ahead, fin, holm in rows:
        print(f"| {m} | {n} | {mu:+.4f} [{mu - half:+.4f}, {mu + half:+.4f}] "
              f"| {p:.3g} ({holm:.3g}) | {ahead}/{n} | {fin:+.4f} |")


if __name__ == "__main__":
    main()
