# SPDX-License-Identifier: MIT
"""`vllm serve` with v05: groups run at once (their first waves in the
engine together), reward POSTs answered with more group streams open
than httpx's default pool holds, and a reward POST sent twice (a resend
after a broken connection) applied once."""
import asyncio
import os

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import RETRIES, V05Client  # noqa: E402

from server_proc import poll  # noqa: E402
from test_vllm_placement import added  # noqa: E402
from test_vllm_server import (paused, stats, vllm_server,  # noqa: E402
                              wait_requests)

PREFIX = f"tcc{os.getpid()}"
SHORT = {"max_tokens": 2, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    # Dev mode: /pause holds the first waves queued in the engine; the
    # requests it takes are logged ("Added request <id>.").
    # The reward timeout of a real deployment (300 s): 480 reward POSTs
    # of 120 groups take a while on a loaded machine; a reward starved
    # by open streams never comes.
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX,
                    "--enable-log-requests",
                    env={"VLLM_SERVER_DEV_MODE": "1"},
                    config={"reward_timeout_s": 300})
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def run(coro):
    return asyncio.run(coro)


def test_groups_run_at_once(server):
    """Two groups, the engine paused: both first waves (8 requests) are
    handed to the engine core (its front end's log) and out in the
    service at once, before either group can end (none ends before its
    rewards, posted only after that). One group at a time would leave the
    second waiting behind the first: 4 requests, never 8. (While paused
    the engine's gauges do not move: they come with scheduler steps.)"""
    with open(server.log_path, "rb") as f:
        offset = f.seek(0, 2)

    def in_core():
        ids = added(server, offset)
        return {g: sum(i.startswith(f"v05-{g}-") for i in ids)
                for g in ("at0", "at1")}

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            its = [c.group(f"at{i}", prompt_ids=tiny.make_prompts(2)[i],
                           prior=1.0, sampling=SHORT) for i in range(2)]
            with paused(server.url):
                heads = [asyncio.ensure_future(it.__anext__())
                         for it in its]
                await asyncio.to_thread(wait_requests, server.url, 8)
                await asyncio.to_thread(
                    poll, lambda: in_core() == {"at0": 4, "at1": 4}, 120,
                    "both first waves handed to the engine core")
                both = stats(server.url)
            recs = [[await h] for h in heads]
            for it, mine in zip(its, recs):
                while len(mine) < 4:
                    mine.append(await it.__anext__())
            # Every first-wave sample of both groups is out before any
            # reward: neither group can have ended.
            await asyncio.gather(*[c.rewards([(r, 1.0) for r in mine])
                                   for mine in recs])
            ends = [[x async for x in it] for it in its]
            return both, recs, ends
    both, recs, ends = run(main())
    assert both["running"] == 2 and both["requests"] == 8
    for mine, end in zip(recs, ends):
        assert sorted(r["sample"] for r in mine) == [0, 1, 2, 3]
        assert [x["type"] for x in end] == ["final"]
        assert end[0]["rewards"] == [1.0] * 4
    s = stats(server.url)
    assert s["running"] == 0 and s["plugin"]["prompts_open"] == 0


def test_rewards_answered_with_many_streams_open(server):
    """120 groups at once through one V05Client, more than httpx's
    default pool (100 connections): every group's rewards still go
    through (a reward waiting for a connection behind open streams would
    have its group dropped at the reward timeout, an error record)."""
    n = 120
    before = stats(server.url)["server"]

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            return await asyncio.gather(*[
                c.run_group(f"many{i}", prompt_ids=tiny.make_prompts(
                    8)[i % 8], prior=1.0, sampling={"max_tokens": 1},
                    score=lambda rec: 1.0) for i in range(n)],
                return_exceptions=True)
    out = run(main())
    errors = [x for x in out if isinstance(x, BaseException)]
    assert errors == []
    assert all(x["type"] == "final" and x["k"] == 4 for x in out)
    after = stats(server.url)["server"]
    assert after["final"] - before["final"] == n
    assert after["reward_timeouts"] == before["reward_timeouts"]
    assert after["rewards"] - before["rewards"] == 4 * n


