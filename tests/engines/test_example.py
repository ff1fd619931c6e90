# SPDX-License-Identifier: MIT
"""The README's vLLM example runs as shipped (its own process: it makes its
engine and event loop itself)."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_readme_example_runs(model_dir):
    readme = open(os.path.join(ROOT, "README.md")).read()
    example = open(os.path.join(ROOT, "examples", "vllm_rollout.py")).read()
    body = example[example.index("import asyncio"):]
    assert body.strip() in readme, "README's example differs from examples/"
    # A segment an earlier, killed run left behind: the example reclaims it.
    code = ("import os, v05\n"
            "try:\n    v05.unlink('example-vllm')\n"
            "except FileNotFoundError:\n    pass\n"
            "v05.Plugin.create('example-vllm', max_prompts=8)\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
    r = subprocess.run([sys.executable,
                        os.path.join(ROOT, "examples", "vllm_rollout.py"),
                        model_dir, "2"],
                       capture_output=True, text=True, env=env, timeout=900,
                       cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    # vLLM 0.32 logs a warning for a raw prompt handed to generate(); the
    # driver renders prompts the way vLLM recommends.
    assert "Passing raw prompts" not in r.stderr, r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("step ")]
    assert len(lines) == 2 and all("64 groups" in x for x in lines), r.stdout
