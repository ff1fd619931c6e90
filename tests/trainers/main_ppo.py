# SPDX-License-Identifier: MIT
"""Running verl's ``python -m verl.trainer.main_ppo`` from a test: one Ray
cluster for every run of a test module (a head started once; each run
connects to it, so no run pays for Ray's start and teardown), the tiny
model and task, and the CPU fixture (verl_cpu_fixture.py)."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
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
           RAY_DEDUP_LOGS="0", OMP_NUM_THREADS="1",
           # A local test cluster: no token (Ray 2.60 turns token
           # authentication on for `ray start`).
           RAY_AUTH_MODE="disabled")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    """``ray start --head --block`` in its own session, with one (fake)
    GPU for the trainer (verl_cpu_fixture), 8 logical CPUs (verl's
    TransferQueue, reward, agent-loop and server actors each ask for one),
    no dashboard. stop() ends that session (only it: other Ray clusters on
    this machine are not touched)."""

    def __init__(self, tmp: str):
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="v05ray-", dir="/tmp")
        env = dict(os.environ, **ENV)
        self.log = open(os.path.join(tmp, "ray-head.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "ray"), "start",
             "--head", "--block", f"--port={self.port}",
             "--node-ip-address=127.0.0.1", "--num-cpus=8", "--num-gpus=1",
             "--include-dashboard=false", "--disable-usage-stats",
             f"--temp-dir={self.temp}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        for line in self.proc.stdout:
            self.log.write(line)
            if "Ray runtime started" in line:
                break
        else:
            self.log.flush()
            raise RuntimeError(f"ray start failed (exit {self.proc.wait()}); "
                               f"see {self.log.name}")
        # The rest of its output goes to the log, read by a thread.
        import threading
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stdout:
            self.log.write(line)

    def stop(self):
        # SIGKILL, not SIGTERM: on SIGTERM `ray start --block` drains the
        # node for up to 30 s first. The session's processes go together;
        # a worker of another group ends when its raylet is gone.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


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

    def __init__(self, head: RayHead, overrides: List[str], cwd: str,
                 env: Optional[Dict[str, str]] = None):
        job_env = {**ENV, **(env or {})}
        # The job's own environment (fault injection, ...) reaches every
        # worker through Ray's runtime_env; the head's is the common one.
        extra = [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={v}"
                 for k, v in (env or {}).items()]
        self.cmd = [sys.executable, "-m", "verl.trainer.main_ppo",
                    *overrides, f"+ray_kwargs.ray_init.address={head.address}",
                    *extra]
        self.log_path = os.path.join(cwd, "main_ppo.log")
        self.log = open(self.log_path, "w")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, cwd=cwd,
                                     env=dict(os.environ, **job_env),
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 900) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.elapsed = time.monotonic() - self.t0
            self.log.close()
        return rc

    def output(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-n:])
