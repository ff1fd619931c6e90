# SPDX-License-Identifier: MIT
"""The engine-level benchmark, small (bench/engine_run.py on the real vLLM,
one repetition of one batch of 32 prompts, two modes, a short tail): what
it promises holds: every mode has its rows; fixed k=4's tokens are exactly
the drawn lengths of its samples (the lengths are enforced and the same in
every mode); v05-eb spends at least those; the busy fraction is in (0, 1];
p50 <= p99; the running-sequences picture is written and is SVG."""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def load(name):
    """bench/<name>.py as a module (engine_run imports engine_report from
    its own folder)."""
    if os.path.join(ROOT, "bench") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_engine_benchmark_small(tmp_path):
    modes = "fixed k=4,v05-eb default"
    args = ["--reps", "1", "--batches", "1", "--prompts", "32", "--cap", "64",
            "--modes", modes, "--out", str(tmp_path)]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                     "engine_run.py")] + args,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / "engine-vllm-s1.json") as f:
        run = json.load(f)
    rows = {row["mode"]: row for row in run["rows"]}
    assert set(rows) == set(modes.split(","))
    run_mod = load("engine_run")
    a = argparse.Namespace(**run["args"])
    drawn = sum(sum(run_mod.lengths(a.seed, 0, i, 4, a))
                for i in range(a.prompts))
    assert rows["fixed k=4"]["tokens"] == drawn
    assert rows["fixed k=4"]["samples"] == 4 * a.prompts
    assert rows["v05-eb default"]["tokens"] >= drawn
    for row in rows.values():
        assert 0.0 < row["busy"] <= 1.0
        assert 0.0 <= row["lat_p50_s"] <= row["lat_p99_s"]
        assert row["wasted_tokens"] == 0 and row["overhead_s"] > 0
    svg = tmp_path / "trace.svg"
    assert load("engine_report").svg(run, str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2
