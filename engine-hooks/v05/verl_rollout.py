# SPDX-License-Identifier: MIT
"""A name verl configurations already use:
agent_loop_manager_class=v05.verl_rollout.V05AgentLoopManagerTQ (or
V05AgentLoopManager). The classes live in v05.trainers.verl (and are the
same objects when reached through this name)."""

from .trainers import verl as _verl

__all__ = ["V05AgentLoopManager", "V05AgentLoopWorker",
           "V05AgentLoopManagerTQ", "V05AgentLoopWorkerTQ", "pad_rows",
           "PAD_FIELD", "row_multiple", "plugin_params"]


def __getattr__(name):
    if name in __all__:
        return getattr(_verl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
