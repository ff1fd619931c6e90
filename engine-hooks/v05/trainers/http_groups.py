# SPDX-License-Identifier: MIT
"""What the trainers that reach v05 over HTTP share (slime's rollout
function, ROLL's rollout loop; docs/SLIME.md): which server runs a group,
a trainer's reward put on v05's [-1, 1] scale, their settings read from
the trainer's own configuration or the environment (each refused with the
name of the setting it came from), and a group's stream run to its final
record with each sample scored as it arrives."""

import asyncio
import contextlib
import math
import os
import zlib
from typing import (Any, Awaitable, Callable, Dict, List, Optional, Sequence,
                    Tuple)

__all__ = ["ConfigError", "server_urls", "reward_range", "batch_rewards",
           "pick_server", "to_unit", "unit_prior", "stream_group",
           "kept_samples"]


class ConfigError(ValueError):
    """A setting the integration refuses; the message names it."""


def _setting(obj: Any, attr: str, env: str):
    """(value, where it came from): the trainer's attribute first, then
    the environment variable; (None, None) when neither is set."""
    v = getattr(obj, attr, None) if obj is not None else None
    if v is not None:
        return v, attr
    v = os.environ.get(env)
    if v not in (None, ""):
        return v, env
    return None, None


def _url(u: Any, where: str) -> str:
    if not isinstance(u, str) or not u.strip():
        raise ConfigError(f"{where}: {u!r} is not a server URL")
    u = u.strip().rstrip("/")
    if "://" not in u:
        u = "http://" + u
    if not u.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: {u!r} is not an http(s) URL")
    return u


def server_urls(obj: Any, attr: str, env: str,
                fallback: Sequence[str] = ()) -> List[str]:
    """The v05 servers (`host:port` or URLs): `obj.attr` (a list or a
    comma-separated string), else `$env`, else `fallback` (what the
    trainer itself knows of its engines)."""
    v, where = _setting(obj, attr, env)
    if v is None:
        if fallback:
            return [_url(u, "the trainer's engine addresses")
                    for u in fallback]
        if obj is None:
            raise ConfigError(f"{env}: no v05 server given: set the "
                              "environment variable to host:port[,...]")
        raise ConfigError(
            f"{attr}: no v05 server given: set {attr} (a list of "
            f"host:port) or the environment variable {env}")
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: {v!r} is not a list of server URLs")
    return [_url(u, f"{where}[{i}]") for i, u in enumerate(items)]


def reward_range(obj: Any, attr: str, env: str,
                 default=(0.0, 1.0)) -> Tuple[float, float]:
    """The trainer's reward range (lo, hi), mapped linearly onto v05's
    [-1, 1]: `obj.attr` ([lo, hi] or "lo,hi"), else `$env`, else
    `default`."""
    v, where = _setting(obj, attr, env)
    if v is None:
        return default
    items = v.split(",") if isinstance(v, str) else v
    try:
        lo, hi = (float(x) for x in items)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {v!r} is not a pair lo, hi") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(f"{where}: [{lo}, {hi}] is not a range lo < hi "
                          "of finite numbers")
    return lo, hi


def batch_rewards(obj: Any, attr: str, env: str) -> str:
    """How the client gathers rewards into POSTs (V05Client's
    batch_rewards, docs/SERVERS.md "The async client"): `obj.attr`, else
    `$env`, else "origin" (by the front end that sent the sample: right
    for servers and routers alike)."""
    from ..servers.client import BATCH_KEYS
    v, where = _setting(obj, attr, env)
    if v is None:
        return "origin"
    if v not in BATCH_KEYS:
        raise ConfigError(f"{where}: {v!r} is not one of "
                          f"{', '.join(BATCH_KEYS)}")
    return v


def pick_server(uid: str, urls: Sequence[str]) -> str:
    """The server that runs group `uid`: one for all its samples (the
    group's stream), and the same one whichever process asks (CRC-32 of
    the uid, not Python's salted hash)."""
    return urls[zlib.crc32(uid.encode()) % len(urls)]


def to_unit(value: Any, rng: Tuple[float, float], where: str) -> float:
    """A trainer's reward in [lo, hi] as v05's reward in [-1, 1]."""
    lo, hi = rng
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: the reward {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ValueError(f"{where}: the reward {x!r} is outside the reward "
                         f"range [{lo:g}, {hi:g}] (the setting that maps "
                         "rewards onto v05's [-1, 1])")
    return max(-1.0, min(1.0, 2.0 * (x - lo) / (hi - lo) - 1.0))


def unit_prior(value: Any, where: str) -> Optional[float]:
    """A prior as the group route takes it: a number in [-1, 1] (a value
    model's success probability p is 2p - 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not -1.0 <= value <= 1.0:
        raise ValueError(f"{where}: the prior {value!r} is not a number in "
                         "[-1, 1] (a success probability p is 2p - 1)")
    return float(value)


async def stream_group(client, uid: str, *, prompt_ids, prior, sampling,
                       make: Callable[[dict], Any],
                       score: Callable[[dict, Any], Awaitable[float]]):
    """One group through the group route to its final record.

    Each sample record becomes the trainer's object (`make(record)`),
    scored while the stream goes on (`await score(record, obj)`, v05's
    reward in [-1, 1]) and its reward pushed. Returns (the final record,
    {sample index: object}) with the objects of the kept samples, or
    (the final record, None) when v05 dropped the group. Raises
    GroupFailed when the stream ended "aborted" or "error", and a
    RuntimeError naming the group and sample when a score or its push
    failed: the stream is closed at once (the server aborts the group)
    rather than at the server's reward timeout. Cancelling the caller
    closes the stream the same way."""
    from ..servers.client import GroupFailed
    objs: Dict[int, Any] = {}
    scoring: List[asyncio.Future] = []
    main, failed = asyncio.current_task(), []

    async def push(rec, obj):
        try:
            await client.reward(rec, await score(rec, obj))
        except Exception as e:
            failed.append(RuntimeError(f"group {uid} sample {rec['sample']}:"
                                       f" {type(e).__name__}: {e}"))
            failed[-1].__cause__ = e
            main.cancel()

    try:
        async with contextlib.aclosing(client.group(
                uid, prompt_ids=prompt_ids, prior=prior,
                sampling=sampling)) as recs:
            async for rec in recs:
                if rec["type"] == "sample":
                    obj = objs[rec["sample"]] = make(rec)
                    scoring.append(asyncio.ensure_future(push(rec, obj)))
                elif rec["type"] == "final":
                    await asyncio.gather(*scoring)
                    return rec, kept_samples(rec, objs)
                else:
                    raise GroupFailed(rec)
        raise RuntimeError(f"group {uid}: the stream ended without a final "
                           "record")
    except asyncio.CancelledError:
        if failed:
            raise failed[0] from failed[0].__cause__
        raise
    finally:
        for t in scoring:
            t.cancel()
        await asyncio.gather(*scoring, return_exceptions=True)


def kept_samples(rec, objs: Dict[int, Any]) -> Optional[Dict[int, Any]]:
    """{sample index: object} of the final record's kept samples (all of
    0..k-1 but under reinforce-ada), or None for a group v05 dropped."""
    if rec["dropped"]:
        return None
    k = rec["k"]
    if sorted(objs) != list(range(k)):
        raise RuntimeError(f"group {rec['uid']}: final k = {k} but samples "
                           f"{sorted(objs)} came")
    return {i: objs[i] for i in rec["kept"]}
