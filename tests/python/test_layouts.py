# SPDX-License-Identifier: MIT
"""The binding's one description of each struct (its ctypes mirrors) is
checked against the library it loads: at import, every field of every
mirror against v05_abi(); a library that differs, or one from before the
check (no v05_abi), is refused with an ImportError naming the package's
version and the library's. The struct rows are made from the mirrors and
read the same bytes."""
import ctypes

import pytest

from v05.core import _lib


class _Fn:
    def __init__(self, value):
        self.value, self.restype = value, None

    def __call__(self):
        return self.value


class _Lib:
    """A stand-in library: a version and a layout text."""

    def __init__(self, version, abi=None):
        self.v05_version = _Fn(version)
        if abi is not None:
            self.v05_abi = _Fn(abi.encode())


def real_abi():
    return _lib.lib.v05_abi().decode()


def test_loaded_library_matches():
    _lib._check_layouts(_lib.lib, _lib.path_loaded)
    layouts = _lib._library_layouts(real_abi())
    assert set(layouts) == set(_lib._MIRRORS)
    for name, ct in _lib._MIRRORS.items():
        assert layouts[name][0] == ctypes.sizeof(ct)
        assert layouts[name][1] == _lib._mirror_layout(ct)


@pytest.mark.parametrize("edit,what", [
    (("F v05_group keep 104 8 uint64_t", "F v05_group keep 104 8 int64_t"),
     "v05_group"),
    (("S v05_lane_stat 96", "S v05_lane_stat 80"), "v05_lane_stat"),
    (("F v05_decision gen 56 4", "F v05_decision gen 52 4"), "v05_decision"),
])
def test_other_layout_refused(edit, what):
    text = real_abi().replace(*edit)
    assert text != real_abi()
    with pytest.raises(ImportError) as e:
        _lib._check_layouts(_Lib(b"7.1.2", text), "/x/libv05.so")
    msg = str(e.value)
    assert what in msg and "libv05 7.1.2" in msg and "/x/libv05.so" in msg
    assert _lib._package_version() in msg


def test_size_tagged_config_may_be_longer():
    """A later library's longer config is fine: the binding passes its
    own size (v05_config_init), the fields it lacks keep their defaults."""
    real = real_abi()
    size = ctypes.sizeof(_lib.Config)
    head = f"S v05_config {size} tagged"
    assert head in real
    last = [ln for ln in real.splitlines() if ln.startswith("F v05_config ")][-1]
    text = real.replace(head, f"S v05_config {size + 16} tagged")
    text = text.replace(last + "\n", last + "\n"
                        f"F v05_config later {size} 16 uint64_t[2]\n")
    _lib._check_layouts(_Lib(b"0.6.0", text), "/x/libv05.so")
    # Shorter is not: the binding would write past it.
    with pytest.raises(ImportError, match="v05_config"):
        _lib._check_layouts(_Lib(b"0.6.0", real.replace(
            head, f"S v05_config {size - 8} tagged")), "/x")


def test_library_without_layouts_refused():
    with pytest.raises(ImportError) as e:
        _lib._check_layouts(_Lib(b"0.1.0"), "/old/libv05.so")
    msg = str(e.value)
    assert "libv05 0.1.0" in msg and "v05_abi" in msg
    assert _lib._package_version() in msg


@pytest.mark.parametrize("ct,row", [(_lib.Decision_, _lib.DECISION_ROW),
                                    (_lib.Group_, _lib.GROUP_ROW),
                                    (_lib.Reward, _lib.REWARD_ROW)])
def test_rows_read_the_mirrors(ct, row):
    """Each field set to a value no other field has, read back through
    the row: the same values in the same order, reserved fields left out."""
    x = ct()
    want = []
    for i, (name, typ) in enumerate(ct._fields_):
        if name.startswith("reserved"):
            continue
        if hasattr(typ, "contents"):
            v = 0x2000 + 8 * i
            setattr(x, name, ctypes.cast(v, typ))
        else:
            v = 0x1000 + i
            v = float(v) if typ in (ctypes.c_double, ctypes.c_float) else v
            setattr(x, name, v)
        want.append(v)
    assert row.size == ctypes.sizeof(ct)
    assert list(row.unpack(bytes(x))) == want
