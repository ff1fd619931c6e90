# SPDX-License-Identifier: MIT
"""`python -m v05.demos --engine vllm` (what `scripts/demo --engine vllm`
runs) prints the same numbers twice under its stated seed: every column
but the timings."""
import json
import os
import subprocess
import sys

TIMED = {"wall_s", "v05_s", "barrier_s", "lat_p50_us", "lat_p99_us"}


def run_demo(model_dir, out):
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
    r = subprocess.run([sys.executable, "-m", "v05.demos", "--engine", "vllm",
                        "--prompts", "64", "--modes", "v05,v05-eb,grpo",
                        "--model-dir", model_dir, "--no-progress",
                        "--json", out], capture_output=True, text=True,
                       env=env, timeout=900, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Passing raw prompts" not in r.stderr, r.stderr[-3000:]
    with open(out) as f:
        return [{k: v for k, v in row.items() if k not in TIMED}
                for row in json.load(f)["rows"]]


def test_vllm_demo_is_reproducible(model_dir, tmp_path):
    root = os.path.dirname(model_dir)  # the demo makes <root>/tiny-llama
    a = run_demo(root, str(tmp_path / "a.json"))
    b = run_demo(root, str(tmp_path / "b.json"))
    assert len(a) == 3 and a == b
    assert all(r["tokens"] > 0 for r in a)
