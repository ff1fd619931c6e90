# SPDX-License-Identifier: MIT
"""What the plugin answers, and how a prompt is named: uids, keys, Decision
(and the decisions read out of the library's array), SubmitError."""

import dataclasses
from typing import Callable, List, Optional, Union

from ._lib import DECISION_ROW, V05Error, lib
from .names import (FLAG_HALTED, FLAG_PADDED, FLAG_RECOVERED, KINDS,
                    REJECT_REASONS, UID_MAX)

__all__ = ["Uid", "Decision", "SubmitError", "key_of", "uid_bytes",
           "uid_checked", "decisions_of"]

Uid = Union[str, bytes]


def uid_bytes(uid: Uid) -> bytes:
    """A uid's bytes: a str as UTF-8, bytes as they are. Anything else is
    refused rather than turned into a string: 7 and "7" would then be one
    prompt, where a trainer (verl) keeps them apart."""
    if isinstance(uid, str):
        return uid.encode("utf-8")
    if isinstance(uid, (bytes, bytearray, memoryview)):
        return bytes(uid)
    raise TypeError(f"uid {uid!r} is of type {type(uid).__name__}; a uid is "
                    "a str or bytes (str(uid) if its type does not matter)")


def uid_checked(uid: Uid, where: str) -> bytes:
    """uid_bytes of a uid handed in, and its length checked (1 to UID_MAX
    bytes, what the library takes): TypeError or ValueError naming
    `where` and the uid."""
    try:
        b = uid_bytes(uid)
    except TypeError as e:
        raise TypeError(f"{where}: {e}") from None
    if not 1 <= len(b) <= UID_MAX:
        raise ValueError(f"{where}: uid {uid!r} is {len(b)} bytes; a uid "
                         f"has 1 to {UID_MAX}")
    return b


def key_of(uid: Uid) -> int:
    """The 64-bit key v05 uses for a uid (XXH3 of its bytes)."""
    b = uid_bytes(uid)
    return lib.v05_key(b, len(b))


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the engine must do next for one prompt.

    kind: "sample" (generate `samples`), "final" (the group's advantages are
    in `slot`), "drop" (dapo: the group carries no signal; release it),
    "barrier" (external halt: `batch` waits at a round barrier, `k` of its
    `batch_size` prompts need more; see v05.trainers.distributed), or
    "reject" (the reward pushed for sample `samples[0]` was refused for its
    value, `value`, because it is `reason`: unless a valid one is pushed,
    the group cannot finish), or "abort" (v05-eb's early start: `samples`
    are not needed after all; stop generating them, push no reward), or
    "cancel" (a segment made with abort_records=True: a producer aborted
    the prompt, RewardWriter.abort; it is gone from the plugin, its slot
    free: stop generating `samples`, push nothing, release nothing).
    """
    kind: str
    uid: Optional[Uid]
    key: int
    slot: int
    samples: List[int]
    k: int
    baseline: float
    batch: int
    latency_ns: int
    padded: bool
    halted: bool
    recovered: bool
    batch_size: int = 0
    gen: int = 0  # the prompt instance: release() checks it with the key,
    # and every reward for these samples carries it (RewardWriter.push)
    reason: str = ""   # "reject": "not finite" or "outside [-1, 1]"
    value: float = 0.0  # "reject": the refused reward, as received


def _samples(mask: int) -> List[int]:
    """The set bits of a sample mask, lowest first. The masks a run sees
    are few (a wave's bits), so each is worked out once."""
    bits = _MASKS.get(mask)
    if bits is None:
        out, m = [], mask
        while m:  # one step per set bit
            low = m & -m
            out.append(low.bit_length() - 1)
            m ^= low
        bits = tuple(out)
        if len(_MASKS) < 4096:
            _MASKS[mask] = bits
    return list(bits)  # the caller's own list


_MASKS = {}


def decisions_of(buf, n: int, uids: dict, finals: set,
             uid_of: Callable[[int, int], Optional[Uid]],
             cancelled: Optional[list] = None) -> List[Decision]:
    """The first n decisions of a Decision_ array (a poll's, a submit's),
    as Decisions. uids: key -> uid of the prompts a Plugin knows;
    uid_of(key, slot): the uid of a key not there (read from its slot);
    finals: the keys of final and drop decisions handed out, added to;
    cancelled: the "cancel" decisions, appended to.
    Read as struct rows, not through ctypes fields: this runs for every
    decision on the engine's event loop (tests/python/test_api.py,
    test_polled_decisions_are_whole, checks the fields against a
    Decision built the plain way)."""
    out = []
    rows = memoryview(buf).cast("B")[:n * DECISION_ROW.size]
    for (key, mask, batch, latency, baseline, kind, slot, k, flags,
         gen) in DECISION_ROW.iter_unpack(rows):
        kind = KINDS.get(kind, "?")
        if kind == "barrier":
            uid = None
        elif kind == "cancel":
            # Its slot is free already: the uid is the one submitted.
            uid = uids.get(key)
        else:
            uid = uids.get(key) or uid_of(key, slot)
        # Without Decision's __init__: a frozen dataclass sets each of
        # its 16 fields through object.__setattr__, a quarter of this
        # loop's cost. Equal to Decision(**fields) (the test above).
        d = object.__new__(Decision)
        if kind == "sample" or kind == "abort" or kind == "cancel":
            d.__dict__.update(
                kind=kind, uid=uid, key=key, slot=slot, gen=gen,
                samples=_samples(mask), k=k, baseline=baseline,
                batch=batch, latency_ns=latency,
                padded=bool(flags & FLAG_PADDED),
                halted=bool(flags & FLAG_HALTED),
                recovered=bool(flags & FLAG_RECOVERED),
                batch_size=0, reason="", value=0.0)
        else:
            if kind == "final" or kind == "drop":
                finals.add(key)
            reject = kind == "reject"
            d.__dict__.update(
                kind=kind, uid=uid, key=key, slot=slot, gen=gen,
                samples=_samples(mask) if reject else [],
                k=k, baseline=0.0 if reject else baseline,
                batch=batch, latency_ns=latency,
                padded=bool(flags & FLAG_PADDED),
                halted=bool(flags & FLAG_HALTED),
                recovered=bool(flags & FLAG_RECOVERED),
                batch_size=mask if kind == "barrier" else 0,
                reason=REJECT_REASONS.get(flags, "?") if reject else "",
                value=baseline if reject else 0.0)
        out.append(d)
        if kind == "cancel" and cancelled is not None:
            cancelled.append(d)
    return out


class SubmitError(V05Error):
    """Some prompts of a submit were refused; the others were registered.
    `decisions` is the first dispatch of the accepted ones, `rejected` maps
    each refused uid to its errno, and the message names them and why."""

    def __init__(self, errno_, msg, decisions, rejected):
        super().__init__(errno_, msg)
        self.decisions = decisions
        self.rejected = rejected
