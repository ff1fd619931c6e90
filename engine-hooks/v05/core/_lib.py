# SPDX-License-Identifier: MIT
"""ctypes bindings for libv05: the library found, loaded and checked, its
calls' signatures, the error mapping (negative errno to V05Error).

The structs are mirrored in _structs.py (and named here too: ``_lib.Reward``,
``_lib.DECISION_ROW``, ...). At import ``_check_layouts`` compares every
field of every mirror with the layout the loaded library reports
(``v05_abi()``), refusing a library that differs with an ImportError
naming both versions, instead of corrupting memory (docs/PACKAGING.md,
"One version series").
"""

import ctypes
import ctypes.util
import errno as _errno
import os
import re

# The mirrors, as _lib.X for the modules that use them.
from ._structs import (DECISION_ROW, EB_H_GRID, EB_N0_GRID,  # noqa: F401
                       EB_SHAPES,
                       GROUP_ROW, MIRRORS as _MIRRORS, REWARD_ROW, Config,
                       Decision_, EbFit, EbState, Ebpo, Estimate, Greso,
                       GresoPrompt, Group_, KnapsackHist, LaneStat,
                       ObserverInfo, Params, PcPrompt, PromptIn, PromptView,
                       Reward, Support)

__all__ = ["lib", "path_loaded", "V05Error", "check", "Params", "Estimate",
           "Config", "PromptIn", "Decision_", "Group_", "Support", "Reward",
           "ObserverInfo", "LaneStat", "PromptView", "DECISION_ROW",
           "GROUP_ROW",
           "REWARD_ROW",
           "KnapsackHist", "GresoPrompt", "Greso", "Ebpo", "PcPrompt"]


class V05Error(OSError):
    """A libv05 call failed: ``errno`` is the C errno, ``strerror`` its
    explanation (the library's own message when it gave one)."""


# ---- the layouts, against the library's -------------------------------

_TYPES = {ctypes.c_uint8: "uint8_t", ctypes.c_uint32: "uint32_t",
          ctypes.c_int32: "int32_t", ctypes.c_uint64: "uint64_t",
          ctypes.c_double: "double", ctypes.c_float: "float",
          ctypes.c_bool: "bool", ctypes.c_char: "char",
          ctypes.c_char_p: "const char*", ctypes.c_void_p: "const void*"}


def _type_text(typ) -> str:
    """A ctypes type as v05_abi() spells the C type."""
    dims = ""
    while hasattr(typ, "_length_"):
        dims += f"[{typ._length_}]"
        typ = typ._type_
    if hasattr(typ, "contents"):
        base = "const " + _TYPES[typ._type_] + "*"
    elif typ in _TYPES:
        base = _TYPES[typ]
    else:
        base = "struct " + next(n for n, c in _MIRRORS.items() if c is typ)
    return base + dims


def _mirror_layout(ct):
    return [(name, getattr(ct, name).offset, getattr(ct, name).size,
             _type_text(typ)) for name, typ in ct._fields_]


def _library_layouts(text: str) -> dict:
    """v05_abi()'s text as {struct: (size, [(field, offset, size, type)],
    size-tagged)}."""
    out = {}
    for line in text.splitlines():
        part = line.split(" ", 5)
        if part[0] == "S":
            out[part[1]] = (int(part[2]), [], part[3:] == ["tagged"])
        elif part[0] == "F":
            out[part[1]][1].append((part[2], int(part[3]), int(part[4]),
                                    part[5]))
    return out


