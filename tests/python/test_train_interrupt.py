# SPDX-License-Identifier: MIT
"""bench/train stopped mid-matrix (SIGTERM, as a batch system or `kill`
sends): the runs finished so far are kept in the results file, marked
incomplete, the report reads them as what they are, and the plugin's
segment of the run in progress does not stay in /dev/shm."""
import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODES = ["fixed-2", "fixed-4", "grpo-16", "fixed-8"]


def test_sigterm_keeps_the_finished_runs_and_frees_the_segment(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "engine-hooks"))
    p = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "bench", "train", "main.py"),
         "--steps", "2", "--seeds", "1", "--seed-from", "3",
         "--modes", ",".join(MODES), "--warmup", "5", "--heldout", "30",
         "--out", str(out), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # The first run's progress line: it is saved by then (the line is
        # printed before the save, and the signal is handled between two
        # runs or inside one: either way that run is in the file).
        line = p.stdout.readline()
        assert line.startswith(f"[1/{len(MODES)}]"), line + p.stderr.read()
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM, err
    data = json.loads(out.read_text())
    n = len(data["runs"])
    # Three more runs of two steps each were left when the signal came.
    assert data["complete"] is False and 1 <= n < len(MODES)
    assert [r["mode"] for r in data["runs"]] == MODES[:n]
    assert f"interrupted after {n} of {len(MODES)} runs" in err
    assert not os.path.exists(str(out) + ".tmp")
    # The trainer was closed: no segment of this process is left.
    left = [f for f in os.listdir("/dev/shm") if f"train-{p.pid}-" in f]
    assert left == []

    # The report takes the interrupted file and says so.
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "train", "report.py"),
         str(out), str(tmp_path / "R.md")],
        capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"is an interrupted run ({n} runs, seeds [3])" in r.stderr


def test_a_complete_run_is_marked_complete(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "engine-hooks"))
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "train", "main.py"),
         "--steps", "1", "--seeds", "1", "--seed-from", "3",
         "--modes", "fixed-2", "--warmup", "5", "--heldout", "30",
         "--out", str(out), "--no-report"],
        check=True, capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(out.read_text())
    assert data["complete"] is True and len(data["runs"]) == 1


# The stop that lands while a trainer makes its segment, deterministically:
# SIGTERM sent from inside Plugin.create (after the segment exists, before
# the trainer holds it). Without trainer.stops_held the handler raised
# there, the trainer was never made, and the segment stayed in /dev/shm
# (the run above failed so twice under load).
def test_a_stop_while_the_segment_is_made_leaves_nothing(monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
    import model as M
    import task
    import trainer as T
    import v05

    heldout = task.heldout_set(30)
    state = M.TinyLM().state_dict()
    made = []
    real = v05.Plugin.create.__func__

    def create(cls, name, **kw):
        p = real(cls, name, **kw)
        made.append(name)
        os.kill(os.getpid(), signal.SIGTERM)
        return p  # the handler has run by here, in this frame or the next

    monkeypatch.setattr(v05.Plugin, "create", classmethod(create))
    old = signal.signal(signal.SIGTERM, T.stop_handler)
    try:
        with pytest.raises(SystemExit) as e:
            T.Trainer(T.mode_specs()["fixed-2"], 0, state, heldout)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert e.value.code == 128 + signal.SIGTERM
    assert made and not os.path.exists(f"/dev/shm/v05-{made[0]}")
    # And a stop outside such a section raises at once.
    signal.signal(signal.SIGTERM, T.stop_handler)
    try:
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between two of these
                pass
    finally:
        signal.signal(signal.SIGTERM, old)
