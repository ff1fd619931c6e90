# SPDX-License-Identifier: MIT
"""V05GRPOTrainer's generation (v05.trainers.trl) through the shared
driver: TRL's own single-turn generation and reward functions behind
GroupRollout's generate and score, so that TRL runs the same decision loop
as the engines do, the plain one (GroupRollout.run) and the fill
(StreamFill, with the trainer's admission policy, v05.core.admission).

TRL generates in batches on the training thread, not request by request:
every sample the decisions ask for in one turn of the event loop (a
poll's, and the first waves of the prompts admitted with it) is generated
by one call of TRL's ``_generate_single_turn`` and scored by one call of
its reward functions, and each generate call's output is that sample's
(completion ids, reward). The driver stages and publishes the rewards
(through the trainer's RewardWriter, ``v05_writer``) and polls, as it does
for an engine. Each generation runs on an event loop of its own (on a
helper thread when the training thread already runs one, as in a
notebook), with a driver of its own; the admission policy, with what the
finished groups taught it, is the trainer's and lasts.
"""

import asyncio
import concurrent.futures
import contextlib
import itertools
import random
from typing import Dict, List

import torch

from ..core.admission import Admission
from ..engines.driver import GroupRollout
from ..engines.fill import StreamFill

__all__ = ["TrlRollout", "TrlSamples", "run_coroutine"]

_gen_ids = itertools.count()


def run_coroutine(coro):
    """Run coro to its end on a new event loop: in this thread, or in a
    helper thread when this one runs a loop already (asyncio.run would
    refuse: a notebook's cell)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="v05-trl") as ex:
        return ex.submit(asyncio.run, coro).result()


class _Prompt:
    """A prompt in flight: its example, its token ids (None until the
    first batch that generates for it tokenizes it) and its id across
    epochs (v05_prompt_id)."""

    __slots__ = ("example", "ids", "pid")

    def __init__(self, example, ids, pid):
        self.example, self.ids, self.pid = example, ids, pid


class TrlSamples:
    """The driver's generate and score for one generation (module text)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._queue = []  # (prompt, uid, sample, future) for the next batch
        self._due = False

    async def generate(self, prompt: _Prompt, uid, sample, batch):
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((prompt, uid, sample, fut))
        if not self._due:
            # Once the loop has run what is ready now: the other samples
            # of this turn join the batch.
            self._due = True
            asyncio.get_running_loop().call_soon(self._run)
        return await fut

    @staticmethod
    async def score(uid, sample, out):
        return out[1]

    def _run(self):
        """One batch: the samples asked for since the last, less those
        aborted meanwhile."""
        self._due = False
        q, self._queue = [x for x in self._queue if not x[3].done()], []
        if not q:
            return
        try:
            outs = self.trainer._v05_sample([x[:3] for x in q])
        except Exception as e:  # the samples' tasks report it
            for *_, fut in q:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (*_, fut), out in zip(q, outs):
            if not fut.done():
                fut.set_result(out)


async def _no_barrier(plugin, d):
    raise NotImplementedError("v05: external halt (barrier decisions) needs "
                              "several engines; not in TRL")


def _copied(g, dropped: bool) -> dict:
    """A final (or dropped) group's numbers, copied out of its slot."""
    return {"k": g.k, "kept": list(g.kept),
            "advantages": g.advantages.copy(), "rewards": g.rewards.copy(),
            "dropped": dropped}


