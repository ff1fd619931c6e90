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

A mode with a fill (ModeSpec.fill = B, issue 38) fills each step to B
informative groups: it rolls out the B it still needs, takes the
informative ones (v05.core.fill: rewards not all equal, not dropped) and
pulls as many prompts again as groups fell short, until B are in; the
groups that are not informative leave the batch, their rollouts counted.
`fill_wave` is that one step of the loop, the function to swap for the
engine's streamed fill (v05.engines.fill.StreamFill) once the trainers
have it.
"""

import asyncio
import contextlib
import os
import signal
import time
from typing import Dict, List, Optional

import numpy as np
import torch

import v05
from v05.core.fill import SkipRule, group_informative
from v05.core.prior import ValueModelPrior
from v05.core.rules import Greso, KnapsackHistory, PilotCommit
from v05.engines.driver import GroupRollout

import model as M
import regimes
import task
from modes import ModeSpec, RESULTS_MODES, mode_specs  # noqa: F401 (re-exported)

# SIGTERM and SIGINT (main.py installs stop_handler for both) raise
# SystemExit or KeyboardInterrupt where the main thread is, except in a
# section that makes or closes a segment (stops_held): there the stop
# waits for the section's end. Blocking the signals would not do: any
# other thread (torch's) may take a process signal, and Python runs the
# handler in the main thread all the same.
_held = 0
_pending: List[int] = []


def _raise_stop(signum: int):
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def stop_handler(signum, frame):
    if _held:
        _pending.append(signum)
        return
    _raise_stop(signum)


@contextlib.contextmanager
def stops_held():
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            _raise_stop(signum)

BUDGET = 256  # rollouts per step: prompt batch x group size


# A plan held to pad is released when its batch's first waves are all in,
# never by the clock (Trainer.__init__).
STREAM_DEADLINE_US = 10_000_000

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
        self.pending.append((prompt, uid, sample, fut))
        return await fut

    def draw(self, reqs):
        """Completions for the wave's (prompt, uid, sample) requests."""
        outs, e, n = M.sample(self.policy, [p for p, _, _ in reqs], self.gen)
        self.ent_sum += e
        self.ntok += n
        return outs

    def _flush(self):
        reqs, self.pending = self.pending, []
        t = time.perf_counter()
        try:
            outs = self.draw([r[:3] for r in reqs])
        except Exception as exc:  # surfaced by the driver
            for *_, f in reqs:
                if not f.done():
                    f.set_exception(exc)
            return
        self.seconds += time.perf_counter() - t
        self.waves += 1
        for (*_, f), o in zip(reqs, outs):
            if not f.done():
                f.set_result(o)


# The fused modes: sigma="paper" (the paper's normaliser) applies to them
# only; the others keep their own scale (docs/STATISTICS.md).
FUSED = ("v05", "v05-fixed", "v05-eb", "v05-pg")


