#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/plots/*.svg for bench/report.py (matplotlib; none without it)."""

import os
import sys

import stats_report
from report_inputs import HERE, load
from report_sim import HALLUCINATIONS, MODES, NOISES, find


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
