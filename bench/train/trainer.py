# SPDX-License-Identifier: MIT
"""One training run (mode, seed) driven through the real v05 plugin.

Each step: draw a prompt batch, ask the value prior (fitted on the plugin's
support buffer) for each prompt's prior, run the batch through
v05.engines.driver.GroupRollout (the plugin's segment, decisions, rounds, halt and
padding; every sample is one generate call, batched into one forward pass
per wave by Sampler), score each sample with the exact verifier (pushed to
the plugin through its RewardWriter), and when every group is final take
the advantages from the plugin's slots for the policy-gradient loss

    L = -(1/B) sum_prompts (1/n) sum_{i kept} A_i * mean_t log pi(o_i,t)

(the paper's objective with one on-policy update, so rho = 1 and clipping
never acts; DAPO's dropped groups leave the batch, B counts the kept ones;
n = k but under reinforce-ada, which trains on n of its k samples).
"""

import asyncio
import dataclasses
import os
import time
from typing import Dict, List, Optional

import numpy as np
import torch

import v05
from v05.core.prior import ValueModelPrior
from v05.core.rules import Greso, KnapsackHistory
from v05.engines.driver import GroupRollout

import model as M
import task
import valueprior

BUDGET = 256  # rollouts per step: prompt batch x group size


@dataclasses.dataclass
class ModeSpec:
    name: str        # label in the results
    mode: str        # plugin mode
    k: int           # k_init (group size for fixed modes)
    adaptive: bool   # k decided by the plugin: size the batch by expected k
    halt: float = 0.25  # the batch halt fraction (the paper's 25%)
    # A published rule (docs/RULES.md): its own defaults (v05_config_mode),
    # only k_init given (knapsack-prior's budget per prompt).
    rule: bool = False
    # A rule with a cross-epoch state kept here, as a trainer keeps it
    # (v05.core.rules): "knapsack" (its own success-rate estimate is the
    # prior; no value model) or "greso" (its skip filter picks the prompts
    # rolled out). Both need a fixed training set (--train-set).
    history: str = ""


def mode_specs() -> Dict[str, ModeSpec]:
    # grpo-4 is not in the paper: a control with fixed-4's batch shape
    # (64 prompts x 4) and the plain group mean, to separate the prior's
    # effect from that of more prompts per step.
    s = [ModeSpec("grpo-16", "grpo", 16, False),
         ModeSpec("dapo-16", "dapo", 16, False),
         ModeSpec("grpo-4", "grpo", 4, False)]
    s += [ModeSpec(f"fixed-{k}", "v05-fixed", k, False) for k in (1, 2, 4, 8)]
    # v05-nohalt (not in the paper): OSLA without the 25% batch halt, so
    # every prompt whose prior is rejected gets its OSLA target.
    s += [ModeSpec("v05", "v05", 4, True),
          ModeSpec("v05-nohalt", "v05", 4, True, halt=0.0),
          ModeSpec("v05-eb", "v05-eb", 4, True)]
    # The published rules (issue 28): Reinforce-Ada with its authors'
    # defaults (rounds of 8 up to 32, 4 trained on), Knapsack RL's
    # allocation from the value prior at 4 and 8 samples per prompt.
    s += [ModeSpec("reinforce-ada", "reinforce-ada", 8, True, rule=True),
          ModeSpec("reinforce-ada-pos", "reinforce-ada-pos", 8, True,
                   rule=True),
          ModeSpec("knapsack-prior-4", "knapsack-prior", 4, False, rule=True),
          ModeSpec("knapsack-prior-8", "knapsack-prior", 8, False, rule=True)]
    # The rules with a cross-epoch state, as their authors run them:
    # Knapsack RL with its own estimate from each prompt's past epochs,
    # GRESO's filter over DAPO's groups of 8 (and DAPO's 8 without it).
    s += [ModeSpec("knapsack-4", "knapsack", 4, False, rule=True,
                   history="knapsack"),
          ModeSpec("knapsack-8", "knapsack", 8, False, rule=True,
                   history="knapsack"),
          ModeSpec("dapo-8", "dapo", 8, False),
          ModeSpec("greso-8", "greso", 8, False, rule=True, history="greso")]
    return {m.name: m for m in s}


class Sampler:
    """generate(prompt, uid, sample, batch) for GroupRollout: requests that
    arrive together (one wave of decisions) are sampled in one batched
    forward pass of the policy."""

    def __init__(self, policy: M.TinyLM, gen: torch.Generator):
        self.policy, self.gen = policy, gen
        self.pending = []
        self.calls = 0          # generate calls (= rollouts)
        self.waves = 0          # batched passes
        self.ent_sum = 0.0
        self.ntok = 0
        self.seconds = 0.0

    async def generate(self, prompt, uid, sample, batch):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.calls += 1
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((prompt, fut))
        return await fut

    def _flush(self):
        reqs, self.pending = self.pending, []
        t = time.perf_counter()
        try:
            outs, e, n = M.sample(self.policy, [p for p, _ in reqs], self.gen)
        except Exception as exc:  # surfaced by the driver
            for _, f in reqs:
                if not f.done():
                    f.set_exception(exc)
            return
        self.seconds += time.perf_counter() - t
        self.waves += 1
        self.ent_sum += e
        self.ntok += n
        for (_, f), o in zip(reqs, outs):
            if not f.done():
                f.set_result(o)


