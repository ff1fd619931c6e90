# SPDX-License-Identifier: MIT
"""TRL adapter: a GRPOTrainer whose group sizes and advantages come from v05.

Read against trl 1.16.0 (requirements/trainers.txt), trl/trainer/
grpo_trainer.py:

* ``_prepare_inputs`` calls ``_generate_and_score_completions(inputs)`` once
  per generation batch (every ``steps_per_generation * num_iterations``
  steps), then ``shuffle_sequence_dict`` and ``split_tensor_dict(batch,
  steps_per_generation)`` (equal chunks of ``N // steps_per_generation``
  rows: a remainder would be dropped).
* The train sampler (``RepeatSampler``, ``mini_repeat_count=
  num_generations``) hands each prompt ``num_generations`` times in a row;
  ``_generate`` generates one completion per row and the advantages are
  ``rewards.view(-1, num_generations)`` group statistics: a fixed G.
* ``_compute_loss(model, inputs)`` uses ``inputs["advantages"]`` (B,) and,
  for ``loss_type="grpo"``, averages the per-sequence token means over the
  micro-batch: every row weighs the same, so a prompt's weight grows with
  its sample count.

``V05GRPOTrainer`` overrides ``_generate_and_score_completions``: it takes
each distinct prompt of the generation batch once, submits them to the
plugin, and runs the plugin's decisions through the shared driver
(v05.engines.driver.GroupRollout, the loop the engines run; the trainer's
side of it is v05.trainers.trl_rollout): each "sample" decision becomes
that many single completions (TRL's own ``_generate_single_turn``, every
sample asked for at one moment in one call), scored by the trainer's
reward functions (``_calculate_rewards``) and pushed to the plugin; at
"final" the group's advantages are copied from the slot (the slot is then
released). Each prompt thus has its own k. Rows are padded to a multiple
of ``steps_per_generation`` with rows whose mask is zero (they take no
part in the loss). ``v05_wait``: seconds the plugin may go without a
decision while nothing is generating or being scored (TimeoutError).

It also overrides ``_compute_loss`` with the same clipped objective as
TRL's "grpo" loss (token ratio, two-sided clip epsilon_low/epsilon_high,
optional k3 KL to the reference with ``beta``), normalised per prompt: a
row of a group of k samples weighs 1/(P k) (P prompts in the generation),
so every prompt counts the same whatever its k. ``self.v05_loss_log``
keeps, per micro-batch, the uids, samples, weights and advantages the
loss used.

The rules with a cross-epoch state (docs/RULES.md) run here too, their
state kept by the trainer (``v05_history``): a ``KnapsackHistory`` under
mode "knapsack" gives each prompt its prior (None, the uniform budget,
until it has 8 outcomes) and folds each finished group with the epoch
(``int(state.epoch)``); a ``Greso`` filter drops, before the plugin sees
them, the prompts it skips at this step (``state.global_step``; at least
one prompt of a generation is rolled out), folds each rolled-out group
and ends a step after each generation (adapting nothing in epoch 0); a
``PilotCommit`` record under mode "pilot-commit" drops the prompts drawn
this epoch already or evicted as solved and folds each group's pilot. A
prompt is known across epochs by ``v05_prompt_id(example)``, default the
example's "v05_id" column, else its prompt's text. The state is saved in
each checkpoint (``v05_history.json``) and read back on resume.

The fill (``v05_fill``, docs/TRAINERS.md): each generation batch is
filled to its P informative groups (v05.core.fill: rewards not all equal
under "contrast", a non-zero kept advantage under "signal") by the
streamed fill the engines use (v05.engines.fill.StreamFill, with the one
admission policy, v05.core.admission). A group that is not informative
is released and not trained on, and a prompt from the train dataset takes
its place at once (a seeded shuffled pass of its own, ``args.seed``; the
epoch's sampler is untouched); a ``v05_skip`` rule skips, before any
sample, prompts whose prior predicts an all-same group (its revisit draw
by the prompt's id and the step). Replacements are admitted by
expectation (the policy's, carried from one generation to the next), so
that each of TRL's generate calls carries all that is likely needed; once
P groups are in, prompts still open are cancelled in the plugin (no
tokens are generated for them: TRL generates between polls). At most
``v05_fill_max`` prompts are rolled out per generation (default 10 P):
past that, the step trains on what it has, with a warning.
``self.v05_fill_log`` keeps, per generation, the counts.

Several processes (``accelerate launch`` or ``torchrun``, DDP): each
process generates for its own share of the generation batch (TRL's
sampler deals it), with its own plugin (its own segment: name it by
rank), and trains on its own groups; DDP averages the gradients, so each
prompt weighs 1/(W P) over the W processes. TRL gathers the rewards of
every process at each scoring (its fixed-G advantages need them); v05's
advantages are per group and the processes' scorings differ in number
and size, so here each process scores its own samples only. Under v05-eb
(the default mode) the running fits are merged (``v05_merge``, default
True): at each generation a process hands its plugin the others' parts
of the last exchange that has completed (FitExchange: an asynchronous
all_gather on a gloo group of the trainer's own) and posts its own part
for the next; no process waits for another, and the cold start counts
the first waves of every process. ``train()`` ends with the processes'
exchanges in step (the one collective that waits), so none is left
pending. ``self.v05_fit_log`` has, per generation, the first waves in
the fit: own, handed in, and which exchange they came from.

Not supported (refused at construction): with several processes FSDP,
DeepSpeed, vLLM generation (each of them runs collectives in the
generation, which v05's processes call unequally) and a cross-epoch
history (each process would see its own prompts only); tools,
environments, a rollout_func, multimodal prompts, vLLM importance-sampling
correction; loss types other than the clipped ones (grpo, bnpo, dr_grpo,
dapo all get this per-prompt normalisation).
"""

