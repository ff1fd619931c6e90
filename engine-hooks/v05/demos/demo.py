# SPDX-License-Identifier: MIT
"""The v05 demo: one batch through the simulated engine, per mode.

    python3 -m v05.demos [--prompts 512] [--seed 0]
                        [--modes v05,v05-eb,v05-fixed,grpo,dapo]
                        [--schedule rounds|stream] [--workers 4] ...

Each mode gets a real segment and real reward-worker processes; the table
compares samples generated, group sizes, baseline error against the
simulated truth, halts, wall time and how long complete groups waited for
their decision.
"""

import argparse
import os
import sys

import numpy as np

from .. import version
from ..core.plugin import Plugin
from .common import MODES, format_table, schedule_text, with_schedule
from .sim import Latency, Progress, SimEngine, make_prompts

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="python3 -m v05.demos",
        description="One batch through v05 with a simulated engine and "
                    "reward-worker processes, compared across modes.")
    ap.add_argument("--prompts", type=int, default=512,
                    help="prompts in the batch (default 512)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--modes", default="v05,v05-eb,v05-fixed,grpo,dapo",
                    help="comma-separated: v05, v05-eb, v05-fixed, grpo, "
                    "dapo, v05-pg (the library's default mode, for the "
                    "gradient: its baseline MSE is not what it lowers)")
    ap.add_argument("--schedule", choices=["rounds", "stream"], default=None,
                    help="batch policy for every mode (default: rounds for "
                    "v05, the paper's; stream, no barrier, for v05-eb)")
    ap.add_argument("--workers", type=int, default=4,
                    help="reward-worker processes (default 4)")
    ap.add_argument("--latency", default="lognormal:2:0.5",
                    help="generation time per sample in ms: const:MS, "
                         "uniform:LO:HI, exp:MEAN, lognormal:MEDIAN:SIGMA "
                         "(default lognormal:2:0.5)")
    ap.add_argument("--noise", type=float, default=0.2,
                    help="value-model prior noise, std on [-1, 1] (default 0.2)")
    ap.add_argument("--hallucination", type=float, default=0.3,
                    help="share of priors drawn at random (default 0.3: a "
                         "value model wrong often enough that more than "
                         "halt_fraction of prompts conflict and OSLA runs "
                         "rounds; with 0.1/0.1 the batch halts after k=4)")
    ap.add_argument("--pad", type=int, default=32,
                    help="pad dispatches to this multiple (default 32)")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar")
    ap.add_argument("--engine", choices=["sim", "vllm", "sglang"],
                    default="sim",
                    help="sim: the simulated engine with reward-worker "
                         "processes (default); vllm: a real vLLM AsyncLLM on "
                         "a tiny local model (needs the engine environment: "
                         "scripts/demo --engine vllm sets it up); sglang: a "
                         "real sglang Engine on its CPU engine, the same "
                         "model (scripts/demo --engine sglang sets up the "
                         "sglang environment)")
    ap.add_argument("--halt", type=float, default=0.25,
                    help="halt_fraction: a batch halts when fewer than this "
                         "share of its prompts need more (default 0.25, the "
                         "paper's)")
    ap.add_argument("--max-tokens", type=int, default=8,
                    help="vllm, sglang: tokens generated per sample (default 8)")
    ap.add_argument("--model-dir", default=os.path.join("build-venv", "models"),
                    help="vllm, sglang: where the tiny model is written (default "
                         "build-venv/models)")
    ap.add_argument("--json", default=None,
                    help="vllm, sglang: also write the results to this JSON file")
    ap.add_argument("--keep", action="store_true",
                    help="keep each mode's segment after the run (owner "
                         "closed) to look at with v05ctl stat NAME; remove "
                         "with v05ctl reclaim NAME")
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--modes: unknown {', '.join(bad) or '(none)'}; "
                 f"choose from {', '.join(MODES)}")
    if a.prompts < 1 or a.prompts > 1 << 20:
        ap.error("--prompts must be in [1, 1048576]")
    if a.workers < 1 or a.workers > 64:
        ap.error("--workers must be in [1, 64]")
    if a.noise < 0 or not 0 <= a.hallucination <= 1:
        ap.error("--noise must be >= 0 and --hallucination in [0, 1]")
    if a.pad < 1:
        ap.error("--pad must be >= 1")
    if not 0 <= a.halt <= 1:
        ap.error("--halt must be in [0, 1]")
    if not 1 <= a.max_tokens <= 48:
        ap.error("--max-tokens must be in [1, 48] (the tiny model's context is 64)")
    if a.engine != "sim" and a.keep:
        ap.error("--keep is for the simulated engine")
    try:
        Latency(a.latency)
    except ValueError as e:
        ap.error(f"--latency: {e}")
    a.modes = modes
    return a


def run_mode(mode, args, prompts):
    label, params = MODES[mode]
    name = f"demo-{os.getpid()}-{mode}"
    with Plugin.create(name, max_prompts=max(args.prompts, 64),
                       max_producers=args.workers + 4,
                       lane_capacity=16384, halt_fraction=args.halt,
                       pad_multiple=args.pad, on_stale="remove",
                       **with_schedule(params, args.schedule)) as plugin:
        with SimEngine(plugin, prompts, workers=args.workers,
                       latency=args.latency, seed=args.seed) as eng:
            res = eng.run(Progress(len(prompts), mode, not args.no_progress))
        res.mode = label
        res.wait_path = plugin.wait_path
        res.segment = name
        if args.keep:
            plugin.close(unlink=False)
    return res


def table(results):
    head = ("mode", "samples", "mean k", "max k", "baseline MSE", "halts",
            "dropped", "wall s", "lat p50 us", "lat p99 us")
    rows = []
    for r in results:
        lat = r.latency_ns / 1000.0
        p50 = f"{np.percentile(lat, 50):.0f}" if len(lat) else "-"
        p99 = f"{np.percentile(lat, 99):.0f}" if len(lat) else "-"
        rows.append((r.mode, str(r.samples), f"{r.k.mean():.2f}",
                     str(int(r.k.max())), f"{r.mse:.4f}", str(r.halts),
                     str(r.dropped), f"{r.wall_s:.2f}", p50, p99))
    return format_table(head, rows)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.engine == "vllm":
        from .demo_vllm import run
        return run(args, [(m, *MODES[m]) for m in args.modes])
    if args.engine == "sglang":
        from .demo_sglang import run
        return run(args, [(m, *MODES[m]) for m in args.modes])
    prompts = make_prompts(args.prompts, args.seed, args.noise,
                           args.hallucination)
    results = [run_mode(m, args, prompts) for m in args.modes]
    print(f"v05 {version()} demo: {args.prompts} prompts, seed {args.seed}, "
          f"prior noise {args.noise}, hallucination {args.hallucination}, "
          f"{schedule_text(args.schedule)}, pad {args.pad}, {args.workers} reward "
          f"workers, generation latency {args.latency} ms, wait path "
          f"{results[0].wait_path}")
    print(table(results))
    print("baseline MSE: mean over prompts of (baseline - true mean)^2 on the "
          "[-1, 1] scale; latency: how long a group whose samples were all "
          "rewarded waited for its decision (from the poll that applied its "
          "last reward; '-': every group was decided at once).")
    if args.keep:
        print("segments kept: " + ", ".join(r.segment for r in results) +
              " (v05ctl stat NAME; v05ctl reclaim NAME removes one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
