# SPDX-License-Identifier: MIT
"""bench/train/probe_report.py PROBE_JSON...: the gradient probe's tables
(into PROBE.md, between its markers) and its committed summaries.

    probe_report.py bench/train/out/probe/probe-<regime>.json ...
        writes bench/results/train/PROBE-<regime>.json (the probe's output,
        per replicate, numbers rounded to 5 digits) and the tables
    probe_report.py bench/results/train/PROBE-*.json
        the tables from the committed summaries

Per checkpoint a rule's figure is the mean over its replicate batches;
the tables give the median over checkpoints [min, max]. err: squared error
to the reference, less the reference's own error, relative to ||g*||^2;
err@c: the same at the rule's best fixed scale c (one per rule and
checkpoint: Adam makes a rule's overall scale moot), = 1 - rho^2 with rho
the correlation-like E<g, g*> / sqrt(E||g||^2 ||g*||^2); cos: mean cosine;
D: the same in Adam's metric (probe_stats.py).
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench",
                       "results", "train")
PAGE = os.path.join(HERE, "PROBE.md")
BEGIN = "<!-- probe tables: written by probe_report.py, do not edit -->"
END = "<!-- end of probe tables -->"
# Rules whose batches do not read the prior: in the prior regimes they are
# today's, batch for batch (same checkpoints, prompts and draws).
NO_PRIOR = ("ebpo-4", "ebpo-8", "pilot-commit-4-12", "reinforce-ada",
            "grpo-16", "dapo-16")


def rnd(x):
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, dict):
        return {k: rnd(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rnd(v) for v in x]
    return x


def figures(rule: dict, ref: dict, variant: str = "trained") -> dict:
    """A rule's means over replicates at one checkpoint."""
    v = rule["variants"][variant]
    out = {}
    for sfx, L in (("", "I"), ("D", "D")):
        st = ref[L]
        raw2 = st["norm2"] + st["var_ref"]            # ||R1||^2 as measured
        n2 = np.array(v["n2" + sfx])
        dot = np.array(v["cos" + sfx]) * np.sqrt(n2 * raw2)
        c = dot.mean() / n2.mean()
        out["err" + sfx] = (np.mean(v["err" + sfx]) - st["var_ref"]) / st["norm2"]
        out["errc" + sfx] = (c * c * n2.mean() - 2 * c * dot.mean()
                             + st["norm2"]) / st["norm2"]
        out["cos" + sfx] = float(np.mean(v["cos" + sfx]))
        out["bias" + sfx] = v["bias2"][L] / st["norm2"]
    out["cos0"] = float(np.mean(v["cos0"]))
    b = rule["batch"]
    out["rollouts"] = float(np.mean(b["rollouts"]))
    out["prompts"] = float(np.mean(b["prompts"]))
    out["mse"] = float(np.mean(b["mse"]))
    out["err256"] = out["err"] * out["rollouts"] / 256
    return out


def load(paths):
    """The probe's outputs, those of one regime and normaliser merged
    (more seeds added by a later invocation: same settings required)."""
    runs = {}
    for p in paths:
        with open(p) as f:
            R = json.load(f)
        key = (R["regime"], R["sigma"])
        if key not in runs:
            runs[key] = R
            continue
        Q = runs[key]
        for k in ("checkpoints", "replicates", "burn", "ref_prompts",
                  "ref_samples", "lr", "budget"):
            if Q[k] != R[k]:
                raise SystemExit(f"probe_report: {k} differs between the "
                                 f"{key[0]} runs merged")
        have = {(c["seed"], c["at"]): c for c in Q["results"]}
        if set(R["rules"]) == set(Q["rules"]):  # more seeds
            Q["results"] += [c for c in R["results"]
                             if (c["seed"], c["at"]) not in have]
        else:  # more rules at the same checkpoints
            add_rules(key[0], have, R)
            Q["rules"] += [r for r in R["rules"] if r not in Q["rules"]]
        Q["seeds"] = sorted(set(Q["seeds"]) | set(R["seeds"]))
        Q["command"] += "` + `" + R["command"]
        Q["commit"] = " + ".join(dict.fromkeys(Q["commit"].split(" + ") + [R["commit"]]))
        Q["wall"] += R["wall"]
    for R in runs.values():
        R["results"].sort(key=lambda c: (c["seed"], c["at"]))
    return list(runs.values())


