# SPDX-License-Identifier: MIT
"""The bench's run entries: each a plugin mode and how the trainer drives
it (ModeSpec), the matrix of RESULTS.md, and `default`, whatever mode the
library's configuration defaults to (asked of the library, not named
here)."""

import dataclasses
from typing import Dict


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
    # rolled out), "pilot-commit" (its record: prompts evicted as
    # solved). All need a fixed training set (--train-set).
    history: str = ""
    # Issue 38's fill: each step is filled to this many informative groups
    # (0: no fill, the step is its prompt batch).
    fill: int = 0
    # The fill's skip by prior (v05.core.fill.SkipRule, v05-eb's own model
    # once its running fit is warm): prompts predicted all-same are not
    # rolled out.
    skip: bool = False
    # Plugin.create parameters beyond k_init (a pilot's commit, padding).
    plugin: Dict[str, object] = dataclasses.field(default_factory=dict)
    # The library's configuration as it comes (the entry `default`): no
    # mode, k_init or other parameter passed to Plugin.create.
    library: bool = False


# The matrix of RESULTS.md (the paper's claims), bench/train/run's default.
RESULTS_MODES = ("grpo-16", "dapo-16", "grpo-4", "fixed-1", "fixed-2",
                 "fixed-4", "fixed-8", "v05", "v05-nohalt", "v05-eb")


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
    # v05-pg (issue 43): the first wave of 1, 2 or 4 and the skip chosen by
    # the gradient's error per rollout (its preset's k_init 2 sizes the
    # batch until the running k is known; its normaliser the paper's
    # sqrt(1 - mu^2), its preset's), with the skip bar its pages ran at:
    # 0.25 of the mean signal (the library's first default; its default
    # is now 0.75, the bench's v05-pg-s750).
    q = {"skip": 0.25}
    s += [ModeSpec("v05-pg", "v05-pg", 2, True, rule=True,
                   plugin={"pg": q}),
          # What LEADERS.md's runs (5780152) called it: the same run.
          ModeSpec("v05-pg-paper", "v05-pg", 2, True, rule=True,
                   plugin={"sigma": "paper", "pg": q}),
          # ...with rms, which at one sample a prompt clips every rare
          # success to |A| = 1 (PROBE.md); LEADERS.md's 'v05-pg' (5780152,
          # before the preset had a normaliser).
          ModeSpec("v05-pg-rms", "v05-pg", 2, True, rule=True,
                   plugin={"sigma": "rms", "pg": q}),
          # ...skipping every prompt below 0.75 of the mean signal of
          # the prompts submitted: the gradient probe's best v05-pg on
          # the sparse task (PROBE.md), the library's default bar.
          ModeSpec("v05-pg-s750", "v05-pg", 2, True, rule=True,
                   plugin={"pg": {"skip": 0.75}})]
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
    # Issue 38: the steps filled to B informative groups (DAPO's and
    # GRESO's own drop; Pilot-Commit's rounds until B are committed, its
    # authors' loop), EBPO (no extra samples, every group trained on),
    # and v05-eb with the fill and its skip by prior (padding off: a
    # fill's waves are a few prompts each).
    s += [ModeSpec("dapo-16-fill", "dapo", 16, False, fill=16),
          ModeSpec("greso-8-fill", "greso", 8, False, rule=True,
                   history="greso", fill=32),
          ModeSpec("ebpo-8", "ebpo", 8, False, rule=True),
          ModeSpec("ebpo-4", "ebpo", 4, False, rule=True,
                   plugin={"k_max": 4}),
          ModeSpec("pilot-commit-4-12", "pilot-commit", 4, False, rule=True,
                   history="pilot-commit", fill=16,
                   plugin={"k_step": 12, "k_max": 16}),
          ModeSpec("v05-eb-fill", "v05-eb", 4, True, fill=32, skip=True,
                   plugin={"pad_multiple": 1})]
    out = {m.name: m for m in s}
    out["default"] = default_spec()
    return out


def library_default():
    """(mode, k_init) of the library's default configuration
    (v05_config_default, through v05.core.config.make_config with nothing
    given)."""
    from v05.core.config import make_config
    from v05.core.names import MODES
    c = make_config("bench-train-default")
    names = {v: k for k, v in MODES.items()}
    return names[c.params.mode], int(c.params.k_init)


def default_spec() -> ModeSpec:
    """The entry `default`: the library's default mode with every
    parameter the library's own (only the trainer's stream deadline set),
    its batch sized by the running mean of k as an adaptive mode's."""
    mode, k = library_default()
    return ModeSpec("default", mode, k, True, library=True)