def test_reward_posted_twice_is_applied_once(server):
    """The reward route is idempotent: the same (uid, sample, gen,
    reward) again is acknowledged as a duplicate and not pushed, also
    after its group ended; another reward for the sample is a 409."""
    before = stats(server.url)

    async def main():
        async with V05Client(server.url, timeout=120) as c:
            it = c.group("twice", prompt_ids=tiny.make_prompts(3)[2],
                         prior=1.0, sampling=SHORT)
            first = [await it.__anext__() for _ in range(4)]
            a = await c.reward(first[0], 1.0)
            b = await c.reward(first[0], 1.0)
            r = await c.http.post("/v05/reward", json={
                "uid": "twice", "sample": first[0]["sample"],
                "gen": first[0]["gen"], "reward": -1.0})
            conflict = (r.status_code, r.json()["field"])
            both = await c.rewards([(first[1], 1.0), (first[1], 1.0)])
            await c.rewards([(x, 1.0) for x in first[2:]])
            rest = [x async for x in it]
            after_end = await c.reward(first[3], 1.0)
            return a, b, conflict, both, rest, after_end
    a, b, conflict, both, rest, after_end = run(main())
    assert a == {"accepted": 1, "forwarded": 0}
    assert b == {"accepted": 0, "forwarded": 0, "duplicates": 1}
    assert conflict == (409, "body.sample")
    assert both == {"accepted": 1, "forwarded": 0, "duplicates": 1,
                    "each": ["accepted", "duplicate"]}
    assert [x["type"] for x in rest] == ["final"]
    assert rest[0]["rewards"] == [1.0] * 4
    assert after_end == {"accepted": 0, "forwarded": 0, "duplicates": 1}
    s = stats(server.url)
    assert s["server"]["reward_duplicates"] - \
        before["server"]["reward_duplicates"] == 3
    # Each of the 4 samples applied once; the plugin saw no duplicate.
    assert s["plugin"]["rewards_applied"] - \
        before["plugin"]["rewards_applied"] == 4
    assert s["plugin"]["rejected_duplicate"] == \
        before["plugin"]["rejected_duplicate"]


class Broken(httpx.AsyncBaseTransport):
    """Breaks the connection of chosen reward POSTs (by their order):
    "before" as a kept-alive connection closed under a request (it never
    reaches the server), "after" once the server has taken it (its
    answer lost)."""

    def __init__(self, plan):
        self.inner = httpx.AsyncHTTPTransport()
        self.plan, self.posts = plan, 0

    async def handle_async_request(self, request):
        if request.url.path != "/v05/reward":
            return await self.inner.handle_async_request(request)
        what = self.plan.get(self.posts)
        self.posts += 1
        if what == "before":
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.",
                request=request)
        resp = await self.inner.handle_async_request(request)
        if what == "after":
            await resp.aread()
            await resp.aclose()
            raise httpx.ReadError("connection reset", request=request)
        return resp

    async def aclose(self):
        await self.inner.aclose()


@pytest.mark.parametrize("batch", ["off", "origin"])
def test_client_resends_a_reward_its_connection_lost(server, batch):
    """POST 0 lost before the server, POST 2 after it (answer lost): each
    sent again, every reward applied once. A POST per reward ("off"): the
    resent one is the route's one duplicate. Gathered (the default): the
    same, whatever the POSTs carried."""
    before = stats(server.url)
    plan = {0: "before", 2: "after"}
    transport = Broken(plan)

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120,
                                     transport=transport) as http:
            c = V05Client(server.url, client=http, batch_rewards=batch)
            final = await c.run_group(
                f"resent-{batch}", prompt_ids=tiny.make_prompts(4)[3],
                prior=1.0, sampling=SHORT, score=lambda rec: 1.0)
            return final, c.retries, c.reward_posts
    final, retries, posts = run(main())
    assert final["type"] == "final" and final["rewards"] == [1.0] * 4
    s = stats(server.url)
    assert s["server"]["rewards"] - before["server"]["rewards"] == 4
    assert s["plugin"]["rewards_applied"] - \
        before["plugin"]["rewards_applied"] == 4
    dups = s["server"]["reward_duplicates"] - \
        before["server"]["reward_duplicates"]
    assert transport.posts == posts + retries
    if batch == "off":
        assert retries == 2 and posts == 4 and dups == 1
    else:
        # POST 2 may not exist (four rewards in two POSTs or fewer).
        assert retries == (2 if posts >= 2 else 1) and 1 <= posts <= 4
        assert (dups >= 1) == (posts >= 2) and dups <= 4 - (posts - 1)

    # A connection that stays broken: the error after RETRIES resends.
    async def hopeless():
        t = Broken({i: "before" for i in range(RETRIES + 1)})
        async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                     transport=t) as http:
            c = V05Client(server.url, client=http)
            with pytest.raises(httpx.RemoteProtocolError):
                await c.reward({"uid": "x", "sample": 0, "gen": 1,
                                "owner": 0}, 1.0)
            return c.retries, t.posts
    assert run(hopeless()) == (RETRIES, RETRIES + 1)
