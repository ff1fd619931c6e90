# SPDX-License-Identifier: MIT
"""Driving a plugin by hand with known rewards (the fit-merge test, the
main_ppo resume test's replay, bench/verl_cold_start.py)."""

import numpy as np

import v05


def table(uids, seed):
    """Each prompt's prior (a noisy 2p - 1) and its rewards by sample
    (+1 with the prompt's own rate p)."""
    rng = np.random.default_rng(seed)
    out = {}
    for u in uids:
        p = rng.uniform(0.05, 0.95)
        prior = float(np.clip(2 * p - 1 + rng.normal(0, 0.3), -0.95, 0.95))
        out[u] = (prior, [1.0 if x < p else -1.0 for x in rng.random(16)])
    return out


def drive(p, prompts):
    """One batch of `prompts` (uid -> (prior, rewards by sample)) through
    plugin p, each sample's reward pushed as the plugin asks for it.
    Returns each uid's final k."""
    w = v05.RewardWriter.attach(p.name)
    try:
        k = {}
        pending = p.submit([(u, prompts[u][0]) for u in prompts])
        while len(k) < len(prompts):
            for d in pending:
                if d.kind == "sample":
                    for s in d.samples:
                        w.push(d, s, prompts[d.uid][1][s])
                elif d.kind in ("final", "drop"):
                    k[d.uid] = p.group(d).k
                    p.release(d)
            if len(k) < len(prompts):
                pending = p.poll()
                if not pending:
                    p.wait_blocking(1.0)
                    pending = p.poll()
        return k
    finally:
        w.close()
