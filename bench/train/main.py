# SPDX-License-Identifier: MIT
"""bench/train: the run matrix (modes x seeds), one progress line per run,
raw results as JSON in bench/train/out/, then the report."""

import argparse
import asyncio
import json
import os
import signal
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model as M  # noqa: E402
import regimes  # noqa: E402
import task  # noqa: E402
import trainer as T  # noqa: E402

OUT = os.path.join(HERE, "out")
# Seeds below this are design seeds (looked at while building rules and
# this bench); from it on, report seeds, for the final pages only
# (--report-seeds): a rule is never tuned on the seeds it is reported on.
REPORT_SEEDS = 1000


def warm_state(seed: int, steps: int, heldout) -> dict:
    """The supervised warm-up for a seed (cached: every mode of a seed
    starts from the same weights)."""
    path = os.path.join(OUT, f"warm-{seed}-{steps}.pt")
    if os.path.exists(path):
        return torch.load(path)
    torch.manual_seed(seed)
    m = M.TinyLM()
    M.warmup(m, task.PromptStream(heldout, seed=500 + seed), steps, seed=seed)
    os.makedirs(OUT, exist_ok=True)
    torch.save(m.state_dict(), path + ".tmp")
    os.replace(path + ".tmp", path)
    return m.state_dict()


def run_one(spec, seed, state, heldout, budget, args, regime):
    tr = T.Trainer(spec, seed, state, heldout, lr=args.lr,
                   eval_every=args.eval_every, train_set=args.train_set,
                   eval_rollouts=args.eval_rollouts, regime=regime,
                   sigma=args.sigma)
    try:
        asyncio.run(tr.train(budget))
        return tr.result()
    finally:
        tr.close()


