# SPDX-License-Identifier: MIT
"""bench/train's pages (Markdown) from a summary: the results table, the
paired analysis against the default (analysis.py), the rollouts to a
target, the published rules' comparisons, the paper's claims."""

import os

import numpy as np

import analysis
from summary import FILL, RULES, fmt, to_target

HERE = os.path.dirname(os.path.abspath(__file__))
# A run's "sigma" (main.py --sigma): runs before v05-pg's preset had a
# normaliser (to 8ef9d71) say rms when no --sigma was given.
NORMALISERS = {"rms": "rms", "paper": "paper (sqrt(1 - mu^2))",
               "default": "each mode's own (paper for v05-pg, else rms)"}


def verdicts(s):
    out = []

    def paired(a, b, key):
        # on the seeds both ran (a set still running has fewer)
        y = dict(zip(s[b]["seeds"], s[b][key]))
        d = np.array([x - y[sd] for sd, x in zip(s[a]["seeds"], s[a][key])
                      if sd in y])
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


def reference_mode(ctx, s):
    """The mode the others are compared with: `default` if the page ran
    it, else the library's default mode by name (ctx["default_mode"],
    asked of the library when the runs were made)."""
    if "default" in s:
        return "default"
    m = ctx.get("default_mode")
    return m if m in s else None


def targets(ctx, s, budget):
    """(per-seed target accuracy, its description) or (None, None): the
    report's --target if given, else grpo-16's final accuracy seed by
    seed (the issue's target), else none."""
    t = ctx.get("target_acc")
    if t is not None:
        seeds = {sd for x in s.values() for sd in x["seeds"]}
        return {sd: float(t) for sd in seeds}, f"held-out accuracy {t:.3f}"
    if "grpo-16" in s:
        return (dict(zip(s["grpo-16"]["seeds"], s["grpo-16"]["final"])),
                "grpo-16's final accuracy in the same seed")
    return None, None


def _ci(st, d=4, key="mean"):
    return (f"{st[key]:+.{d}f} [{st['lo']:+.{d}f}, {st['hi']:+.{d}f}]"
            if st["n"] >= 2 else f"{st[key]:+.{d}f}")


def _p(st):
    return f"{st['p']:.3g} ({st['p_holm']:.3g})" if st["n"] >= 2 else "-"


def analysis_section(ctx, s, budget):
    """The paired analysis against the default (issue 43): needs each
    run's curve (summaries written since issue 43)."""
    ref = reference_mode(ctx, s)
    if ref is None or len(s) < 2:
        return []
    target, tdesc = targets(ctx, s, budget) if all(
        x.get("curves") for x in s.values()) else (None, None)
    res = analysis.compare(s, ref, budget, target)
    text = (f"Every mode against `{ref}` (the library's default mode"
            + (f", {ctx.get('default_mode')}" if ref == "default" else "")
            + "), paired by seed: the mean difference (mode minus "
            f"{ref}), its 95% t-interval, the paired t-test's two-sided p "
            "and in brackets that p after Holm's correction over the modes "
            "compared, and in how many seeds the mode is ahead. *AUC* (the "
            "primary endpoint): mean held-out accuracy over the budget, "
            "from each run's curve; *detectable*: the smallest true AUC "
            "difference these seeds detect with power 0.8 at 5%. *final*: "
            "held-out accuracy at the budget.")
    if target is not None:
        text += (f" *rollouts to T* (T: {tdesc}): the first time the curve "
                 "reaches T, linear between evaluations; a run that never "
                 f"does counts as the budget ({budget}); *reached*: the share "
                 "of the mode's runs that do; *ratio*: mode / "
                 f"{ref}, the geometric mean of the per-seed ratios with its "
                 "interval (below 1: fewer rollouts than the default).")
    text += (" A comparison on fewer than 10 seeds is marked: too few for "
             "differences of the size these modes show.\n")
    L = ["## Paired against the default\n", text]
    head = "| mode | seeds | AUC diff | p (Holm) | ahead | detectable |"
    sep = "|---|---|---|---|---|---|"
    if target is not None:
        head += " reached T | rollouts to T: ratio | diff | p (Holm) |"
        sep += "---|---|---|---|"
    head += " final diff | p (Holm) | ahead |"
    sep += "---|---|---|"
    L += [head, sep]
    if target is not None:
        L.append(f"| {ref} | {len(s[ref]['seeds'])} | - | - | - | - | "
                 f"{res['share'][ref]:.0%} | - | - | - | - | - | - |")
    for m, row in res["rows"].items():
        a = row["auc"]
        n = a["n"]
        cells = [m, f"{n}" + (" (< 10)" if n < 10 else ""), _ci(a), _p(a),
                 f"{a['ahead']}/{n}", f"{a['mde']:.4f}"]
        if target is not None:
            r = row["reach"]
            cells += [f"{res['share'][m]:.0%}",
                      (f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]"
                       if n >= 2 else f"{r['ratio']:.2f}"),
                      _ci(r, 0), _p(r)]
        f_ = row["final"]
        cells += [_ci(f_), _p(f_), f"{f_['ahead']}/{n}"]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    return L


def render(ctx, dest):
    R, s, files = ctx, ctx["summary"], ctx["files"]
    budget = R["steps"] * R["budget_per_step"]
    L = []
    regime = R.get("regime") or "today"
    if regime != "today":
        # A regime's page (issue 43): the leaders of the other pages.
        L.append("# Small-scale RL training: the leading rules against "
                 f"v05 at equal rollout budget, regime {regime}\n")
    elif any(m in FILL for m in s):
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
             f"seeds {R['seeds']}; policy {R['params']} parameters; lr {R['lr']}"
             # runs since issue 43 say their regime and normaliser
             + (f"; regime {R['regime']}; the fused modes' normaliser "
                + NORMALISERS.get(R.get("sigma") or "rms", R.get("sigma"))
                if R.get("regime") else "")
             + (f"; held-out evaluation every {R['eval_rollouts']} rollouts"
                if R.get("eval_rollouts") else "") + ".\n")
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
    L += analysis_section(R, s, budget)
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
