# SPDX-License-Identifier: MIT
"""bench/train's plots (SVG): held-out accuracy against rollouts (and
paired against grpo-16), gradient norm, entropy, the adaptive modes'
allocation, baseline MSE by success rate."""

import os

import numpy as np

from summary import acc_on_grid

HERE = os.path.dirname(os.path.abspath(__file__))
PLOTS = os.path.join(HERE, "plots")
COLORS = {"grpo-16": "black", "dapo-16": "grey", "grpo-4": "tab:brown",
          "fixed-1": "tab:pink",
          "fixed-2": "tab:orange", "fixed-4": "tab:green", "fixed-8": "tab:olive",
          "v05": "tab:blue", "v05-nohalt": "tab:cyan", "v05-eb": "tab:purple",
          "reinforce-ada": "tab:red", "reinforce-ada-pos": "salmon",
          "knapsack-prior-4": "tab:gray", "knapsack-prior-8": "darkkhaki",
          "knapsack-4": "teal", "knapsack-8": "darkslategray",
          "dapo-8": "silver", "greso-8": "gold",
          "dapo-16-fill": "dimgray", "greso-8-fill": "goldenrod",
          "ebpo-8": "tab:green", "ebpo-4": "lime",
          "pilot-commit-4-12": "tab:orange", "v05-eb-fill": "magenta",
          "default": "indigo"}



def smooth(y, w=5):
    y = np.asarray(y, dtype=float)
    if len(y) < w:
        return y
    c = np.convolve(y, np.ones(w) / w, mode="valid")
    return np.concatenate([y[:w - 1] * 0 + c[0], c])


def series(runs, key):
    n = min(len(r["log"]) for r in runs)
    return np.array([[s[key] for s in r["log"][:n]] for r in runs])


def plots(mruns, s, budget, PLOTS=PLOTS, prefix=""):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(PLOTS, exist_ok=True)
    files = []

    def save(fig, name):
        name = prefix + name  # another report's plots keep their own
        p = os.path.join(PLOTS, name)
        fig.tight_layout()
        fig.savefig(p, format="svg")
        plt.close(fig)
        files.append(name)

    grid = np.linspace(0, budget, 61)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    for m, runs in mruns.items():
        Y = np.array([acc_on_grid(r, grid) for r in runs])
        ax.plot(grid, Y.mean(0), color=COLORS.get(m), label=m,
                lw=2.2 if m in ("v05", "grpo-16") else 1.3)
        if m in ("v05", "grpo-16"):
            ax.fill_between(grid, Y.min(0), Y.max(0), color=COLORS.get(m), alpha=0.12)
    ax.set_xlabel("rollouts consumed")
    ax.set_ylabel("held-out accuracy (exact P(correct), T=1)")
    ax.set_title("held-out accuracy vs rollouts (mean of seeds; band: min-max, v05 and grpo-16)", fontsize=9)
    ax.legend(fontsize=8, ncol=2)
    if "grpo-16" in mruns:
        ref = {r["seed"]: acc_on_grid(r, grid) for r in mruns["grpo-16"]}
        for m, runs in mruns.items():
            if m == "grpo-16":
                continue
            D = np.array([acc_on_grid(r, grid) - ref[r["seed"]] for r in runs
                          if r["seed"] in ref])
            ax2.plot(grid, D.mean(0), color=COLORS.get(m), label=m,
                     lw=2.2 if m == "v05" else 1.3)
            if m == "v05":
                ax2.fill_between(grid, D.min(0), D.max(0), color=COLORS.get(m), alpha=0.15)
        ax2.axhline(0, color="black", lw=1)
        ax2.set_xlabel("rollouts consumed")
        ax2.set_ylabel("held-out accuracy minus grpo-16's (same seed)")
        ax2.set_title("paired by seed: difference to grpo-16 (band: v05 min-max)",
                      fontsize=9)
        ax2.legend(fontsize=8, ncol=2)
    save(fig, "accuracy.svg")

    for key, name, lab in (("grad_norm", "grad_norm.svg", "gradient norm (before clipping at 1)"),
                           ("entropy", "entropy.svg", "policy entropy per sampled token (nats)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for m, runs in mruns.items():
            Y = series(runs, key)
            ax.plot(smooth(Y.mean(0)), color=COLORS.get(m), label=m,
                    lw=2.2 if m in ("v05", "grpo-16") else 1.3)
        ax.set_xlabel("step")
        ax.set_ylabel(lab)
        ax.set_title(f"{lab} (mean of seeds, 5-step moving average)", fontsize=9)
        ax.legend(fontsize=8, ncol=2)
        save(fig, name)

    ad = [m for m in mruns if m in ("v05", "v05-nohalt", "v05-eb")]
    if ad:
        fig, axs = plt.subplots(1, 3, figsize=(12, 3.8))
        for m in ad:
            runs = mruns[m]
            rpp = series(runs, "spent") / series(runs, "prompts")
            axs[0].plot(rpp.mean(0), color=COLORS.get(m), label=m)
            axs[1].plot(series(runs, "waves").mean(0), color=COLORS.get(m), label=m)
            ks = np.concatenate([x["k"] for r in runs for x in r["log"]])
            axs[2].hist(ks, bins=np.arange(0.5, 17.5, 1), alpha=0.5,
                        color=COLORS.get(m), label=m, density=True)
        axs[0].set_title("rollouts per prompt (padding included)", fontsize=9)
        axs[1].set_title("waves per batch (batched generate passes)", fontsize=9)
        axs[2].set_title("final k per prompt", fontsize=9)
        for a in axs[:2]:
            a.set_xlabel("step")
        axs[2].set_xlabel("k")
        axs[0].legend(fontsize=8)
        save(fig, "adaptive.svg")

    bins = np.linspace(0, 1, 11)
    mid = (bins[1:] + bins[:-1]) / 2
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in mruns:
        tp, bl = s[m]["tp"], s[m]["bl"]
        err = (bl - (2 * tp - 1)) ** 2
        idx = np.clip(np.digitize(tp, bins) - 1, 0, 9)
        y = [err[idx == b].mean() if (idx == b).any() else np.nan for b in range(10)]
        ax.plot(mid, y, "o-", color=COLORS.get(m), label=m, ms=3)
    tp, pr = s[next(iter(mruns))]["tp"], s[next(iter(mruns))]["pr"]
    err = (pr - (2 * tp - 1)) ** 2
    idx = np.clip(np.digitize(tp, bins) - 1, 0, 9)
    ax.plot(mid, [err[idx == b].mean() if (idx == b).any() else np.nan
                  for b in range(10)], "k--", label="prior alone", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("prompt's success rate p (exact, policy at sampling time)")
    ax.set_ylabel("realized baseline MSE vs 2p-1")
    ax.set_title("baseline MSE by prompt success rate (all steps and seeds)")
    ax.legend(fontsize=8, ncol=2)
    save(fig, "baseline_mse.svg")
    return files
