# SPDX-License-Identifier: MIT
"""V05Client gathers rewards posted one at a time (batch_rewards): an
idle server gets each at once, rewards that come while a POST is on its
way go out together in the next, every caller is answered for its own
reward, and one refused reward fails alone. Against a stand-in of the
reward route (httpx.MockTransport: the route's checks and answers, no
engine), so the POSTs can be held and counted; the real route's "each"
is checked in test_vllm_concurrency.py."""
import asyncio
import json
import math

import httpx
import numpy as np
import pytest

from v05.servers.client import MAX_BATCH, V05Client, V05HTTPError


class Route:
    """POST /v05/reward as the service answers it: every reward checked
    before any is pushed (a refusal names rewards[i].field, or body.field
    for a request of one), a resend of the same value acknowledged as a
    duplicate, "each" for a request of several. `hold` keeps POSTs
    waiting until released, so the test decides what is in flight."""

    def __init__(self, running=("a", "b", "c", "d")):
        self.running = set(running)
        self.pushed = {}      # (uid, sample) -> reward
        self.posts = []       # each POST's items, in arrival order
        self.headers = []     # each POST's routing key
        self.hold = None      # an asyncio.Event while POSTs are held
        self.arrived = asyncio.Event()
        self.status = None    # answer every POST with this status

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        items = body["rewards"] if "rewards" in body else [body]
        self.posts.append(items)
        self.headers.append(request.headers.get("X-Session-ID"))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.status is not None:
            return httpx.Response(self.status, json={"error": "busy"})
        each = []
        for i, r in enumerate(items):
            where = f"rewards[{i}]" if len(items) > 1 else "body"
            if r["uid"] not in self.running:
                return httpx.Response(404, json={
                    "error": f"{r['uid']!r} is no group running",
                    "field": f"{where}.uid"})
            old = self.pushed.get((r["uid"], r["sample"]))
            if old is not None and old != r["reward"]:
                return httpx.Response(409, json={
                    "error": "has its reward already",
                    "field": f"{where}.sample"})
            each.append("duplicate" if old is not None else "accepted")
        for r, e in zip(items, each):
            self.pushed[(r["uid"], r["sample"])] = r["reward"]
        out = {"accepted": each.count("accepted"), "forwarded": 0}
        if "duplicate" in each:
            out["duplicates"] = each.count("duplicate")
        if len(items) > 1:
            out["each"] = each
        return httpx.Response(200, json=out)


def rec(uid, sample, origin="fe-a"):
    r = {"uid": uid, "sample": sample, "gen": 1, "owner": 0}
    if origin is not None:
        r["origin"] = origin
    return r


def client(route, batch="origin"):
    http = httpx.AsyncClient(base_url="http://v05",
                             transport=httpx.MockTransport(route))
    return http, V05Client("http://v05", client=http, batch_rewards=batch)


async def first_held(c, route):
    """Reward (a, 0) posted and its POST at the route, held there: what
    is posted next waits behind it. Its task."""
    first = asyncio.ensure_future(c.reward(rec("a", 0), 1.0))
    await started(route, 1)
    return first


async def started(route, n):
    """Until the route has received its n-th POST."""
    while len(route.posts) < n:
        route.arrived.clear()
        await route.arrived.wait()


def test_idle_reward_goes_at_once_and_answers_as_alone():
    async def main():
        route = Route()
        http, c = client(route)
        async with http:
            a = await c.reward(rec("a", 0), 1.0)
            b = await c.reward(rec("a", 0), 1.0)
            return route, c, a, b
    route, c, a, b = asyncio.run(main())
    # The route's fields only: the record's origin is the client's key.
    assert route.posts == [[{"uid": "a", "sample": 0, "gen": 1, "owner": 0,
                             "reward": 1.0}]] * 2
    assert a == {"accepted": 1, "forwarded": 0}
    assert b == {"accepted": 0, "forwarded": 0, "duplicates": 1}
    assert c.reward_posts == 2


