#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The published allocation rules against v05's default in `v05ctl sim`
(issue 28, item 2): over the 12-cell prior grid and a cell without any
prior (every prior 0), side by side in one run, each rule with its own
defaults: rollouts per prompt, the share of groups with a non-zero
advantage, the baseline's MSE, the largest |A|, waves per batch; and
v05-eb's MSE at the same rollouts (v05-eb run at group sizes 2 to 16 and
interpolated), so each rule is compared at equal rollouts. Then the
rules with a cross-epoch state (knapsack with its own estimate, GRESO's
filter) over 10 epochs of the same prompts, beside the modes that need
none, with success rates spread uniformly and piled near 0 and 1. Writes
bench/results/rules.json (the summary, committed) and bench/RULES.md from
it.

    python3 bench/rules.py [--v05ctl build/tools/v05ctl/v05ctl]
    python3 bench/rules.py --from bench/results/rules.json
"""
import argparse
import math
import os

import simrun  # this folder

NOISES = [0.05, 0.1, 0.2, 0.3]
HALLUCINATIONS = [0.0, 0.1, 0.3]
SEEDS = [1, 2, 3, 4, 5]
PROMPTS, BATCH = 4096, 512
# Each rule with the defaults its authors ran (v05_config_mode), and the
# fixed-size baselines.
RULES = {
    "reinforce-ada": ["--mode", "reinforce-ada"],
    "reinforce-ada-pos": ["--mode", "reinforce-ada-pos"],
    "knapsack-prior (8/prompt)": ["--mode", "knapsack-prior"],
    "knapsack-prior (4/prompt)": ["--mode", "knapsack-prior", "--k", "4"],
    "GRPO G=16": ["--mode", "grpo", "--k", "16"],
    "DAPO G=16": ["--mode", "dapo", "--k", "16"],
    "GRPO G=4": ["--mode", "grpo", "--k", "4"],
    # Issue 38: EBPO (one wave of G, no extra samples) at three group
    # sizes, Pilot-Commit with its authors' 1:3 split at two sizes.
    "EBPO G=4": ["--mode", "ebpo", "--k", "4"],
    "EBPO G=8": ["--mode", "ebpo", "--k", "8"],
    "EBPO G=16": ["--mode", "ebpo", "--k", "16"],
    "pilot-commit p8c24": ["--mode", "pilot-commit", "--k", "8"],
    "pilot-commit p4c12": ["--mode", "pilot-commit", "--k", "4"],
    "v05-eb default": ["--mode", "v05-eb"],
}
DEFAULT = "v05-eb default"
# v05-eb's curve for equal rollouts: first waves of K, up to max(16, 2K),
# and one wave of K (k_max = K); the lower envelope of all of them.
EB_K = [2, 3, 4, 6, 8, 12, 16]
EB_ONE_WAVE = [2, 4, 6, 8, 12, 16, 24, 32]


def sim(v05ctl, args):
    return simrun.sim(v05ctl, args, PROMPTS, BATCH)


def mean_runs(v05ctl, args):
    """The figures averaged over the seeds (the largest |A| and waves: the
    largest)."""
    acc = {"mse": 0.0, "rollouts": 0.0, "nonzero": 0.0, "max_a": 0.0,
           "waves": 0.0}
    for seed in SEEDS:
        d = sim(v05ctl, args + ["--seed", str(seed)])
        acc["mse"] += d["mse"] / len(SEEDS)
        acc["rollouts"] += d["rollouts_per_prompt"] / len(SEEDS)
        acc["nonzero"] += d["nonzero_share"] / len(SEEDS)
        acc["max_a"] = max(acc["max_a"], d["adv"]["max"])
        acc["waves"] = max(acc["waves"], d["waves_per_batch"])
    return acc


def at_rollouts(curve, r):
    """v05-eb's MSE at r rollouts per prompt: linear in log(MSE) against
    log(rollouts) between the two points around r (None outside)."""
    pts = []
    for r_, m_ in sorted((c["rollouts"], c["mse"]) for c in curve):
        if not pts or m_ < pts[-1][1]:  # the frontier: better for more
            pts.append((r_, m_))
    for (r0, m0), (r1, m1) in zip(pts, pts[1:]):
        if r0 <= r <= r1:
            t = (math.log(r) - math.log(r0)) / (math.log(r1) - math.log(r0))
            return math.exp(math.log(m0) + t * (math.log(m1) - math.log(m0)))
    return None


# The epochs part: the same prompts, EPOCHS times, fresh rewards each time.
EPOCHS, EPOCH_PROMPTS, EPOCH_BATCH = 10, 1024, 256
EPOCH_CELLS = {
    "success rates uniform on [0, 1]": [],
    "success rates from Beta(0.3, 0.3) (most near 0 or 1)":
        ["--p-beta", "0.3"],
}
EPOCH_MODES = {
    "v05-eb default": ["--mode", "v05-eb"],
    "knapsack-prior (8/prompt)": ["--mode", "knapsack-prior"],
    "knapsack, own history (8/prompt)": ["--mode", "knapsack"],
    "knapsack, own history (4/prompt)": ["--mode", "knapsack", "--k", "4"],
    "GRPO G=8": ["--mode", "grpo", "--k", "8"],
    "DAPO G=8": ["--mode", "dapo", "--k", "8"],
    "GRESO G=8": ["--mode", "greso", "--k", "8"],
    "EBPO G=8": ["--mode", "ebpo", "--k", "8"],
    "pilot-commit p8c24": ["--mode", "pilot-commit", "--k", "8"],
}


def epochs_measure(v05ctl):
    """The epochs runs: cell -> mode -> figures."""
    out = {}
    for cell, cargs in EPOCH_CELLS.items():
        out[cell] = {}
        for label, margs in EPOCH_MODES.items():
            acc = {"r": 0.0, "mse": 0.0, "nz": 0.0, "skip": 0.0, "drop": 0.0,
                   "max_a": 0.0, "waves": 0.0}
            for seed in SEEDS:
                d = simrun.sim(v05ctl, ["--epochs", str(EPOCHS),
                                        "--prior-noise", "0.1", "--seed",
                                        str(seed)] + cargs + margs,
                               EPOCH_PROMPTS, EPOCH_BATCH)
                n = len(SEEDS)
                visits = EPOCH_PROMPTS * EPOCHS
                acc["r"] += d["rollouts_per_prompt"] / n
                acc["mse"] += d["mse"] / n
                acc["nz"] += d["nonzero_share"] / n
                acc["skip"] += d["skipped"] / visits / n
                acc["drop"] += d["dropped"] / (visits - d["skipped"]) / n
                acc["max_a"] = max(acc["max_a"], d["adv"]["max"])
                acc["waves"] = max(acc["waves"], d["waves_per_batch"])
            out[cell][label] = acc
        print(f"epochs, {cell}: done", flush=True)
    return out


def epochs_part(epochs):
    """The epochs runs' table lines."""
    lines = [
        "## The rules with a cross-epoch state, over epochs", "",
        f"{EPOCH_PROMPTS} prompts seen {EPOCHS} times (`--epochs "
        f"{EPOCHS}`, batches of {EPOCH_BATCH}, each a training step), "
        "fresh rewards each epoch, prior noise 0.1 for the modes that use "
        "a prior, seeds as above. `knapsack` plans each batch from each "
        "prompt's own past rewards (no estimate in the first epoch: the "
        "uniform share), `greso` skips prompts whose recent groups were "
        "all-same (each batch a step; the rates adapt after the first "
        "epoch) and drops all-same groups as DAPO does. *rollouts* per "
        "prompt and epoch, skipped prompts counted as 0; *skipped* the "
        "share of prompt visits GRESO's filter passed over; *MSE*, "
        "*non-zero* and *largest abs(A)* over the groups rolled out (the "
        "largest over the seeds, as *waves / batch*).", ""]
    for cell in EPOCH_CELLS:  # the measured order, whatever the JSON's
        modes = epochs[cell]
        lines += [f"### {cell}", "",
                  "| mode | rollouts / prompt | MSE | non-zero | skipped | "
                  "dropped / group | largest abs(A) | waves / batch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for label in EPOCH_MODES:
            acc = modes[label]
            lines.append(f"| {label} | {acc['r']:.2f} | {acc['mse']:.4f} | "
                         f"{acc['nz']:.3f} | {acc['skip']:.3f} | "
                         f"{acc['drop']:.3f} | {acc['max_a']:.2f} | "
                         f"{acc['waves']:.2f} |")
        lines.append("")
    return lines


SUMMARY = "bench/results/rules.json"


# The prior cells, in the page's order; the last, where a linear shrinkage
# (EBPO's) is not the Bayes rule: success rates piled near 0 and 1.
CELLS = [(f"noise {n}, hallucination {h}",
          ["--prior-noise", str(n), "--hallucination", str(h)])
         for n in NOISES for h in HALLUCINATIONS] + \
    [("no prior (every prior 0)", ["--no-prior"]),
     ("no prior, success rates from Beta(0.3, 0.3)",
      ["--no-prior", "--p-beta", "0.3"])]


def measure(v05ctl):
    res = {}
    for name, cargs in CELLS:
        curve = [mean_runs(v05ctl, cargs + ["--mode", "v05-eb", "--k",
                                            str(k), "--k-max",
                                            str(max(16, 2 * k))])
                 for k in EB_K] + \
            [mean_runs(v05ctl, cargs + ["--mode", "v05-eb", "--k", str(k),
                                        "--k-max", str(k)])
             for k in EB_ONE_WAVE]
        rows = {}
        for label, margs in RULES.items():
            r = mean_runs(v05ctl, cargs + margs)
            r["eb_equal"] = at_rollouts(curve, r["rollouts"])
            rows[label] = r
        res[name] = rows
        print(f"{name}: done", flush=True)
    return {"cells": res, "epochs": epochs_measure(v05ctl)}


def main():
    ap = argparse.ArgumentParser(prog="bench/rules.py")
    ap.add_argument("--out", default=os.path.join(simrun.ROOT, "bench",
                                                  "RULES.md"))
    a, summary = simrun.summary_of(
        ap, "rules.json",
        "ninja -C build && python3 bench/rules.py",
        measure)
    res = summary["cells"]
    lines = [
        "# The published allocation rules against v05's default "
        "(`v05ctl sim`)",
        "",
        simrun.provenance("bench/rules.py", summary, SUMMARY) + " "
        f"{PROMPTS} prompts per run in batches of {BATCH}, seeds "
        f"{', '.join(map(str, SEEDS))} averaged per cell (the largest |A| "
        "and waves: the largest over the seeds). Each prompt's true "
        "success probability is uniform on [0, 1], rewards are +-1 "
        "draws, the prior is the truth plus N(0, noise^2) with a share of "
        "uniformly random priors (hallucination), or 0 for every prompt "
        "in the last two cells (the last with success rates from "
        "Beta(0.3, 0.3), piled near 0 and 1). Each rule runs with its "
        "authors' defaults (docs/RULES.md): reinforce-ada rounds of 8 up "
        "to 32, 4 of them trained on; knapsack-prior a budget of 8 (or 4) "
        "per prompt, 2 to 64 each; GRPO and DAPO G = 16; EBPO one wave of "
        "G, its running statistics over every group before and including "
        "the one estimated; pilot-commit a pilot of 8 (or 4), a commit of "
        "24 (or 12) for a pilot success rate in [0.125, 0.75], else the "
        "prompt is dropped after its pilot. *MSE* is the baseline's "
        "against the prompt's true mean reward, over every group "
        "(Reinforce-Ada's baseline is the mean of all its samples, the "
        "ones not trained on included; a prompt Pilot-Commit dropped has "
        "its pilot's mean); *non-zero* the share of groups with a trained "
        "advantage that is not 0 (what Reinforce-Ada and Knapsack RL "
        "optimise; v05's fused baseline gives an all-same group a "
        "non-zero advantage whenever the prior disagrees with it); "
        "*v05-eb at equal rollouts* v05-eb (no barrier) run with first "
        f"waves of {', '.join(map(str, EB_K))} (up to twice that, at least "
        "16) and with one wave of "
        f"{', '.join(map(str, EB_ONE_WAVE))} (k_max = k_init), the best "
        "of these at each number of rollouts, interpolated at the rule's "
        "rollouts (log-log); *ratio* the rule's MSE over it (below 1: the "
        "rule wins).",
        "",
    ]
    ratios = {label: [] for label in RULES if label != DEFAULT}
    for name, _ in CELLS:  # the measured order, whatever the JSON's
        rows = res[name]
        lines += [f"## {name}", "",
                  "| mode | rollouts / prompt | MSE | v05-eb at equal "
                  "rollouts | ratio | non-zero | largest abs(A) | "
                  "waves / batch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for label in RULES:
            r = rows[label]
            eq = r["eb_equal"]
            ratio = r["mse"] / eq if eq else None
            if ratio is not None and label != DEFAULT:
                ratios[label].append(ratio)
            lines.append(
                f"| {label} | {r['rollouts']:.2f} | {r['mse']:.4f} | "
                f"{'%.4f' % eq if eq else '-'} | "
                f"{'%.3f' % ratio if ratio is not None else '-'} | "
                f"{r['nonzero']:.3f} | {r['max_a']:.2f} | "
                f"{r['waves']:.2f} |")
        lines.append("")
    lines += ["## Over the cells", "",
              "Geometric mean over the cells of the rule's MSE over "
              "v05-eb's at the same rollouts, and the range (cells where "
              "the rule's rollouts fall outside v05-eb's curve are left "
              "out, and counted):", "",
              "| mode | MSE ratio to v05-eb at equal rollouts | range | "
              "cells |", "|---|---:|---|---:|"]
    for label, xs in ratios.items():
        if xs:
            lines.append(f"| {label} | {simrun.gmean(xs):.3f} | "
                         f"{min(xs):.3f}-{max(xs):.3f} | {len(xs)} of "
                         f"{len(res)} |")
        else:
            lines.append(f"| {label} | - | - | 0 of {len(res)} |")
    lines += [""] + epochs_part(summary["epochs"])
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
