# SPDX-License-Identifier: MIT
"""Mode v05-pg with the skip bar at 0.75 behind `v05-vllm serve` (vLLM
0.32's CPU build), through the group route: a prompt in three is sure to
fail and its prior says so (-0.98), the others are a coin with the prior
0. Once the running fit is warm (eb_cold 8) and 32 more prompts came in,
the sure prompts are skipped: the group's stream is its final record
alone (k 0, dropped, the prior as its baseline, no sample record, nothing
generated), counted in /v05/stats; every other group ends final with the
paper normaliser's advantages on the rewards pushed."""
import asyncio
import hashlib
import math
import os

import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402

from test_vllm_server import stats, vllm_server  # noqa: E402

PREFIX = f"tsp{os.getpid()}"
PG = {"mode": "v05-pg", "pg": {"skip": 0.75}, "pad_multiple": 1,
      "eb_cold": 8}
GROUPS = 60


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX,
                    config={"plugin": PG})
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def coin(uid, sample):
    h = hashlib.blake2b(f"{uid}/{sample}".encode(), digest_size=1).digest()
    return 1.0 if h[0] & 1 else -1.0


def test_v05_pg_skips_through_the_group_route(server):
    prompts = tiny.make_prompts(GROUPS, seed=3)
    sure = {f"g{i}" for i in range(GROUPS) if i % 3 == 0}

    out = asyncio.run(_streamed(server, prompts, sure))
    skipped = []
    for i in range(GROUPS):
        uid = f"g{i}"
        recs = out[uid]
        final = recs[-1]
        assert final["type"] == "final", final
        samples = [r for r in recs if r["type"] == "sample"]
        assert len(samples) == final["k"]
        if final["k"] == 0:
            skipped.append(i)
            assert final["dropped"] and final["rewards"] == [] and \
                final["advantages"] == [] and final["kept"] == []
            assert final["baseline"] == pytest.approx(-0.98)
            continue
        b = final["baseline"]
        assert not final["dropped"] and -1 < b < 1
        want = [(r - b) / math.sqrt(1 - b * b) for r in final["rewards"]]
        assert final["advantages"] == pytest.approx(want, rel=1e-5)
    assert skipped and all(f"g{i}" in sure for i in skipped)
    assert min(skipped) >= 8 + 32  # the cold start, then 32 prompts
    st = stats(server.url)["plugin"]
    assert st["prompts_skipped"] == len(skipped)
    assert st["prompts_open"] == 0 and st["prompts_held"] == 0
    assert st["samples_issued"] == st["rewards_applied"] == sum(
        out[f"g{i}"][-1]["k"] for i in range(GROUPS))


async def _streamed(server, prompts, sure):
    """Each group in turn (the fit's order is the groups'): its records,
    each sample's reward pushed as the sample arrives (the stream's final
    record comes once the rewards are in)."""
    out = {}
    async with V05Client(server.url, timeout=120) as c:
        for i in range(GROUPS):
            uid = f"g{i}"
            recs, pushes = [], []
            async for rec in c.group(uid, prompt_ids=prompts[i],
                                     prior=-0.98 if uid in sure else 0.0,
                                     sampling={"max_tokens": 4}):
                recs.append(rec)
                if rec["type"] == "sample":
                    r = -1.0 if uid in sure else coin(uid, rec["sample"])
                    pushes.append(asyncio.ensure_future(c.reward(rec, r)))
            await asyncio.gather(*pushes)
            out[uid] = recs
    return out