class TrlRollout:
    """V05GRPOTrainer's part that generates (module text); the trainer's
    attributes it uses: v05 (the plugin), v05_writer, v05_wait,
    v05_prompt_id, v05_fill, v05_skip, v05_fill_max, v05_fill_log,
    _v05_refill, _v05_policy, and TRL's own."""

    def _v05_drive(self, body):
        """body(driver) -> a coroutine, run on a loop of its own with a
        driver of its own (module text)."""
        samples = TrlSamples(self)
        drv = GroupRollout(self.v05, samples.generate, score=samples.score,
                           on_barrier=_no_barrier, release=True,
                           writer=self.v05_writer,
                           stall_timeout=self.v05_wait)
        try:
            return run_coroutine(body(drv))
        finally:
            drv.close()

    def _v05_uid(self, gen: int, i: int) -> str:
        return f"trl-{id(self):x}-{gen}-{i}"

    def _run_plugin(self, examples, prompt_ids):
        """Drive the plugin's decisions for one generation (GroupRollout.
        run). Returns the uids, per prompt its group (copied out of the
        slot) and completions by sample index."""
        gen = next(_gen_ids)
        uids = [self._v05_uid(gen, i) for i in range(len(examples))]
        items = [(u, _Prompt(x, ids, None), self._prior_of(x))
                 for u, x, ids in zip(uids, examples, prompt_ids)]
        res = self._v05_drive(lambda drv: drv.run(items))
        groups = {u: _copied(r.group, r.dropped) for u, r in res.items()}
        completions = [_completions(res[u].outputs) for u in uids]
        return uids, groups, completions

    def _v05_admission(self) -> Admission:
        """The fill's admission policy, made once (it lasts: module text)."""
        if self._v05_policy is None:
            from ..core.observer import Observer
            with Observer(self.v05.name) as o:
                k_init = o.info()["k_init"]
            self._v05_policy = Admission(self.v05.mode, k_init,
                                         count=self.v05_fill,
                                         skip=self.v05_skip)
        return self._v05_policy

    def _run_plugin_fill(self, examples, prompt_ids):
        """One generation filled to len(examples) informative groups by
        the streamed fill (v05.trainers.trl's text): the generation's own
        prompts first, then the refill pass's. Returns (examples, prompt
        ids, uids, completions) of the informative groups, in the order
        they became final, the groups of every prompt rolled out, and
        those prompts' examples by uid."""
        P = len(examples)
        cap = self.v05_fill_max or max(10 * P, 64)
        gen = next(_gen_ids)
        if self._v05_refill is None:
            self._v05_refill = self._refill_examples()
        prompts: Dict[str, _Prompt] = {}
        groups: Dict[str, dict] = {}

        def source():
            own = zip(examples, prompt_ids)
            more = ((x, None) for x in self._v05_refill)
            for i, (x, ids) in enumerate(itertools.chain(own, more)):
                u = self._v05_uid(gen, i)
                p = prompts[u] = _Prompt(x, ids, self.v05_prompt_id(x))
                yield u, p, self._prior_of(x)

        def on_group(d, g, counts):
            groups[d.uid] = _copied(g, d.kind == "drop")
            groups[d.uid]["prompt"] = prompts[d.uid].pid

        async def body(drv):
            fill = StreamFill(drv, policy=self._v05_admission(),
                              prompt_name=lambda u, p: p.pid,
                              on_group=on_group)
            try:
                return await fill.fill(source(), P,
                                       visit=self.state.global_step,
                                       max_admitted=cap)
            finally:
                await fill.close()

        res = self._v05_drive(body)
        self._v05_fill_logged(res, P, cap)
        good = list(res.groups)
        return ([prompts[u].example for u in good],
                [prompts[u].ids for u in good], good,
                [_completions(res.groups[u].outputs) for u in good], groups,
                {u: prompts[u].example for u in groups})

    def _v05_fill_logged(self, res, P: int, cap: int) -> None:
        """A fill's counts into v05_fill_log and TRL's metrics; a step
        that came back short warns (trains on what it has), one with no
        group raises."""
        import warnings

        # rolled_out: prompts submitted to the plugin; plugin_skipped of
        # them (in not_informative too) it skipped at submit (v05-pg), so
        # no sample of them was generated.
        log = {"rolled_out": res.admitted, "informative": len(res.groups),
               "not_informative": res.dropped, "skipped": len(res.skipped),
               "plugin_skipped": res.plugin_skipped,
               "cancelled": res.aborted, "capped": res.capped}
        if res.short:
            warnings.warn(f"v05: the fill rolled out {res.admitted} prompts "
                          f"(v05_fill_max {cap}) and found "
                          f"{len(res.groups)} informative groups of {P}; "
                          "this step trains on those")
        self.v05_fill_log.append(log)
        for key in ("skipped", "plugin_skipped", "not_informative",
                    "rolled_out"):
            self._metrics["train"][f"v05/fill_{key}"].append(float(log[key]))
        if not res.groups:
            raise RuntimeError("v05: the fill found no informative group "
                               f"in {res.admitted} prompts")

    def _refill_examples(self):
        """The train dataset's prompts for replacements: seeded shuffled
        passes of their own, endless."""
        n = len(self.train_dataset)
        for rnd in itertools.count():
            order = list(range(n))
            random.Random(f"{self.args.seed}-v05-refill-{rnd}").shuffle(order)
            # Several processes: each takes its own share of the pass.
            acc = self.accelerator
            for i in order[acc.process_index::acc.num_processes]:
                yield self.train_dataset[i]

    @contextlib.contextmanager
    def _v05_local_rewards(self):
        """TRL's _calculate_rewards ends with a gather of every process's
        rewards (its fixed-G groups may span processes). v05's groups are
        each process's own, and the processes score unequal numbers of
        samples unequally often, so that gather would wait for ever: with
        several processes, its gather (trl.trainer.grpo_trainer.gather,
        read against TRL 1.16.0) is the identity while this process scores
        its own samples. One generation at a time scores (on the thread that
        runs its loop)."""
        if self.accelerator.num_processes == 1:
            yield
            return
        import trl.trainer.grpo_trainer as grpo
        saved = grpo.gather
        grpo.gather = lambda t: t
        try:
            yield
        finally:
            grpo.gather = saved

    def _v05_sample(self, requests) -> List[tuple]:
        """Generate one completion per (prompt, uid, sample) request with
        TRL's generation, score them with the reward functions: per
        request (completion ids, reward on [-1, 1]). A sample no function
        scored, or whose reward is not one, raises naming it."""
        from trl.data_utils import is_conversational

        fresh = [p for p, _, _ in requests if p.ids is None]
        if fresh:
            ids, images, _ = self._tokenize_prompts(
                [p.example["prompt"] for p in fresh])
            if images is not None:
                raise NotImplementedError("v05: multimodal prompts")
            for p, i in zip(fresh, ids):
                p.ids = i
        completion_ids, _ = self._generate_single_turn(
            [p.ids for p, _, _ in requests], None, {}, 1)
        texts = self.processing_class.batch_decode(completion_ids,
                                                   skip_special_tokens=True)
        prompts = [p.example["prompt"] for p, _, _ in requests]
        if is_conversational({"prompt": prompts[0]}):
            texts = [[{"role": "assistant", "content": t}] for t in texts]
        inputs = [p.example for p, _, _ in requests]
        with self._v05_local_rewards():
            per_func = self._calculate_rewards(inputs, prompts, texts,
                                               completion_ids)
        w = self.reward_weights.to(per_func.device)
        scored = (~torch.isnan(per_func)).any(dim=1).tolist()
        scores = (per_func * w.unsqueeze(0)).nansum(dim=1)
        out = []
        for (p, uid, s), ids_, score, ok in zip(requests, completion_ids,
                                                scores.tolist(), scored):
            if not ok:
                raise ValueError(
                    f"v05: no reward function scored prompt {uid!r} "
                    f"sample {s} (each returned None or NaN); TRL would "
                    "train on a reward of 0 there, v05 does not guess")
            try:
                reward = self.v05_to_reward(score)
            except (TypeError, ValueError) as e:
                raise type(e)(f"v05: prompt {uid!r} sample {s}: {e}") \
                    from None
            out.append((list(ids_), reward))
        self._metrics["train"]["reward"].append(scores.mean().item())
        return out


def _completions(outputs) -> Dict[int, list]:
    """A result's outputs (completion ids, reward) by sample: the ids."""
    return {s: o[0] for s, o in enumerate(outputs) if o is not None}
