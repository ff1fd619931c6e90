# SPDX-License-Identifier: MIT
"""Range checks for integers on their way into C. ctypes converts a Python
int into a C integer by dropping the high bits (2**32 + 1 becomes 1, -1
becomes 2**32 - 1), so every count, index and size is checked here first:
TypeError for a non-integer, ValueError for a value the call cannot take,
OverflowError for one wider than the C field."""

import numbers

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
INT_MAX = 2**31 - 1


def integer(name: str, value, lo: int, hi: int, c_max: int) -> int:
    """value as an int in [lo, hi]; c_max is the C field's largest value."""
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