def test_rewards_that_come_meanwhile_go_out_together():
    """batch_rewards="server": while the first POST is held, six more
    rewards of three groups (one a resend) wait and leave as one POST;
    each caller gets its own answer."""
    async def main():
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route, "server")
        async with http:
            first = await first_held(c, route)
            rest = [asyncio.ensure_future(c.reward(rec(u, s), 0.5))
                    for u, s in (("a", 1), ("b", 0), ("b", 1), ("c", 0),
                                 ("c", 1))]
            again = asyncio.ensure_future(c.reward(rec("a", 0), 1.0))
            await asyncio.sleep(0)  # let the callers queue
            assert len(route.posts) == 1
            route.hold.set()
            return (route, c, await first, await asyncio.gather(*rest),
                    await again)
    route, c, first, rest, again = asyncio.run(main())
    assert [len(p) for p in route.posts] == [1, 6]
    assert first == {"accepted": 1, "forwarded": 0}
    assert rest == [{"accepted": 1, "forwarded": 0}] * 5
    assert again == {"accepted": 0, "forwarded": 0, "duplicates": 1}
    assert c.reward_posts == 2
    assert len(route.pushed) == 6


def test_origin_key_gathers_what_one_front_end_sent():
    """The default gathers by the records' origin: rewards of two groups
    of one front end leave together, another front end's apart; a POST's
    routing key is the uid of a group of its origin."""
    async def main():
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route)
        async with http:
            tasks = [asyncio.ensure_future(c.reward(rec(u, 0, o), 1.0))
                     for u, o in (("a", "fe-a"), ("c", "fe-c"))]
            await started(route, 2)
            tasks += [asyncio.ensure_future(c.reward(rec(u, s, o), 1.0))
                      for u, o in (("a", "fe-a"), ("b", "fe-a"),
                                   ("c", "fe-c"), ("d", "fe-c"))
                      for s in (1, 2)]
            await asyncio.sleep(0)
            route.hold.set()
            await asyncio.gather(*tasks)
            return route, c
    route, c = asyncio.run(main())
    assert c.reward_posts == 4
    by_post = sorted(sorted((r["uid"], r["sample"]) for r in p)
                     for p in route.posts)
    assert by_post == [[("a", 0)], [("a", 1), ("a", 2), ("b", 1), ("b", 2)],
                       [("c", 0)], [("c", 1), ("c", 2), ("d", 1), ("d", 2)]]
    for items, key in zip(route.posts, route.headers):
        assert key == items[0]["uid"]
    assert len(route.pushed) == 10


@pytest.mark.parametrize("batch,origin", [("group", "fe-a"),
                                          ("origin", None)])
def test_group_key_keeps_one_uid_per_post(batch, origin):
    """batch_rewards="group" (and the default for records that name no
    origin) gathers one group's rewards: every POST carries one uid."""
    async def main():
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route, batch)
        async with http:
            tasks = [asyncio.ensure_future(c.reward(rec(u, 0, origin), 1.0))
                     for u in ("a", "b")]
            await started(route, 2)
            tasks += [asyncio.ensure_future(c.reward(rec(u, s, origin), 1.0))
                      for u in ("a", "b") for s in (1, 2)]
            await asyncio.sleep(0)
            route.hold.set()
            await asyncio.gather(*tasks)
            return route
    route = asyncio.run(main())
    assert sorted(len(p) for p in route.posts) == [1, 1, 2, 2]
    for items, key in zip(route.posts, route.headers):
        assert {r["uid"] for r in items} == {key}
    assert len(route.pushed) == 6