import json
import numbers
import os
from typing import Callable, Dict, Hashable, List, Optional, Union

import torch

from ..core import _checks
from ..core.fill import COUNTS, SkipRule
from ..core.plugin import Plugin
from ..core.rules import Greso, KnapsackHistory, PilotCommit
from ..core.stats import reward_from_score
from ..core.writer import RewardWriter
from .fit_exchange import FitExchange
from .trl_processes import TrlProcesses
from .trl_rollout import TrlRollout

__all__ = ["V05GRPOTrainer", "binary_to_reward"]


def binary_to_reward(r: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """A reward function's output (the weighted sum of the trainer's reward
    functions) on v05's [-1, 1]: [lo, hi] (default [0, 1]) maps linearly,
    lo -> -1, hi -> 1. NaN, an infinity or a value outside [lo, hi] raises
    ValueError: a verifier that failed must not become a reward."""
    return reward_from_score(r, lo, hi, what="reward")


def _trl():
    from trl import GRPOTrainer
    from trl.trainer.utils import pad
    return GRPOTrainer, pad


GRPOTrainer, _pad = _trl()

# The cross-epoch state's file in a checkpoint directory.
HISTORY_FILE = "v05_history.json"


def _default_prompt_id(example) -> Hashable:
    """An example's id across epochs: its "v05_id" column, else its prompt
    (a conversation as its JSON text)."""
    if "v05_id" in example:
        return example["v05_id"]
    p = example["prompt"]
    return p if isinstance(p, str) else json.dumps(p, sort_keys=True)


class V05GRPOTrainer(TrlRollout, TrlProcesses, GRPOTrainer):
    """GRPOTrainer with v05 deciding each prompt's sample count.

    v05_plugin: a Plugin this process owns (Plugin.create). v05_prior:
    example -> prior on [-1, 1] (a value model's 2p - 1); default: the
    example's "v05_prior" column, else 0. v05_to_reward: the weighted sum of
    the reward functions -> [-1, 1] (default binary_to_reward: [0, 1] onto
    [-1, 1]). TRL's convention holds for one function's None (or NaN): it
    does not apply to that sample and the others' weighted sum is taken; a
    sample no function scored, or whose sum is infinite or out of range,
    is an error that names its prompt and sample (TRL itself would train
    on a 0 there), and the generation's batch is cancelled in the plugin.
    ``args.num_generations`` only sets how many distinct prompts a
    generation batch has (generation_batch_size / num_generations).
    v05_history: a KnapsackHistory (mode "knapsack": it gives the priors,
    v05_prior must be None), a Greso filter (any mode; "greso" is the
    published rule) or a PilotCommit record (mode "pilot-commit"), kept
    across epochs; v05_prompt_id: example -> a
    stable id (default: its "v05_id" column, else its prompt's text).
    v05_fill: "contrast" or "signal" fills each generation to P
    informative groups (module text); v05_skip: a SkipRule (needs
    v05_fill); v05_fill_max: prompts rolled out per generation at most
    (default 10 P, at least 64). v05_merge: with several processes, merge
    their running fits (v05-eb; module text); False: each process decides
    under its own first waves only.
    """

    def __init__(self, *args, v05_plugin: Plugin,
                 v05_prior: Optional[Callable[[dict], float]] = None,
                 v05_to_reward: Callable[[float], float] = binary_to_reward,
                 v05_wait: float = 30.0,
                 v05_history: Optional[Union[KnapsackHistory, Greso,
                                             PilotCommit]] = None,
                 v05_prompt_id: Optional[Callable[[dict], Hashable]] = None,
                 v05_fill: Optional[str] = None,
                 v05_skip: Optional[SkipRule] = None,
                 v05_fill_max: Optional[int] = None,
                 v05_merge: bool = True,
                 **kwargs):
        if v05_fill is not None and v05_fill not in COUNTS:
            raise ValueError(f"V05GRPOTrainer: v05_fill must be None or one "
                             f"of {COUNTS}, not {v05_fill!r}")
        if v05_skip is not None and not isinstance(v05_skip, SkipRule):
            raise TypeError(f"V05GRPOTrainer: v05_skip is "
                            f"{type(v05_skip).__name__}, not a SkipRule")
        if v05_skip is not None and v05_fill is None:
            raise ValueError("V05GRPOTrainer: v05_skip needs v05_fill (a "
                             "skipped prompt is replaced by the fill)")
        if v05_fill_max is not None:
            v05_fill_max = _checks.integer("v05_fill_max", v05_fill_max, 1,
                                           1 << 20, _checks.U32_MAX)
        if v05_wait is not None and (
                isinstance(v05_wait, bool) or
                not isinstance(v05_wait, numbers.Real) or not v05_wait > 0):
            raise ValueError(f"V05GRPOTrainer: v05_wait must be None or a "
                             f"number of seconds > 0, not {v05_wait!r}")
        if not isinstance(v05_merge, bool):
            raise TypeError(f"V05GRPOTrainer: v05_merge is "
                            f"{type(v05_merge).__name__}, not a bool")
        if isinstance(v05_history, KnapsackHistory):
            if v05_prior is not None:
                raise ValueError("V05GRPOTrainer: a KnapsackHistory gives "
                                 "the priors; v05_prior must be None")
            if v05_plugin.mode != "knapsack":
                raise ValueError(f"V05GRPOTrainer: a KnapsackHistory needs "
                                 f"mode knapsack; the plugin runs "
                                 f"{v05_plugin.mode}")
        elif isinstance(v05_history, PilotCommit):
            if v05_plugin.mode != "pilot-commit":
                raise ValueError(f"V05GRPOTrainer: a PilotCommit record "
                                 f"needs mode pilot-commit; the plugin runs "
                                 f"{v05_plugin.mode}")
        elif v05_history is not None and not isinstance(v05_history, Greso):
            raise TypeError(f"V05GRPOTrainer: v05_history is "
                            f"{type(v05_history).__name__}, not a "
                            "KnapsackHistory, a Greso or a PilotCommit")
        super().__init__(*args, **kwargs)
        if self.tools or self.environment_factories is not None or \
                self.rollout_func is not None:
            raise NotImplementedError("V05GRPOTrainer: no tools, "
                                      "environments or rollout_func")
        if self.use_vllm and self.vllm_importance_sampling_correction:
            raise NotImplementedError("V05GRPOTrainer: vLLM importance "
                                      "sampling correction is not supported")
        if self.loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo"):
            raise NotImplementedError(f"V05GRPOTrainer: loss_type "
                                      f"{self.loss_type!r}")
        self.v05 = v05_plugin
        self.v05_prior = v05_prior
        self.v05_to_reward = v05_to_reward
        self.v05_wait = v05_wait
        self.v05_writer = RewardWriter.attach(v05_plugin.name)
        # Per generation: uid -> {"k", "kept", "advantages", "rewards",
        # "dropped", "prompt" (v05_prompt_id)}.
        self.v05_groups: List[Dict[str, dict]] = []
        self.v05_loss_log: List[dict] = []
        self.v05_history = v05_history
        self.v05_prompt_id = v05_prompt_id or _default_prompt_id
        # Per generation, under a Greso filter: its step and epoch, the
        # prompt ids rolled out and those skipped.
        self.v05_filter_log: List[dict] = []
        self.v05_fill = v05_fill
        self.v05_skip = v05_skip
        self.v05_fill_max = v05_fill_max
        # Per generation, with the fill: prompts rolled out, informative,
        # not informative, skipped, cancelled at the target.
        self.v05_fill_log: List[dict] = []
        self._v05_refill = None  # the refill pass over the train dataset
        self._v05_policy = None  # the fill's Admission, made on first use
        # Several processes: the exchange of the running fits (None: one
        # process, a mode without a running fit, or v05_merge False).
        self.v05_exchange: Optional[FitExchange] = None
        self.v05_fit_log: List[dict] = []
        if self.accelerator.num_processes > 1:
            self.v05_exchange = self._v05_processes(v05_merge)

    def train(self, *args, **kwargs):
        out = super().train(*args, **kwargs)
        self._v05_exchange_end()
        return out

    # ---- generation ----------------------------------------------------

    def _prior_of(self, example):
        """Checked by Plugin.submit, which names the prompt of a bad one."""
        if isinstance(self.v05_history, KnapsackHistory):
            return self.v05_history.prior(self.v05_prompt_id(example))
        if self.v05_prior is not None:
            return self.v05_prior(example)
        return example.get("v05_prior", 0.0)

    def _v05_select(self, examples):
        """A Greso filter's choice among the generation's prompts (at least
        one is kept: a generation of none would have nothing to train)."""
        h = self.v05_history
        if not isinstance(h, (Greso, PilotCommit)):
            return examples
        step = self.state.global_step
        # GRESO's draws are per step, Pilot-Commit's record per epoch.
        when = step if isinstance(h, Greso) else int(self.state.epoch or 0)
        kept, skipped = [], []
        for x in examples:
            pid = self.v05_prompt_id(x)
            (skipped if h.skip(pid, when) else kept).append((pid, x))
        if not kept:
            kept.append(skipped.pop(0))
        self.v05_filter_log.append({
            "step": step, "epoch": int(self.state.epoch or 0),
            "kept": [pid for pid, _ in kept],
            "skipped": [pid for pid, _ in skipped]})
        self._metrics["train"]["v05/skipped"].append(float(len(skipped)))
        return [x for _, x in kept]

    def _v05_fold(self, uids, groups):
        """Each finished group into the cross-epoch state."""
        h = self.v05_history
        if h is None:
            return
        epoch = int(self.state.epoch or 0)
        for uid in uids:
            g = groups[uid]
            rewards = [float(r) for r in g["rewards"][:g["k"]]]
            if isinstance(h, (KnapsackHistory, PilotCommit)):
                h.fold(g["prompt"], epoch, rewards)
            else:
                h.fold(g["prompt"], rewards)
        if isinstance(h, Greso):
            h.step_end(first_epoch=epoch == 0)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.v05_history is not None:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
            d = os.path.join(self._get_output_dir(trial=trial),
                             f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            with open(os.path.join(d, HISTORY_FILE), "w") as f:
                json.dump(self.v05_history.state_dict(), f)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, HISTORY_FILE)
        if self.v05_history is not None:
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"v05: {path}: the checkpoint has no v05 history; "
                    "resuming would start the rule's state over")
            with open(path) as f:
                self.v05_history.load_state_dict(json.load(f))

    def _distinct_prompts(self, inputs):
        """The generation batch repeats each prompt num_generations times
        in a row (RepeatSampler): take each run once."""
        g = self.num_generations
        if len(inputs) % g:
            raise ValueError(f"v05: {len(inputs)} inputs is not a multiple "
                             f"of num_generations = {g}")
        out = []
        for i in range(0, len(inputs), g):
            run = inputs[i:i + g]
            if any(x["prompt"] != run[0]["prompt"] for x in run):
                raise ValueError("v05: the generation batch does not repeat "
                                 "each prompt num_generations times")
            out.append(run[0])
        return out

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            # Evaluation keeps TRL's fixed-G path (no plugin).
            return super()._generate_and_score_completions(inputs)
        device = self.accelerator.device
        self._v05_exchange_step()
        examples = self._v05_select(self._distinct_prompts(inputs))
        prompt_ids, images, _ = self._tokenize_prompts(
            [x["prompt"] for x in examples])
        if images is not None:
            raise NotImplementedError("v05: multimodal prompts")
        if self.v05_fill is not None:
            examples, prompt_ids, uids, completions, groups, _ = \
                self._run_plugin_fill(examples, prompt_ids)
            self.v05_groups.append(groups)
            self._v05_fold(list(groups), groups)
            groups = {u: groups[u] for u in uids}
        else:
            uids, groups, completions = self._run_plugin(examples,
                                                         prompt_ids)
            for x, uid in zip(examples, uids):
                groups[uid]["prompt"] = self.v05_prompt_id(x)
            self.v05_groups.append(groups)
            self._v05_fold(uids, groups)

        # Rows: every sample of every group trained on (all k but under
        # reinforce-ada, which keeps n of them), weighted 1/(P n).
        P = len(uids)
        rows_p, rows_c, adv, weight, row_uid, row_sample = [], [], [], [], [], []
        for p, uid in enumerate(uids):
            g = groups[uid]
            if sorted(completions[p]) != list(range(g["k"])):
                raise RuntimeError(f"v05: {uid}: generated samples "
                                   f"{sorted(completions[p])}, group k = "
                                   f"{g['k']}")
            for s in g["kept"]:
                rows_p.append(prompt_ids[p])
                rows_c.append(completions[p][s])
                adv.append(float(g["advantages"][s]))
                weight.append(0.0 if g["dropped"] else
                              1.0 / (P * len(g["kept"])))
                row_uid.append(uid)
                row_sample.append(s)
        n_real = len(rows_p)
        # Padding rows (mask 0, weight 0) so split_tensor_dict drops
        # nothing; and at least one, for a generation every prompt of
        # which mode v05-pg skipped at submit (no sample, so no row).
        S = self.args.steps_per_generation
        while len(rows_p) % S or not rows_p:
            rows_p.append(rows_p[0] if rows_p else prompt_ids[0])
            rows_c.append(rows_c[0] if rows_c else [])
            adv.append(0.0)
            weight.append(0.0)
            row_uid.append("")
            row_sample.append(-1)

        pad_id = self._tokenizer.pad_token_id
        prompt_t = [torch.tensor(x, dtype=torch.long) for x in rows_p]
        comp_t = [torch.tensor(x if x else [pad_id], dtype=torch.long)
                  for x in rows_c]
        prompt_ids_t = _pad(prompt_t, padding_value=pad_id,
                            padding_side="left").to(device)
        prompt_mask = _pad([torch.ones_like(t) for t in prompt_t],
                           padding_value=0, padding_side="left").to(device)
        completion_ids_t = _pad(comp_t, padding_value=pad_id,
                                padding_side="right").to(device)
        completion_mask = _pad(
            [torch.tensor([1] * len(x) if x else [0], dtype=torch.long)
             for x in rows_c], padding_value=0, padding_side="right").to(device)
        completion_mask[n_real:] = 0

        out = {
            "prompt_ids": prompt_ids_t,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids_t,
            "completion_mask": completion_mask,
            "advantages": torch.tensor(adv, dtype=torch.float32, device=device),
            "num_items_in_batch": completion_mask.sum(),
            "v05_weight": torch.tensor(weight, dtype=torch.float32, device=device),
            "v05_sample": torch.tensor(row_sample, dtype=torch.long, device=device),
            "v05_uid": row_uid,
        }
        ids = torch.cat([prompt_ids_t, completion_ids_t], dim=1)
        mask = torch.cat([prompt_mask, completion_mask], dim=1)
        keep = completion_ids_t.size(1)
        bs = self.args.per_device_train_batch_size
        with torch.no_grad():
            generate_every = S * self.num_iterations
            if self.args.gradient_accumulation_steps % generate_every != 0:
                out["old_per_token_logps"], _, _ = \
                    self._get_per_token_logps_and_entropies(
                        self.model, ids, mask, keep, batch_size=bs)
            if self.beta != 0.0:
                if self.ref_model is None:
                    raise NotImplementedError("v05: beta != 0 needs a "
                                              "reference model (no PEFT)")
                out["ref_per_token_logps"], _, _ = \
                    self._get_per_token_logps_and_entropies(
                        self.ref_model, ids, mask, keep, batch_size=bs)
        ks = [g["k"] for g in groups.values()]
        self._metrics["train"]["v05/k_mean"].append(sum(ks) / len(ks))
        self._metrics["train"]["v05/rows"].append(float(n_real))
        return out

    # ---- loss ------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        if "v05_weight" not in inputs:
            return super()._compute_loss(model, inputs)
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids = inputs["completion_ids"]
        mask = inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, mask], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1))
        adv = inputs["advantages"].unsqueeze(1)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        coef_1 = torch.exp(logps - old)
        coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
        per_token = -torch.min(coef_1 * adv, coef_2 * adv)
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            kl = torch.exp(ref - logps) - (ref - logps) - 1
            per_token = per_token + self.beta * kl
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        w = inputs["v05_weight"]
        # The weights of one generation sum to 1 over its
        # steps_per_generation micro-batches; an optimizer step spans
        # gradient_accumulation_steps of them.
        scale = self.args.steps_per_generation / self.current_gradient_accumulation_steps
        loss = (per_seq * w).sum() * scale
        self.v05_loss_log.append({
            "uid": list(inputs["v05_uid"]),
            "sample": inputs["v05_sample"].tolist(),
            "weight": w.tolist(),
            "advantages": inputs["advantages"].tolist(),
            "loss": loss.item(),
        })
        return loss