def add_rules(regime, have, R):
    """R's rules into the checkpoints of `have` ((seed, at) -> checkpoint).
    A batch is a function of its checkpoint, replicate and rule (probe.py),
    so a rule probed later joins the others, and a rule probed again (a
    later build of the library) replaces its earlier data; the checkpoint
    must be the same state: its reference statistics equal (to the
    summaries' rounding)."""
    for c in R["results"]:
        q = have.get((c["seed"], c["at"]))
        if q is None:
            raise SystemExit(f"probe_report: the {regime} run adding "
                             f"{R['rules']} has checkpoint seed {c['seed']} "
                             f"at {c['at']}, which the others lack")
        a, b = q["ref"]["I"]["norm2"], c["ref"]["I"]["norm2"]
        if abs(a - b) > 1e-4 * abs(a):
            raise SystemExit(f"probe_report: checkpoint seed {c['seed']} at "
                             f"{c['at']} of {regime} is another state in the "
                             f"runs merged (reference norm {a} vs {b})")
        q["rules"].update(c["rules"])


def summaries(runs):
    os.makedirs(RESULTS, exist_ok=True)
    for R in runs:
        # Runs to 8ef9d71 without --sigma were rms for every rule (no
        # suffix); later runs say "default" (each rule's own normaliser).
        name = f"PROBE-{R['regime']}" + {"paper": "-paper", "rms": ""}.get(
            R["sigma"], f"-{R['sigma']}")
        with open(os.path.join(RESULTS, name + ".json"), "w") as f:
            json.dump(rnd(R), f, separators=(",", ":"))
            f.write("\n")


def rows_of(R, rule, today=None):
    """(checkpoint's reference statistics, the rule's data) over R's
    checkpoints; a rule R did not run that reads no prior comes from
    today's run at the same checkpoint (same state, prompts and draws)."""
    if rule in R["rules"]:
        return [(ck["ref"], ck["rules"][rule]) for ck in R["results"]]
    if today is None or rule not in NO_PRIOR or rule not in today["rules"]:
        return []
    # The same state: the same seed and checkpoint of the same reference
    # run (its rollouts and step; a reference run made with another
    # library stops at other rollouts, and its rows are not this one's).
    def key(c):
        return c["seed"], c["at"], c["rollouts"], c["step"]
    at = {key(c): c for c in today["results"]}
    return [(ck["ref"], at[key(ck)]["rules"][rule])
            for ck in R["results"] if key(ck) in at]


def rules_of(R, today=None):
    out = list(R["rules"])
    if today is not None and today is not R:
        out += [r for r in today["rules"] if r in NO_PRIOR and r not in out]
    return out


def med(xs, d=3, pct=False):
    xs = np.asarray(xs, dtype=float)
    f = (lambda x: f"{x:.0%}") if pct else (lambda x: f"{x:.{d}f}")
    return f"{f(np.median(xs))} [{f(xs.min())}, {f(xs.max())}]"