def _package_version() -> str:
    """This package's version: the wheel's, else the source tree's
    meson.build (where the version lives), else unknown."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Read, not imported: core/ imports nothing above it.
    for path, tag in ((os.path.join(pkg, "_version.py"), ""),
                      (os.path.join(pkg, "..", "..", "meson.build"),
                       " (source tree)")):
        try:
            with open(path) as f:
                m = re.search(r"""^\s*version\s*[=:]\s*['"]([^'"]+)['"]""",
                              f.read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1) + tag
    return "unknown"


def _check_layouts(lib, path):
    """Refuse a library whose structs are not laid out as the mirrors."""
    ver = lib.v05_version
    ver.restype = ctypes.c_char_p
    libver = (ver() or b"?").decode()
    head = (f"v05 {_package_version()} cannot use the libv05 at {path} "
            f"(libv05 {libver})")
    tail = ("; install the package with its own library (pip install . or "
            "the wheel), or point V05_LIB at a build of this source tree")
    try:
        fn = lib.v05_abi
    except AttributeError:
        raise ImportError(f"{head}: that library reports no struct layouts "
                          "(v05_abi, added in 0.5.0), so its structs cannot "
                          "be checked against this package's" + tail) \
            from None
    fn.restype = ctypes.c_char_p
    theirs = _library_layouts(fn().decode())
    for name, ct in _MIRRORS.items():
        if name not in theirs:
            raise ImportError(f"{head}: it has no struct {name}" + tail)
        size, fields, tagged = theirs[name]
        mine = _mirror_layout(ct)
        # Size-tagged (v05_config): the library's may be longer, with
        # fields this package leaves at their defaults (it passes its size).
        if tagged:
            ok = size >= ctypes.sizeof(ct) and fields[:len(mine)] == mine
        else:
            ok = size == ctypes.sizeof(ct) and fields == mine
        if not ok:
            diff = [f"{a} there, {b} here" for a, b in zip(fields, mine)
                    if a != b][:1] or \
                [f"{len(fields)} fields there, {len(mine)} here"]
            raise ImportError(f"{head}: its struct {name} is {size} bytes, "
                              f"this package's {ctypes.sizeof(ct)} "
                              f"({diff[0]})" + tail)


path_loaded = None  # the libv05 this process uses (set by _load)


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
        _check_layouts(lib, path)
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


lib = _load()

_P = ctypes.c_void_p
_u32, _u64, _int = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
_sig("v05_version", ctypes.c_char_p)
_sig("v05_abi", ctypes.c_char_p)
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
_sig("v05_ebpo_init", None, ctypes.POINTER(Ebpo))
_sig("v05_ebpo_fold", _int, ctypes.POINTER(Ebpo), ctypes.c_double,
     ctypes.POINTER(ctypes.c_double), _u32)
_sig("v05_ebpo_shrinkage", _int, ctypes.POINTER(Ebpo), _u32,
     ctypes.POINTER(ctypes.c_double))
_sig("v05_ebpo_estimate", _int, ctypes.POINTER(Ebpo),
     ctypes.POINTER(ctypes.c_double), _u32, ctypes.POINTER(Estimate),
     ctypes.POINTER(ctypes.c_double))
_sig("v05_pc_class", _int, ctypes.POINTER(ctypes.c_double), _u32,
     ctypes.c_double, ctypes.c_double, ctypes.c_double)
_sig("v05_pc_fold", _int, ctypes.POINTER(PcPrompt), _u64,
     ctypes.POINTER(ctypes.c_double), _u32, ctypes.c_double, ctypes.c_double,
     ctypes.c_double)
_sig("v05_pc_skip", _int, ctypes.POINTER(PcPrompt), _u64)
_sig("v05_eb_estimate", _int, ctypes.POINTER(Params), ctypes.POINTER(EbFit),
     ctypes.c_double, ctypes.POINTER(ctypes.c_double), _u32,
     ctypes.POINTER(Estimate), ctypes.POINTER(ctypes.c_double))
_sig("v05_eb_fit", _int, ctypes.POINTER(ctypes.c_double),
     ctypes.POINTER(_u32), ctypes.POINTER(ctypes.c_double), _u32,
     ctypes.POINTER(EbFit))
_sig("v05_eb_n0_at", ctypes.c_double, _u32)
_sig("v05_eb_h_at", ctypes.c_double, _u32)
_sig("v05_eb_shape_at", _int, _u32, ctypes.POINTER(ctypes.c_double),
     ctypes.POINTER(ctypes.c_double))
_sig("v05_eb_first_wave", _int, ctypes.POINTER(Params), ctypes.POINTER(EbFit),
     ctypes.c_double, _u32, ctypes.POINTER(ctypes.c_double))
_sig("v05_eb_state_init", None, ctypes.POINTER(EbState))
_sig("v05_eb_state_fold", _int, ctypes.POINTER(EbState), ctypes.c_double,
     ctypes.c_double, _u32, ctypes.c_double)
_sig("v05_eb_state_add", _int, ctypes.POINTER(EbState), ctypes.POINTER(EbState))
_sig("v05_eb_state_fit", _int, ctypes.POINTER(EbState), ctypes.POINTER(EbFit))
_sig("v05_mode_from_name", _int, ctypes.c_char_p)
_sig("v05_prior_from_p", _int, ctypes.c_double, ctypes.POINTER(ctypes.c_double))
_sig("v05_reward_from_binary", _int, _int, ctypes.POINTER(ctypes.c_double))
_sig("v05_config_init", _int, ctypes.POINTER(Config), ctypes.c_size_t,
     ctypes.c_uint)
_sig("v05_config_default", None, ctypes.POINTER(Config))
_sig("v05_config_paper", None, ctypes.POINTER(Config))
_sig("v05_config_mode", _int, ctypes.POINTER(Config), _u32)
_sig("v05_config_check", _int, ctypes.POINTER(Config))
_sig("v05_plugin_create", _int, ctypes.c_char_p, ctypes.POINTER(Config),
     ctypes.POINTER(_P))
_sig("v05_plugin_attach", _int, ctypes.c_char_p, ctypes.c_uint,
     ctypes.POINTER(_P))
_sig("v05_plugin_replace", _int, ctypes.c_char_p, ctypes.POINTER(Config),
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
_sig("v05_producer_abort", _int, _P, _u64, _u32)
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
_sig("v05_observer_prompt", _int, _P, _u64, ctypes.POINTER(PromptView))
_sig("v05_observer_eb_state", _int, _P, ctypes.POINTER(EbState))
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
