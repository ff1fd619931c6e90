# SPDX-License-Identifier: MIT
"""The async Python client of the v05 routes, on httpx (in both engines'
environments, and what slime and ROLL already use for their HTTP calls).

    async with V05Client("http://host:8000") as c:
        final = await c.run_group("p17", prompt_ids=ids, prior=0.2,
                                  sampling={"max_tokens": 512},
                                  score=my_verifier)   # sample record -> reward
        final["advantages"]

``group()`` yields the raw records (docs/SERVERS.md, "Routes") for callers
that score elsewhere and push with ``reward()``. Every request of a group
carries its uid as a routing key (sglang's model gateway hashes
``X-SMG-Routing-Key`` under ``--policy consistent_hashing``, vllm-router
``X-Session-ID`` under ``--policy consistent_hash``), so a router sends
the stream, its rewards and its abort to one server.
Leaving ``group()``'s iterator early closes the stream, and the server
aborts the group.

Two connection pools: the group streams' (each open group holds one
connection for as long as it runs) and the short requests' (rewards,
aborts, stats, fit), neither with a bound on connections. A group's
stream ends only once its rewards have come, so rewards that waited for
a connection behind open streams would wait for ever: with one pool of
100, 100 open groups starved every reward POST until the server's reward
timeout dropped them. Separate pools, not a bound on streams: a bound
would queue groups here, out of the server's sight, and cap the
concurrency the server batches for; how many groups are in flight is the
caller's choice (the server refuses what its segment cannot hold). And
no bound on the rewards' pool either: a reward POST holds its connection
for milliseconds, but requests queued for a bounded httpx pool cost it
work per queued request at every release (httpcore 1.0), which stalled
a burst of rewards past the server's reward timeout (docs/SERVERS.md,
"The async client").

Rewards posted one at a time (``reward()``) are gathered: while a
reward POST of the same batching key is on its way, the rewards that
come meanwhile wait and go out together in the next one (at most
MAX_BATCH), so an idle server answers each at once and a busy one gets
one request where it got one per sample. The key (``batch_rewards``):
"origin" (the default: the rewards of samples one server front end sent,
named by the records' "origin", together; a POST's routing key is its
first reward's uid, whose group that front end runs, so a router that
sends by the routing key sends the POST there, and the front end takes
every reward in it), "group" (one group's rewards together; also what
"origin" does with a record that names no origin), "server" (every
reward of this client together: only for a client of one server, never
of a router that spreads groups over several), "off" (a POST per
reward). Per origin, one reward POST is in flight per front end, on one
kept-alive connection. Per group, there is a POST in flight per group
posting, more connections than httpx keeps alive (20): they are opened
and closed by the hundred, and every request scans the pool (httpcore
1.0); on this 2-core machine that, not the server, was most of the
reward round trip (bench/ENGINE.md). Each caller is answered for its
own reward (the route's "each"); a reward the server refuses comes back
to its caller alone (its field named as if posted alone) and the others
are sent again (a refused request pushes nothing).

A reward POST that fails in transport (the connection closed under it:
a kept-alive connection the server was closing as the POST went out) is
sent again, up to RETRIES times: safe, since the reward route is
idempotent (the same (uid, sample, gen, reward) received twice is
acknowledged and applied once, docs/SERVERS.md).
"""

import asyncio
import inspect
import json
import math
import numbers
import re
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

import httpx

__all__ = ["V05Client", "V05HTTPError", "GroupFailed", "ROUTING_HEADERS",
           "RETRIES", "MAX_BATCH", "BATCH_KEYS"]

ROUTING_HEADERS = ("X-SMG-Routing-Key", "X-Session-ID")
RETRIES = 2
# Rewards in one gathered POST at most (a few tens of KB of JSON).
MAX_BATCH = 512
BATCH_KEYS = ("origin", "group", "server", "off")
_ITEM = re.compile(r"^rewards\[(\d+)\](.*)$")
# Transport errors of a connection that broke (not a timeout: a slow
# server is not a lost request).
_BROKEN = (httpx.ConnectError, httpx.ReadError, httpx.WriteError,
           httpx.RemoteProtocolError)
# No bound on connections (the module's text); idle ones kept for reuse
# as in httpx's default pool.
_UNBOUNDED = httpx.Limits(max_connections=None, max_keepalive_connections=20)


class V05HTTPError(RuntimeError):
    """A route refused a request: `status`, and `field` when the server
    named one."""

    def __init__(self, status: int, body: Any):
        self.status = status
        self.field = body.get("field") if isinstance(body, dict) else None
        msg = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {msg}")


