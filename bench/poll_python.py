# SPDX-License-Identifier: MIT
"""The per-reward logic of bench_poll.c written plainly in Python with
numpy, as a user would otherwise write it in the trainer: a dict of prompt
states, a check and a store per reward, the V0.5 statistics with numpy when
a group's 4 rewards are in. Same stream as bench_poll.c, timed with
perf_counter. Prints one JSON object.
    /usr/bin/python3 bench/poll_python.py [PROMPTS] [REPS]
"""
import json
import math
import sys
import time

import numpy as np

K = 4
COST = 0.0039


def stream(n, producers=8):
    """The records in the order a round-robin drain of 8 lanes sees them."""
    lanes = [[] for _ in range(producers)]
    for i in range(n):
        lanes[i % producers].extend(
            (f"p{i}", s, 1.0 if (7 * i + 3 * s) % 5 < 3 else -1.0)
            for s in range(K))
    out = []
    for j in range(max(len(lane) for lane in lanes)):
        for lane in lanes:
            if j < len(lane):
                out.append(lane[j])
    return out


def run(n, records):
    states = {f"p{i}": {"prior": ((i % 21) - 10) / 10.0,
                        "rewards": np.zeros(16, dtype=np.float32),
                        "issued": (1 << K) - 1, "received": 0, "final": False}
              for i in range(n)}
    decisions = []
    rejected = 0
    t0 = time.perf_counter()
    for uid, s, r in records:
        st = states.get(uid)
        if st is None or not math.isfinite(r) or abs(r) > 1 or st["final"]:
            rejected += 1
            continue
        bit = 1 << s
        if not st["issued"] & bit or st["received"] & bit:
            rejected += 1
            continue
        st["rewards"][s] = r
        st["received"] |= bit
        if st["received"] != st["issued"]:
            continue
        k = bin(st["issued"]).count("1")
        rw = st["rewards"][:k].astype(np.float64)
        mean = rw.mean()
        d = mean - st["prior"]
        delta2 = max(0.0, d * d - 1.0 / k)
        w = delta2 / (delta2 + 1.0 / k)
        mu = w * mean + (1 - w) * st["prior"]
        sigma = max(math.sqrt(1 - mu * mu), 0.01)
        adv = ((rw - mu) / sigma).astype(np.float32)
        more = delta2 > 0 and k < 1 / math.sqrt(COST) - 1 / delta2 and k + 2 <= 16
        if not more:
            st["final"] = True
        decisions.append((uid, more, mu, adv))
    t1 = time.perf_counter()
    assert rejected == 0 and len(decisions) == n
    return (t1 - t0) * 1e9 / len(records)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    records = stream(n)
    runs = [run(n, records) for _ in range(reps)]
    print(json.dumps({"prompts": n, "rewards": len(records),
                      "median_ns_per_reward": sorted(runs)[len(runs) // 2],
                      "runs_ns": runs, "python": sys.version.split()[0],
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