class Trainer:
    def __init__(self, spec: ModeSpec, seed: int, init_state: dict,
                 heldout: List[task.Prompt], *, lr: float = 1e-3,
                 eval_every: int = 5, clip: float = 1.0, record: bool = False,
                 lr_warmup: int = 10, train_set: int = 0):
        self.spec, self.seed = spec, seed
        torch.manual_seed(seed)
        self.policy = M.TinyLM()
        self.policy.load_state_dict(init_state)
        self.opt = torch.optim.Adam(self.policy.parameters(), lr=lr)
        # Linear learning-rate warm-up over the first steps, as the paper's
        # 10 warm-up steps (a fresh Adam's first steps are otherwise large).
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1.0, (s + 1) / lr_warmup))
        self.heldout = heldout
        if spec.history and not train_set:
            raise ValueError(f"{spec.name} keeps a history per prompt: it "
                             "needs a fixed training set (--train-set N)")
        # The same training set and epoch order for every mode of a seed.
        self.stream = task.EpochStream(heldout, train_set, seed=1000 + seed) \
            if train_set else task.PromptStream(heldout, seed=1000 + seed)
        self.history = KnapsackHistory() if spec.history == "knapsack" else \
            Greso(seed=seed) if spec.history == "greso" else None
        self.skipped = 0  # greso: candidates its filter passed over
        self.eval_every, self.clip = eval_every, clip
        self.record = record          # keep the advantages the loss used (tests)
        self.used: List[dict] = []
        self.name = f"train-{os.getpid()}-{spec.name}-{seed}"
        # Raises ValueError for a mode this build of v05 does not know.
        if spec.rule:
            self.plugin = v05.Plugin.create(self.name, mode=spec.mode,
                                            k_init=spec.k)
        else:
            self.plugin = v05.Plugin.create(
                self.name, mode=spec.mode, k_init=spec.k,
                k_max=max(16, spec.k), pad_multiple=32,
                halt_fraction=spec.halt)
        self.prior = ValueModelPrior(self.plugin, valueprior.predict,
                                     batch_size=64, context_size=256, seed=seed)
        self.sampler = Sampler(self.policy, torch.Generator().manual_seed(seed))
        self.rollout = GroupRollout(self.plugin, self.sampler.generate,
                                    score=self._score, release=False)
        self.prompts: Dict[str, task.Prompt] = {}
        self.rewards_seen: Dict[str, Dict[int, float]] = {}
        self.expected_k = float(spec.k)
        self.rollouts = 0
        self.step_no = 0
        self.log: List[dict] = []
        self.evals: List[dict] = []
        self.times = dict(prior=0.0, rollout=0.0, generate=0.0, update=0.0,
                          eval=0.0, true_p=0.0)

    def _score(self, uid, sample, out):
        r = task.verify(self.prompts[uid], out)
        self.rewards_seen.setdefault(uid, {})[sample] = r
        return r

    def close(self):
        self.rollout.close()
        self.plugin.close(force=True)

    def batch_size(self) -> int:
        if self.spec.adaptive:
            return max(8, int(round(BUDGET / self.expected_k)))
        return BUDGET // self.spec.k

    def evaluate(self):
        t = time.perf_counter()
        p = M.success_prob(self.policy, self.heldout).numpy()
        self.evals.append(dict(step=self.step_no, rollouts=self.rollouts,
                               acc=float(p.mean())))
        self.times["eval"] += time.perf_counter() - t

    def _take(self, B: int):
        """B prompts to roll out: (dataset index, prompt, epoch) each.
        Under greso, candidates come in the training set's order until B
        pass its filter (those it skips are passed over this epoch)."""
        if not isinstance(self.history, Greso):
            return self.stream.take_ids(B)
        out = []
        while len(out) < B:
            for c in self.stream.take_ids(B - len(out)):
                if self.history.skip(c[0], self.step_no):
                    self.skipped += 1
                else:
                    out.append(c)
        return out

    async def step(self) -> dict:
        B = self.batch_size()
        taken = self._take(B)
        ps = [p for _, p, _ in taken]
        uids = [f"{self.step_no}:{i}" for i in range(B)]
        self.prompts = dict(zip(uids, ps))
        self.rewards_seen = {}

        t = time.perf_counter()
        true_p = M.success_prob(self.policy, ps).numpy()   # the policy that samples
        self.times["true_p"] += time.perf_counter() - t

        t = time.perf_counter()
        if isinstance(self.history, KnapsackHistory):
            # Knapsack RL's own estimate (None: no estimate yet).
            priors = {u: self.history.prior(pid)
                      for u, (pid, _, _) in zip(uids, taken)}
        elif self.history is not None:
            priors = {u: 0.0 for u in uids}  # greso's groups use none
        else:
            priors = dict(self.prior.priors(
                [(u, task.text(p)) for u, p in zip(uids, ps)]))
        self.times["prior"] += time.perf_counter() - t

        st0 = self.plugin.stats()
        calls0, waves0, gen0 = self.sampler.calls, self.sampler.waves, self.sampler.seconds
        ent0, ntok0 = self.sampler.ent_sum, self.sampler.ntok
        t = time.perf_counter()
        results = await self.rollout.run([(u, p, priors[u]) for u, p in zip(uids, ps)])
        self.times["rollout"] += time.perf_counter() - t
        self.times["generate"] += self.sampler.seconds - gen0
        st1 = self.plugin.stats()
        spent = self.sampler.calls - calls0

        # The loss, from the slots' advantages.
        t = time.perf_counter()
        seq_p, seq_o, seq_a, seq_w = [], [], [], []
        ks, baselines, pri, tp, dropped, nonzero = [], [], [], [], 0, 0
        for i, u in enumerate(uids):
            r = results[u]
            g = r.group
            k = int(g.k)
            ks.append(k)
            baselines.append(float(g.baseline))
            pri.append(0.0 if priors[u] is None else priors[u])
            if self.history is not None:
                rew = [self.rewards_seen[u][s] for s in range(k)]
                pid, _, epoch = taken[i]
                if isinstance(self.history, KnapsackHistory):
                    self.history.fold(pid, epoch, rew)
                else:
                    self.history.fold(pid, rew)
            tp.append(float(true_p[i]))
            if r.dropped:
                dropped += 1
            else:
                adv = torch.tensor(np.array(g.advantages, dtype=np.float32))
                if self.record:
                    self.used.append(dict(uid=u, prior=priors[u], k=k,
                                          slot=np.array(g.advantages).tolist(),
                                          rewards=[self.rewards_seen[u][s] for s in range(k)],
                                          loss_adv=adv.tolist(), mode=self.spec.mode))
                # The samples trained on: all k but under reinforce-ada.
                kept_s = g.kept
                nonzero += any(float(adv[s]) != 0.0 for s in kept_s)
                for s in kept_s:
                    seq_p.append(ps[i])
                    seq_o.append(r.outputs[s])
                    seq_a.append(adv[s])
                    seq_w.append(1.0 / len(kept_s))
            r.group = None
            del g
            self.plugin.release(r.decision)
        kept = B - dropped
        gnorm = 0.0
        if seq_p:
            lp, _ = M.seq_logprob(self.policy, seq_p, seq_o)
            a = torch.stack(seq_a)
            w = torch.tensor(seq_w)
            loss = -(w * a * lp).sum() / kept
            self.opt.zero_grad()
            loss.backward()
            gnorm = float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.clip))
            self.opt.step()
        self.sched.step()
        self.times["update"] += time.perf_counter() - t
        if isinstance(self.history, Greso):
            # The skip rates adapt after each step but the first epoch's.
            self.history.step_end(first_epoch=taken[-1][2] == 0)

        self.rollouts += spent
        if self.spec.adaptive:
            self.expected_k = 0.7 * self.expected_k + 0.3 * spent / B
        mu = 2 * np.asarray(tp) - 1
        rec = dict(step=self.step_no, rollouts=self.rollouts, prompts=B,
                   spent=spent, kept=kept, dropped=dropped,
                   # groups with a trained advantage that is not 0 (the
                   # "effective gradient" Reinforce-Ada and Knapsack raise)
                   nonzero=nonzero,
                   waves=self.sampler.waves - waves0,
                   rounds=st1["rounds"] - st0["rounds"],
                   halts=st1["halts"] - st0["halts"],
                   padded=st1["samples_padded"] - st0["samples_padded"],
                   grad_norm=gnorm,
                   skipped=self.skipped,
                   epoch=taken[-1][2],
                   entropy=(self.sampler.ent_sum - ent0) / max(1, self.sampler.ntok - ntok0),
                   reward=float(np.mean([np.mean(list(v.values())) for v in self.rewards_seen.values()])),
                   mse=float(np.mean((np.asarray(baselines) - mu) ** 2)),
                   prior_mse=float(np.mean((np.asarray(pri) - mu) ** 2)),
                   k=ks, baseline=[round(b, 4) for b in baselines],
                   true_p=[round(x, 4) for x in tp], prior=[round(x, 4) for x in pri])
        self.log.append(rec)
        self.step_no += 1
        return rec

    async def train(self, budget_rollouts: int, progress=None):
        self.evaluate()
        while self.rollouts < budget_rollouts:
            await self.step()
            if self.step_no % self.eval_every == 0:
                self.evaluate()
            if progress:
                progress(self)
        if self.evals[-1]["step"] != self.step_no:
            self.evaluate()

    def result(self) -> dict:
        return dict(mode=self.spec.name, plugin_mode=self.spec.mode,
                    seed=self.seed, steps=self.step_no, rollouts=self.rollouts,
                    generate_calls=self.rollout.generate_calls,
                    sampler_calls=self.sampler.calls,
                    evals=self.evals, log=self.log, times=self.times,
                    final_greedy=M.greedy_accuracy(self.policy, self.heldout))