def save(path: str, record: dict) -> None:
    """Write the raw results whole or not at all: a run stopped while
    writing leaves the previous file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def eta(t0: float, done: int, total: int) -> str:
    spent = time.time() - t0
    left = spent / max(1, done) * (total - done)
    return f"elapsed {spent / 60:.1f} min, about {left / 60:.1f} min left"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/train/run", description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="smoke version: 1 seed, 4 modes, 6 steps")
    ap.add_argument("--steps", type=int, default=None,
                    help="rollout budget in steps of 256 (default 80, quick 6)")
    ap.add_argument("--seeds", type=int, default=None, help="default 5 (quick 1)")
    ap.add_argument("--seed-from", type=int, default=0,
                    help="first seed (to add seeds to an earlier run)")
    ap.add_argument("--modes", default=None,
                    help="comma list of " + ",".join(T.mode_specs()) +
                    " (default: RESULTS.md's matrix, " + ",".join(T.RESULTS_MODES)
                    + ")")
    ap.add_argument("--warmup", type=int, default=250, help="supervised steps")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=5,
                    help="with --eval-rollouts 0: evaluate every N steps")
    ap.add_argument("--eval-rollouts", type=int, default=512,
                    help="evaluate each time the rollouts pass a multiple "
                    "of this (default 512; 0: every --eval-every steps); "
                    "training does not depend on it")
    ap.add_argument("--regime", default="today",
                    help="the task and prior: " + ", ".join(regimes.REGIMES)
                    + " (bench/train/regimes.py; default today)")
    ap.add_argument("--sigma", choices=("rms", "paper"), default=None,
                    help="the fused modes' normaliser (default: each mode's "
                    "own, v05_config_mode's: paper for v05-pg, else rms; "
                    "paper: sqrt(1 - mu^2), the paper's)")
    ap.add_argument("--report-seeds", action="store_true",
                    help=f"allow seeds {REPORT_SEEDS} and up: the report "
                    "seeds, kept for final pages (never used while designing)")
    ap.add_argument("--heldout", type=int, default=360)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train-set", type=int, default=0,
                    help="a fixed training set of N prompts visited in "
                    "epochs, for every mode (default 0: fresh prompts each "
                    "step); the modes with a cross-epoch state "
                    "(knapsack-4/8, greso-8, greso-8-fill, "
                    "pilot-commit-4-12) need it")
    ap.add_argument("--out", default=None, help="raw results (default "
                    "bench/train/out/results.json; --quick: out/quick/results.json)")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.out is None:
        args.out = os.path.join(OUT, "quick", "results.json") if args.quick \
            else os.path.join(OUT, "results.json")
    steps = args.steps or (6 if args.quick else 80)
    seeds = list(range(args.seed_from,
                       args.seed_from + (args.seeds or (1 if args.quick else 5))))
    specs = T.mode_specs()
    names = (args.modes.split(",") if args.modes else
             (["grpo-16", "fixed-4", "v05", "default"] if args.quick else
              list(T.RESULTS_MODES)))
    unknown = [n for n in names if n not in specs]
    if unknown:
        ap.error(f"unknown mode(s) {','.join(unknown)}; the modes are "
                 + ",".join(specs))
    # Refused before the first run, not skipped after an hour of others.
    need_set = [n for n in names if specs[n].history]
    if need_set and not args.train_set:
        ap.error(f"{','.join(need_set)}: a state kept across epochs needs a "
                 "fixed training set; add --train-set N (EPOCHS.md uses 512)")
    try:
        regime = regimes.get(args.regime)
    except ValueError as e:
        ap.error(str(e))
    if seeds[-1] >= REPORT_SEEDS and not args.report_seeds:
        ap.error(f"seeds {REPORT_SEEDS} and up are report seeds, kept unseen "
                 "for final pages; add --report-seeds to run them")
    # The warm-up excludes today's held-out set whatever the regime (the
    # cached weights are the same in every regime).
    warm_heldout = task.heldout_set(args.heldout)
    heldout = regime.heldout(args.heldout)
    budget = steps * T.BUDGET
    t0 = time.time()
    runs, skipped, warm = [], {}, dict(seconds=0.0)
    total = len(names) * len(seeds)
    import report
    commit = report.git_rev()

    def record(complete: bool) -> dict:
        return dict(runs=runs, skipped=skipped, wall=time.time() - t0,
                    warmup_seconds=warm["seconds"], steps=steps, seeds=seeds,
                    warmup=args.warmup, lr=args.lr, heldout=args.heldout,
                    budget_per_step=T.BUDGET, commit=commit,
                    train_set=args.train_set,
                    eval_rollouts=args.eval_rollouts,
                    eval_every=args.eval_every,
                    regime=regime.name, sigma=args.sigma or "default",
                    default_mode=specs["default"].mode,
                    params=M.n_params(M.TinyLM()), complete=complete,
                    command=" ".join(["bench/train/run"] +
                                     (argv or sys.argv[1:])))

    # SIGTERM's default kills the process where it stands: no trainer's
    # close (its plugin's segment would stay in /dev/shm) and no results.
    # As an exception it unwinds like Ctrl-C, but never while a segment
    # is being made or closed (trainer.stops_held): the trainer closes
    # its own.
    signal.signal(signal.SIGTERM, T.stop_handler)
    signal.signal(signal.SIGINT, T.stop_handler)
    try:
        matrix(seeds, names, specs, runs, skipped, warm, total, t0, args,
               regime, warm_heldout, heldout, budget,
               lambda: save(args.out, record(False)))
    except (KeyboardInterrupt, SystemExit):
        save(args.out, record(False))
        print(f"interrupted after {len(runs)} of {total} runs; those are "
              f"in {args.out} (marked incomplete)", file=sys.stderr,
              flush=True)
        raise
    wall = time.time() - t0
    save(args.out, record(True))
    print(f"done: {len(runs)} runs in {wall:.0f} s (warm-up {warm['seconds']:.0f} s); "
          f"raw results in {args.out}", flush=True)
    if not args.no_report:
        # The full run rewrites bench/train/RESULTS.md and plots/; --quick
        # writes its report next to its JSON (bench/train/out/quick/).
        report.main([args.out] + ([os.path.join(os.path.dirname(args.out), "RESULTS.md")]
                                  if args.quick else []))


def matrix(seeds, names, specs, runs, skipped, warm, total, t0, args,
           regime, warm_heldout, heldout, budget, checkpoint) -> None:
    """Every (seed, mode) run in order, appended to `runs` and saved
    after each (`checkpoint`); the warm-ups' seconds added to `warm`."""
    i = 0
    for seed in seeds:
        t = time.time()
        state = warm_state(seed, args.warmup, warm_heldout)
        warm["seconds"] += time.time() - t
        for name in names:
            i += 1
            spec = specs[name]
            t = time.time()
            try:
                res = run_one(spec, seed, state, heldout, budget, args, regime)
            except ValueError as e:
                if name not in skipped:
                    print(f"[{i}/{total}] {name}: skipped, this build of v05 "
                          f"has no mode {spec.mode!r} ({e})", flush=True)
                skipped[name] = str(e)
                continue
            res["wall"] = time.time() - t
            runs.append(res)
            tm = res["times"]
            ev = res["evals"]
            print(f"[{i}/{total}] {name:8s} seed {seed}: {res['steps']:3d} steps "
                  f"{res['rollouts']:6d} rollouts  held-out acc "
                  f"{ev[0]['acc']:.3f} -> {ev[-1]['acc']:.3f}  "
                  f"{res['wall']:5.1f} s (generate {tm['generate']:.1f}, "
                  f"plugin+scoring {tm['rollout'] - tm['generate']:.1f}, "
                  f"update {tm['update']:.1f}, prior {tm['prior']:.1f}, "
                  f"eval {tm['eval'] + tm['true_p']:.1f}); "
                  f"{eta(t0, i, total)}", flush=True)
            checkpoint()


if __name__ == "__main__":
    main()
