# SPDX-License-Identifier: MIT
"""ctypes bindings for libv05: struct mirrors, signatures, error mapping.

The structs mirror include/v05/*.h; plugin/abi.c pins their sizes in C and
``_check_abi`` pins the same numbers here, so a layout drift fails loudly at
import instead of corrupting memory.
"""

import ctypes
import ctypes.util
import errno as _errno
import os
import struct

__all__ = ["lib", "path_loaded", "V05Error", "check", "Params", "Estimate",
           "Config", "PromptIn", "Decision_", "Group_", "Support", "Reward",
           "ObserverInfo", "LaneStat", "DECISION_ROW", "GROUP_ROW",
           "REWARD_ROW",
           "KnapsackHist", "GresoPrompt", "Greso"]


class V05Error(OSError):
    """A libv05 call failed: ``errno`` is the C errno, ``strerror`` its
    explanation (the library's own message when it gave one)."""


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
    _fields_ = [("n0", ctypes.c_double), ("h", ctypes.c_double)]


EB_N0_GRID, EB_H_GRID = 31, 24


class EbState(ctypes.Structure):
    _fields_ = [("ll", (ctypes.c_double * EB_H_GRID) * EB_N0_GRID),
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
                ("eb_early", ctypes.c_uint32), ("reserved_eb", ctypes.c_uint32)]


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


# A Decision_ as one tuple (key, samples, batch, latency_ns, baseline, kind,
# slot, k, flags, gen, reserved): struct's unpacking reads a whole array of
# them in one C call, where ctypes builds an object per field read (the
# decision path runs on the engine's event loop, hundreds per batch).
DECISION_ROW = struct.Struct("=QQQQdIIIIII")


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
                ("uid_len", ctypes.c_uint32), ("keep", ctypes.c_uint64)]


# A Group_ as one tuple (key, seq, batch, rewards, advantages, uid, prior,
# baseline, sigma, mean, slot, gen, k, action, uid_len, keep); the three
# pointers as addresses. Native alignment: 4 bytes of padding before keep.
GROUP_ROW = struct.Struct("@QQQPPPddddIIIIIQ")


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


class Support(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("mean", ctypes.c_float),
                ("k", ctypes.c_uint32)]


class Reward(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("gen", ctypes.c_uint32),
                ("sample", ctypes.c_uint32), ("reward", ctypes.c_float),
                ("reserved", ctypes.c_uint32)]


# struct v05_reward as bytes (RewardWriter.stage packs records with it).
REWARD_ROW = struct.Struct("=QIIfI")


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
                ("reserved2", ctypes.c_uint32)]


