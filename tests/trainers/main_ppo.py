# SPDX-License-Identifier: MIT
"""Running verl's ``python -m verl.trainer.main_ppo`` from a test: the tiny
model and task, and the CPU fixture (verl_cpu_fixture.py). Each run starts
its own Ray (8 logical CPUs: verl's TransferQueue, reward, agent-loop and
server actors each ask for one; one fake GPU for the trainer, see the
fixture; no dashboard). A Ray head shared by the runs was tried: the
second job's trainer process never left its process-group setup (verl's
WorkerDict, after "create worker group"), so each run has its own."""

import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import verl_cpu_fixture  # noqa: E402  (its overrides and environment)

# What every process of a run needs: this directory on the path (the CPU
# fixture, the task's reward function), the fixture and v05 loaded by verl
# in every process, no model hub.
ENV = dict(verl_cpu_fixture.ENV,
           VERL_USE_EXTERNAL_MODULES="verl_cpu_fixture,v05.trainers.verl",
           PYTHONPATH=HERE, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
           RAY_DEDUP_LOGS="0", OMP_NUM_THREADS="1")


def base_overrides(data: str, model: str, ckpt: str, steps: int,
                   batch: int = 8, workers: int = 1) -> List[str]:
    return [
        f"data.train_files={data}", f"data.val_files={data}",
        f"data.train_batch_size={batch}", "data.max_prompt_length=16",
        "data.max_response_length=4", "data.dataloader_num_workers=0",
        "data.shuffle=false",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=false",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=false",
        f"actor_rollout_ref.rollout.agent.num_workers={workers}",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={HERE}/ppo_task.py",
        f"trainer.total_training_steps={steps}", "trainer.logger=[console]",
        "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.project_name=v05",
        "trainer.experiment_name=test", f"trainer.default_local_dir={ckpt}",
    ] + verl_cpu_fixture.CPU_OVERRIDES


class Run:
    """One ``main_ppo`` subprocess."""

    def __init__(self, overrides: List[str], cwd: str,
                 env: Optional[Dict[str, str]] = None):
        # Ray's local cluster (started by main_ppo) and its workers inherit
        # the driver's environment.
        job_env = {**ENV, **(env or {})}
        self.cmd = [sys.executable, "-m", "verl.trainer.main_ppo",
                    *overrides, "ray_kwargs.ray_init.num_cpus=8",
                    "+ray_kwargs.ray_init.num_gpus=1",
                    "+ray_kwargs.ray_init.include_dashboard=false"]
        self.log_path = os.path.join(cwd, "main_ppo.log")
        self.log = open(self.log_path, "w")
        self.t0 = time.monotonic()
        # A session of its own: on a hang the run and every process it
        # started (Ray's among them) are ended together.
        self.proc = subprocess.Popen(self.cmd, cwd=cwd,
                                     env=dict(os.environ, **job_env),
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait(self, stall: float = None, limit: float = None) -> int:
        """The run's exit status. A run that writes nothing for `stall`
        seconds (V05_MAIN_PPO_STALL, default 600) is hung, and one still
        going after `limit` (V05_MAIN_PPO_LIMIT, default 7200) is ended
        too: subprocess.TimeoutExpired. A run on a loaded machine is slow,
        not silent (each step logs), so the bound is on silence, not on
        the run's length (issue 45: a loaded run took more than the 900 s
        this used to allow, with every step logging)."""
        stall = stall or float(os.environ.get("V05_MAIN_PPO_STALL", 600))
        limit = limit or float(os.environ.get("V05_MAIN_PPO_LIMIT", 7200))
        size, seen = -1, time.monotonic()
        try:
            while True:
                try:
                    return self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                grown = os.path.getsize(self.log_path)
                if grown != size:
                    size, seen = grown, now
                if now - seen > stall or now - self.t0 > limit:
                    self._end()
                    raise subprocess.TimeoutExpired(
                        self.cmd, now - self.t0,
                        output=f"main_ppo: {now - seen:.0f} s without "
                        f"output, {now - self.t0:.0f} s in all: ended")
        finally:
            self.elapsed = time.monotonic() - self.t0
            self.log.close()

    def _end(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def output(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-n:])
