# SPDX-License-Identifier: MIT
"""What the plugin answers, and how a prompt is named: uids, keys, Decision,
SubmitError."""

import dataclasses
from typing import List, Optional, Union

from ._lib import V05Error, lib
from .names import UID_MAX

__all__ = ["Uid", "Decision", "SubmitError", "key_of", "uid_bytes",
           "uid_checked"]

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
    are not needed after all; stop generating them, push no reward).
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


class SubmitError(V05Error):
    """Some prompts of a submit were refused; the others were registered.
    `decisions` is the first dispatch of the accepted ones, `rejected` maps
    each refused uid to its errno, and the message names them and why."""

    def __init__(self, errno_, msg, decisions, rejected):
        super().__init__(errno_, msg)
        self.decisions = decisions
        self.rejected = rejected
