# SPDX-License-Identifier: MIT
"""bench/train/report.py RESULTS_JSON: plots (SVG) into bench/train/plots/
and bench/train/RESULTS.md, every number computed from the JSON."""

import json
import os
import platform
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PLOTS = os.path.join(HERE, "plots")
ORDER = ["grpo-16", "dapo-16", "grpo-4", "fixed-1", "fixed-2", "fixed-4", "fixed-8",
         "v05", "v05-nohalt", "v05-eb", "reinforce-ada", "reinforce-ada-pos",
         "knapsack-prior-4", "knapsack-prior-8", "knapsack-4", "knapsack-8",
         "dapo-8", "greso-8", "dapo-16-fill", "greso-8-fill", "ebpo-8",
         "ebpo-4", "pilot-commit-4-12", "v05-eb-fill"]
# The published rules (issue 28, docs/RULES.md), compared with v05's modes.
RULES = ["reinforce-ada", "reinforce-ada-pos", "knapsack-prior-4",
         "knapsack-prior-8", "knapsack-4", "knapsack-8", "greso-8"]
# Issue 38's modes: a report holding one of them is the fill report.
FILL = ["dapo-16-fill", "greso-8-fill", "ebpo-8", "ebpo-4",
        "pilot-commit-4-12", "v05-eb-fill"]
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
          "pilot-commit-4-12": "tab:orange", "v05-eb-fill": "magenta"}


def by_mode(runs):
    out = {}
    for r in runs:
        out.setdefault(r["mode"], []).append(r)
    return {m: sorted(out[m], key=lambda r: r["seed"]) for m in ORDER if m in out}


def acc_on_grid(run, grid):
    x = [e["rollouts"] for e in run["evals"]]
    y = [e["acc"] for e in run["evals"]]
    return np.interp(grid, x, y)


def to_target(run, target):
    """Rollouts at which the held-out accuracy first reaches `target`
    (linear between evaluations; 0 if it starts there), or None."""
    prev = None
    for e in run["evals"]:
        r, a = e["rollouts"], e["acc"]
        if a >= target:
            if prev is None:
                return 0.0
            r0, a0 = prev
            return r0 + (r - r0) * (target - a0) / (a - a0)
        prev = (r, a)
    return None


def smooth(y, w=5):
    y = np.asarray(y, dtype=float)
    if len(y) < w:
        return y
    c = np.convolve(y, np.ones(w) / w, mode="valid")
    return np.concatenate([y[:w - 1] * 0 + c[0], c])


def series(runs, key):
    n = min(len(r["log"]) for r in runs)
    return np.array([[s[key] for s in r["log"][:n]] for r in runs])