class GroupFailed(RuntimeError):
    """A group's stream ended "aborted" or "error" (`record`)."""

    def __init__(self, record: Dict[str, Any]):
        self.record = record
        super().__init__(f"group {record.get('uid')!r} {record.get('type')}:"
                         f" {record.get('error')}")


def _routing(uid: str) -> Dict[str, str]:
    return {h: uid for h in ROUTING_HEADERS}


def _item(rec: Dict[str, Any], reward: float) -> Dict[str, Any]:
    return {"uid": rec["uid"], "sample": rec["sample"], "gen": rec["gen"],
            "owner": rec["owner"], "reward": reward}


def _answer(fut: asyncio.Future, result: Any = None,
            exc: Optional[BaseException] = None) -> None:
    """A waiting caller's answer, unless it stopped waiting (cancelled)."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _plain(x: Any) -> bool:
    """A finite real number (not a bool): what may join others' POST."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and \
        math.isfinite(x)


def _own_answer(status: str) -> Dict[str, int]:
    """The answer a POST of this one reward would have had."""
    if status == "duplicate":
        return {"accepted": 0, "forwarded": 0, "duplicates": 1}
    return {"accepted": 1, "forwarded": int(status == "forwarded")}


class V05Client:
    """client: the httpx.AsyncClient of the short requests; stream_client:
    the group streams' (default: `client` when one is given); each
    default one of its own with no bound on connections. Clients given
    are the caller's to close. batch_rewards: how reward() gathers
    rewards into POSTs (the module's text)."""

    def __init__(self, base_url: str, *, timeout: Optional[float] = None,
                 headers: Optional[Dict[str, str]] = None,
                 client: Optional[httpx.AsyncClient] = None,
                 stream_client: Optional[httpx.AsyncClient] = None,
                 batch_rewards: str = "origin"):
        if batch_rewards not in BATCH_KEYS:
            raise ValueError(f"batch_rewards: {batch_rewards!r} is not one "
                             f"of {', '.join(BATCH_KEYS)}")
        self.batch_rewards = batch_rewards
        # key -> [(item, future)] waiting; key -> the task sending them
        self._waiting: Dict[str, list] = {}
        self._senders: Dict[str, asyncio.Task] = {}
        self.reward_posts = 0  # reward POSTs sent (resends not counted)
        t = httpx.Timeout(timeout, connect=30.0)
        self._mine = []
        if client is None:
            client = httpx.AsyncClient(base_url=base_url, headers=headers,
                                       timeout=t, limits=_UNBOUNDED)
            self._mine.append(client)
            if stream_client is None:
                stream_client = httpx.AsyncClient(
                    base_url=base_url, headers=headers, timeout=t,
                    limits=_UNBOUNDED)
                self._mine.append(stream_client)
        self.http = client
        self.streams = stream_client or client
        self.retries = 0  # reward POSTs sent again, all told

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    async def aclose(self):
        for task in list(self._senders.values()):
            task.cancel()
        for task in list(self._senders.values()):
            try:
                await task
            except asyncio.CancelledError:
                pass
        for c in self._mine:
            await c.aclose()

    async def _json(self, method: str, path: str, body=None,
                    headers=None) -> Any:
        r = await self.http.request(method, path, json=body, headers=headers)
        data = r.json() if r.content else None
        if r.status_code >= 400:
            raise V05HTTPError(r.status_code, data)
        return data

    async def group(self, uid: str, *, prompt: Optional[str] = None,
                    prompt_ids: Optional[List[int]] = None,
                    prior: Optional[float] = 0.0,
                    sampling: Optional[Dict[str, Any]] = None
                    ) -> AsyncIterator[Dict[str, Any]]:
        body: Dict[str, Any] = {"uid": uid, "prior": prior}
        if prompt is not None:
            body["prompt"] = prompt
        if prompt_ids is not None:
            body["prompt_ids"] = list(prompt_ids)
        if sampling:
            body["sampling"] = dict(sampling)
        async with self.streams.stream("POST", "/v05/group", json=body,
                                       headers=_routing(uid)) as r:
            if r.status_code >= 400:
                raw = await r.aread()
                raise V05HTTPError(r.status_code, json.loads(raw or b"null"))
            async for line in r.aiter_lines():
                if line:
                    yield json.loads(line)

    async def reward(self, record: Dict[str, Any], reward: float) -> Any:
        """The reward of a sample record (its uid, sample, gen, owner),
        gathered with others (batch_rewards); the answer is this
        reward's own, as if it had been posted alone."""
        if _plain(reward):
            reward = float(reward)  # a numpy scalar serialised as JSON
        item = _item(record, reward)
        if self.batch_rewards == "off" or not _plain(reward):
            # Posted alone: what refuses it (the JSON encoder, the route)
            # concerns this caller only.
            return await self._post_rewards([item])
        if self.batch_rewards == "server":
            key = ""
        elif self.batch_rewards == "origin" and "origin" in record:
            key = "origin " + str(record["origin"])
        else:  # "group", or a record of a server that names no origin
            key = "uid " + item["uid"]
        fut = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((item, fut))
        if key not in self._senders:
            # Started, not run: the rewards posted in this same turn of
            # the loop join the first POST.
            self._senders[key] = asyncio.ensure_future(self._send(key))
        return await fut

    async def rewards(self, pairs) -> Any:
        """Several (sample record, reward) pairs in one request, as given:
        all accepted or none (the route's answer)."""
        return await self._post_rewards([_item(rec, r) for rec, r in pairs])

    async def _post_rewards(self, items) -> Any:
        uid = items[0]["uid"] if items else ""
        self.reward_posts += 1
        for attempt in range(RETRIES + 1):
            try:
                return await self._json("POST", "/v05/reward",
                                        {"rewards": items},
                                        headers=_routing(uid))
            except _BROKEN:
                if attempt == RETRIES:
                    raise
                self.retries += 1

    async def _send(self, key: str) -> None:
        """Key's waiting rewards, MAX_BATCH a POST, until none wait.
        Every future taken is answered; on cancellation (aclose) the
        ones not answered yet are cancelled."""
        batch: list = []
        try:
            while self._waiting.get(key):
                waiting = self._waiting[key]
                batch[:] = [(i, f) for i, f in waiting[:MAX_BATCH]
                            if not f.cancelled()]
                del waiting[:MAX_BATCH]
                await self._post_batch(batch)
        except BaseException:
            for _, f in batch + self._waiting.pop(key, []):
                f.cancel()
            raise
        finally:
            self._senders.pop(key, None)

    async def _post_batch(self, batch: list) -> None:
        """One gathered POST: each future gets its reward's own answer, or
        the error that concerns it. Empties `batch` as it answers."""
        while batch:
            try:
                out = await self._post_rewards([i for i, _ in batch])
            except V05HTTPError as e:
                m = _ITEM.match(e.field or "")
                if m is not None and int(m.group(1)) < len(batch):
                    # Only this reward was wrong, and nothing of the
                    # request was pushed: it fails alone, the rest go
                    # again.
                    _, f = batch.pop(int(m.group(1)))
                    _answer(f, exc=V05HTTPError(e.status, {
                        "error": str(e).split(": ", 1)[-1],
                        "field": "body" + m.group(2)}))
                    continue
                for _, f in batch:
                    _answer(f, exc=e)
            except Exception as e:
                for _, f in batch:
                    _answer(f, exc=e)
            else:
                each = out.get("each") if isinstance(out, dict) else None
                for n, (_, f) in enumerate(batch):
                    _answer(f, _own_answer(each[n]) if each else out)
            batch.clear()

    async def run_group(self, uid: str, *,
                        score: Callable[[Dict[str, Any]], Any],
                        **kw) -> Dict[str, Any]:
        """One group to its final record: each sample is scored as it
        arrives (`score(record)`, a function or an async def) and its
        reward pushed. Raises GroupFailed when the group ended otherwise;
        a cancellation closes the stream, which aborts the group."""
        pushes = []
        try:
            async for rec in self.group(uid, **kw):
                if rec["type"] == "sample":
                    r = score(rec)
                    if inspect.isawaitable(r):
                        r = await r
                    pushes.append(asyncio.ensure_future(
                        self.reward(rec, r)))
                elif rec["type"] == "final":
                    await asyncio.gather(*pushes)
                    return rec
                else:
                    raise GroupFailed(rec)
            raise GroupFailed({"uid": uid, "type": "error",
                               "error": "the stream ended without a final "
                                        "record"})
        finally:
            for p in pushes:
                if not p.done():
                    p.cancel()

    async def abort(self, uid: str, owner: Optional[int] = None) -> Any:
        """Abort the group `uid` on whichever front end runs it (owner:
        the one its sample records name, when known: saves the lookup)."""
        body = {"uid": uid} if owner is None else {"uid": uid, "owner": owner}
        return await self._json("POST", "/v05/abort", body,
                                headers=_routing(uid))

    async def stats(self) -> Any:
        return await self._json("GET", "/v05/stats")

    async def fit(self) -> Any:
        return await self._json("GET", "/v05/fit")

    async def post_fit(self, others: List[float], policy_version: int) -> Any:
        return await self._json("POST", "/v05/fit",
                                {"others": list(others),
                                 "policy_version": policy_version})
