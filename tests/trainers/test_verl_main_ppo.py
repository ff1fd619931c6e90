# SPDX-License-Identifier: MIT
"""verl's own ``python -m verl.trainer.main_ppo`` end to end, as a verl user
runs it (default v1 trainer, TransferQueue, FSDP2 actor, agent-loop
rollout, reward loop), on v05.demos.tiny's model and a parity task
(ppo_task.py): plain GRPO, and v05 turned on by configuration only
(v05.trainers.verl.main_ppo_overrides). What verl needs to run on a CPU
is a test fixture (verl_cpu_fixture.py), not part of v05.

Every run shares one Ray cluster (main_ppo.RayHead) and writes v05's run
report (algorithm.v05_report), from which the tests check, per step: the
rows the estimator gave v05 advantages are exactly the samples of the
plugin's groups (k rows per group, the sum of the plugin's k per step),
each with the plugin's advantage for its sample; none fell back to GRPO;
samples issued equal rewards applied, none rejected. After every run,
however it ended, nothing of the run is left in /dev/shm (the check is
scoped to the run's segment names: other tests use this machine too).
"""

import json
import os
import signal
import time

import pytest

try:
    import verl  # noqa: F401
    import ray  # noqa: F401
except ImportError as e:
    pytest.skip(f"verl is not installed ({e}); run scripts/setup-trainers "
                "verl and use its python", allow_module_level=True)

import main_ppo
import v05
from v05.demos import tiny
from v05.trainers.report import read_report
from v05.trainers.verl import main_ppo_overrides
from v05.trainers.verl.run import shm_dir

import ppo_task

pytestmark = pytest.mark.filterwarnings("ignore")

# Prompts per step (the train batch), and the data set's size (two epochs
# in 4 steps: the cross-epoch rule sees its prompts come back).
BATCH = 8
PROMPTS = 16


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The Ray head, the model (with its tokenizer) and the data."""
    tmp = tmp_path_factory.mktemp("main_ppo")
    model = tiny.make_model(str(tmp / "model"))
    data = ppo_task.make_data(str(tmp / "train.parquet"), PROMPTS)
    head = main_ppo.RayHead(str(tmp))
    try:
        yield {"tmp": tmp, "model": model, "data": data, "head": head}
    finally:
        head.stop()


_runs = iter(range(1000))


def _prefix():
    return f"t35-{os.getpid()}-{next(_runs)}"


def leftovers(prefix: str) -> list:
    """Everything of run `prefix` in the segment directory."""
    return sorted(f for f in os.listdir(shm_dir())
                  if f.startswith(f"v05-{prefix}-"))


def wait_gone(prefix: str, timeout: float = 60.0) -> list:
    """The run's files once its reapers are done (they remove a segment
    when its owner has ended, which Ray does shortly after the run's
    driver exits): polled up to `timeout` s, then what is left."""
    deadline = time.monotonic() + timeout
    while leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.2)
    return leftovers(prefix)


def run(world, name, steps, *, v05_on=True, plugin=None, history=None,
        workers=1, extra=(), env=None, expect_ok=True, ckpt=None,
        start_only=False):
    tmp = world["tmp"] / name
    tmp.mkdir(exist_ok=True)
    prefix = _prefix()
    rep = str(tmp / "report.jsonl")
    ckpt = ckpt or str(tmp / "ckpt")
    ov = main_ppo.base_overrides(world["data"], world["model"], ckpt, steps,
                                 batch=BATCH, workers=workers)
    if v05_on:
        ov += main_ppo_overrides(segment=prefix, plugin=plugin, report=rep,
                                 history=history)
    else:
        ov += ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"]
    ov += list(extra)
    r = main_ppo.Run(world["head"], ov, str(tmp), env=env)
    r.prefix, r.report_path, r.ckpt = prefix, rep, ckpt
    if start_only:
        return r
    rc = r.wait()
    print(f"main_ppo {name}: {r.elapsed:.1f} s, exit {rc}")
    if expect_ok:
        assert rc == 0, r.tail()
    r.rc = rc
    return r


def records(r, kind=None):
    if not os.path.exists(r.report_path):
        return []
    recs = read_report(r.report_path)
    return [x for x in recs if kind is None or x["kind"] == kind]


def check_groups_and_rows(r, steps, workers=1):
    """The promises of a v05 run, from its report."""
    chunks = records(r, "chunk")
    adv = records(r, "advantage")
    assert chunks and adv, r.tail()
    plugin = {}  # uid -> its group
    per_step = {}
    for c in chunks:
        for g in c["groups"]:
            assert g["uid"] not in plugin, "a uid rolled out twice"
            plugin[g["uid"]] = g
            if not g["dropped"]:
                per_step.setdefault(c["step"], 0)
                per_step[c["step"]] += len(g["kept"])
    assert sorted(per_step) == list(range(1, steps + 1))
    # The estimator's calls, one per step (the v1 trainer computes the
    # advantages of a step's batch at once): rows per step equal the sum
    # of the plugin's k over that step's groups, every row has its
    # group's advantage for its sample, none fell back.
    assert len(adv) == steps
    for a, step in zip(adv, sorted(per_step)):
        assert a["fallback_rows"] == 0
        assert a["v05_rows"] == per_step[step]
        for uid, given in a["groups"].items():
            g = plugin[uid]
            assert sorted(s for s, _ in given) == g["kept"]
            for s, value in given:
                assert value == pytest.approx(g["advantages"][s], abs=1e-6)
    # Samples issued = rewards applied, none rejected, per worker (its
    # last chunk's counters are the worker's totals).
    last = {}
    for c in chunks:
        last[c["worker"]] = c["stats"]
    assert len(last) == workers
    for st in last.values():
        assert st["samples_issued"] == st["rewards_applied"]
        assert sum(v for k, v in st.items() if k.startswith("rejected_")) == 0
    return plugin, per_step


def test_grpo_plain(world):
    """Plain GRPO through the same main_ppo, fixture and cluster: verl
    itself runs here (the comparison for the cost per step)."""
    r = run(world, "grpo", 2, v05_on=False)
    assert "step:2" in r.output()


def test_v05_mode(world):
    """Mode v05 (the paper's fusion and stopping): every row's advantage
    is the plugin's, each prompt its own k."""
    r = run(world, "v05", 3, plugin={"mode": "v05", "k_init": 2, "k_max": 8,
                                     "k_step": 2, "pad_multiple": 1})
    groups, per_step = check_groups_and_rows(r, 3)
    assert {g["k"] for g in groups.values()} - {2}, \
        "no prompt got a second wave"
    assert wait_gone(r.prefix) == []
