# SPDX-License-Identifier: MIT
"""v05-eb's cold start against the number of verl agent-loop workers, with
and without the manager's step-boundary merge of their running fits.

    build-venv/verl/bin/python bench/verl_cold_start.py [--prompts 8]
        [--steps 40] [--eb-cold 64]

Each step hands `prompts` prompts to W workers (verl's manager chunks a
batch over its workers), each worker's own plugin runs its chunk as one
batch (priors and rewards from a fixed table, as test_verl_fit_merge.py),
and, when merging, every worker gets the sum of the others' parts at the
start of each step (v05.trainers.verl.manager.merge_others, what
V05ManagerMixin._v05_exchange hands out). Reported per (W, merge): the
first step whose chunks are decided under a warm fit (own + merged first
waves >= eb_cold when the chunk starts: before it, a chunk's second waves
wait for its last first wave and are decided under what the worker has),
and the first step in which a worker's prompts got different k (a
data-driven second wave).
"""

import argparse
import itertools
import os
import sys

import v05
from v05.trainers.verl.manager import merge_others

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "trainers"))
from plugin_drive import drive, table  # noqa: E402

_names = itertools.count()


def one(workers, merge, prompts, steps, eb_cold, seed=0):
    plugins = [v05.Plugin.create(f"bcs-{os.getpid()}-{next(_names)}",
                                 reclaim=True, k_init=2, k_step=2, k_max=8,
                                 pad_multiple=1, eb_cold=eb_cold)
               for _ in range(workers)]
    remote = [0] * workers
    warm_step = varied_step = None
    try:
        for step in range(1, steps + 1):
            if merge and workers > 1:
                parts = [p.eb_state().to_list() for p in plugins]
                for i, (p, o) in enumerate(zip(plugins, merge_others(parts))):
                    p.set_eb_remote(o)
                    remote[i] = o.folded
            batch = table([f"s{step}-{i}" for i in range(prompts)],
                          seed * 100003 + step)
            uids = list(batch)
            for i, p in enumerate(plugins):
                chunk = {u: batch[u] for u in uids[i::workers]}
                if not chunk:
                    continue
                fit = p.eb_state().folded + remote[i]
                if warm_step is None and fit >= eb_cold:
                    warm_step = step
                k = drive(p, chunk)
                if varied_step is None and len(set(k.values())) > 1:
                    varied_step = step
        return warm_step, varied_step
    finally:
        for p in plugins:
            p.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eb-cold", type=int, default=64)
    a = ap.parse_args()
    print(f"prompts per step {a.prompts}, eb_cold {a.eb_cold}, "
          f"up to {a.steps} steps")
    print("| workers | merged | first warm step | first step with varied k |")
    print("|---|---|---|---|")
    for w in (1, 2, 4):
        for merge in ((False,) if w == 1 else (True, False)):
            warm, varied = one(w, merge, a.prompts, a.steps, a.eb_cold)
            print(f"| {w} | {'yes' if merge else 'no'} | "
                  f"{warm if warm else f'> {a.steps}'} | "
                  f"{varied if varied else f'> {a.steps}'} |")


if __name__ == "__main__":
    main()
