# SPDX-License-Identifier: MIT
"""The ctypes mirrors of libv05's public structs (include/v05/*.h) and the
struct rows read from them: this package's one description of the
library's structs. Each mirror is compared, field by field, with the
layout the loaded library reports when it loads (_lib.py); a new or
changed public struct changes here and in plugin/abi.c's table."""

import ctypes
import struct

__all__ = ["Params", "Estimate", "EbFit", "EbState", "EB_SHAPES",
           "EB_N0_GRID", "EB_H_GRID", "Config", "PromptIn", "Decision_", "Group_",
           "Support", "Reward", "ObserverInfo", "LaneStat", "PromptView",
           "KnapsackHist",
           "GresoPrompt", "Greso", "Ebpo", "PcPrompt", "DECISION_ROW",
           "GROUP_ROW", "REWARD_ROW", "MIRRORS"]


class Params(ctypes.Structure):
    _fields_ = [("cost", ctypes.c_double), ("k_init", ctypes.c_uint32),
                ("k_step", ctypes.c_uint32), ("k_max", ctypes.c_uint32),
                ("mode", ctypes.c_uint32), ("sigma", ctypes.c_uint32),
                ("keep_n", ctypes.c_uint32)]


class Estimate(ctypes.Structure):
    _fields_ = [("k", ctypes.c_uint32), ("action", ctypes.c_uint32),
                ("has_target", ctypes.c_bool), ("mean", ctypes.c_double),
                ("delta2", ctypes.c_double), ("weight", ctypes.c_double),
                ("baseline", ctypes.c_double), ("sigma", ctypes.c_double),
                ("k_target", ctypes.c_double)]


class EbFit(ctypes.Structure):
    _fields_ = [("n0", ctypes.c_double), ("h", ctypes.c_double),
                ("a2", ctypes.c_double), ("b2", ctypes.c_double)]


EB_SHAPES, EB_N0_GRID, EB_H_GRID = 12, 16, 12


class EbState(ctypes.Structure):
    _fields_ = [("ll", ((ctypes.c_double * EB_H_GRID) * EB_N0_GRID)
                 * EB_SHAPES),
                ("pop", ctypes.c_double * EB_SHAPES),
                ("weight", ctypes.c_double), ("folded", ctypes.c_uint64)]


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("params", Params),
                ("halt_fraction", ctypes.c_double),
                ("pad_multiple", ctypes.c_uint32), ("schedule", ctypes.c_uint32),
                ("stream_deadline_us", ctypes.c_uint32),
                ("max_prompts", ctypes.c_uint32),
                ("max_producers", ctypes.c_uint32),
                ("lane_capacity", ctypes.c_uint32),
                ("max_batches", ctypes.c_uint32), ("file_mode", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("journal_sync", ctypes.c_uint32),
                ("journal_path", ctypes.c_char_p),
                ("broker_uids", ctypes.c_uint32 * 16),
                ("broker_gids", ctypes.c_uint32 * 16),
                ("n_broker_uids", ctypes.c_uint32),
                ("n_broker_gids", ctypes.c_uint32),
                ("lane_cut_records", ctypes.c_uint32),
                ("lane_cut_permille", ctypes.c_uint32),
                ("eb_window", ctypes.c_uint32), ("eb_cold", ctypes.c_uint32),
                ("eb_early", ctypes.c_uint32), ("eb_first", ctypes.c_uint32),
                ("pc_lower", ctypes.c_double), ("pc_upper", ctypes.c_double),
                ("ebpo_window", ctypes.c_uint32),
                ("reserved_rules", ctypes.c_uint32),
                ("pg_between", ctypes.c_double),
                ("pg_first", ctypes.c_uint32), ("pg_skip", ctypes.c_uint32)]


class PromptIn(ctypes.Structure):
    _fields_ = [("uid", ctypes.c_void_p), ("uid_len", ctypes.c_uint32),
                ("prior", ctypes.c_double)]


