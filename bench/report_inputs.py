#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The run's inputs for bench/report.py: a benchmark's JSON from the run's
output directory (load, or None when the run did not make it: load_opt),
and the summary the page is made from, saved beside it and restored to
rewrite the page (bench/results/run.json)."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def load_opt(out, name):
    try:
        return load(out, name)
    except OSError:
        return None


SUMMARY = "bench/results/run.json"


def save_inputs(out, m, rerun):
    """Every file of OUT_DIR (JSON, or JSON lines as a list), with the
    machine, commit and command: the summary the page is made from. A
    simulator run's per-batch figures are left out: the page reads only
    its totals."""
    files = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            files[name] = [{k: v for k, v in json.loads(x).items()
                            if k != "batches"} for x in f if x.strip()] \
                if name.endswith(".jsonl") else json.load(f)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(ROOT, SUMMARY), "w") as f:
        json.dump({"machine": m, "rerun": rerun, "files": files}, f,
                  sort_keys=True, separators=(",", ":"))
        f.write("\n")


def restore_inputs(path, out):
    """The files of a summary back in OUT_DIR; its machine and command."""
    with open(path) as f:
        s = json.load(f)
    for name, content in s["files"].items():
        with open(os.path.join(out, name), "w") as f:
            if name.endswith(".jsonl"):
                f.write("".join(json.dumps(x) + "\n" for x in content))
            else:
                json.dump(content, f)
    return s["machine"], s["rerun"]