def summarize(mruns, budget):
    s = {}
    for m, runs in mruns.items():
        fin = np.array([acc_on_grid(r, [budget])[0] for r in runs])
        start = np.array([r["evals"][0]["acc"] for r in runs])
        grid = np.linspace(0, budget, 41)
        auc = np.array([acc_on_grid(r, grid).mean() for r in runs])
        g = [np.array([x["grad_norm"] for x in r["log"]]) for r in runs]
        ent = [np.array([x["entropy"] for x in r["log"]]) for r in runs]
        half = [len(x) // 2 for x in ent]
        logs = [x for r in runs for x in r["log"]]
        tp = np.concatenate([x["true_p"] for x in logs])
        bl = np.concatenate([x["baseline"] for x in logs])
        pr = np.concatenate([x["prior"] for x in logs])
        ks = np.concatenate([x["k"] for x in logs])
        s[m] = dict(
            n=len(runs), start=start, final=fin, gain=fin - start, auc=auc,
            greedy=np.array([r["final_greedy"] for r in runs]),
            gnorm=np.array([x.mean() for x in g]),
            gstd=np.array([x.std() for x in g]),
            ent_late=np.array([e[h:].mean() for e, h in zip(ent, half)]),
            mse=float(np.mean((bl - (2 * tp - 1)) ** 2)),
            prior_mse=float(np.mean((pr - (2 * tp - 1)) ** 2)),
            mean_k=float(ks.mean()),
            rollouts_per_prompt=float(sum(x["spent"] for x in logs) /
                                      sum(x["prompts"] for x in logs)),
            waves=float(np.mean([x["waves"] for x in logs])),
            halts=float(np.mean([x["halts"] for x in logs])),
            dropped=float(sum(x["dropped"] for x in logs) /
                          sum(x["prompts"] for x in logs)),
            # groups with a trained advantage that is not 0 (recorded
            # since the published rules; None for older runs)
            nonzero=(float(sum(x["nonzero"] for x in logs) /
                           sum(x["prompts"] for x in logs))
                     if all("nonzero" in x for x in logs) else None),
            steps=float(np.mean([r["steps"] for r in runs])),
            # The fill's skip by prior: of the prompts pulled, the share
            # skipped (the log's count is cumulative).
            skipped_prior=float(
                sum(r["log"][-1].get("skipped_prior", 0) for r in runs) /
                max(1, sum(r["log"][-1].get("skipped_prior", 0) +
                           sum(x["prompts"] for x in r["log"]) for r in runs))),
            fill_waves=float(np.mean([x.get("fill_waves", 0) for x in logs])),
            seeds=[r["seed"] for r in runs],
            rollouts=float(np.mean([r["rollouts"] for r in runs])),
            wall=float(np.mean([r["wall"] for r in runs])),
            tp=tp, bl=bl, pr=pr)
    return s


def fmt(a, d=3):
    a = np.asarray(a, dtype=float)
    if len(a) == 1:
        return f"{a[0]:.{d}f}"
    return f"{a.mean():.{d}f} [{a.min():.{d}f}, {a.max():.{d}f}]"


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
        ax.plot(grid, Y.mean(0), color=COLORS[m], label=m,
                lw=2.2 if m in ("v05", "grpo-16") else 1.3)
        if m in ("v05", "grpo-16"):
            ax.fill_between(grid, Y.min(0), Y.max(0), color=COLORS[m], alpha=0.12)
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
            ax2.plot(grid, D.mean(0), color=COLORS[m], label=m,
                     lw=2.2 if m == "v05" else 1.3)
            if m == "v05":
                ax2.fill_between(grid, D.min(0), D.max(0), color=COLORS[m], alpha=0.15)
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
            ax.plot(smooth(Y.mean(0)), color=COLORS[m], label=m,
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
            axs[0].plot(rpp.mean(0), color=COLORS[m], label=m)
            axs[1].plot(series(runs, "waves").mean(0), color=COLORS[m], label=m)
            ks = np.concatenate([x["k"] for r in runs for x in r["log"]])
            axs[2].hist(ks, bins=np.arange(0.5, 17.5, 1), alpha=0.5,
                        color=COLORS[m], label=m, density=True)
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
        ax.plot(mid, y, "o-", color=COLORS[m], label=m, ms=3)
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


def verdicts(s):
    out = []

    def paired(a, b, key):
        d = s[a][key] - s[b][key]
        return d, int((d > 0).sum()), len(d)

    if "grpo-16" not in s:
        return out
    for m in ("fixed-4", "fixed-8", "v05", "v05-nohalt", "v05-eb"):
        if m in s:
            d, w, n = paired(m, "grpo-16", "final")
            out.append((f"{m} ends higher than grpo-16 (final held-out acc)",
                        f"diff {fmt(d)}; higher in {w}/{n} seeds",
                        "holds" if w == n else ("mixed" if w else "does not hold")))
            d, w, n = paired(m, "grpo-16", "auc")
            out.append((f"{m} learns faster than grpo-16 (mean acc over the budget)",
                        f"diff {fmt(d)}; higher in {w}/{n} seeds",
                        "holds" if w == n else ("mixed" if w else "does not hold")))
    if "v05" in s and "dapo-16" in s:
        d, w, n = paired("v05", "dapo-16", "final")
        out.append(("v05 ends higher than dapo-16", f"diff {fmt(d)}; higher in {w}/{n} seeds",
                    "holds" if w == n else ("mixed" if w else "does not hold")))
    if "grpo-4" in s and "fixed-4" in s:
        d, w, n = paired("fixed-4", "grpo-4", "final")
        out.append(("(control, not in the paper) fixed-4 ends higher than grpo-4: "
                    "the prior's own effect at the same batch shape",
                    f"diff {fmt(d)}; higher in {w}/{n} seeds",
                    "holds" if w == n else ("mixed" if w else "does not hold")))
        d, w, n = paired("grpo-4", "grpo-16", "final")
        out.append(("(control) grpo-4 ends higher than grpo-16: the effect of "
                    "more prompts per step without a prior",
                    f"diff {fmt(d)}; higher in {w}/{n} seeds",
                    "holds" if w == n else ("mixed" if w else "does not hold")))
    for m in ("fixed-1", "fixed-2"):
        if m in s:
            d, w, n = paired(m, "grpo-16", "final")
            g = s[m]["gain"]
            out.append((f"{m} fails (ends below grpo-16)",
                        f"diff to grpo {fmt(d)}; own gain {fmt(g)}; below grpo in {n - w}/{n} seeds",
                        "holds" if w == 0 else ("mixed" if w < n else "does not hold")))
    for m in ("v05", "fixed-4"):
        if m in s:
            d = s[m]["gnorm"] - s["grpo-16"]["gnorm"]
            w = int((d < 0).sum())
            out.append((f"{m}: lower gradient norm than grpo-16 (mean over steps)",
                        f"{fmt(s[m]['gnorm'])} vs {fmt(s['grpo-16']['gnorm'])}; lower in {w}/{len(d)} seeds",
                        "holds" if w == len(d) else ("mixed" if w else "does not hold")))
            d = s[m]["gstd"] - s["grpo-16"]["gstd"]
            w = int((d < 0).sum())
            out.append((f"{m}: steadier gradient norm than grpo-16 (std over steps)",
                        f"{fmt(s[m]['gstd'])} vs {fmt(s['grpo-16']['gstd'])}; lower in {w}/{len(d)} seeds",
                        "holds" if w == len(d) else ("mixed" if w else "does not hold")))
            d = s[m]["ent_late"] - s["grpo-16"]["ent_late"]
            w = int((d > 0).sum())
            out.append((f"{m}: higher entropy than grpo-16 (second half of training)",
                        f"{fmt(s[m]['ent_late'])} vs {fmt(s['grpo-16']['ent_late'])}; higher in {w}/{len(d)} seeds",
                        "holds" if w == len(d) else ("mixed" if w else "does not hold")))
    return out


def rule_rows(s):
    """Table rows: v05-eb against each published rule, and each rule
    against its batch shape's fixed-size mode without a prior."""
    out = []
    pairs = []
    rivals = RULES + [m for m in FILL if m != "v05-eb-fill"]
    if any(m in FILL for m in s):
        rivals = ["grpo-16"] + rivals  # the baseline of issue 38's report
    for m in rivals:
        if m in s and "v05-eb" in s:
            pairs.append(("v05-eb", m))
    for m, base in (("v05-eb-fill", "v05-eb"),
                    ("dapo-16-fill", "grpo-16"),
                    ("greso-8-fill", "grpo-16"),
                    ("pilot-commit-4-12", "grpo-16"),
                    ("ebpo-8", "grpo-16"),
                    ("knapsack-prior-4", "grpo-4"),
                    ("knapsack-prior-8", "fixed-8"),
                    ("reinforce-ada", "grpo-16"),
                    ("knapsack-4", "grpo-4"),
                    ("knapsack-prior-4", "knapsack-4"),
                    ("knapsack-8", "fixed-8"),
                    ("greso-8", "dapo-8")):
        if m in s and base in s:
            pairs.append((m, base))
    for a, b in pairs:
        n = min(s[a]["n"], s[b]["n"])
        cells = [f"{a} vs {b}"]
        for key in ("final", "auc"):
            d = s[a][key][:n] - s[b][key][:n]
            cells += [fmt(d), f"{int((d > 0).sum())}/{n}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def eval_grid(runs):
    """The median spacing of the evaluations, in rollouts."""
    d = [b["rollouts"] - a["rollouts"] for r in runs
         for a, b in zip(r["evals"], r["evals"][1:])]
    return float(np.median(d)) if d else 0.0


def target_rows(s, mruns, budget):
    """The rollouts each run needs to reach its seed's T, grpo-16's final
    held-out accuracy in that seed (every mode of a seed starts from the
    same weights, seeds from different ones: 0.227 to 0.283), and
    v05-eb's paired against each mode."""
    if "grpo-16" not in s or "v05-eb" not in s:
        return None, []
    T = dict(zip(s["grpo-16"]["seeds"], s["grpo-16"]["final"]))
    reach = {m: [to_target(r, T[r["seed"]]) if r["seed"] in T else None
                 for r in runs] for m, runs in mruns.items()}
    rows = ["| mode | reached in | rollouts to T | v05-eb minus the mode, paired | v05-eb faster in | beyond the seeds' spread |",
            "|---|---|---|---|---|---|"]

    def cens(x):  # not reached: the budget, a lower bound
        return budget if x is None else x

    ref = dict(zip(s["v05-eb"]["seeds"], reach["v05-eb"]))
    for m, xs in reach.items():
        got = [x for x in xs if x is not None]
        rt = (fmt([cens(x) for x in xs], 0) +
              (" (not reached: counted as the budget)" if len(got) < len(xs) else ""))
        cells = [m, f"{len(got)}/{len(xs)}", rt]
        if m != "v05-eb":
            d = np.array([cens(ref[sd]) - cens(x)
                          for sd, x in zip(s[m]["seeds"], xs) if sd in ref])
            faster = int((d < 0).sum())
            # Beyond the spread: one of the two faster in every seed (the
            # paired differences' range excludes 0).
            beyond = "v05-eb behind" if (d > 0).all() else \
                "v05-eb ahead" if (d < 0).all() else "no"
            cells += [fmt(d, 0), f"{faster}/{len(d)}", beyond]
        else:
            cells += ["-", "-", "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return T, rows


def git_rev():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def merge(paths):
    """Several invocations (e.g. more seeds added later) as one result:
    same steps and budget required; runs, seeds and times add up."""
    parts = []
    for p in paths:
        with open(p) as f:
            parts.append(json.load(f))
    R = dict(parts[0])
    for q in parts[1:]:
        for k in ("steps", "budget_per_step", "warmup", "lr", "heldout"):
            if q[k] != R[k]:
                raise SystemExit(f"report: {k} differs between the runs merged")
        R["runs"] = R["runs"] + q["runs"]
        R["seeds"] = sorted(set(R["seeds"]) | set(q["seeds"]))
        R["wall"] += q["wall"]
        R["warmup_seconds"] += q["warmup_seconds"]
        R["skipped"] = {**R["skipped"], **q["skipped"]}
        # A mode one invocation skipped and a later one ran is not skipped.
        ran = {r["mode"] for r in R["runs"]}
        R["skipped"] = {m: e for m, e in R["skipped"].items() if m not in ran}
    R["command"] = "` + `".join(q["command"] for q in parts)
    R["commit"] = " + ".join(dict.fromkeys(q.get("commit", "?") for q in parts))
    R["walls"] = [q["wall"] for q in parts]
    return R


RESULTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench",
                       "results", "train")


def main(argv=None):
    """report.py [RESULTS.json...] [DEST.md]: the page from runs; its
    summary (every figure the page shows, not the runs' step logs) goes to
    bench/results/train/<page>.json (committed).
    report.py --from bench/results/train/<page>.json [DEST.md]: the page
    (not the plots) from a summary."""
    argv = argv if argv is not None else sys.argv[1:]
    if argv[:1] == ["--from"]:
        with open(argv[1]) as f:
            ctx = json.load(f)
        # Per-seed figures back as the arrays summarize() made.
        ctx["summary"] = {m: {k: np.array(v) if isinstance(v, list) else v
                              for k, v in x.items()}
                          for m, x in ctx["summary"].items()}
        render(ctx, argv[2] if len(argv) > 2 else
               os.path.join(HERE, ctx["page"] + ".md"))
        return
    paths = [a for a in argv if not a.endswith(".md")] or \
        [os.path.join(HERE, "out", "results.json")]
    dests = [a for a in argv if a.endswith(".md")]
    dest = dests[0] if dests else os.path.join(HERE, "RESULTS.md")
    R = merge(paths)
    mruns = by_mode(R["runs"])
    budget = R["steps"] * R["budget_per_step"]
    s = summarize(mruns, budget)
    # A report other than RESULTS.md (RULES.md) names its plots after
    # itself, so the main report's stay.
    stem = os.path.splitext(os.path.basename(dest))[0]
    files = plots(mruns, s, budget,
                  os.path.join(os.path.dirname(os.path.abspath(dest)), "plots"),
                  "" if stem == "RESULTS" else stem.lower() + "-")
    # Rollouts to a held-out accuracy need every run's curve: computed
    # here, kept in the summary for --from.
    T, trows = target_rows(s, mruns, budget) if any(m in FILL for m in s) \
        else (None, [])
    target = {"T": T, "rows": trows,
              "grid": eval_grid(R["runs"]) if T is not None else None}
    tt = {}
    for r in R["runs"]:
        for k, v in r["times"].items():
            tt[k] = tt.get(k, 0.0) + v
    ctx = {"page": stem, "files": files, "summary": s, "times": tt,
           "target": target,
           "wall_in_runs": sum(r["wall"] for r in R["runs"]),
           "n_runs": len(R["runs"]), "report_commit": git_rev(),
           "inputs": [os.path.relpath(os.path.abspath(p), os.path.dirname(
               os.path.dirname(HERE))) for p in paths],
           **{k: R.get(k) for k in ("command", "commit", "walls", "wall",
                                    "warmup_seconds", "steps",
                                    "budget_per_step", "seeds", "params",
                                    "lr", "heldout", "skipped")}}
    # The committed pages' summaries only (not --quick's, next to its JSON).
    if os.path.dirname(os.path.abspath(dest)) == HERE:
        os.makedirs(RESULTS, exist_ok=True)
        # Without the per-sample arrays only the plots read (tp, bl, pr:
        # megabytes over a full run): --from rewrites the page, not them.
        small = {**ctx, "summary": {
            m: {k: v for k, v in x.items() if k not in ("tp", "bl", "pr")}
            for m, x in s.items()}}
        with open(os.path.join(RESULTS, stem + ".json"), "w") as f:
            json.dump(small, f, indent=1,
                      default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
            f.write("\n")
    render(ctx, dest)


def render(ctx, dest):
    R, s, files = ctx, ctx["summary"], ctx["files"]
    budget = R["steps"] * R["budget_per_step"]
    L = []
    if any(m in FILL for m in s):
        L.append("# Small-scale RL training: full batches and the newest "
                 "published rules against v05 at equal rollout budget "
                 "(issue 38)\n")
    elif any(m in RULES for m in s):
        L.append("# Small-scale RL training: the published allocation rules "
                 "against v05 at equal rollout budget\n")
    else:
        L.append("# Small-scale RL training: v05 against GRPO and DAPO at "
                 "equal rollout budget\n")
    L.append(f"Generated by `{R['command']}` (run at commit {R.get('commit', '?')}, report at {R['report_commit']}) on this project's "
             f"2-core Debian 12 VM, shared with other jobs; Debian's python3 and "
             f"torch, one torch thread. Every number below comes from "
             "`" + "` + `".join(R["inputs"]) + "`, summarised in "
             f"`bench/results/train/{R['page']}.json` (committed; "
             f"`python3 bench/train/report.py --from "
             f"bench/results/train/{R['page']}.json` rewrites this page "
             "from it).\n")
    if len(R.get("walls", [])) > 1:
        L.append("Merged from separate invocations, wall times " +
                 " + ".join(f"{w:.0f} s" for w in R["walls"]) + ".\n")
    L.append(f"**Wall time: {R['wall']:.0f} s** for {R['n_runs']} runs "
             f"(supervised warm-up {R['warmup_seconds']:.0f} s of it, cached per seed in "
             "bench/train/out/). Budget per run: "
             f"{R['steps']} steps x {R['budget_per_step']} rollouts = {budget} rollouts; "
             f"seeds {R['seeds']}; policy {R['params']} parameters; lr {R['lr']}.\n")
    tt, tot = R["times"], R["wall_in_runs"]
    L.append("Where the time goes (summed over runs, seconds): " + ", ".join([
        f"sampling (policy forward, batched) {tt['generate']:.0f}",
        f"plugin, driver and scoring {tt['rollout'] - tt['generate']:.0f}",
        f"policy update (forward+backward) {tt['update']:.0f}",
        f"value prior (fit + predict) {tt['prior']:.0f}",
        f"exact success rates + held-out eval {tt['eval'] + tt['true_p']:.0f}",
        f"rest (batch assembly, JSON, step bookkeeping) "
        f"{tot - sum(v for k, v in tt.items() if k != 'generate'):.0f}",
        f"total in runs {tot:.0f}"]) + ".\n")
    if R["skipped"]:
        for m, e in R["skipped"].items():
            L.append(f"- **{m} skipped**: this build of v05 has no such mode (`{e}`).")
        L.append("")
    L.append("## Results\n")
    L.append("Mean over seeds, [min, max] across seeds. *acc*: held-out accuracy, the "
             "exact probability that a temperature-1 sample is correct, averaged over "
             f"{R['heldout']} held-out prompts; *final*: at the common budget; *AUC*: mean "
             "accuracy over the budget (speed); *greedy*: greedy decoding accuracy at the end; "
             "*grad norm*: mean and std over steps of the norm before clipping; *entropy*: "
             "second half of training; *MSE*: baseline against 2p-1 with p the prompt's "
             "exact success rate, all groups; *k*: rollouts per prompt (padding included).\n")
    L.append("| mode | start acc | final acc | AUC | greedy | grad norm mean | grad norm std | entropy | baseline MSE | prior MSE | k | waves/batch | halts/batch | dropped | non-zero | s/run |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m, x in s.items():
        L.append(f"| {m} | {fmt(x['start'])} | {fmt(x['final'])} | {fmt(x['auc'])} | "
                 f"{fmt(x['greedy'])} | {fmt(x['gnorm'])} | {fmt(x['gstd'])} | "
                 f"{fmt(x['ent_late'])} | {x['mse']:.4f} | {x['prior_mse']:.4f} | "
                 f"{x['rollouts_per_prompt']:.2f} | {x['waves']:.2f} | {x['halts']:.2f} | "
                 f"{x['dropped']:.1%} | "
                 f"{'-' if x['nonzero'] is None else format(x['nonzero'], '.1%')} | "
                 f"{x['wall']:.0f} |")
    L.append("")
    if any(m in FILL for m in s):
        T, trows, grid = (R["target"][k] for k in ("T", "rows", "grid"))
        if T is not None:
            L.append("## Rollouts to a held-out accuracy\n")
            L.append("T: grpo-16's final held-out accuracy in the same "
                     "seed (its end point, as Pilot-Commit's paper takes "
                     "its baselines'), seed by seed " +
                     ", ".join(f"{T[k]:.3f}" for k in sorted(T)) +
                     ". *rollouts to T*: where each run's "
                     "held-out accuracy first reaches T, linear between "
                     "its evaluations (about every "
                     f"{grid:.0f} rollouts), mean "
                     "[min, max] over seeds; a run that never does counts "
                     f"as the budget, {budget} (a lower bound). *v05-eb "
                     "minus the mode*: paired by seed, negative where "
                     "v05-eb gets there with fewer rollouts. *beyond the "
                     "seeds' spread*: one of the two faster in every "
                     "seed.\n")
            L += trows
            L.append("")
        L.append("The fill (bench/train/README.md): *dropped* is the "
                 "share of rolled-out groups not trained on (dropped by "
                 "the rule, or not informative under a fill), their "
                 "rollouts counted; v05-eb-fill's prompts skipped by "
                 f"prior: {s.get('v05-eb-fill', {}).get('skipped_prior', 0):.1%} "
                 "of those it pulled; waves of the fill "
                 "per step: " + ", ".join(
                     f"{m} {x['fill_waves']:.1f}" for m, x in s.items()
                     if x["fill_waves"]) + ".\n")
    rules = rule_rows(s)
    if rules:
        L.append("## The published rules at the same budget\n")
        L.append("Each rule against v05's default (v05-eb) and against the "
                 "fixed-size mode of its batch shape without a prior, paired "
                 "by seed: the difference of the final held-out accuracy and "
                 "of the mean accuracy over the budget (AUC), mean [min, max] "
                 "over seeds, and in how many seeds the first is higher. "
                 "*non-zero* in the table above is the share of groups with "
                 "a trained advantage that is not 0 (the effective gradients "
                 "Reinforce-Ada and Knapsack RL raise; for v05's fused modes "
                 "an all-same group has a non-zero advantage whenever the "
                 "prior disagrees with it).\n")
        L.append("| comparison | final acc diff | higher in | AUC diff | higher in |")
        L.append("|---|---|---|---|---|")
        L += rules
        L.append("")
    claims = verdicts(s)
    if claims:  # a run without the modes the claims compare has none
        L.append("## The paper's claims at this scale\n")
        L.append("Paired by seed (every mode of a seed starts from the same warm-up "
                 "weights and is evaluated on the same held-out prompts). \"holds\" "
                 "means in every seed.\n")
        L.append("| claim | measured | verdict |")
        L.append("|---|---|---|")
        for c, m, v in claims:
            L.append(f"| {c} | {m} | {v} |")
        L.append("")
    reading = os.path.join(HERE, "READING.md")
    if os.path.exists(reading) and os.path.abspath(dest) == os.path.join(HERE, "RESULTS.md"):
        L.append("## Reading\n")
        L.append("Hand-written (bench/train/READING.md) for the committed run; after a "
                 "rerun, check it against the tables above.\n")
        with open(reading) as f:
            L.append(f.read())
    L.append("## Plots\n")
    for f_ in files:
        L.append(f"![{f_}](plots/{f_})\n")
    with open(dest, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {dest} and {len(files)} plots in "
          f"{os.path.join(os.path.dirname(os.path.abspath(dest)), 'plots')}")


if __name__ == "__main__":
    main()