class LaneStat(ctypes.Structure):
    _fields_ = [("owner_pid", ctypes.c_uint32), ("owner_alive", ctypes.c_uint32),
                ("fill", ctypes.c_uint32), ("high_water", ctypes.c_uint32),
                ("consumed", ctypes.c_uint64), ("claims", ctypes.c_uint64),
                ("applied", ctypes.c_uint64), ("rejected", ctypes.c_uint64),
                ("discarded", ctypes.c_uint64), ("cut", ctypes.c_uint32),
                ("cut_pid", ctypes.c_uint32), ("cuts", ctypes.c_uint32),
                ("cut_records", ctypes.c_uint32),
                ("cut_rejected", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


path_loaded = None  # the libv05 this process uses (set by _load)


def _check_abi():
    expect = {Params: 32, Estimate: 64, Config: 256, EbState: 5968, PromptIn: 24,
              Decision_: 64, Group_: 112, Support: 16, Reward: 24,
              ObserverInfo: 936, LaneStat: 80, KnapsackHist: 32,
              GresoPrompt: 8, Greso: 48}
    for struct, size in expect.items():
        if ctypes.sizeof(struct) != size:
            raise ImportError(f"v05: ctypes {struct.__name__} is "
                              f"{ctypes.sizeof(struct)} bytes, the C ABI "
                              f"says {size}")
    if Config.journal_path.offset != 88 or ObserverInfo.journal_error.offset != 136 \
            or Config.lane_cut_records.offset != 232 \
            or Config.eb_window.offset != 240 \
            or ObserverInfo.broker.offset != 776 or LaneStat.cut.offset != 56:
        raise ImportError("v05: ctypes layout drifted from the C ABI")
    # The struct rows read the same bytes as the ctypes mirrors, field
    # for field (each field set to a value no other field has).
    for ct, row in ((Decision_, DECISION_ROW), (Group_, GROUP_ROW),
                    (Reward, REWARD_ROW)):
        x = ct()
        want = []
        for i, (name, typ) in enumerate(ct._fields_):
            v = 0x1000 + i if not hasattr(typ, "contents") else 0x2000 + 8 * i
            if typ is ctypes.c_double:
                v = float(v)
            setattr(x, name, v if not hasattr(typ, "contents")
                    else ctypes.cast(v, typ))
            want.append(v)
        if ctypes.sizeof(ct) != row.size or \
                list(row.unpack(bytes(x))) != want:
            raise ImportError(f"v05: the struct row of {ct.__name__} "
                              "drifted from its ctypes mirror")


def _candidates():
    """Where libv05 may be, in order: $V05_LIB (development: a build tree,
    a sanitizer build), the copy inside this package (a wheel or
    `pip install .`), this checkout's build/ (engine-hooks/v05 run from
    the source tree), the system's (`meson install`)."""
    env = os.environ.get("V05_LIB")
    if env:
        yield env, True
    # The package's folder (this file is in its core/).
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    yield os.path.join(pkg, "libv05.so"), False
    yield os.path.join(pkg, "..", "..", "build", "libv05.so"), False
    found = ctypes.util.find_library("v05")
    if found:
        yield found, True


def _load():
    tried = []
    for path, named in _candidates():
        # A set $V05_LIB that fails is an error to report, not to skip:
        # falling through to another copy would hide it.
        if not named and not os.path.exists(path):
            tried.append(f"{path}: absent")
            continue
        try:
            lib = ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            tried.append(f"{path}: {e}")
            if path == os.environ.get("V05_LIB"):
                break
            continue
        global path_loaded
        path_loaded = path
        return lib
    raise ImportError(
        "v05: libv05.so not found. Install the package with its library "
        "(pip install . from the checkout, or the wheel from scripts/wheel), "
        "or build it (meson setup build && ninja -C build) and point V05_LIB "
        "at build/libv05.so. Tried: " + "; ".join(tried))


def _sig(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_check_abi()
lib = _load()

_P = ctypes.c_void_p
_u32, _u64, _int = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
_sig("v05_version", ctypes.c_char_p)
_sig("v05_errmsg", ctypes.c_char_p)
_sig("v05_key", _u64, ctypes.c_void_p, ctypes.c_size_t)
_sig("v05_params_default", None, ctypes.POINTER(Params))
_sig("v05_estimate", _int, ctypes.POINTER(Params), ctypes.c_double,
     ctypes.POINTER(ctypes.c_double), _u32, ctypes.POINTER(Estimate),
     ctypes.POINTER(ctypes.c_double))
_sig("v05_keep", _int, ctypes.POINTER(Params),
     ctypes.POINTER(ctypes.c_double), _u32, ctypes.POINTER(_u64))
_sig("v05_knapsack_plan", _int, ctypes.POINTER(ctypes.c_double), _u32, _u32,
     _u32, ctypes.POINTER(_u32))
_sig("v05_knapsack_hist_fold", _int, ctypes.POINTER(KnapsackHist), _u64,
     ctypes.POINTER(ctypes.c_double), _u32)
_sig("v05_knapsack_hist_estimate", _int, ctypes.POINTER(KnapsackHist),
     ctypes.POINTER(ctypes.c_double))
_sig("v05_greso_init", None, ctypes.POINTER(Greso), _u64)
_sig("v05_greso_fold", _int, ctypes.POINTER(Greso), ctypes.POINTER(GresoPrompt),
     ctypes.POINTER(ctypes.c_double), _u32)
_sig("v05_greso_keep_p", _int, ctypes.POINTER(Greso),
     ctypes.POINTER(GresoPrompt), ctypes.POINTER(ctypes.c_double))
_sig("v05_greso_skip", _int, ctypes.POINTER(Greso), ctypes.POINTER(GresoPrompt),
     _u64, _u64)
_sig("v05_greso_step_end", _int, ctypes.POINTER(Greso))
_sig("v05_greso_refill", _int, _u32, _u32, ctypes.c_double, _u32,
     ctypes.POINTER(_u32))
_sig("v05_eb_estimate", _int, ctypes.POINTER(Params), ctypes.POINTER(EbFit),
     ctypes.c_double, ctypes.POINTER(ctypes.c_double), _u32,
     ctypes.POINTER(Estimate), ctypes.POINTER(ctypes.c_double))
_sig("v05_eb_fit", _int, ctypes.POINTER(ctypes.c_double),
     ctypes.POINTER(_u32), ctypes.POINTER(ctypes.c_double), _u32,
     ctypes.POINTER(EbFit))
_sig("v05_eb_n0_at", ctypes.c_double, _u32)
_sig("v05_eb_h_at", ctypes.c_double, _u32)
_sig("v05_eb_state_init", None, ctypes.POINTER(EbState))
_sig("v05_eb_state_fold", _int, ctypes.POINTER(EbState), ctypes.c_double,
     ctypes.c_double, _u32, ctypes.c_double)
_sig("v05_eb_state_add", _int, ctypes.POINTER(EbState), ctypes.POINTER(EbState))
_sig("v05_eb_state_fit", _int, ctypes.POINTER(EbState), ctypes.POINTER(EbFit))
_sig("v05_mode_from_name", _int, ctypes.c_char_p)
_sig("v05_prior_from_p", _int, ctypes.c_double, ctypes.POINTER(ctypes.c_double))
_sig("v05_reward_from_binary", _int, _int, ctypes.POINTER(ctypes.c_double))
_sig("v05_config_default", None, ctypes.POINTER(Config))
_sig("v05_config_paper", None, ctypes.POINTER(Config))
_sig("v05_config_mode", _int, ctypes.POINTER(Config), _u32)
_sig("v05_config_check", _int, ctypes.POINTER(Config))
_sig("v05_plugin_create", _int, ctypes.c_char_p, ctypes.POINTER(Config),
     ctypes.POINTER(_P))
_sig("v05_plugin_attach", _int, ctypes.c_char_p, ctypes.c_uint,
     ctypes.POINTER(_P))
_sig("v05_plugin_close", _int, _P, ctypes.c_uint)
_sig("v05_submit", _int, _P, ctypes.POINTER(PromptIn), _u32,
     ctypes.POINTER(Decision_), ctypes.POINTER(_int))
_sig("v05_poll", _int, _P, ctypes.POINTER(Decision_), _u32)
_sig("v05_recover", _int, _P, ctypes.POINTER(Decision_), _u32)
_sig("v05_resolve", _int, _P, _u64, _int)
_sig("v05_eb_state_get", _int, _P, ctypes.POINTER(EbState))
_sig("v05_eb_state_set_remote", _int, _P, ctypes.POINTER(EbState))
_sig("v05_eb_state_set_own", _int, _P, ctypes.POINTER(EbState))
_sig("v05_cancel", _int, _P, _u64)
_sig("v05_fd", _int, _P)
_sig("v05_arm", _int, _P, _int)
_sig("v05_wait", _int, _P, _int)
_sig("v05_pending", _int, _P)
_sig("v05_next_deadline", _int, _P, ctypes.POINTER(ctypes.c_int64))
_sig("v05_wait_path", ctypes.c_char_p, _P)
_sig("v05_wait_reason", ctypes.c_char_p, _P)
_sig("v05_group", _int, _P, _u32, ctypes.POINTER(Group_))
_sig("v05_release", _int, _P, _u32, _u32, _u64)
_sig("v05_slot_uid", _int, _P, _u32, ctypes.c_void_p, _u32)
_sig("v05_slot_offsets", _int, _P, _u32, ctypes.POINTER(_u64),
     ctypes.POINTER(_u64))
_sig("v05_support_sample", _int, _P, ctypes.POINTER(Support), _u32, _u64)
_sig("v05_counters", _int, _P, ctypes.POINTER(_u64), _u32)
_sig("v05_counter_name", ctypes.c_char_p, _u32)
_sig("v05_producer_open", _int, ctypes.c_char_p, ctypes.c_uint,
     ctypes.POINTER(_P))
_sig("v05_producer_push", _int, _P, _u64, _u32, _u32, ctypes.c_float)
_sig("v05_producer_push_batch", _int, _P, ctypes.POINTER(Reward), _u32)
_sig("v05_producer_push_wait", _int, _P, ctypes.POINTER(Reward), _u32, _int)
_sig("v05_producer_flush", _int, _P)
_sig("v05_producer_close", _int, _P)
_sig("v05_producer_lane", _int, _P)
_sig("v05_reader_open", _int, ctypes.c_char_p, ctypes.c_uint,
     ctypes.POINTER(_P))
_sig("v05_reader_next", _int, _P, ctypes.POINTER(Group_))
_sig("v05_reader_release", _int, _P, ctypes.POINTER(Group_))
_sig("v05_reader_close", _int, _P)
_sig("v05_segment_unlink", _int, ctypes.c_char_p)
_sig("v05_segment_reclaim", _int, ctypes.c_char_p, ctypes.c_uint)
_sig("v05_observer_open", _int, ctypes.c_char_p, ctypes.c_uint,
     ctypes.POINTER(_P))
_sig("v05_observer_close", _int, _P)
_sig("v05_observer_counters", _int, _P, ctypes.POINTER(_u64), _u32)
_sig("v05_observer_info", _int, _P, ctypes.POINTER(ObserverInfo))
_sig("v05_observer_lanes", _int, _P, ctypes.POINTER(LaneStat), _u32)
_sig("v05_wait_path_name", ctypes.c_char_p, _u32)
_sig("v05_journal_state_name", ctypes.c_char_p, _u32)
_sig("v05_schedule_name", ctypes.c_char_p, _u32)
_sig("v05_mode_name", ctypes.c_char_p, _u32)
_sig("v05_sigma_name", ctypes.c_char_p, _u32)
_sig("v05_action_name", ctypes.c_char_p, _u32)
_sig("v05_constant", _int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64))


# Calls that return within microseconds and never block run with the GIL
# held (ctypes.PyDLL). Through CDLL each call gives the GIL up and takes it
# back; with other Python threads running (the driver's scoring pool, the
# engine's own) taking it back is a handoff through the GIL's condition
# variable, system calls and often a context switch, per reward pushed and
# per poll. Calls that may block (v05_wait, v05_producer_push_wait, create,
# attach, close) still give it up. v05_poll may write the journal, so it
# is here as `gil.v05_poll` for Plugin.poll to use when there is none.
_GIL_HELD = ("v05_key", "v05_producer_push", "v05_producer_push_batch",
             "v05_group", "v05_release",
             "v05_slot_uid", "v05_arm", "v05_pending", "v05_next_deadline",
             "v05_poll")
gil = ctypes.PyDLL(path_loaded)
for _name in _GIL_HELD:
    _f, _src = getattr(gil, _name), getattr(lib, _name)
    _f.restype, _f.argtypes = _src.restype, _src.argtypes
    if _name != "v05_poll":
        setattr(lib, _name, _f)
del _name, _f, _src

COUNTER_SLOTS = 256


# errno -> the builtin OSError subclass Python itself would raise for it
# (FileExistsError for EEXIST, PermissionError for EACCES/EPERM, ...):
# V05Error and that subclass at once, so `except FileExistsError` works.
_SUBCLASSES = {}


def error_class(code: int):
    """V05Error, or its child that is also the OSError subclass of code."""
    builtin = type(OSError(code, ""))
    if builtin is OSError:
        return V05Error
    cls = _SUBCLASSES.get(builtin)
    if cls is None:
        cls = type("V05" + builtin.__name__, (V05Error, builtin),
                   {"__module__": __name__})
        _SUBCLASSES[builtin] = cls
        # A module attribute, so the error pickles (multiprocessing, Ray).
        globals()[cls.__name__] = cls
    return cls


def raise_errno(code: int, msg: str):
    """Raise the V05Error (subclass) for errno `code`."""
    raise error_class(code)(code, msg)


def error(ret, what):
    """A V05Error for a negative return, with the library's message."""
    code = -ret
    msg = (lib.v05_errmsg() or b"").decode("utf-8", "replace")
    if not msg:
        msg = os.strerror(code)
    return error_class(code)(code, f"{what}: {msg}")


def check(ret, what):
    """Return ret when >= 0, else raise the matching V05Error."""
    if ret < 0:
        raise error(ret, what)
    return ret


EAGAIN = _errno.EAGAIN


def const(name: str) -> int:
    """A public header's integer constant, from the loaded library (one
    source of truth: nothing copied by hand)."""
    v = ctypes.c_int64()
    check(lib.v05_constant(name.encode(), ctypes.byref(v)), "constant")
    return v.value


def names(fn, stop: str = None) -> dict:
    """name -> value of an enumeration the library names (v05_mode_name,
    ...): the values from 0 up to the first without a name."""
    out = {}
    for i in range(256):
        n = fn(i)
        if n is None or n.decode() == stop:
            break
        out[n.decode()] = i
    return out