class Decision_(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("samples", ctypes.c_uint64),
                ("batch", ctypes.c_uint64), ("latency_ns", ctypes.c_uint64),
                ("baseline", ctypes.c_double), ("kind", ctypes.c_uint32),
                ("slot", ctypes.c_uint32), ("k", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("gen", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class Group_(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("seq", ctypes.c_uint64),
                ("batch", ctypes.c_uint64),
                ("rewards", ctypes.POINTER(ctypes.c_float)),
                ("advantages", ctypes.POINTER(ctypes.c_float)),
                ("uid", ctypes.POINTER(ctypes.c_uint8)),
                ("prior", ctypes.c_double), ("baseline", ctypes.c_double),
                ("sigma", ctypes.c_double), ("mean", ctypes.c_double),
                ("slot", ctypes.c_uint32), ("gen", ctypes.c_uint32),
                ("k", ctypes.c_uint32), ("action", ctypes.c_uint32),
                ("uid_len", ctypes.c_uint32), ("keep", ctypes.c_uint64),
                ("reserved", ctypes.c_uint64 * 2)]


class KnapsackHist(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint64), ("window", ctypes.c_uint32),
                ("filled", ctypes.c_uint32), ("seen", ctypes.c_uint32),
                ("last_n", ctypes.c_uint32), ("last_s", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class GresoPrompt(ctypes.Structure):
    _fields_ = [("z", ctypes.c_uint32), ("kind", ctypes.c_uint32)]


class Greso(ctypes.Structure):
    _fields_ = [("p_easy", ctypes.c_double), ("p_hard", ctypes.c_double),
                ("seed", ctypes.c_uint64), ("total", ctypes.c_uint64),
                ("easy", ctypes.c_uint64), ("hard", ctypes.c_uint64)]


class Ebpo(ctypes.Structure):
    _fields_ = [("weight", ctypes.c_double), ("mean", ctypes.c_double),
                ("m2", ctypes.c_double), ("within", ctypes.c_double),
                ("noise", ctypes.c_double), ("groups", ctypes.c_uint64)]


class PcPrompt(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint64), ("last", ctypes.c_uint32),
                ("seen", ctypes.c_uint32)]


class Support(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("mean", ctypes.c_float),
                ("k", ctypes.c_uint32)]


class Reward(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("gen", ctypes.c_uint32),
                ("sample", ctypes.c_uint32), ("reward", ctypes.c_float),
                ("reserved", ctypes.c_uint32)]


class ObserverInfo(ctypes.Structure):
    _fields_ = [("size_bytes", ctypes.c_uint64), ("created_ns", ctypes.c_uint64),
                ("heartbeat_age_ns", ctypes.c_uint64),
                ("last_seq", ctypes.c_uint64),
                ("journal_durable_seq", ctypes.c_uint64),
                ("journal_offset", ctypes.c_uint64),
                ("cost", ctypes.c_double), ("halt_fraction", ctypes.c_double),
                ("owner_pid", ctypes.c_uint32), ("owner_alive", ctypes.c_uint32),
                ("creator_uid", ctypes.c_uint32), ("wait_path", ctypes.c_uint32),
                ("journal_state", ctypes.c_uint32),
                ("journal_errno", ctypes.c_int32),
                ("lanes", ctypes.c_uint32), ("lane_capacity", ctypes.c_uint32),
                ("slots", ctypes.c_uint32), ("k_max", ctypes.c_uint32),
                ("batches", ctypes.c_uint32), ("mode", ctypes.c_uint32),
                ("schedule", ctypes.c_uint32), ("k_init", ctypes.c_uint32),
                ("k_step", ctypes.c_uint32), ("pad_multiple", ctypes.c_uint32),
                ("asym_doorbell", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("journal_error", ctypes.c_char * 160),
                ("journal_path", ctypes.c_char * 480),
                ("broker", ctypes.c_uint32),
                ("n_broker_uids", ctypes.c_uint32),
                ("n_broker_gids", ctypes.c_uint32),
                ("broker_uids", ctypes.c_uint32 * 16),
                ("broker_gids", ctypes.c_uint32 * 16),
                ("broker_refused_uid", ctypes.c_uint32),
                ("broker_refused_gid", ctypes.c_uint32),
                ("lane_cut_records", ctypes.c_uint32),
                ("lane_cut_permille", ctypes.c_uint32),
                ("reserved2", ctypes.c_uint32 * 23)]


class PromptView(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("issued", ctypes.c_uint64),
                ("received", ctypes.c_uint64), ("gen", ctypes.c_uint32),
                ("state", ctypes.c_uint32),
                ("reserved", ctypes.c_uint64 * 2)]


class LaneStat(ctypes.Structure):
    _fields_ = [("owner_pid", ctypes.c_uint32), ("owner_alive", ctypes.c_uint32),
                ("fill", ctypes.c_uint32), ("high_water", ctypes.c_uint32),
                ("consumed", ctypes.c_uint64), ("claims", ctypes.c_uint64),
                ("applied", ctypes.c_uint64), ("rejected", ctypes.c_uint64),
                ("discarded", ctypes.c_uint64), ("cut", ctypes.c_uint32),
                ("cut_pid", ctypes.c_uint32), ("cuts", ctypes.c_uint32),
                ("cut_records", ctypes.c_uint32),
                ("cut_rejected", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32 * 5)]


# ---- struct rows, made from the mirrors ---------------------------------

_CODES = {ctypes.c_uint8: "B", ctypes.c_uint32: "I", ctypes.c_int32: "i",
          ctypes.c_uint64: "Q", ctypes.c_int64: "q", ctypes.c_double: "d",
          ctypes.c_float: "f", ctypes.c_bool: "?"}


def _is_pointer(typ) -> bool:
    return typ in (ctypes.c_void_p, ctypes.c_char_p) or \
        hasattr(typ, "contents")


def _row(ct) -> struct.Struct:
    """A struct.Struct reading a ct's bytes as one tuple of its fields in
    order (pointers as addresses), fields named reserved* skipped: the
    same bytes as the ctypes mirror, field for field, from the mirror."""
    fmt, at = "=", 0
    for name, typ in ct._fields_:
        f = getattr(ct, name)
        fmt += f"{f.offset - at}x" if f.offset > at else ""
        if name.startswith("reserved"):
            fmt += f"{f.size}x"
        elif typ in _CODES:
            fmt += _CODES[typ]
        elif _is_pointer(typ) and f.size == 8:
            fmt += "Q"
        else:
            raise TypeError(f"v05: no struct row for {ct.__name__}.{name}")
        at = f.offset + f.size
    return struct.Struct(fmt + (f"{ctypes.sizeof(ct) - at}x"
                                if ctypes.sizeof(ct) > at else ""))


# A Decision_ as one tuple (key, samples, batch, latency_ns, baseline, kind,
# slot, k, flags, gen): struct's unpacking reads a whole array of them in
# one C call, where ctypes builds an object per field read (the decision
# path runs on the engine's event loop, hundreds per batch).
DECISION_ROW = _row(Decision_)
# A Group_ as one tuple (key, seq, batch, rewards, advantages, uid, prior,
# baseline, sigma, mean, slot, gen, k, action, uid_len, keep); the three
# pointers as addresses.
GROUP_ROW = _row(Group_)
# struct v05_reward as bytes, (key, gen, sample, reward) (RewardWriter.stage
# packs records with it).
REWARD_ROW = _row(Reward)


# The library's struct name of each mirror.
MIRRORS = {"v05_params": Params, "v05_estimate": Estimate,
           "v05_eb_fit": EbFit, "v05_eb_state": EbState,
           "v05_config": Config, "v05_prompt_in": PromptIn,
           "v05_decision": Decision_, "v05_group": Group_,
           "v05_support": Support, "v05_reward": Reward,
           "v05_observer_info": ObserverInfo, "v05_lane_stat": LaneStat,
           "v05_prompt_view": PromptView,
           "v05_knapsack_hist": KnapsackHist,
           "v05_greso_prompt": GresoPrompt, "v05_greso": Greso,
           "v05_ebpo": Ebpo, "v05_pc_prompt": PcPrompt}
