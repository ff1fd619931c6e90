# SPDX-License-Identifier: MIT
"""The gradient probe's batches: each rule run through the real plugin at
a frozen checkpoint, and the weights its loss gives each sequence.

A rule runs in the bench's own Trainer (its mode, its prior, its plugin
config, the regime's priors), with the policy frozen at the checkpoint:
first `burn` batches that only warm its state (the running fit, the value
prior's context, EBPO's statistics, the running mean of k that sizes an
adaptive batch), then one batch per replicate. Replicate r draws its
prompts from a list fixed by (checkpoint, r) and sample s of the list's
j-th prompt from uniforms fixed by (checkpoint, r, j, s) (common random
numbers): two rules that both roll out sample s of prompt j get the same
completion, so their difference is the allocation and the advantages,
not the draw.

A batch becomes coefficients on sequences, keyed (r, j, s): the ascent
direction the trainer's loss gives is sum_key c_key grad l_key
(trainer.Trainer.sequences), for three sets of advantages from the same
samples:
  trained  the slot's advantages, as the trainer uses them
  raw      r - the slot's baseline (no normaliser)
  oracle   r - (2p - 1), p the prompt's exact success rate
and the pseudo-rules oracle-k take the first 256/k prompts with k samples
each and the exact baseline (no plugin).
"""

import dataclasses
import random
import zlib
from typing import Dict, List, Tuple

import numpy as np
import torch

import grads
import model as M
import task
import trainer as T

VARIANTS = ("trained", "raw", "oracle")
Key = Tuple[int, int, int]  # (replicate, prompt position, sample)


class Pool:
    """The checkpoint's replicate prompt lists and completions (cached:
    every rule that asks for key (r, j, s) gets the same one)."""

    def __init__(self, name: str, policy: M.TinyLM, heldout, lengths):
        self.name, self.policy = name, policy
        self.salt = zlib.crc32(name.encode())
        self.exclude = set(heldout)
        self.lengths = lengths
        self.prompts: Dict[int, List[task.Prompt]] = {}
        self._rng: Dict[int, random.Random] = {}
        self.outputs: Dict[Key, List[int]] = {}
        self._p: Dict[task.Prompt, float] = {}
        self.sampled = 0

    def prompt(self, r: int, j: int) -> task.Prompt:
        lst = self.prompts.setdefault(r, [])
        rng = self._rng.setdefault(r, random.Random(f"{self.name}-rep-{r}"))
        while len(lst) <= j:
            p = task.random_prompt(rng, self.lengths)
            if p not in self.exclude:
                lst.append(p)
        return lst[j]

    def uniforms(self, key: Key) -> np.ndarray:
        return np.random.default_rng([self.salt, *key]).random(task.MAX_ANSWER)

    def sample(self, keys: List[Key]) -> List[List[int]]:
        """Completions for keys, drawn (batched) where not cached."""
        new = [k for k in dict.fromkeys(keys) if k not in self.outputs]
        if new:
            ps = [self.prompt(r, j) for r, j, _ in new]
            U = np.stack([self.uniforms(k) for k in new])
            for k, o in zip(new, grads.sample_from_uniforms(self.policy, ps, U)):
                self.outputs[k] = o
            self.sampled += len(new)
        return [self.outputs[k] for k in keys]

    def true_p(self, ps) -> np.ndarray:
        """Exact success rates under the frozen policy (cached)."""
        new = [p for p in dict.fromkeys(ps) if p not in self._p]
        if new:
            for p, v in zip(new, M.success_prob(self.policy, new).tolist()):
                self._p[p] = v
        return np.array([self._p[p] for p in ps])

    def reward(self, key: Key) -> float:
        return task.verify(self.prompt(key[0], key[1]), self.outputs[key])


class ReplicateStream:
    """Replicate r's prompts in order, with their positions as ids."""

    def __init__(self, pool: Pool, r: int):
        self.pool, self.r, self.j = pool, r, 0

    def take_ids(self, n: int):
        out = [(self.j + i, self.pool.prompt(self.r, self.j + i), 0)
               for i in range(n)]
        self.j += n
        return out


class PoolSampler(T.Sampler):
    """The trainer's batched sampler, drawing from the pool: a request's
    key is (replicate, the prompt's position, sample); burn-in prompts
    (no position) are drawn from a seeded stream of their own."""

    def __init__(self, pool: Pool, seed: int):
        super().__init__(pool.policy, torch.Generator().manual_seed(seed))
        self.pool = pool
        self.trainer = None   # set once the trainer exists: uid -> position
        self.replicate = None  # None: burn-in
        self.rng = np.random.default_rng(seed)

    def draw(self, reqs):
        if self.replicate is None:
            ps = [p for p, _, _ in reqs]
            U = self.rng.random((len(ps), task.MAX_ANSWER))
            return grads.sample_from_uniforms(self.policy, ps, U)
        return [list(o) for o in self.pool.sample(
            [(self.replicate, self.trainer.pids[u], s) for _, u, s in reqs])]


