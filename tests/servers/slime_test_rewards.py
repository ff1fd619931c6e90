# SPDX-License-Identifier: MIT
"""slime reward functions (``--custom-rm-path``: ``async fn(args,
sample)``) the slime tests name by path. Each answers from what the
sample carries (its index in the v05 group, its group), never from
timing, so every test's outcome holds by construction."""
import asyncio

calls = []          # (group_index, sample) of every call
cancelled = []      # the same, for the calls that were cancelled
_first = []         # the group the hold_others reward answers


def _who(sample):
    return sample.group_index, sample.metadata["v05"]["sample"]


async def alternate(args, sample):
    """0, 1, 0, 1, ... by sample index: on [0, 1] mapped to -1, +1."""
    calls.append(_who(sample))
    return float(sample.metadata["v05"]["sample"] % 2)


async def zero(args, sample):
    calls.append(_who(sample))
    return 0.0


async def as_dict(args, sample):
    """A reward of several keys (slime's --reward-key picks one)."""
    calls.append(_who(sample))
    s = 1.0 if sample.metadata["v05"]["sample"] % 2 else -1.0
    return {"score": s, "other": 99.0}


async def hold_others(args, sample):
    """Answers the first group it is asked about (1.0); every other
    group's samples wait until cancelled: those groups are still running
    when the first completes the batch."""
    who = _who(sample)
    calls.append(who)
    if not _first:
        _first.append(sample.group_index)
    if sample.group_index == _first[0]:
        return 1.0
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(who)
        raise


async def raises(args, sample):
    calls.append(_who(sample))
    raise ValueError("no verdict for this answer")


async def too_big(args, sample):
    calls.append(_who(sample))
    return 2.0


def reset():
    calls.clear()
    cancelled.clear()
    _first.clear()
