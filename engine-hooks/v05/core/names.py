# SPDX-License-Identifier: MIT
"""The library's enumerations and constants by name, read from the loaded
libv05 (one source of truth: nothing copied by hand)."""

from . import _lib
from ._lib import lib

__all__ = ["MODES", "SIGMAS", "SCHEDULES", "ACTIONS", "KINDS", "UID_MAX",
           "REJECT_REASONS", "SUPPORT_GROUPS"]

MODES = _lib.names(lib.v05_mode_name)
# Advantage normaliser of the fused modes (docs/STATISTICS.md).
SIGMAS = _lib.names(lib.v05_sigma_name)
SCHEDULES = _lib.names(lib.v05_schedule_name, stop="?")
ACTIONS = {v: k for k, v in _lib.names(lib.v05_action_name).items()}
KINDS = {_lib.const("V05_DECISION_" + k.upper()): k
         for k in ("sample", "final", "drop", "barrier", "reject", "abort",
                   "cancel")}

FLAG_PADDED = _lib.const("V05_DF_PADDED")
FLAG_HALTED = _lib.const("V05_DF_HALTED")
FLAG_RECOVERED = _lib.const("V05_DF_RECOVERED")
# Why a "reject" decision's reward was refused.
REJECT_REASONS = {_lib.const("V05_DF_NONFINITE"): "not finite",
                  _lib.const("V05_DF_RANGE"): "outside [-1, 1]"}
SUPPORT_GROUPS = _lib.const("V05_SUPPORT_GROUPS")
CONFIG_WAIT_THREAD = _lib.const("V05_CONFIG_WAIT_THREAD")
CONFIG_EXTERNAL_HALT = _lib.const("V05_CONFIG_EXTERNAL_HALT")
CONFIG_PRODUCER_BROKER = _lib.const("V05_CONFIG_PRODUCER_BROKER")
CONFIG_BROKER_OVERFLOW_IDS = _lib.const("V05_CONFIG_BROKER_OVERFLOW_IDS")
CONFIG_ABORT_RECORDS = _lib.const("V05_CONFIG_ABORT_RECORDS")
BROKER_ALLOW_MAX = _lib.const("V05_BROKER_ALLOW_MAX")
CLOSE_UNLINK = _lib.const("V05_CLOSE_UNLINK")
CLOSE_KEEP_READABLE = _lib.const("V05_CLOSE_KEEP_READABLE")
UID_MAX = _lib.const("V05_UID_MAX_BYTES")