def rule_table(R, today=None):
    """Per rule: median over checkpoints [min, max]."""
    L = ["| rule | batch: rollouts, prompts | baseline MSE | err | err x rollouts/256 "
         "| err@c | cos | err D | err@c D | cos D | cos to R0 |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for rule in rules_of(R, today):
        F = [figures(x, ref) for ref, x in rows_of(R, rule, today)]
        if not F:
            continue
        col = {k: [f[k] for f in F] for k in F[0]}
        name = rule + (" (today's batches: it reads no prior)"
                       if rule not in R["rules"] else "")
        L.append(f"| {name} | {np.mean(col['rollouts']):.0f}, "
                 f"{np.mean(col['prompts']):.0f} | {np.mean(col['mse']):.3f} | "
                 f"{med(col['err'], 2)} | {med(col['err256'], 2)} | "
                 f"{med(col['errc'])} | {med(col['cos'])} | "
                 f"{med(col['errD'], 2)} | {med(col['errcD'])} | "
                 f"{med(col['cosD'])} | {med(col['cos0'])} |")
    return L


def paired_table(R, ref_rule="v05-eb", today=None):
    """Per rule against ref_rule, checkpoint by checkpoint (same prompts
    and draws): in how many checkpoints its err@c and cos are better."""
    if ref_rule not in R["rules"]:
        return []
    L = [f"| rule | err@c below {ref_rule}'s | cos above | err@c D below | "
         "cos D above | err@c minus, median [min, max] |",
         "|---|---|---|---|---|---|"]
    b = [figures(x, ref) for ref, x in rows_of(R, ref_rule)]
    n = len(b)
    for rule in rules_of(R, today):
        if rule == ref_rule:
            continue
        a = [figures(x, ref) for ref, x in rows_of(R, rule, today)]
        if len(a) != n:
            continue
        cnt = {k: sum((x[k] < y[k]) if k.startswith("err") else (x[k] > y[k])
                      for x, y in zip(a, b)) for k in ("errc", "cos", "errcD", "cosD")}
        d = [x["errc"] - y["errc"] for x, y in zip(a, b)]
        L.append(f"| {rule} | {cnt['errc']}/{n} | {cnt['cos']}/{n} | "
                 f"{cnt['errcD']}/{n} | {cnt['cosD']}/{n} | {med(d)} |")
    return L


def decomposition_table(R):
    L = ["| seed | rollouts | p mean | p < 0.1 | Vb | Vw | S | H | "
         "reference's error | cos(R0, R1) | cos(R2, R1) | Vb D | Vw D |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ck in R["results"]:
        I, D = ck["ref"]["I"], ck["ref"]["D"]
        n2, n2D = I["norm2"], D["norm2"]
        L.append(f"| {ck['seed']} | {ck['at']} | {ck['ref']['p_mean']:.3f} | "
                 f"{ck['ref']['p_below_01']:.0%} | {I['Vb'] / n2:.1f} | "
                 f"{I['Vw'] / n2:.1f} | {I['S'] / n2:.0f} | {I['H'] / n2:.2f} | "
                 f"{I['var_ref'] / n2:.3f} | {I['cos_R0_R1']:.3f} | "
                 f"{I['cos_R2_R1']:.3f} | {D['Vb'] / n2D:.1f} | "
                 f"{D['Vw'] / n2D:.1f} |")
    return L


def oracle_table(R):
    """The pseudo-rules oracle-k: 256 rollouts = 256/k prompts x k, exact
    baseline. Measured err against (k Vb + Vw) / 256 (relative)."""
    ks = sorted(int(r[7:]) for r in R["rules"] if r.startswith("oracle-"))
    if not ks:
        return []
    L = ["| k | measured err | predicted (k Vb + Vw) / 256 | measured / predicted | err@c | cos |",
         "|---|---|---|---|---|---|"]
    for k in ks:
        meas, pred, errc, cos = [], [], [], []
        for ck in R["results"]:
            f = figures(ck["rules"][f"oracle-{k}"], ck["ref"])
            I = ck["ref"]["I"]
            meas.append(f["err"])
            pred.append((k * I["Vb"] + I["Vw"]) / 256 / I["norm2"])
            errc.append(f["errc"])
            cos.append(f["cos"])
        L.append(f"| {k} | {med(meas, 2)} | {med(pred, 2)} | "
                 f"{med(np.array(meas) / np.array(pred), 2)} | {med(errc)} | {med(cos)} |")
    return L


def prediction_table(R):
    """Measured err of the raw and oracle variants (no normaliser)
    against the decomposition's prediction plus the rule's measured bias."""
    L = ["| rule | variant | measured err | predicted variance | bias^2 | "
         "measured / (predicted + bias^2) |", "|---|---|---|---|---|---|"]
    for rule in R["rules"]:
        if rule.startswith("oracle-") and rule not in ("oracle-1", "oracle-16"):
            continue
        for var in ("raw", "oracle"):
            if rule.startswith("oracle-") and var == "raw":
                continue
            m, p, b = [], [], []
            for ck in R["results"]:
                f = figures(ck["rules"][rule], ck["ref"], var)
                n2 = ck["ref"]["I"]["norm2"]
                m.append(f["err"])
                p.append(np.nanmean(ck["rules"][rule]["pred"][var]["I"]) / n2)
                b.append(f["bias"])
            ratio = np.array(m) / (np.array(p) + np.maximum(np.array(b), 0))
            L.append(f"| {rule} | {var} | {med(m, 2)} | {med(p, 2)} | "
                     f"{med(b, 2)} | {med(ratio, 2)} |")
    return L


def cost_table(R):
    """err@c of each rule's three gradients from the same samples: the
    exact baseline (its allocation alone), its own baseline without the
    normaliser, and as trained; and the baseline's MSE."""
    L = ["| rule | err@c, exact baseline | its baseline | as trained | "
         "baseline's cost | normaliser's cost | baseline MSE |",
         "|---|---|---|---|---|---|---|"]
    for rule in R["rules"]:
        if rule.startswith("oracle-"):
            continue
        col = {v: [] for v in ("oracle", "raw", "trained")}
        mse = []
        for ck in R["results"]:
            for v in col:
                col[v].append(figures(ck["rules"][rule], ck["ref"], v)["errc"])
            mse.append(np.mean(ck["rules"][rule]["batch"]["mse"]))
        o, r, t = (np.array(col[v]) for v in ("oracle", "raw", "trained"))
        L.append(f"| {rule} | {med(o)} | {med(r)} | {med(t)} | {med(r - o)} | "
                 f"{med(t - r)} | {np.mean(mse):.3f} |")
    return L


def checkpoint_rows(R):
    L = ["| seed | rollouts | rule | err | err@c | cos | err D | err@c D | cos D |",
         "|---|---|---|---|---|---|---|---|---|"]
    for ck in R["results"]:
        for rule, x in ck["rules"].items():
            f = figures(x, ck["ref"])
            L.append(f"| {ck['seed']} | {ck['at']} | {rule} | {f['err']:.2f} | "
                     f"{f['errc']:.3f} | {f['cos']:.3f} | {f['errD']:.2f} | "
                     f"{f['errcD']:.3f} | {f['cosD']:.3f} |")
    return L


def tables(runs):
    today = next((R for R in runs if R["regime"] == "today"
                  and R["sigma"] != "paper"), None)
    out = []
    for R in runs:
        title = R["regime"] + {"paper": " (the paper's normaliser)",
                               "rms": ""}.get(R["sigma"], " (each rule's own normaliser)")
        out.append(f"### Regime {title}\n")
        out.append(f"`{R['command']}` at {R['commit']}: seeds {R['seeds']}, "
                   f"checkpoints at {R['checkpoints']} rollouts, {R['replicates']} "
                   f"replicates per rule, reference {R['ref_prompts']} prompts x "
                   f"{R['ref_samples']} samples; {R['wall'] / 60:.0f} min.\n")
        other = today if R is not today and R["regime"] in ("noisy-prior", "no-prior") else None
        out += rule_table(R, other) + [""]
        pt = paired_table(R, today=other)
        if pt:
            out += ["Against v05-eb, checkpoint by checkpoint:\n"] + pt + [""]
        out += ["The decomposition (relative to ||g*||^2; Vb between prompts, "
                "Vw within a prompt for one sample, S the score's second "
                "moment, H = ||E grad l||^2):\n"] + decomposition_table(R) + [""]
        ot = oracle_table(R)
        if ot:
            out += ["The exact-baseline batches at 256 rollouts:\n"] + ot + [""]
        out += ["What the baseline and the normaliser cost (err@c, median "
                "over checkpoints; the costs are per checkpoint differences):\n"] + \
            cost_table(R) + [""]
        out += ["The prediction from (prompts, samples, baseline errors):\n"] + \
            prediction_table(R) + [""]
        out += ["<details><summary>Per checkpoint</summary>\n"] + \
            checkpoint_rows(R) + ["\n</details>\n"]
    return "\n".join(out)


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    paths = [a for a in argv if a.endswith(".json")]
    runs = load(paths)
    # Raw runs are summarised into RESULTS; committed summaries (RESULTS
    # and its folders) are only read.
    if any(not os.path.abspath(p).startswith(RESULTS + os.sep) for p in paths):
        summaries(runs)
    text = tables(runs)
    if os.path.exists(PAGE) and "--stdout" not in argv:
        page = open(PAGE).read()
        if BEGIN in page and END in page:
            a, b = page.index(BEGIN) + len(BEGIN), page.index(END)
            with open(PAGE, "w") as f:
                f.write(page[:a] + "\n\n" + text + "\n" + page[b:])
            print(f"wrote the tables into {PAGE}")
            return
    print(text)


if __name__ == "__main__":
    main()
