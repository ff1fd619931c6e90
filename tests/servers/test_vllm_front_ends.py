# SPDX-License-Identifier: MIT
"""`--api-server-count 2`: two API-server processes, one engine core. Each
loads v05's plugin with its own segment by its index; a reward posted to
the other front end reaches the owner's segment and is applied once, its
duplicate refused by the plugin; vLLM's own /abort_requests reaches only
the requests of the front end it lands on, v05's /v05/abort reaches the
group's owner from either front end (an abort record in its segment). vLLM force-kills its front ends
when it stops (--shutdown-timeout 0): the fixture's check that no segment
is left is the reapers' work."""
import asyncio
import json
import os

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402

from server_proc import poll, segments  # noqa: E402
from test_vllm_server import (LONG, finished, running,  # noqa: E402
                              vllm_server)

PREFIX = f"tfe{os.getpid()}"


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("fe"), PREFIX,
                    "--api-server-count", "2",
                    env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        s.wait_ready()
        print(f"vLLM server (2 front ends) with v05 ready after "
              f"{s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


async def pinned(url, owner, tries=64):
    """A client whose (kept-alive) connection the kernel gave to front end
    `owner`: which process accepts a connection is not the client's
    choice (SO_REUSEPORT), so connections are opened until one lands
    there."""
    for _ in range(tries):
        c = httpx.AsyncClient(base_url=url, timeout=300)
        if (await c.get("/v05/stats")).json()["owner"] == owner:
            return c
        await c.aclose()
    raise AssertionError(f"no connection reached front end {owner}")


def test_each_front_end_has_its_own_segment(server):
    async def main():
        c0, c1 = await pinned(server.url, 0), await pinned(server.url, 1)
        s = [(await c.get("/v05/stats")).json() for c in (c0, c1)]
        await c0.aclose()
        await c1.aclose()
        return s
    s0, s1 = asyncio.run(main())
    assert (s0["segment"], s1["segment"]) == (f"{PREFIX}-fe0",
                                              f"{PREFIX}-fe1")
    assert segments(PREFIX) == sorted(
        f"v05-{PREFIX}-fe{i}{x}" for i in (0, 1) for x in ("", ":side"))


def test_rewards_through_the_other_front_end_apply_once(server):
    async def main():
        c0, c1 = await pinned(server.url, 0), await pinned(server.url, 1)
        before = (await c1.get("/v05/stats")).json()
        body = {"uid": "fwd", "prompt_ids": tiny.make_prompts(7)[6],
                "prior": 1.0, "sampling": {"max_tokens": 3}}
        posted = []
        async with c0.stream("POST", "/v05/group", json=body) as r:
            # Read to the end: a response left unread closes its
            # connection, and the next request may land elsewhere.
            async for line in r.aiter_lines():
                rec = json.loads(line)
                if rec["type"] != "sample":
                    continue
                rb = {k: rec[k] for k in ("uid", "sample", "gen", "owner")}
                for _ in range(2):  # the second is a duplicate
                    a = await c1.post("/v05/reward", json=dict(rb, reward=1.0))
                    posted.append(a.json())
        # The last duplicate may still wait in front end 0's lane (no one
        # polls between groups there); a group of its own drains it.
        body = dict(body, uid="drain")
        async with c0.stream("POST", "/v05/group", json=body) as r:
            async for line in r.aiter_lines():
                x = json.loads(line)
                if x["type"] == "sample":
                    await c1.post("/v05/reward", json=dict(
                        {k: x[k] for k in ("uid", "sample", "gen", "owner")},
                        reward=1.0))
        assert x["type"] == "final"
        after0 = (await c0.get("/v05/stats")).json()
        after1 = (await c1.get("/v05/stats")).json()
        assert (after0["owner"], after1["owner"]) == (0, 1)
        for c in (c0, c1):
            await c.aclose()
        return rec, posted, before, after0, after1
    final, posted, before1, after0, after1 = asyncio.run(main())
    assert final["type"] == "final" and final["rewards"] == [1.0] * 4
    assert posted == [{"accepted": 1, "forwarded": 1}] * 8
    p = after0["plugin"]
    assert p["rewards_applied"] == 8          # each once, both groups
    # The duplicates: refused while the group waited, or after its end
    # (its key gone: "unknown").
    assert p["rejected_duplicate"] + p["rejected_late"] + \
        p["rejected_unknown"] == 4
    assert after1["server"]["rewards_forwarded"] == \
        before1["server"]["rewards_forwarded"] + 12
    assert after1["plugin"]["rewards_applied"] == 0


def test_an_abort_on_the_other_front_end_reaches_the_owner(server):
    """vLLM's own /abort_requests on front end 1 aborts none of front end
    0's requests; v05's /v05/abort on front end 1 (no owner named) finds
    the group in front end 0's segment and aborts it there with an abort
    record: the engine ends up idle, the group's stream ends "aborted",
    and front end 0's plugin freed the prompt (aborts_applied)."""
    async def main():
        c0, ctl0, c1 = (await pinned(server.url, 0),
                        await pinned(server.url, 0),
                        await pinned(server.url, 1))
        before0 = (await ctl0.get("/v05/stats")).json()
        body = {"uid": "far", "prompt_ids": tiny.make_prompts(8)[7],
                "sampling": LONG}

        async def drain():
            async with c0.stream("POST", "/v05/group", json=body) as r:
                return [json.loads(x) async for x in r.aiter_lines()]
        # The engine holds every new request queued until resumed, so
        # the abort finds them there however fast the model is.
        paused = await c1.post("/pause", params={"mode": "keep"})
        assert paused.status_code == 200, paused.text
        try:
            t = asyncio.ensure_future(drain())
            while (await ctl0.get("/v05/stats")).json()["requests"] < 4:
                assert not t.done(), t.result()
                await asyncio.sleep(0.05)
            lengths = finished(server.url, "length")
            # vLLM's own abort-everything, on the other front end: it
            # knows none of front end 0's requests.
            other = (await c1.post("/abort_requests", json={})).json()
            still = (await ctl0.get("/v05/stats")).json()["requests"]
            v05_other = await c1.post("/v05/abort", json={"uid": "far"})
            # A guard against a hang (the engine is paused), not a timing.
            recs = await asyncio.wait_for(t, 120)
        finally:
            await c1.post("/resume")
        # A group of its own after the resume: had any aborted request
        # stayed queued, it would run now, to its length.
        body = dict(body, uid="after", sampling={"max_tokens": 2,
                                                  "ignore_eos": True})
        async with c0.stream("POST", "/v05/group", json=body) as r:
            async for line in r.aiter_lines():
                x = json.loads(line)
                if x["type"] == "sample":
                    # With owner: this connection may land on either.
                    a = await c1.post("/v05/reward", json=dict(
                        {k: x[k] for k in ("uid", "sample", "gen", "owner")},
                        reward=1.0))
                    assert a.status_code == 200, a.text
        assert x["type"] == "final", x
        await asyncio.to_thread(poll, lambda: running(server.url) == 0, 30,
                                "the engine to have no request")
        ran = (finished(server.url, "length") - lengths, x["k"])
        after0 = (await ctl0.get("/v05/stats")).json()
        after1 = (await c1.get("/v05/stats")).json()
        again = await c1.post("/v05/abort", json={"uid": "far"})
        for c in (c0, ctl0, c1):
            await c.aclose()
        return (other, still, v05_other, recs, before0, after0, after1,
                again, ran)
    other, still, v05_other, recs, before0, after0, after1, again, ran = \
        asyncio.run(main())
    assert other == {"status": "aborted", "aborted": 0}
    assert still == 4                        # the group went on there
    assert v05_other.status_code == 200, v05_other.text
    assert v05_other.json() == {"aborted": True, "uid": "far", "owner": 0,
                                "forwarded": True, "requests": 4}
    assert recs[-1]["type"] == "aborted"
    assert "another front end" in recs[-1]["error"]
    assert not [r for r in recs if r["type"] == "sample"]
    assert after0["plugin"]["aborts_applied"] == \
        before0["plugin"]["aborts_applied"] + 1
    assert after0["server"]["aborted"] == before0["server"]["aborted"] + 1
    assert after0["running"] == 0 and after0["requests"] == 0
    # The "after" group's k samples ran to their length; none of "far"'s.
    assert ran[0] == ran[1], ran
    assert after1["server"]["aborts_forwarded"] == 1
    # Gone everywhere now: a second abort finds no such group.
    assert again.status_code == 404 and again.json()["field"] == "uid"


def test_an_abort_on_the_owner_stops_its_requests(server):
    async def main():
        c0, ctl0 = await pinned(server.url, 0), await pinned(server.url, 0)
        body = {"uid": "near", "prompt_ids": tiny.make_prompts(8)[7],
                "sampling": LONG}

        async def drain():
            async with c0.stream("POST", "/v05/group", json=body) as r:
                return [json.loads(x) async for x in r.aiter_lines()]
        paused = await ctl0.post("/pause", params={"mode": "keep"})
        assert paused.status_code == 200, paused.text
        try:
            t = asyncio.ensure_future(drain())
            while (await ctl0.get("/v05/stats")).json()["requests"] < 4:
                assert not t.done(), t.result()
                await asyncio.sleep(0.05)
            mine = (await ctl0.post("/v05/abort",
                                    json={"uid": "near"})).json()
            # A guard against a hang (the engine is paused), not a timing.
            recs = await asyncio.wait_for(t, 120)
        finally:
            await ctl0.post("/resume")
        await asyncio.to_thread(poll, lambda: running(server.url) == 0, 30,
                                "the engine to have no request")
        for c in (c0, ctl0):
            await c.aclose()
        return mine, recs
    mine, recs = asyncio.run(main())
    assert mine == {"aborted": True, "uid": "near", "owner": 0,
                    "requests": 4}
    assert recs[-1]["type"] == "aborted"
