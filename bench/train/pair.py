# SPDX-License-Identifier: MIT
"""bench/train/pair.py A.json MODE B.json MODE2,MODE3,...: one mode of a
committed summary against modes of another, paired by seed (runs that
cannot share a page: the same regime and seeds, recorded under different
settings, e.g. LEADERS.json's runs from before the normaliser was
recorded per mode). Mean AUC and final-accuracy differences, 95% paired
t-intervals, Holm's correction over the modes compared, seeds ahead."""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from analysis import holm, paired  # noqa: E402


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 4:
        raise SystemExit(__doc__)
    a_path, mode, b_path, others = argv
    with open(a_path) as f:
        A = json.load(f)
    with open(b_path) as f:
        B = json.load(f)
    for k in ("regime", "steps", "budget_per_step", "lr", "heldout"):
        if A.get(k) != B.get(k):
            raise SystemExit(f"pair: {k} differs ({A.get(k)} and {B.get(k)})")
    a = A["summary"][mode]
    rows = []
    for m in others.split(","):
        b = B["summary"][m]
        if list(a["seeds"]) != list(b["seeds"]):
            raise SystemExit(f"pair: {mode} and {m} ran other seeds")
        d = np.array(a["auc"]) - np.array(b["auc"])
        fin = float(np.mean(np.array(a["final"]) - np.array(b["final"])))
        rows.append((m, paired(d), int((d > 0).sum()), fin))
    adj = holm([r[1]["p"] for r in rows])
    print(f"{mode} ({a_path}) against {b_path}, regime {A.get('regime')}, "
          f"seeds {a['seeds'][0]}-{a['seeds'][-1]}")
    print("| mode | seeds | AUC diff | p (Holm) | ahead | final diff |")
    print("|---|---|---|---|---|---|")
    for (m, t, ahead, fin), h in zip(rows, adj):
        print(f"| {m} | {t['n']} | {t['mean']:+.4f} [{t['lo']:+.4f}, "
              f"{t['hi']:+.4f}] | {t['p']:.3g} ({h:.3g}) | {ahead}/{t['n']} "
              f"| {fin:+.4f} |")


if __name__ == "__main__":
    main()
