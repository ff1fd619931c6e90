# SPDX-License-Identifier: MIT
"""Checks of what a caller hands in, before it reaches C. ctypes converts a
Python int into a C integer by dropping the high bits (2**32 + 1 becomes 1,
-1 becomes 2**32 - 1), and a float NaN passes every comparison test it
fails, so every count, index, size, reward and prior is checked here first:
TypeError for the wrong type, ValueError for a value the call cannot take,
OverflowError for an integer wider than the C field."""

import math
import numbers

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
INT_MAX = 2**31 - 1


def integer(name: str, value, lo: int, hi: int, c_max: int) -> int:
    """value as an int in [lo, hi]; c_max is the C field's largest value."""
    # The common case first, building nothing: these checks run on every
    # reward pushed and every poll (hi <= c_max for every caller).
    if type(value) is int and lo <= value <= hi and value <= c_max:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    v = int(value)
    if v > c_max or v < -c_max - 1:
        raise OverflowError(f"{name} = {v} does not fit the C field "
                            f"(at most {c_max})")
    if v < lo or v > hi:
        raise ValueError(f"{name} = {v} is not in [{lo}, {hi}]")
    return v


def u32(name: str, value, lo: int = 0, hi: int = U32_MAX) -> int:
    return integer(name, value, lo, hi, U32_MAX)


def u64(name: str, value, lo: int = 0, hi: int = U64_MAX) -> int:
    return integer(name, value, lo, hi, U64_MAX)


def cstr(name: str, value) -> bytes:
    """A str (or bytes) for a C string: a NUL inside would end it early in
    C, naming something else than the caller said (a segment "a\\0b" is
    segment "a"), so it is refused."""
    if isinstance(value, str):
        b = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, (bytes, bytearray)):
        b = bytes(value)
    else:
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    if b"\0" in b:
        raise ValueError(f"{name} {value!r} contains a NUL character")
    return b


def unit_interval(what: str, value, hint: str = "") -> float:
    """A finite number in [-1, 1] (a reward, a prior) as a float, or
    TypeError / ValueError saying what was wrong with it. A bool or a
    string is refused (True would be read as 1, False as 0, the middle of
    [-1, 1]), as is anything float() cannot take."""
    if type(value) is float and -1.0 <= value <= 1.0:  # false for NaN
        return value  # the common case, before any message is built
    accepted = f"; the accepted range is finite numbers in [-1, 1]{hint}"
    bad_type = TypeError(f"{what} is {value!r} ({type(value).__name__}), "
                         f"not a number{accepted}")
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise bad_type
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise bad_type from None
    if not -1.0 <= v <= 1.0:  # false for NaN too
        kind = "not finite" if math.isnan(v) or math.isinf(v) else \
            "outside [-1, 1]"
        raise ValueError(f"{what} is {v!r}: {kind}{accepted}")
    return v
