# SPDX-License-Identifier: MIT
"""`--api-server-count 2`: two API-server processes, one engine core. Each
loads v05's plugin with its own segment by its index; a reward posted to
the other front end reaches the owner's segment and is applied once, its
duplicate refused by the plugin; vLLM's own /abort_requests reaches only
the requests of the front end it lands on. vLLM force-kills its front ends
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
from test_vllm_server import LONG, running, vllm_server  # noqa: E402

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


def test_an_abort_reaches_only_its_own_front_end(server):
    async def main():
        c0, ctl0, c1 = (await pinned(server.url, 0),
                        await pinned(server.url, 0),
                        await pinned(server.url, 1))
        body = {"uid": "far", "prompt_ids": tiny.make_prompts(8)[7],
                "sampling": LONG}

        async def drain():
            async with c0.stream("POST", "/v05/group", json=body) as r:
                return [json.loads(x) async for x in r.aiter_lines()]
        t = asyncio.ensure_future(drain())
        await asyncio.to_thread(poll, lambda: running(server.url) >= 4, 120,
                                "4 requests running")
        # vLLM's own abort-everything, on the other front end: it knows
        # none of front end 0's requests.
        other = (await c1.post("/abort_requests", json={})).json()
        v05_other = await c1.post("/v05/abort", json={"uid": "far"})
        still = (await ctl0.get("/v05/stats")).json()["running"]
        mine = (await ctl0.post("/v05/abort", json={"uid": "far"})).json()
        await asyncio.to_thread(poll, lambda: running(server.url) == 0, 30,
                                "the engine to have no request")
        recs = await t
        for c in (c0, ctl0, c1):
            await c.aclose()
        return other, v05_other, still, mine, recs
    other, v05_other, still, mine, recs = asyncio.run(main())
    assert other == {"status": "aborted", "aborted": 0}
    assert v05_other.status_code == 404      # the owner is front end 0
    assert still == 1                        # the group went on there
    assert mine == {"aborted": True, "uid": "far", "requests": 4}
    assert recs[-1]["type"] == "aborted"
