# SPDX-License-Identifier: MIT
"""bench/server_run.py's lengths, enforced inside vLLM's engine: a logits
processor (vLLM 0.32's ``LogitsProcessor``, loaded by ``--logits-processors
server_lengths:DrawnLengths`` on ``vllm serve`` and by the same engine
argument in process) that ends every sample at its drawn length.

Why not max_tokens: the group route takes one set of sampling parameters
per group, so its samples cannot each carry their own max_tokens, and a
per-group length would drop the per-sample part of the tail. Here the
length of a sample is drawn exactly as bench/engine_run.py draws it
(``lengths``: lognormal with a per-prompt and a per-sample component,
seeded, capped), keyed by (prompt index, sample index), and the same
processor runs in both engines, so the group route and the in-process
driver generate the same tokens per (prompt, sample) whatever sends the
requests.

- The prompt index rides in the prompt: ``encode(prompt, run, index)``
  appends [MARK, run, run, index, index] (two base-125 digits each, token
  ids 3..127 as the tiny model's prompt tokens are); MARK (0, the pad id)
  never occurs in the tiny model's prompts. A prompt without the mark is
  left alone.
- The sample index is the order in which the engine sees requests of the
  same prompt: the j-th request of a prompt gets draw j. Each arm's run
  has prompts of its own (``run``), so the count starts at 0 for every
  run; a group's first wave starts together (which of its equal-start
  samples gets which draw changes nothing), and its second wave comes
  after it. A request preempted and re-added keeps its draw (found by its
  output list, which vLLM keeps across preemption).
- The end: the stop token (EOS, in the request's stop_token_ids) is
  masked until the drawn length is one token away and then forced, so an
  output has exactly its drawn length, stop token included.

The draw's parameters come from the environment (``ENV``, a JSON object:
seed, median, sigma, prompt_sigma, cap and optionally log, a file that
gets a line for each request re-added after preemption); the engine-core
process inherits it from the process that starts the engine.
"""
import json
import os
import types

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

ENV = "V05_BENCH_LENGTHS"
MARK = 0          # the tiny model's pad id: not in its prompts
STOP = 2          # the tiny model's EOS
FIRST, DIGITS = 3, 125  # prompt token ids 3..127
TABLE = 64        # draws per prompt (beyond k_max = 16)


def encode(prompt, run, index):
    """The prompt with (run, index) appended after MARK."""
    if not (0 <= run < DIGITS ** 2 and 0 <= index < DIGITS ** 2):
        raise ValueError(f"run {run} or index {index} outside "
                         f"0..{DIGITS ** 2 - 1}")
    return list(prompt) + [MARK, FIRST + run // DIGITS, FIRST + run % DIGITS,
                           FIRST + index // DIGITS, FIRST + index % DIGITS]


def decode(prompt):
    """The prompt index encode() put in, or None."""
    if prompt is None or len(prompt) < 5 or prompt[-5] != MARK:
        return None
    hi, lo = prompt[-2] - FIRST, prompt[-1] - FIRST
    if not (0 <= hi < DIGITS and 0 <= lo < DIGITS):
        return None
    return hi * DIGITS + lo


def draws(cfg, index):
    """The lengths of prompt `index`'s samples 0..TABLE-1: bench/engine's
    (engine_run.lengths, batch 0)."""
    from engine_run import lengths  # this folder; imported where used
    a = types.SimpleNamespace(median=cfg["median"], sigma=cfg["sigma"],
                              prompt_sigma=cfg["prompt_sigma"],
                              cap=cfg["cap"])
    return lengths(cfg["seed"], 0, index, TABLE, a)


class DrawnLengths(LogitsProcessor):
    """Ends each marked request at its drawn length (see the module)."""

    def __init__(self, vllm_config, device, is_pin_memory):
        raw = os.environ.get(ENV)
        self.cfg = json.loads(raw) if raw else None
        self.rows = {}      # batch index -> (length, output token list)
        self.next = {}      # prompt -> the next request's sample index
        self.by_out = {}    # id(output list) -> (length, list): re-adds
        self.table = {}     # prompt index -> its draws
        self.readded = 0

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token wins

    def _add(self, params, prompt, out):
        if self.cfg is None:
            return None
        index = decode(prompt)
        if index is None:
            return None
        known = self.by_out.get(id(out))
        if known is not None and known[1] is out:
            self.readded += 1
            log = self.cfg.get("log")
            if log:
                with open(log, "a") as f:
                    f.write(f"readded {index} {len(out)}\n")
            return known
        key = tuple(prompt)
        j = self.next.get(key, 0)
        self.next[key] = j + 1
        if index not in self.table:
            self.table[index] = draws(self.cfg, index)
        entry = (self.table[index][j % TABLE], out)
        # Held for the run's life (a few thousand small lists): an id is
        # never reused while its list is kept.
        self.by_out[id(out)] = entry
        return entry

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.rows, batch_update, self._add)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        block, force = [], []
        for i, (length, out) in self.rows.items():
            # This pass samples token len(out) + 1.
            (force if len(out) + 1 >= length else block).append(i)
        if block:
            logits[block, STOP] = float("-inf")
        if force:
            logits[force] = float("-inf")
            logits[force, STOP] = 0.0
        return logits
