# SPDX-License-Identifier: MIT
"""The statistics section of bench/RESULTS.md (issue 13): the paper's rule
with and without its halt, v05-eb, fixed k and grpo over the 12-cell prior
grid, a cost sweep, both schedules, and the advantages' distribution. Every
number comes from bench/out/stats.jsonl and sim.jsonl (bench/run)."""

import json
import math
import os

NOISES = [0.05, 0.1, 0.2, 0.3]
HALLUCINATIONS = [0.0, 0.1, 0.3]
COST = 0.0039


def records(out):
    recs = []
    with open(os.path.join(out, "stats.jsonl")) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    return recs


def close(a, b):
    return abs(a - b) < 1e-9


def pick(recs, noise, h, mode, cost=COST, halt=None, schedule="rounds",
         sigma="rms", k=None):
    for r in recs:
        if (close(r["prior_noise"], noise) and close(r["hallucination"], h)
                and r["mode"] == mode and close(r["cost"], cost)
                and r["schedule"] == schedule and r["sigma"] == sigma
                and (halt is None or close(r["halt_fraction"], halt))
                and (k is None or r["k"] == k)):
            return r
    return None


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def cells():
    return [(n, h) for h in HALLUCINATIONS for n in NOISES]


# (label, selector over (recs, sims, noise, h, cost)) for the three rules
def paper_halt(recs, n, h, c=COST, sched="rounds"):
    return pick(recs, n, h, "v05", c, 0.25, sched)


def paper_nohalt(recs, n, h, c=COST, sched="rounds"):
    return pick(recs, n, h, "v05", c, 0.0, sched)


def eb(recs, n, h, c=COST, sched="rounds"):
    return pick(recs, n, h, "v05-eb", c, None, sched)


def grpo16(sims, n, h):
    for r in sims:
        if (close(r["prior_noise"], n) and close(r["hallucination"], h)
                and r["mode"] == "grpo" and r["k"] == 16):
            return r
    return None


def costs(recs):
    return sorted({r["cost"] for r in recs}, reverse=True)