class ProbeTrainer(T.Trainer):
    """The trainer with exact success rates from the pool's cache (the
    policy does not move)."""

    pool: Pool = None

    def true_p(self, ps):
        return self.pool.true_p(ps)


def probe_spec(spec: T.ModeSpec) -> T.ModeSpec:
    """A mode as the probe runs it: fresh prompts, so a record kept across
    epochs (Pilot-Commit's evictions) never acts and is left out; a rule
    that needs one to choose its prompts (Knapsack's own estimate, GRESO)
    cannot be probed on fresh prompts."""
    if spec.history in ("knapsack", "greso"):
        raise ValueError(f"{spec.name}: its prompts come from a cross-epoch "
                         "history; the probe draws fresh prompts")
    return dataclasses.replace(spec, history="")


def coefficients(batch: dict, pids: Dict[str, int], r: int
                 ) -> Tuple[Dict[str, Dict[Key, float]], dict]:
    """A collected batch as coefficients per variant, and its record."""
    trained = batch["trained"]
    K = len(trained)
    out = {v: {} for v in VARIANTS}
    p_x, k_x, e_x, n_x = [], [], [], []
    for e in trained:
        j = pids[e["uid"]]
        bstar = 2 * e["true_p"] - 1
        n = len(e["kept"])
        for s in e["kept"]:
            key = (r, j, s)
            w = 1.0 / (n * K)
            out["trained"][key] = w * float(e["adv"][s])
            out["raw"][key] = w * (e["rewards"][s] - e["baseline"])
            out["oracle"][key] = w * (e["rewards"][s] - bstar)
        p_x.append(e["true_p"])
        k_x.append(e["k"])
        n_x.append(n)
        e_x.append(e["baseline"] - bstar)
    ents = batch["entries"]
    mu = np.array([2 * e["true_p"] - 1 for e in ents])
    rec = dict(rollouts=batch["spent"], prompts=len(ents), kept=K,
               p=p_x, k=k_x, n=n_x, e=e_x,
               mse=float(np.mean((np.array([e["baseline"] for e in ents])
                                  - mu) ** 2)) if ents else 0.0,
               prior_mse=float(np.mean((np.array(
                   [0.0 if e["prior"] is None else e["prior"]
                    for e in ents]) - mu) ** 2)) if ents else 0.0)
    return out, rec


async def run_rule(spec: T.ModeSpec, pool: Pool, seed: int, state: dict,
                   heldout, regime, sigma, replicates: int, burn: int):
    """The rule's batches at the checkpoint: per replicate, coefficients
    per variant and the batch's record."""
    sampler = PoolSampler(pool, seed)
    ProbeTrainer.pool = pool
    tr = ProbeTrainer(probe_spec(spec), seed, state, heldout, regime=regime,
                      sigma=sigma, sampler=sampler)
    sampler.trainer = tr
    tr.stream = task.PromptStream(heldout, seed=f"{pool.name}-burn",
                                  lengths=pool.lengths)
    out = []
    try:
        spent = []
        for _ in range(burn):
            spent.append((await tr.collect())["spent"])
            tr.step_no += 1   # uids stay unique for the prior's texts
        if tr.spec.fill and spent:
            # A fill's batch is its B informative groups, whatever they
            # cost: scaled so that a batch costs the bench's budget on
            # average over the burn-in (the replicates report their own).
            tr.spec = dataclasses.replace(tr.spec, fill=max(1, round(
                tr.spec.fill * T.BUDGET / np.mean(spent))))
        for r in range(replicates):
            tr.stream = ReplicateStream(pool, r)
            sampler.replicate = r
            b = await tr.collect()
            tr.step_no += 1
            out.append(coefficients(b, tr.pids, r))
            sampler.replicate = None
    finally:
        tr.close()
    return out


def oracle_k(pool: Pool, k: int, r: int, budget: int = T.BUDGET):
    """The pseudo-rule oracle-k at replicate r: budget/k prompts, k samples
    each, advantages r - (2p - 1) with p exact (no plugin, no normaliser)."""
    B = budget // k
    keys = [(r, j, s) for j in range(B) for s in range(k)]
    pool.sample(keys)
    ps = [pool.prompt(r, j) for j in range(B)]
    p = pool.true_p(ps)
    co = {}
    for (rr, j, s) in keys:
        co[(rr, j, s)] = (pool.reward((rr, j, s)) - (2 * p[j] - 1)) / (B * k)
    rec = dict(rollouts=B * k, prompts=B, kept=B, p=p.tolist(), k=[k] * B,
               n=[k] * B, e=[0.0] * B, mse=0.0, prior_mse=0.0)
    return {"trained": co, "raw": co, "oracle": co}, rec