class Trainer:
    """One run. `regime` (regimes.py) sets the task's lengths and the
    priors; `sigma` ("paper" or None) the fused modes' normaliser;
    `checkpoints` (rollout counts) where the policy and Adam's state are
    saved to `ckpt_dir` (the gradient probe's frozen states). A run is a
    function of its seed and these: evaluations read the policy only (no
    random stream), whenever they happen."""

    def __init__(self, spec: ModeSpec, seed: int, init_state: dict,
                 heldout: List[task.Prompt], *, lr: float = 1e-3,
                 eval_every: int = 5, clip: float = 1.0, record: bool = False,
                 lr_warmup: int = 10, train_set: int = 0,
                 eval_rollouts: int = 0, regime: Optional[regimes.Regime] = None,
                 sigma: Optional[str] = None, checkpoints=(),
                 ckpt_dir: Optional[str] = None, sampler=None):
        self.spec, self.seed = spec, seed
        self.regime = regime or regimes.REGIMES["today"]
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
        lengths = self.regime.lengths
        self.stream = task.EpochStream(heldout, train_set, seed=1000 + seed,
                                       lengths=lengths) if train_set else \
            task.PromptStream(heldout, seed=1000 + seed, lengths=lengths)
        self.history = KnapsackHistory() if spec.history == "knapsack" else \
            Greso(seed=seed) if spec.history == "greso" else \
            PilotCommit(pilot=spec.k) if spec.history == "pilot-commit" \
            else None
        self.skipped = 0  # greso, pilot-commit: candidates passed over
        self.skipped_prior = 0  # the fill's skip by prior
        self.eval_every, self.clip = eval_every, clip
        # Evaluate each time the rollouts pass a multiple of this (0: every
        # eval_every steps): steps of a fill differ in size.
        self.eval_rollouts = eval_rollouts
        self.checkpoints = sorted(checkpoints)
        self.ckpt_dir = ckpt_dir
        self.record = record          # keep the advantages the loss used (tests)
        self.used: List[dict] = []
        self.name = f"train-{os.getpid()}-{spec.name}-{seed}"
        # Raises ValueError for a mode this build of v05 does not know.
        # The stream schedule releases a plan held to pad at its deadline
        # (default 2 ms), so on an engine the moment a reward arrives can
        # change a dispatch. Here every sample of a wave comes back from
        # one sampler pass and the plugin releases holds when the batch's
        # first waves are all in; the default deadline only measured how
        # fast Python ran between two polls (under load a seed's run came
        # out otherwise). A deadline no run reaches keeps a run a function
        # of its seed.
        kw = dict(stream_deadline_us=STREAM_DEADLINE_US)
        if sigma is not None and (spec.mode in FUSED):
            kw.update(sigma=sigma)
        if spec.library:
            pass  # the library's own configuration
        elif spec.rule:
            kw.update(spec.plugin, mode=spec.mode, k_init=spec.k)
        else:
            kw.update(k_max=max(16, spec.k), pad_multiple=32,
                      halt_fraction=spec.halt, mode=spec.mode, k_init=spec.k)
            kw.update(spec.plugin)
        # A stop waits until the segment is this object's; the rest of
        # the set-up closes it if stopped: a run stopped here leaves
        # nothing in /dev/shm (the caller has no trainer to close yet).
        self.plugin = None
        try:
            with stops_held():
                self.plugin = v05.Plugin.create(self.name, **kw)
            predict = self.regime.predict(seed)
            self.prior = None if predict is None else ValueModelPrior(
                self.plugin, predict, batch_size=64, context_size=256,
                seed=seed)
            self.sampler = sampler or Sampler(
                self.policy, torch.Generator().manual_seed(seed))
            self.rollout = GroupRollout(self.plugin, self.sampler.generate,
                                        score=self._score, release=False)
        except BaseException:
            if self.plugin is not None:
                with stops_held():
                    self.plugin.close(force=True)
            raise
        self.prompts: Dict[str, task.Prompt] = {}
        self.pids: Dict[str, object] = {}  # uid -> the stream's id of it
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
        # Not cut short by a stop (it waits until the segment is gone).
        with stops_held():
            try:
                self.rollout.close()
            finally:
                self.plugin.close(force=True)

    def batch_size(self) -> int:
        if self.spec.adaptive:
            return max(8, int(round(BUDGET / self.expected_k)))
        return BUDGET // self.spec.k

    def true_p(self, ps) -> np.ndarray:
        """Each prompt's exact success rate under the policy now."""
        return M.success_prob(self.policy, ps).numpy()

    def evaluate(self):
        t = time.perf_counter()
        p = M.success_prob(self.policy, self.heldout).numpy()
        self.evals.append(dict(step=self.step_no, rollouts=self.rollouts,
                               acc=float(p.mean())))
        self.times["eval"] += time.perf_counter() - t

    def _take(self, B: int):
        """B prompts to roll out: (dataset index, prompt, epoch) each.
        Under greso and pilot-commit, candidates come in the training
        set's order until B pass its filter (GRESO's skip at this step;
        Pilot-Commit's record: drawn this epoch already, or evicted)."""
        if not isinstance(self.history, (Greso, PilotCommit)):
            return self.stream.take_ids(B)
        out, passed = [], 0
        while len(out) < B:
            for c in self.stream.take_ids(B - len(out)):
                skip = self.history.skip(c[0], self.step_no) \
                    if isinstance(self.history, Greso) else \
                    self.history.skip(c[0], c[2])
                if skip:
                    self.skipped += 1
                    passed += 1
                    if passed > 100 * (len(self.stream.prompts) + B):
                        raise RuntimeError(f"{self.spec.name}: the filter "
                                           "passes over every prompt")
                else:
                    out.append(c)
        return out

    def _priors(self, uids, ps, taken):
        t = time.perf_counter()
        if isinstance(self.history, KnapsackHistory):
            # Knapsack RL's own estimate (None: no estimate yet).
            priors = {u: self.history.prior(pid)
                      for u, (pid, _, _) in zip(uids, taken)}
        elif self.history is not None:
            priors = {u: 0.0 for u in uids}  # the rules' groups use none
        elif self.prior is None:
            priors = {u: 0.0 for u in uids}  # no value model: p = 0.5
        else:
            priors = dict(self.prior.priors(
                [(u, task.text(p)) for u, p in zip(uids, ps)]))
        self.times["prior"] += time.perf_counter() - t
        return priors

    def _skip_rule(self) -> Optional[SkipRule]:
        """The fill's skip by prior: v05-eb's own model of its prior (its
        running fit) once warm, else the shared rule's defaults."""
        if not self.spec.skip:
            return None
        try:
            return SkipRule.from_eb_fit(self.plugin.eb_state().fit(),
                                        seed=self.seed)
        except ValueError:  # no first wave folded yet
            return SkipRule(seed=self.seed)

    async def _wave(self, taken, tag: str) -> List[dict]:
        """Roll out `taken` through the plugin: one entry per prompt, its
        group copied out of the slot (which is released), folded into the
        rule's history. Under a skip rule the prompts it skips are not
        rolled out (counted in self.skipped_prior)."""
        uids = [f"{tag}:{i}" for i in range(len(taken))]
        ps = [p for _, p, _ in taken]
        priors = self._priors(uids, ps, taken)
        rule = self._skip_rule()
        if rule is not None:
            keep = [i for i, u in enumerate(uids)
                    if not rule.skip(task.text(taken[i][1]) if taken[i][0]
                                     is None else taken[i][0], priors[u],
                                     self.spec.k, visit=self.step_no)]
            self.skipped_prior += len(uids) - len(keep)
            uids = [uids[i] for i in keep]
            taken = [taken[i] for i in keep]
            ps = [ps[i] for i in keep]
            if not uids:
                return []
        self.prompts.update(zip(uids, ps))
        self.pids.update((u, c[0]) for u, c in zip(uids, taken))

        t = time.perf_counter()
        true_p = self.true_p(ps)   # the policy that samples
        self.times["true_p"] += time.perf_counter() - t

        gen0 = self.sampler.seconds
        t = time.perf_counter()
        results = await self.rollout.run([(u, p, priors[u]) for u, p in zip(uids, ps)])
        self.times["rollout"] += time.perf_counter() - t
        self.times["generate"] += self.sampler.seconds - gen0
        out = []
        for i, u in enumerate(uids):
            r = results[u]
            g = r.group
            k = int(g.k)
            rew = [self.rewards_seen[u][s] for s in range(k)]
            e = dict(uid=u, prompt=ps[i], prior=priors[u], k=k,
                     baseline=float(g.baseline), true_p=float(true_p[i]),
                     dropped=bool(r.dropped), rewards=rew,
                     outputs=r.outputs,
                     adv=np.array(g.advantages, dtype=np.float32),
                     kept=list(g.kept),
                     informative=group_informative(self.spec.mode, g,
                                                   dropped=r.dropped))
            if self.history is not None:
                pid, _, epoch = taken[i]
                if isinstance(self.history, (KnapsackHistory, PilotCommit)):
                    self.history.fold(pid, epoch, rew)
                else:
                    self.history.fold(pid, rew)
            r.group = None
            del g
            self.plugin.release(r.decision)
            out.append(e)
        return out

    async def fill_wave(self, need: int, wave: int) -> List[dict]:
        """One turn of the fill: pull `need` prompts (through the rule's
        filter), roll them out (the skip rule may pass over some) and
        return their entries; the caller keeps the informative ones."""
        return await self._wave(self._take(need), f"{self.step_no}:{wave}")

    async def collect(self) -> dict:
        """One step's rollouts through the plugin, no update: its entries
        (one per prompt, with the slot's advantages), those trained on,
        and the counters the step's record needs. The rule's allocation
        state (the running mean of k, GRESO's rates) moves on here."""
        st0 = self.plugin.stats()
        calls0, waves0 = self.sampler.calls, self.sampler.waves
        ent0, ntok0 = self.sampler.ent_sum, self.sampler.ntok
        self.prompts, self.rewards_seen, self.pids = {}, {}, {}
        fill_waves = 0
        if self.spec.fill:
            # Each wave pulls as many prompts as informative groups are
            # still missing (the replacement never overshoots B).
            entries, trained = [], []
            while len(trained) < self.spec.fill and fill_waves < 1000:
                got = await self.fill_wave(self.spec.fill - len(trained),
                                           fill_waves)
                fill_waves += 1
                entries += got
                trained += [e for e in got if e["informative"]]
            # The epoch the step ended in (a fresh stream has none).
            epoch = max(0, getattr(self.stream, "epoch", 0))
        else:
            taken = self._take(self.batch_size())
            entries = await self._wave(taken, str(self.step_no))
            trained = [e for e in entries if not e["dropped"]]
            epoch = taken[-1][2]
        spent = self.sampler.calls - calls0
        if isinstance(self.history, Greso):
            # The skip rates adapt after each step but the first epoch's.
            self.history.step_end(first_epoch=epoch == 0)
        if self.spec.adaptive and not self.spec.fill:
            self.expected_k = 0.7 * self.expected_k + 0.3 * spent / len(entries)
        return dict(entries=entries, trained=trained, spent=spent,
                    epoch=epoch, fill_waves=fill_waves, st0=st0,
                    st1=self.plugin.stats(), waves=self.sampler.waves - waves0,
                    entropy=(self.sampler.ent_sum - ent0) /
                    max(1, self.sampler.ntok - ntok0))

    @staticmethod
    def sequences(trained: List[dict]):
        """The loss's terms: (prompt, completion, advantage, weight) per
        sample trained on, weight 1/(samples kept of its group); the loss
        is -(1/len(trained)) sum weight * advantage * l(completion), l =
        model.seq_logprob's mean log-probability."""
        out = []
        for e in trained:
            # The samples trained on: all k but under reinforce-ada.
            kept_s = e["kept"]
            for s in kept_s:
                out.append((e["prompt"], e["outputs"][s], float(e["adv"][s]),
                            1.0 / len(kept_s)))
        return out

    def update(self, trained: List[dict]) -> float:
        """The policy-gradient step from the slots' advantages; the
        gradient norm before clipping."""
        seqs = self.sequences(trained)
        gnorm = 0.0
        a = torch.zeros(0)
        if seqs:
            ps, os_, a, w = zip(*seqs)
            lp, _ = M.seq_logprob(self.policy, list(ps), list(os_))
            a = torch.tensor(a)
            w = torch.tensor(w)
            loss = -(w * a * lp).sum() / len(trained)
            self.opt.zero_grad()
            loss.backward()
            gnorm = float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.clip))
            self.opt.step()
        self.sched.step()
        nonzero, at = 0, 0
        for e in trained:
            used = a[at:at + len(e["kept"])].tolist()  # as the loss had them
            at += len(e["kept"])
            nonzero += any(x != 0.0 for x in used)
            if self.record:
                loss_adv = [0.0] * e["k"]
                for s, x in zip(e["kept"], used):
                    loss_adv[s] = x
                self.used.append(dict(uid=e["uid"], prior=e["prior"],
                                      k=e["k"], slot=e["adv"].tolist(),
                                      rewards=e["rewards"], kept=e["kept"],
                                      loss_adv=loss_adv, mode=self.spec.mode))
        self._nonzero = nonzero
        return gnorm

    async def step(self) -> dict:
        b = await self.collect()
        entries, trained, spent = b["entries"], b["trained"], b["spent"]
        st0, st1 = b["st0"], b["st1"]
        B = len(entries)
        t = time.perf_counter()
        gnorm = self.update(trained)
        self.times["update"] += time.perf_counter() - t
        kept = len(trained)
        self.rollouts += spent
        tp = [e["true_p"] for e in entries]
        pri = [0.0 if e["prior"] is None else e["prior"] for e in entries]
        baselines = [e["baseline"] for e in entries]
        mu = 2 * np.asarray(tp) - 1
        rec = dict(step=self.step_no, rollouts=self.rollouts, prompts=B,
                   spent=spent, kept=kept, dropped=B - kept,
                   # groups with a trained advantage that is not 0 (the
                   # "effective gradient" Reinforce-Ada and Knapsack raise)
                   nonzero=self._nonzero,
                   informative=sum(e["informative"] for e in entries),
                   fill_waves=b["fill_waves"],
                   skipped_prior=self.skipped_prior,
                   waves=b["waves"],
                   rounds=st1["rounds"] - st0["rounds"],
                   halts=st1["halts"] - st0["halts"],
                   padded=st1["samples_padded"] - st0["samples_padded"],
                   grad_norm=gnorm,
                   skipped=self.skipped,
                   epoch=b["epoch"],
                   entropy=b["entropy"],
                   reward=float(np.mean([np.mean(list(v.values())) for v in self.rewards_seen.values()])),
                   mse=float(np.mean((np.asarray(baselines) - mu) ** 2)),
                   prior_mse=float(np.mean((np.asarray(pri) - mu) ** 2)),
                   k=[e["k"] for e in entries],
                   baseline=[round(b, 4) for b in baselines],
                   true_p=[round(x, 4) for x in tp], prior=[round(x, 4) for x in pri])
        self.log.append(rec)
        self.step_no += 1
        return rec

    def save_checkpoint(self, at: int) -> None:
        """The policy and Adam's state (and the step and learning rate)
        after the step that passed `at` rollouts, for the gradient probe."""
        os.makedirs(self.ckpt_dir, exist_ok=True)
        path = os.path.join(self.ckpt_dir, f"{at}.pt")
        torch.save(dict(policy=self.policy.state_dict(),
                        opt=self.opt.state_dict(), step=self.step_no,
                        rollouts=self.rollouts, at=at, seed=self.seed,
                        mode=self.spec.name, regime=self.regime.name,
                        lr=self.opt.param_groups[0]["lr"]), path + ".tmp")
        os.replace(path + ".tmp", path)

    async def train(self, budget_rollouts: int, progress=None):
        self.evaluate()
        while self.rollouts < budget_rollouts:
            before = self.rollouts
            await self.step()
            for at in self.checkpoints:
                if before < at <= self.rollouts:
                    self.save_checkpoint(at)
            if self.eval_rollouts:
                if self.rollouts // self.eval_rollouts > \
                        before // self.eval_rollouts:
                    self.evaluate()
            elif self.step_no % self.eval_every == 0:
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