def test_one_refused_reward_fails_alone():
    """A gathered POST refused for one reward (a group not running, a
    conflicting resend): that caller gets the route's error with its
    field named as if posted alone; the others are sent again without it
    and accepted; nothing is pushed twice."""
    async def main():
        route = Route()
        route.pushed[("a", 3)] = -1.0
        route.hold = asyncio.Event()
        http, c = client(route, "server")
        async with http:
            first = await first_held(c, route)
            tasks = [asyncio.ensure_future(c.reward(rec(u, s), 1.0))
                     for u, s in (("a", 1), ("gone", 0), ("b", 0),
                                  ("a", 3), ("b", 1))]
            await asyncio.sleep(0)
            route.hold.set()
            out = await asyncio.gather(first, *tasks,
                                       return_exceptions=True)
            return route, out
    route, out = asyncio.run(main())
    ok = {"accepted": 1, "forwarded": 0}
    assert out[0] == out[1] == out[3] == out[5] == ok
    assert isinstance(out[2], V05HTTPError)
    assert (out[2].status, out[2].field) == (404, "body.uid")
    assert isinstance(out[4], V05HTTPError)
    assert (out[4].status, out[4].field) == (409, "body.sample")
    assert [len(p) for p in route.posts] == [1, 5, 4, 3]
    assert route.pushed[("a", 3)] == -1.0
    assert sorted(route.pushed) == [("a", 0), ("a", 1), ("a", 3), ("b", 0),
                                    ("b", 1)]


def test_request_error_reaches_every_caller_of_the_post():
    async def main():
        route = Route()
        route.status = 503
        http, c = client(route, "server")
        async with http:
            return await asyncio.gather(
                *[c.reward(rec("a", s), 1.0) for s in range(3)],
                return_exceptions=True)
    out = asyncio.run(main())
    assert [getattr(e, "status", None) for e in out] == [503] * 3


def test_what_cannot_join_a_batch_is_posted_alone():
    """A NaN is refused by the JSON encoder for its caller only; a numpy
    scalar is sent as a plain number."""
    async def main():
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route, "server")
        async with http:
            first = await first_held(c, route)
            bad = asyncio.ensure_future(c.reward(rec("a", 1), math.nan))
            good = asyncio.ensure_future(
                c.reward(rec("a", 2), np.float32(0.5)))
            await asyncio.sleep(0)
            route.hold.set()
            return route, await asyncio.gather(first, bad, good,
                                               return_exceptions=True)
    route, (first, bad, good) = asyncio.run(main())
    assert isinstance(bad, ValueError)
    assert first == good == {"accepted": 1, "forwarded": 0}
    assert route.pushed[("a", 2)] == 0.5


def test_off_posts_each_reward_and_a_burst_is_cut_at_max_batch():
    async def main(batch, n):
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route, batch)
        async with http:
            tasks = [asyncio.ensure_future(c.reward(rec("a", s), 1.0))
                     for s in range(n)]
            await started(route, 1)
            await asyncio.sleep(0)
            route.hold.set()
            await asyncio.gather(*tasks)
            return [len(p) for p in route.posts]
    assert asyncio.run(main("off", 4)) == [1, 1, 1, 1]
    # All queued in one turn of the loop: the first POST takes MAX_BATCH.
    n = MAX_BATCH + 3
    assert asyncio.run(main("origin", n)) == [MAX_BATCH, 3]


def test_aclose_cancels_the_callers_still_waiting():
    async def main():
        route = Route()
        route.hold = asyncio.Event()
        http, c = client(route)
        async with http:
            first = await first_held(c, route)
            waiting = asyncio.ensure_future(c.reward(rec("a", 1), 1.0))
            await asyncio.sleep(0)
            await c.aclose()
            await asyncio.gather(first, waiting, return_exceptions=True)
            return first, waiting, c
    first, waiting, c = asyncio.run(main())
    assert first.cancelled() and waiting.cancelled()
    assert c._senders == {} and c._waiting == {}


def test_unknown_batch_key_is_refused():
    with pytest.raises(ValueError, match="batch_rewards"):
        V05Client("http://v05", batch_rewards="prompt")
    assert V05Client("http://v05").batch_rewards == "origin"
