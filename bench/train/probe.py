# SPDX-License-Identifier: MIT
"""bench/train/probe: the gradient-quality probe (issue 43; PROBE.md).

At frozen checkpoints of a reference training run (mode `default`, saved
with Adam's state), a reference gradient from many rollouts
(probe_ref.py), then R replicate batches per rule at the bench's budget of
256 rollouts, each through the real plugin in that mode and weighted as
the trainer's loss weights it (probe_rules.py); each batch gradient's
squared error to the reference and its cosines, in the identity metric
and in Adam's (probe_stats.py). Raw results to bench/train/out/probe/;
probe_report.py makes the tables and the committed summary.

    bench/train/probe --quick                  a few minutes: 1 seed, 2 checkpoints
    bench/train/probe --regime today           PROBE.md's run for one regime
    bench/train/probe --help
"""

import argparse
import asyncio
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import grads  # noqa: E402
import main as bench  # noqa: E402
import model as M  # noqa: E402
import probe_ref  # noqa: E402
import probe_rules as PR  # noqa: E402
import probe_stats as PS  # noqa: E402
import regimes  # noqa: E402
import task  # noqa: E402
import trainer as T  # noqa: E402

OUT = os.path.join(HERE, "out", "probe")
CKPT = os.path.join(HERE, "out", "ckpt")
# The rules PROBE.md compares: every mode of the bench a fresh prompt
# stream can run, and the pseudo-rules oracle-k (exact baseline, no
# plugin). Any entry of modes.mode_specs() can be added with --rules.
RULES = ("fixed-1", "fixed-2", "fixed-4", "knapsack-prior-4", "ebpo-4",
         "ebpo-8", "pilot-commit-4-12", "reinforce-ada", "grpo-16",
         "dapo-16", "v05", "v05-eb", "v05-pg", "oracle-1", "oracle-2", "oracle-4",
         "oracle-8", "oracle-16")
QUICK_RULES = ("fixed-1", "fixed-4", "grpo-16", "v05-eb", "oracle-1",
               "oracle-4")
BUDGET_STEPS = 80  # the training bench's budget: the checkpoints' scale


def checkpoints(regime, seed, lr, ats, warmup, log):
    """The checkpoint files of the reference run (mode `v05-eb` at this
    lr, in the regime's task with today's priors), run now if missing.
    v05-eb as the bench runs it is the library's default configuration
    (mode `default`, which made every committed checkpoint): named, so
    the probe's states stay what they are if the default changes."""
    d = os.path.join(CKPT, f"{regime.task_key}-lr{lr:g}-s{seed}")
    paths = [os.path.join(d, f"{a}.pt") for a in ats]
    if all(os.path.exists(p) for p in paths):
        return paths
    t0 = time.time()
    run_regime = regimes.Regime("ckpt", lengths=regime.lengths)
    state = bench.warm_state(seed, warmup, task.heldout_set(360))
    spec = T.mode_specs()["v05-eb"]
    tr = T.Trainer(spec, seed, state, run_regime.heldout(360), lr=lr,
                   eval_every=10 ** 9, regime=run_regime, checkpoints=ats,
                   ckpt_dir=d)
    try:
        asyncio.run(tr.train(max(ats), progress=lambda t: None))
    finally:
        tr.close()
    log(f"reference run ({spec.name} = {spec.mode}, seed {seed}, "
        f"{regime.task_key}): {tr.rollouts} rollouts, {time.time() - t0:.0f} s")
    return paths


def load(path, lr):
    ck = torch.load(path)
    policy = M.TinyLM()
    policy.load_state_dict(ck["policy"])
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    opt.load_state_dict(ck["opt"])
    return ck, policy, grads.adam_state(opt, policy)


def reference(name, policy, adam, regime, args, log):
    path = os.path.join(OUT, f"ref-{name}-N{args.ref_prompts}-M{args.ref_samples}.pt")
    if os.path.exists(path):
        return torch.load(path)
    ref = probe_ref.reference(policy, adam, regime.heldout(360), regime.lengths,
                              name, args.ref_prompts, args.ref_samples,
                              progress=log)
    os.makedirs(OUT, exist_ok=True)
    torch.save(ref, path + ".tmp")
    os.replace(path + ".tmp", path)
    return ref


