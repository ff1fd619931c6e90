#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/RESULTS.md's simulator part (bench/report.py writes the page):
the records of `v05ctl sim` (sim.jsonl), the statistical simulator's
section (baseline MSE and rollouts per prompt under each mode, prior noise
and hallucination) with what it finds, and the page's plots
(bench/plots/*.svg)."""

import json
import os
import sys

import stats_report

HERE = os.path.dirname(os.path.abspath(__file__))

NOISES = [0.05, 0.1, 0.2, 0.3]
HALLUCINATIONS = [0.0, 0.1, 0.3]
# (label, predicate over a sim record); the order of the tables' rows.
MODES = [
    ("v05 (OSLA, halt 0.25)", lambda r: r["mode"] == "v05" and r["halt_fraction"] > 0),
    ("v05 (OSLA, no halt)", lambda r: r["mode"] == "v05" and r["halt_fraction"] == 0),
    ("v05-fixed k=1", lambda r: r["mode"] == "v05-fixed" and r["k"] == 1),
    ("v05-fixed k=2", lambda r: r["mode"] == "v05-fixed" and r["k"] == 2),
    ("v05-fixed k=4", lambda r: r["mode"] == "v05-fixed" and r["k"] == 4),
    ("v05-fixed k=8", lambda r: r["mode"] == "v05-fixed" and r["k"] == 8),
    ("grpo G=4", lambda r: r["mode"] == "grpo" and r["k"] == 4),
    ("grpo G=16", lambda r: r["mode"] == "grpo" and r["k"] == 16),
    ("v05-eb (two waves)", lambda r: r["mode"] == "v05-eb"),
]


def load(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def sim_records(out):
    recs = []
    with open(os.path.join(out, "sim.jsonl")) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    return recs


def find(recs, noise, h, pred):
    for r in recs:
        if abs(r["prior_noise"] - noise) < 1e-9 and abs(r["hallucination"] - h) < 1e-9 and pred(r):
            return r
    return None


def simulator(recs):
    n = recs[0]["prompts"]
    r0 = recs[0]
    s = ["## Statistical simulator: baseline MSE and rollouts per prompt", "",
         "`v05ctl sim` on the real library: each configuration pushes %d "
         "prompts through a real plugin (segment, lane, decisions, batch "
         "halt, padding to %d) in batches of %d, seed %d. True success "
         "probability p uniform on [0, 1], mu = 2p - 1; the prior is "
         "clip(mu + N(0, noise^2), -1, 1), or with probability h uniform on "
         "[-1, 1]; rewards are +1 with probability p, else -1. MSE is the "
         "mean of (baseline - mu)^2 over prompts. v05 is OSLA with k_init = "
         "4, k_step = 2, k_max = 16, cost %.4g; its halt is the paper's "
         "(the batch stops when fewer than 25%% of its open prompts need "
         "more), and the no-halt row runs OSLA to each prompt's own answer. "
         "Each cell: MSE (rollouts per prompt)." % (
             n, r0["pad_multiple"], r0["batch"], r0["seed"], r0["cost"]), ""]
    for h in HALLUCINATIONS:
        s += ["### Hallucination rate %g" % h, "",
              "| mode | " + " | ".join("noise %g" % x for x in NOISES) + " |",
              "|---|" + "---:|" * len(NOISES)]
        for label, pred in MODES:
            cells = []
            for noise in NOISES:
                r = find(recs, noise, h, pred)
                cells.append("-" if r is None else "%.4f (%.2f)" % (r["mse"], r["rollouts_per_prompt"]))
            s.append("| %s | %s |" % (label, " | ".join(cells)))
        s.append("")
    # Saving against G = 16, and how often the paper's halt fired at once.
    halted = [r for r in recs if r["mode"] == "v05" and r["halt_fraction"] > 0]
    first_round = sum(1 for r in halted if r["rounds"] == 0)
    s += ["### Samples per prompt and saving against G = 16", "",
          "| noise | h | v05 rollouts | saving | MSE / grpo G=16's | "
          "v05 no halt rollouts | saving | MSE / grpo G=16's |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for h in HALLUCINATIONS:
        for noise in NOISES:
            a = find(recs, noise, h, MODES[0][1])
            b = find(recs, noise, h, MODES[1][1])
            g = find(recs, noise, h, MODES[7][1])
            if not (a and b and g):
                continue
            s.append("| %g | %g | %.2f | %.0f%% | %.2f | %.2f | %.0f%% | %.2f |" % (
                noise, h, a["rollouts_per_prompt"], 100 * a["saving_vs_g16"],
                a["mse"] / g["mse"], b["rollouts_per_prompt"], 100 * b["saving_vs_g16"],
                b["mse"] / g["mse"]))
    s += ["", "What the tables show (these sentences are computed from them):", ""]
    s += findings(recs, halted, first_round)
    return s


def findings(recs, halted, first_round):
    """Statements about the sim grid, each counted from the records."""
    cells = [(n, h) for h in HALLUCINATIONS for n in NOISES]
    s = []
    loss = []
    for n, h in cells:
        a = find(recs, n, h, MODES[0][1])
        b = find(recs, n, h, MODES[1][1])
        if a and b and b["mse"] > 0:
            loss.append(a["mse"] / b["mse"])
    s.append("- With the paper's batch halt (25%%), the halt fired after the "
             "first round in %d of %d configurations: fewer than a quarter "
             "of a batch's prompts disagreed with their prior after 4 "
             "samples, so the batch stopped at k = 4 and the prompts that "
             "did disagree kept a 4-sample baseline. Its MSE was %.1fx to "
             "%.1fx that of OSLA without the halt; the halt trades those "
             "prompts' precision for rounds (latency) by design." % (
                 first_round, len(halted), min(loss), max(loss)))
    wins, rpp, lose = 0, [], []
    for n, h in cells:
        b = find(recs, n, h, MODES[1][1])
        g = find(recs, n, h, MODES[7][1])
        if not (b and g):
            continue
        rpp.append(b["rollouts_per_prompt"])
        if b["mse"] < g["mse"]:
            wins += 1
        else:
            lose.append("(noise %g, h %g)" % (n, h))
    s.append("- OSLA without the halt had a lower MSE than grpo G=16 in %d of "
             "%d configurations, with %.1f to %.1f rollouts per prompt "
             "against 16%s." % (wins, len(rpp), min(rpp), max(rpp),
                                "" if not lose else "; it did not in " + ", ".join(lose)))
    fixed_wins = 0
    for n, h in cells:
        f4 = find(recs, n, h, MODES[4][1])
        g4 = find(recs, n, h, MODES[6][1])
        if f4 and g4 and f4["mse"] < g4["mse"]:
            fixed_wins += 1
    s.append("- The fused baseline alone (v05-fixed k=4, no OSLA) had a "
             "lower MSE than grpo G=4, at the same 4 samples, in %d of %d "
             "configurations." % (fixed_wins, len(cells)))
    return s


# ----------------------------------------------------------------- plots


def plots(out, recs, stats_recs):
    try:
        import matplotlib
        matplotlib.use("svg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: python3-matplotlib missing, no plots", file=sys.stderr)
        return []
    # Byte-stable SVGs: fixed ids, no date.
    matplotlib.rcParams["svg.hashsalt"] = "v05"
    meta = {"Date": None, "Creator": "bench/report.py"}
    d = os.path.join(HERE, "plots")
    os.makedirs(d, exist_ok=True)
    made = []

    fig, axes = plt.subplots(len(HALLUCINATIONS), len(NOISES), figsize=(14, 9.5),
                             sharex=True, sharey=True)
    markers = "os^v<>Dx"
    for i, h in enumerate(HALLUCINATIONS):
        for j, noise in enumerate(NOISES):
            ax = axes[i][j]
            for (label, pred), mk in zip(MODES, markers):
                r = find(recs, noise, h, pred)
                if r is None:
                    continue
                ax.scatter(r["rollouts_per_prompt"], r["mse"], marker=mk, s=36,
                           label=label)
            ax.set_yscale("log")
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title("noise %g, hallucination %g" % (noise, h), fontsize=9)
            if i == len(HALLUCINATIONS) - 1:
                ax.set_xlabel("rollouts per prompt")
            if j == 0:
                ax.set_ylabel("baseline MSE")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)
    fig.suptitle("Baseline MSE against samples per prompt (v05ctl sim, %d prompts each)" %
                 recs[0]["prompts"])
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(os.path.join(d, "mse_vs_rollouts.svg"), metadata=meta)
    plt.close(fig)
    made.append("plots/mse_vs_rollouts.svg")
    if stats_recs:
        made.append(stats_report.plot(stats_recs, recs, d, meta, plt))

    fr = load(out, "false_rejection.json")
    ks = [x["k"] for x in fr["false_rejection"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(ks, [x["rate"] for x in fr["false_rejection"]], color="#4c72b0")
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("P(exact prior rejected)")
    ax.set_xticks(ks)
    ax.set_title("False rejection of an exact prior V = %g" % fr["prior"])
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "false_rejection.svg"), metadata=meta)
    plt.close(fig)
    made.append("plots/false_rejection.svg")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    batches = [1, 8, 32]
    width = 0.27
    for n, (peer, label) in enumerate((("v05", "v05 lane"), ("dpdk", "DPDK rte_ring"),
                                       ("ck", "ck_ring"))):
        vals = []
        for b in batches:
            r = load(out, "ring-%d.json" % b)
            vals.append(r[peer]["median"] / 1e6 if peer in r else 0)
        ax.bar([i + (n - 1) * width for i in range(len(batches))], vals, width, label=label)
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels(["batch %d" % b for b in batches])
    ax.set_ylabel("million 32-byte records / s")
    ax.set_title("One SPSC ring, producer and consumer on two cores")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "transport.svg"), metadata=meta)
    plt.close(fig)
    made.append("plots/transport.svg")
    return made
