# SPDX-License-Identifier: MIT
"""v05's decision state in verl's checkpoints.

What v05's decisions depend on lives on the rollout side (each worker's
part of v05-eb's running fit, the others' parts it last merged, a rule's
cross-epoch history), which verl's checkpoint does not cover. With
``+trainer.checkpoint_callback_class=v05.trainers.verl.V05CheckpointCallback``
verl calls ``on_save`` after each checkpoint it writes; the rollout manager
then writes ``v05_state.json`` into that checkpoint's ``global_step_N``
directory. When the run resumes (verl's ``trainer.resume_mode``: auto, or
resume_path), the manager finds the checkpoint verl resumes from, the same
way verl does, and hands each worker its state back before the first step.
"""

import json
import logging
import os
from typing import Optional

from .config import cfg_get

__all__ = ["V05CheckpointCallback", "STATE_FILE", "resume_folder",
           "write_state", "read_state"]

log = logging.getLogger(__name__)

STATE_FILE = "v05_state.json"


def resume_folder(config) -> Optional[str]:
    """The global_step_N directory verl resumes from, as its v1 trainer's
    _load_checkpoint finds it (None: a fresh start)."""
    trainer = cfg_get(config, "trainer")
    mode = cfg_get(trainer, "resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = cfg_get(trainer, "resume_from_path")
        if path and not os.path.isabs(path):
            path = os.path.join(os.getcwd(), path)
        return path
    root = cfg_get(trainer, "default_local_dir")
    if not root:
        return None
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
    if not os.path.isabs(root):
        root = os.path.join(os.getcwd(), root)
    return find_latest_ckpt_path(root)


def write_state(folder: str, state: dict) -> str:
    path = os.path.join(folder, STATE_FILE)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)
    return path


def read_state(folder: Optional[str]) -> Optional[dict]:
    if not folder:
        return None
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _callback_base():
    from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
    return CheckpointCallback


class V05CheckpointCallback(_callback_base()):
    """trainer.checkpoint_callback_class: saves v05's decision state with
    each checkpoint verl writes (subclass it to add your own on_save, and
    call super().on_save)."""

    def on_save(self, trainer, global_step: int, checkpoint_dir: str,
                async_save: bool = False, **kwargs) -> None:
        manager = getattr(trainer, "agent_loop_manager", None)
        save = getattr(manager, "v05_save", None)
        if save is None:
            log.warning("v05: the rollout manager is not v05's; no v05 "
                        "state saved with checkpoint %s", checkpoint_dir)
            return
        save(checkpoint_dir, global_step)