def rule_batches(rule, pool, seed, ck, regime, args):
    if rule.startswith("oracle-"):
        k = int(rule.split("-")[1])
        return [PR.oracle_k(pool, k, r) for r in range(args.replicates)]
    spec = T.mode_specs()[rule]
    return asyncio.run(PR.run_rule(spec, pool, seed, ck["policy"],
                                   regime.heldout(360), regime, args.sigma,
                                   args.replicates, args.burn))


def probe_checkpoint(regime, seed, path, args, log):
    ck, policy, adam = load(path, args.lr)
    name = f"{regime.task_key}-lr{args.lr:g}-s{seed}-{ck['at']}"
    t0 = time.time()
    ref = reference(name, policy, adam, regime, args, log)
    D = ref["D"]
    t_ref = time.time() - t0
    pool = PR.Pool(name, policy, regime.heldout(360), regime.lengths)
    batches, times = {}, {}
    for rule in args.rules:
        t = time.time()
        batches[rule] = rule_batches(rule, pool, seed, ck, regime, args)
        times[rule] = time.time() - t
    t1 = time.time()
    rows = [(rule, v) for rule in args.rules for v in PR.VARIANTS]
    res = {rule: dict(variants={v: {m: [] for m in PS.METRICS}
                                for v in PR.VARIANTS},
                      batch={k: [] for k in ("rollouts", "prompts", "kept",
                                             "mse", "prior_mse", "k_mean")},
                      pred={v: {"I": [], "D": []} for v in ("raw", "oracle")})
           for rule in args.rules}
    sums = {(row, x): torch.zeros(D.numel(), dtype=torch.float64)
            for row in rows for x in "GU"}
    for r in range(args.replicates):
        keys = sorted({key for rule in args.rules
                       for v in PR.VARIANTS for key in batches[rule][r][0][v]})
        index = {key: i for i, key in enumerate(keys)}
        outs = pool.sample(keys)
        ps = [pool.prompt(key[0], key[1]) for key in keys]
        G = grads.per_seq_grads(policy, ps, outs)
        # Each row has a batch's few hundred sequences of the union's
        # thousand or more: a sparse product.
        ij, val = [], []
        for i, (rule, v) in enumerate(rows):
            for key, c in batches[rule][r][0][v].items():
                ij.append((i, index[key]))
                val.append(c)
        C = torch.sparse_coo_tensor(torch.tensor(ij).t(), torch.tensor(val, dtype=torch.float32),
                                    (len(rows), len(keys)))
        Gv = torch.sparse.mm(C, G).double()
        Uv = PS.adam_steps(Gv, adam)
        m = PS.metrics(Gv, Uv, ref)
        for i, (rule, v) in enumerate(rows):
            sums[((rule, v), "G")] += Gv[i]
            sums[((rule, v), "U")] += Uv[i]
            for k in PS.METRICS:
                res[rule]["variants"][v][k].append(float(m[k][i]))
        for rule in args.rules:
            rec = batches[rule][r][1]
            b = res[rule]["batch"]
            for k in ("rollouts", "prompts", "kept", "mse", "prior_mse"):
                b[k].append(rec[k])
            b["k_mean"].append(float(np.mean(rec["k"])) if rec["k"] else 0.0)
            for v in ("raw", "oracle"):
                pr = PS.predict(ref["stats"], rec, oracle=v == "oracle")
                res[rule]["pred"][v]["I"].append(pr["I"])
                res[rule]["pred"][v]["D"].append(pr["D"])
    R = args.replicates
    for rule, v in rows:
        out = {}
        for label, x, key, target in (("I", "G", "n2", ref["R1"]),
                                      ("D", "U", "n2D", ref["R1"] * D)):
            mean = sums[((rule, v), x)] / R
            var_mean = (sum(res[rule]["variants"][v][key]) -
                        R * float(mean @ mean)) / (R * (R - 1))
            out[label] = PS.bias2(mean, target, var_mean,
                                  ref["stats"][label]["var_ref"])
        res[rule]["variants"][v]["bias2"] = out
    log(f"  {name}: reference {t_ref:.0f} s, rules " +
        ", ".join(f"{k} {t:.0f}" for k, t in times.items()) +
        f" s, gradients {time.time() - t1:.0f} s ({pool.sampled} sampled)")
    return dict(regime=regime.name, seed=seed, at=ck["at"], step=ck["step"],
                rollouts=ck["rollouts"], ref=ref["stats"], rules=res)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/train/probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, checkpoints at 2560 and 5120 rollouts, 6 "
                    "replicates, 6 rules, a small reference (minutes)")
    ap.add_argument("--regime", default="today",
                    help="one of " + ", ".join(regimes.REGIMES))
    ap.add_argument("--seeds", default="0,1,2",
                    help="design seeds, comma list (default 0,1,2)")
    ap.add_argument("--checkpoints", default=None,
                    help="rollouts of the reference run, comma list (default "
                    "2560,5120,10240,15360: after the 10 steps of the "
                    "learning-rate warm-up, and 25/50/75%% of the 80-step "
                    "budget)")
    ap.add_argument("--rules", default=None,
                    help="comma list (default: " + ",".join(RULES) + ")")
    ap.add_argument("--replicates", type=int, default=None,
                    help="replicate batches per rule (default 32)")
    ap.add_argument("--burn", type=int, default=None,
                    help="batches that warm a rule's state first (default 8)")
    ap.add_argument("--ref-prompts", type=int, default=None,
                    help="reference prompts (default 4096)")
    ap.add_argument("--ref-samples", type=int, default=None,
                    help="samples per reference prompt (default 4)")
    ap.add_argument("--lr", type=float, default=2e-3,
                    help="the reference run's learning rate")
    ap.add_argument("--sigma", choices=("rms", "paper"), default=None,
                    help="the fused modes' normaliser (default each "
                    "mode's own: paper for v05-pg, else rms)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    q = args.quick
    args.rules = (args.rules.split(",") if args.rules else
                  list(QUICK_RULES if q else RULES))
    specs = T.mode_specs()
    bad = [r for r in args.rules if not (r in specs or (
        r.startswith("oracle-") and r[7:].isdigit() and 256 % int(r[7:]) == 0))]
    if bad:
        ap.error(f"unknown rule(s) {','.join(bad)}: a mode of "
                 f"{','.join(specs)} or oracle-K (K divides 256)")
    for r in args.rules:
        if r in specs:
            try:
                PR.probe_spec(specs[r])
            except ValueError as e:
                ap.error(str(e))
    try:
        regime = regimes.get(args.regime)
    except ValueError as e:
        ap.error(str(e))
    seeds = [0] if q else [int(s) for s in args.seeds.split(",")]
    if max(seeds) >= bench.REPORT_SEEDS:
        ap.error(f"seeds {bench.REPORT_SEEDS} and up are report seeds")
    ats = [int(a) for a in (args.checkpoints or
                            ("2560,5120" if q else "2560,5120,10240,15360")).split(",")]
    args.replicates = args.replicates or (6 if q else 32)
    args.burn = args.burn if args.burn is not None else (3 if q else 8)
    args.ref_prompts = args.ref_prompts or (512 if q else 4096)
    args.ref_samples = args.ref_samples or (2 if q else 4)
    if args.replicates < 2:
        ap.error("--replicates must be at least 2")
    out = args.out or os.path.join(
        OUT, "quick.json" if q else
        f"probe-{regime.name}{'-' + args.sigma if args.sigma else ''}.json")
    t0 = time.time()

    def log(msg):
        print(f"[{(time.time() - t0) / 60:5.1f} min] {msg}", flush=True)

    cks = []
    total = len(seeds) * len(ats)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    def write(path):
        with open(path, "w") as f:
            json.dump(dict(command=" ".join(["bench/train/probe"] + (argv or sys.argv[1:])),
                           regime=regime.name, sigma=args.sigma or "default",
                           seeds=seeds, checkpoints=ats, rules=args.rules,
                           replicates=args.replicates, burn=args.burn,
                           ref_prompts=args.ref_prompts,
                           ref_samples=args.ref_samples, lr=args.lr,
                           budget=T.BUDGET, params=M.n_params(M.TinyLM()),
                           commit=bench_commit(), wall=time.time() - t0,
                           results=cks), f, default=float)

    for seed in seeds:
        paths = checkpoints(regime, seed, args.lr, ats, 250, log)
        for path in paths:
            cks.append(probe_checkpoint(regime, seed, path, args, log))
            write(out + ".partial")   # what is done survives a crash
            left = (time.time() - t0) / len(cks) * (total - len(cks))
            log(f"checkpoint {len(cks)}/{total} done; about {left / 60:.1f} min left")
    write(out)
    os.remove(out + ".partial")
    log(f"done: {len(cks)} checkpoints; raw results in {out}")
    return out


def bench_commit():
    import report
    return report.git_rev()


if __name__ == "__main__":
    main()
