#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""v05-eb without a barrier in `v05ctl sim` (issue 26, item 3): over the
12-cell prior grid, several batches per run so the cross-batch fit is what
is measured, the barrier-free default against v05-eb's barrier and the
paper's rule without its halt; and a cell whose value model changes half
way (how fast the fit follows). Writes bench/results/nobarrier.json (the
summary, committed) and bench/NOBARRIER.md from it.

    python3 bench/nobarrier.py [--v05ctl build/tools/v05ctl/v05ctl]
    python3 bench/nobarrier.py --from bench/results/nobarrier.json
"""
import argparse
import os

import simrun  # this folder

NOISES = [0.05, 0.1, 0.2, 0.3]
HALLUCINATIONS = [0.0, 0.1, 0.3]
SEEDS = [1, 2, 3]
PROMPTS, BATCH = 4096, 512
MODES = {
    "no barrier (default)": ["--mode", "v05-eb", "--schedule", "stream"],
    "v05-eb barrier": ["--mode", "v05-eb", "--schedule", "rounds"],
    "paper's rule, no halt": ["--mode", "v05", "--schedule", "rounds",
                              "--halt-fraction", "0"],
}


def sim(v05ctl, args, prompts=PROMPTS):
    return simrun.sim(v05ctl, args, prompts, BATCH)


gmean = simrun.gmean


SUMMARY = "bench/results/nobarrier.json"


def measure(v05ctl):
    """Every figure the page shows: per cell and mode (MSE, rollouts); the
    changing value model's run per mode (whole, and batches 6 to 13)."""
    cells = []
    for n in NOISES:
        for h in HALLUCINATIONS:
            for label, margs in MODES.items():
                mse = ro = 0.0
                for seed in SEEDS:
                    d = sim(v05ctl, margs + ["--prior-noise", str(n),
                                             "--hallucination", str(h),
                                             "--seed", str(seed)])
                    mse += d["mse"] / len(SEEDS)
                    ro += d["rollouts_per_prompt"] / len(SEEDS)
                cells.append({"noise": n, "hallucination": h, "mode": label,
                              "mse": mse, "rollouts": ro})
            print(f"cell noise {n} hallucination {h}: done", flush=True)
    drift = {}
    for label, margs in list(MODES.items())[:2]:
        d = sim(v05ctl, margs + [
            "--prior-noise", "0.1", "--hallucination", "0",
            "--drift-hallucination", "0.5", "--seed", "1"],
            prompts=2 * PROMPTS)
        drift[label] = {
            "mse": d["mse"], "rollouts": d["rollouts_per_prompt"],
            "batches": [{"mse": b["mse"],
                         "rollouts": b["rollouts_per_prompt"],
                         "fit_n0": b.get("fit_n0", 0),
                         "fit_h": b.get("fit_h", 0)}
                        for b in d["batches"][5:13]]}
    return {"cells": cells, "drift": drift}


def render(summary):
    cells = {(c["noise"], c["hallucination"], c["mode"]):
             (c["mse"], c["rollouts"]) for c in summary["cells"]}
    drift = summary["drift"]
    nb, bar, pap = MODES
    lines = [
        "# v05-eb without a barrier: the statistics (`v05ctl sim`)",
        "",
        simrun.provenance("bench/nobarrier.py", summary, SUMMARY) + " "
        f"{PROMPTS} prompts per run in batches of {BATCH} (8 batches: the "
        "running fit carries across them), seeds "
        f"{', '.join(map(str, SEEDS))} averaged per cell, c = 0.0039, "
        "k 4/2/16, pad 32, the library's eb_window (512) and eb_cold (64).",
        "",
        "| noise | hallucination | " + " | ".join(
            f"{m}: MSE (rollouts)" for m in MODES) + " |",
        "|---:|---:|" + "---|" * len(MODES),
    ]
    for n in NOISES:
        for h in HALLUCINATIONS:
            lines.append(f"| {n} | {h} | " + " | ".join(
                "%.4f (%.2f)" % cells[(n, h, m)] for m in MODES) + " |")
    ratio = {}
    for other in (bar, pap):
        ratio[other] = (
            gmean([cells[(n, h, nb)][0] / cells[(n, h, other)][0]
                   for n in NOISES for h in HALLUCINATIONS]),
            gmean([cells[(n, h, nb)][1] / cells[(n, h, other)][1]
                   for n in NOISES for h in HALLUCINATIONS]))
    mb, rb = ratio[bar]
    mp, rp = ratio[pap]
    ok1 = mb <= 1.03 and rb <= 1.02
    ok2 = mp <= 0.85 and rp <= 1.05
    lines += [
        "",
        "Geometric means over the 12 cells of the per-cell ratios:",
        "",
        "| target (issue 26) | measured | |",
        "|---|---|---|",
        f"| no barrier vs barrier: MSE <= 1.03 at rollouts <= 1.02 | "
        f"MSE {mb:.3f} at rollouts {rb:.3f} | {'met' if ok1 else 'NOT met'} |",
        f"| no barrier vs the paper's rule without halt: MSE <= 0.85 at "
        f"rollouts <= 1.05 | MSE {mp:.3f} at rollouts {rp:.3f} | "
        f"{'met' if ok2 else 'NOT met'} |",
        "",
        "## A value model that changes",
        "",
        f"{2 * PROMPTS} prompts in batches of {BATCH}, prior noise 0.1; the "
        "value model hallucinates on 0% of the prompts for the first 8 "
        "batches and on 50% from batch 9 on (`--drift-hallucination 0.5`, "
        "seed 1). Per batch: MSE, rollouts per prompt, and the running "
        "fit's (n0, h) after the batch (no barrier only).",
        "",
        "| batch | barrier: MSE (rollouts) | no barrier: MSE (rollouts) | "
        "running fit n0, h |",
        "|---:|---|---|---|",
    ]
    for i, (b, s) in enumerate(zip(drift[bar]["batches"],
                                   drift[nb]["batches"])):
        lines.append(f"| {i + 6} | {b['mse']:.4f} ({b['rollouts']:.2f}) "
                     f"| {s['mse']:.4f} ({s['rollouts']:.2f}) | "
                     f"{s['fit_n0']:.3g}, {s['fit_h']:.3g} |")
    lines += [
        "",
        f"Whole run: barrier MSE {drift[bar]['mse']:.4f} at "
        f"{drift[bar]['rollouts']:.3f} rollouts per prompt, no "
        f"barrier {drift[nb]['mse']:.4f} at "
        f"{drift[nb]['rollouts']:.3f}. The barrier refits each "
        "batch from its own first wave, so it follows at once; the running "
        "fit still trusts the old value model for the first batch after "
        "the change (its window holds 512 first waves), and has moved "
        "within one batch of it.",
        "",
    ]
    return lines


def main():
    _, summary = simrun.summary_of(
        argparse.ArgumentParser(prog="bench/nobarrier.py"), "nobarrier.json",
        "ninja -C build && python3 bench/nobarrier.py", measure)
    lines = render(summary)
    with open(os.path.join(simrun.ROOT, "bench", "NOBARRIER.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