def section(out, sims, goals):
    recs = records(out)
    r0 = recs[0]
    s = ["## Statistics: the paper's rule, its halt, and v05-eb", "",
         "`v05ctl sim` as above (%d prompts per configuration, batches of "
         "%d, padding to %d, seed %d, the same prompts and reward draws in "
         "every configuration of a cell). *paper + halt* is mode v05 with "
         "the paper's 25%% batch halt, *paper, no halt* the same rule run "
         "to each prompt's own answer, *v05-eb* the empirical-Bayes "
         "baseline with two-stage allocation (docs/STATISTICS.md); all at "
         "c = %g, k_init = 4, k_step = 2, k_max = 16, schedule rounds. "
         "Waves: dispatches per batch, the first included. Each cell: MSE "
         "(rollouts per prompt, mean waves per batch)." % (
             r0["prompts"], r0["batch"], r0["pad_multiple"], r0["seed"], COST),
         "",
         "| noise | h | paper + halt | paper, no halt | v05-eb | grpo G=16 "
         "| v05-eb / no halt: MSE | rollouts |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    mse_ratio, rpp_ratio, halt_cost, waves = [], [], [], []
    for n, h in cells():
        a, b, e, g = (paper_halt(recs, n, h), paper_nohalt(recs, n, h),
                      eb(recs, n, h), grpo16(sims, n, h))
        if not (a and b and e and g):
            continue
        mse_ratio.append(e["mse"] / b["mse"])
        rpp_ratio.append(e["rollouts_per_prompt"] / b["rollouts_per_prompt"])
        halt_cost.append(a["mse"] / b["mse"])
        waves.append(e["max_waves"])

        def cell(r):
            return "%.4f (%.2f, %.2f)" % (r["mse"], r["rollouts_per_prompt"],
                                          r["waves_per_batch"])
        s.append("| %g | %g | %s | %s | %s | %.4f | %.3f | %.3f |" % (
            n, h, cell(a), cell(b), cell(e), g["mse"], mse_ratio[-1],
            rpp_ratio[-1]))
    gm, gr = gmean(mse_ratio), gmean(rpp_ratio)
    s += ["", "- Over the %d cells, v05-eb's MSE against the paper's rule "
          "without the halt: geometric mean ratio **%.3f** (%.3f to %.3f), "
          "at a geometric-mean rollouts ratio of **%.3f**, with at most %d "
          "waves per batch (the paper's rule without the halt: %.1f to %.1f "
          "waves on average, up to %d)." % (
              len(mse_ratio), gm, min(mse_ratio), max(mse_ratio), gr,
              max(waves),
              min(paper_nohalt(recs, n, h)["waves_per_batch"] for n, h in cells()),
              max(paper_nohalt(recs, n, h)["waves_per_batch"] for n, h in cells()),
              max(paper_nohalt(recs, n, h)["max_waves"] for n, h in cells())),
          "- The paper's 25%% halt costs %.1fx to %.1fx in MSE against the "
          "same rule without it." % (min(halt_cost), max(halt_cost))]
    goals.append(("v05-eb / paper rule without halt, 12-cell grid, c = %g: "
                  "geometric-mean MSE ratio <= 0.85 at rollouts ratio <= 1.05, "
                  "<= 2 waves" % COST,
                  "%.3f at %.3f, %d waves" % (gm, gr, max(waves)),
                  gm <= 0.85 and gr <= 1.05 and max(waves) <= 2))

    # Cost sweep: where does each rule reach grpo G=16's MSE?
    cs = costs(recs)
    s += ["", "### Reaching grpo G=16's MSE", "",
          "The cost c swept over %s. For each cell, the largest c (fewest "
          "rollouts) at which the rule's MSE is at or below grpo G=16's, "
          "with its MSE and rollouts per prompt; '-' when no c in the sweep "
          "reaches it." % ", ".join("%g" % c for c in cs), "",
          "| noise | h | grpo G=16 | v05-eb | paper, no halt | paper + halt |",
          "|---:|---:|---:|---:|---:|---:|"]
    reach_ok, reach_cells = True, 0
    for n, h in cells():
        g = grpo16(sims, n, h)
        row = []
        for sel in (eb, paper_nohalt, paper_halt):
            hit = None
            for c in cs:
                r = sel(recs, n, h, c)
                if r and r["mse"] <= g["mse"]:
                    hit = (c, r)
                    break
            row.append("-" if hit is None else "c=%g: %.4f (%.2f)" % (
                hit[0], hit[1]["mse"], hit[1]["rollouts_per_prompt"]))
            if sel is eb:
                reach_cells += hit is not None
                reach_ok = reach_ok and hit is not None
        s.append("| %g | %g | %.4f | %s |" % (n, h, g["mse"], " | ".join(row)))
    goals.append(("v05-eb reaches grpo G=16's MSE (some c in the sweep), "
                  "every cell", "%d of %d cells" % (reach_cells, len(cells())),
                  reach_ok))

    # Schedules.
    s += ["", "### Schedules", "",
          "The same rules under `--schedule stream` (a held \"more\" is "
          "released as soon as the held samples fill a dispatch of 32, or "
          "nothing else is collecting). Mean over the 12 cells at c = %g; "
          "waves are dispatches per batch." % COST, "",
          "| rule | schedule | mean MSE | mean rollouts | mean waves | max waves |",
          "|---|---|---:|---:|---:|---:|"]
    for label, sel in (("paper + halt", paper_halt),
                       ("paper, no halt", paper_nohalt), ("v05-eb", eb)):
        for sched in ("rounds", "stream"):
            rs = [sel(recs, n, h, COST, sched) for n, h in cells()]
            rs = [r for r in rs if r]
            if not rs:
                continue
            s.append("| %s | %s | %.4f | %.2f | %.2f | %d |" % (
                label, sched, sum(r["mse"] for r in rs) / len(rs),
                sum(r["rollouts_per_prompt"] for r in rs) / len(rs),
                sum(r["waves_per_batch"] for r in rs) / len(rs),
                max(r["max_waves"] for r in rs)))

    # Advantages.
    s += ["", "### Advantages", "",
          "The distribution of |A| over every final sample, and the mean of "
          "A^2, at noise 0.2 and hallucination 0 (priors clipped at +-1 are "
          "a few percent of prompts), c = %g. *grpo on the same groups* is "
          "verl's (r - mean) / (std + 1e-6) on each row's own groups; the "
          "last row is grpo G=16's own run." % COST, "",
          "| rule | normaliser | p99 | p99.9 | max | mean A^2 | grpo on the same groups: p99.9, max, mean A^2 |",
          "|---|---|---:|---:|---:|---:|---:|"]
    worst_rms = 0.0
    for label, mode, halt, sigma in (("paper + halt", "v05", 0.25, "paper"),
                                     ("paper + halt", "v05", 0.25, "rms"),
                                     ("v05-eb", "v05-eb", None, "paper"),
                                     ("v05-eb", "v05-eb", None, "rms")):
        r = pick(recs, 0.2, 0.0, mode, COST, halt, "rounds", sigma)
        if not r:
            continue
        a, g = r["adv"], r["adv_grpo"]
        s.append("| %s | %s | %.2f | %.2f | %.2f | %.3f | %.2f, %.2f, %.3f |" % (
            label, sigma, a["p99"], a["p999"], a["max"], a["mean_sq"],
            g["p999"], g["max"], g["mean_sq"]))
    g = grpo16(sims, 0.2, 0.0)
    if g and "adv" in g:
        a = g["adv"]
        s.append("| grpo G=16 | std + 1e-6 | %.2f | %.2f | %.2f | %.3f | |" % (
            a["p99"], a["p999"], a["max"], a["mean_sq"]))
    for r in recs:
        if r["sigma"] == "rms" and r["mode"] in ("v05", "v05-eb"):
            worst_rms = max(worst_rms, r["adv"]["max"] / math.sqrt(r["max_k"]))
    s += ["", "- Over every rms run of this section (all cells, costs and "
          "schedules), max |A| / sqrt(max k) = %.3f (the bound is 1)." % worst_rms]
    goals.append(("rms normaliser: |A| <= sqrt(k) in every simulated run",
                  "max |A| / sqrt(k_max seen) = %.3f" % worst_rms,
                  worst_rms <= 1.0 + 1e-6))
    return s, recs


def plot(recs, sims, d, meta, plt):
    """MSE against rollouts per prompt, per cell: the cost sweeps as lines,
    fixed k and grpo as lines over k."""
    fig, axes = plt.subplots(len(HALLUCINATIONS), len(NOISES), figsize=(14, 9.5),
                             sharex=True, sharey=True)
    cs = costs(recs)
    for i, h in enumerate(HALLUCINATIONS):
        for j, n in enumerate(NOISES):
            ax = axes[i][j]
            for label, sel, st in (("paper + halt (c sweep)", paper_halt, "o-"),
                                   ("paper, no halt (c sweep)", paper_nohalt, "s-"),
                                   ("v05-eb (c sweep)", eb, "^-")):
                pts = [sel(recs, n, h, c) for c in cs]
                pts = [p for p in pts if p]
                ax.plot([p["rollouts_per_prompt"] for p in pts],
                        [p["mse"] for p in pts], st, ms=4, label=label)
            for label, mode, st in (("v05-fixed k=1,2,4,8", "v05-fixed", "d--"),
                                    ("grpo G=4,16", "grpo", "x--")):
                pts = sorted((r for r in sims if r["mode"] == mode
                              and close(r["prior_noise"], n)
                              and close(r["hallucination"], h)),
                             key=lambda r: r["k"])
                ax.plot([p["rollouts_per_prompt"] for p in pts],
                        [p["mse"] for p in pts], st, ms=5, label=label)
            ax.set_yscale("log")
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title("noise %g, hallucination %g" % (n, h), fontsize=9)
            if i == len(HALLUCINATIONS) - 1:
                ax.set_xlabel("rollouts per prompt")
            if j == 0:
                ax.set_ylabel("baseline MSE")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9)
    fig.suptitle("Baseline MSE against rollouts per prompt: the paper's rule "
                 "with and without its halt, v05-eb, fixed k, grpo "
                 "(v05ctl sim, %d prompts each)" % recs[0]["prompts"], fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(os.path.join(d, "stats_mse_vs_rollouts.svg"), metadata=meta)
    plt.close(fig)
    return "plots/stats_mse_vs_rollouts.svg"
