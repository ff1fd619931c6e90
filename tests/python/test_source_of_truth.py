# SPDX-License-Identifier: MIT
"""Python takes the library's names, numbers and defaults instead of copies:
a Plugin made with no parameters has exactly v05_config_default's
configuration, paper=True v05_config_paper's; the enumerations and flags
are the library's; errors are the OSError subclasses of their errno."""
import ctypes
import errno
import pickle

import pytest

import v05
from v05.core import _lib
from v05.core.names import FLAG_HALTED, KINDS, MODES, SCHEDULES, SIGMAS


def config_bytes(c):
    c.journal_path = None
    return ctypes.string_at(ctypes.addressof(c), ctypes.sizeof(c))


@pytest.mark.parametrize("paper", [False, True])
def test_create_keeps_the_library_defaults(segname, paper):
    # The library's defaults at this binding's size (the exported
    # v05_config_default fills the smallest config of the soname only;
    # the header's macro passes the caller's size, as this does).
    want = _lib.Config()
    assert _lib.lib.v05_config_init(
        ctypes.byref(want), ctypes.sizeof(want),
        _lib.const("V05_CONFIG_INIT_PAPER") if paper else 0) == 0
    with v05.Plugin.create(segname, paper=paper) as p:
        assert config_bytes(p.config) == config_bytes(want)
        assert p.halt_fraction == want.halt_fraction
        # After an attach there is no config in Python: from the segment.
        p.config = None
        assert p.halt_fraction == want.halt_fraction


def test_explicit_parameters_win(segname):
    with v05.Plugin.create(segname, paper=True, mode="v05-eb", k_max=8) as p:
        assert p.config.params.mode == MODES["v05-eb"]
        assert p.config.params.k_max == 8
        assert p.config.params.sigma == SIGMAS["paper"]


def test_names_and_numbers_are_the_librarys():
    lib = _lib.lib
    assert MODES and all(lib.v05_mode_from_name(n.encode()) == v
                         for n, v in MODES.items())
    assert set(MODES) >= {"v05", "v05-eb", "v05-fixed", "grpo", "dapo"}
    assert set(SIGMAS) == {"rms", "paper"}
    assert set(SCHEDULES) == {"rounds", "stream"}
    assert sorted(KINDS.values()) == ["abort", "barrier", "cancel", "drop",
                                      "final", "reject", "sample"]
    assert FLAG_HALTED == _lib.const("V05_DF_HALTED")
    with pytest.raises(v05.V05Error) as e:
        _lib.const("V05_NO_SUCH_CONSTANT")
    assert e.value.errno == errno.ENOENT and isinstance(e.value, FileNotFoundError)


def test_errors_are_oserror_subclasses(segname):
    with v05.Plugin.create(segname) as p:
        with pytest.raises(FileExistsError) as e:
            v05.Plugin.create(segname)
        assert isinstance(e.value, v05.V05Error)
        assert "create" in str(e.value)
        # It crosses processes (multiprocessing, Ray pickle errors).
        back = pickle.loads(pickle.dumps(e.value))
        assert type(back) is type(e.value) and back.errno == e.value.errno
    with pytest.raises(FileNotFoundError):
        v05.unlink(segname)
    with pytest.raises(v05.V05Error) as e:  # EINVAL has no subclass
        v05.Plugin.create(segname, k_init=8, k_max=4)
    assert type(e.value) is v05.V05Error
