# SPDX-License-Identifier: MIT
"""A scorer named by import path in `v05-vllm serve`'s configuration
(v05.servers.scorer): groups complete on the scorer's rewards with no
reward pushed over HTTP, a scorer that holds its thread does not hold the
server, a scorer that raises or answers NaN or out of range drops its
group with the reason (counted) and the server goes on, and a bad import
path stops the server at its start naming what is wrong."""
import asyncio
import json
import os
import stat

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

import v05  # noqa: E402
from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402

from server_proc import poll, segments  # noqa: E402
from test_vllm_server import PLUGIN, stats, vllm_server  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = f"tsc{os.getpid()}"
SCORER = "v05_test_scorers:score"


@pytest.fixture(scope="module")
def fifo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fifo") / "release")
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory, fifo):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX,
                    env={"PYTHONPATH": HERE, "V05_TEST_FIFO": fifo},
                    config={"scorer": SCORER, "scorer_threads": 2,
                            "reward_timeout_s": 600})
    try:
        s.wait_ready()
        print(f"vLLM server with v05 and a scorer ready after "
              f"{s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


def records(url, uid, prompt_ids, prior=0.0, max_tokens=3):
    """A group's whole stream, read without pushing any reward."""
    body = {"uid": uid, "prompt_ids": prompt_ids, "prior": prior,
            "sampling": {"max_tokens": max_tokens}}
    with httpx.Client(base_url=url, timeout=300) as c, \
            c.stream("POST", "/v05/group", json=body) as r:
        assert r.status_code == 200
        return [json.loads(line) for line in r.iter_lines()]


def test_groups_complete_on_the_scorers_rewards(server):
    before = stats(server.url)["server"]
    # A confident prior the scorer's alternating rewards disagree with:
    # second waves, each of their samples scored too.
    recs = records(server.url, "scored-1", tiny.make_prompts(1)[0], 0.9)
    final = recs[-1]
    assert final["type"] == "final", final
    k = final["k"]
    assert k > 4
    samples = sorted(r["sample"] for r in recs if r["type"] == "sample")
    assert samples == list(range(k))
    want = [1.0 if i % 2 else -1.0 for i in range(k)]
    assert final["rewards"] == want
    est = v05.estimate(0.9, want, mode="v05", cost=PLUGIN["cost"], k_step=2,
                       k_max=16)
    assert final["advantages"] == pytest.approx(est["advantages"], abs=1e-6)
    after = stats(server.url)
    assert after["server"]["rewards_scored"] == before["rewards_scored"] + k
    assert after["server"]["rewards"] == before["rewards"]  # none over HTTP
    assert after["server"]["final"] == before["final"] + 1
    assert after["plugin"]["prompts_open"] == 0


def test_a_pushed_reward_wins_over_none_and_a_scored_one_refuses_a_push(
        server):
    """The scorer answers None for these uids: the samples wait for the
    pushes. A push for a sample the scorer rewarded is a duplicate."""
    async def main():
        async with V05Client(server.url, timeout=120) as c:
            final = await c.run_group("pushed-1", prompt_ids=tiny.make_prompts(
                2)[1], prior=1.0, sampling={"max_tokens": 2},
                score=lambda rec: 1.0)
            it = c.group("scored-2", prompt_ids=tiny.make_prompts(3)[2],
                         prior=-1.0, sampling={"max_tokens": 2})
            first = await it.__anext__()
            # Its reward is the scorer's once the group has gone on.
            rest = [x async for x in it]
            r = await c.http.post("/v05/reward", json={
                "uid": "scored-2", "sample": first["sample"],
                "gen": first["gen"], "reward": 1.0})
            return final, rest, r.status_code
    before = stats(server.url)["server"]
    final, rest, status = asyncio.run(main())
    assert final["type"] == "final" and final["rewards"] == [1.0] * 4
    assert rest[-1]["type"] == "final"
    assert status == 404  # the group is over: no such uid running
    s = stats(server.url)["server"]
    assert s["rewards"] == before["rewards"] + 4
    assert s["rewards_scored"] == before["rewards_scored"] + rest[-1]["k"]


def test_a_blocked_scorer_does_not_block_the_server(server, fifo):
    before = stats(server.url)["server"]

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            recs = asyncio.ensure_future(_drain(c))
            # Samples 1 to 3 scored while sample 0's scorer holds its
            # thread; the server answers meanwhile (this poll).
            await asyncio.to_thread(
                poll, lambda: stats(server.url)["server"]["rewards_scored"]
                == before["rewards_scored"] + 3, 120,
                "3 of 4 samples scored")
            assert not recs.done()
            assert stats(server.url)["running"] == 1
            await asyncio.to_thread(_release, fifo)
            return await asyncio.wait_for(recs, 120)

    async def _drain(c):
        return [x async for x in c.group(
            "blocked-1", prompt_ids=tiny.make_prompts(4)[3], prior=1.0,
            sampling={"max_tokens": 2})]
    recs = asyncio.run(main())
    assert recs[-1]["type"] == "final" and recs[-1]["rewards"] == [1.0] * 4


def _release(path):
    assert stat.S_ISFIFO(os.stat(path).st_mode)
    with open(path, "w"):  # the blocked reader's open returns, then EOF
        pass


@pytest.mark.parametrize("uid,why", [
    ("raises-1", f"scorer {SCORER} raised on sample 1: ValueError: no "
                 "verdict for this one: the group was dropped"),
    ("nan-1", f"scorer {SCORER} gave no reward for sample 2: scorer: nan "
              "is not a finite number: the group was dropped"),
    ("range-1", f"scorer {SCORER} gave no reward for sample 0: scorer: 1.5 "
                "is outside [-1, 1]: the group was dropped"),
])
def test_a_bad_score_drops_its_group_and_the_server_goes_on(server, uid, why):
    before = stats(server.url)
    recs = records(server.url, uid, tiny.make_prompts(5)[4], 1.0)
    assert recs[-1] == {"type": "error", "uid": uid, "error": why}
    after = stats(server.url)
    assert after["server"]["scorer_errors"] == \
        before["server"]["scorer_errors"] + 1
    assert after["server"]["aborted"] == before["server"]["aborted"]
    assert after["plugin"]["prompts_open"] == 0
    assert after["plugin"]["prompts_cancelled"] == \
        before["plugin"]["prompts_cancelled"] + 1
    # The server goes on.
    ok = records(server.url, f"scored-after-{uid}", tiny.make_prompts(6)[5],
                 -1.0)
    assert ok[-1]["type"] == "final"


@pytest.mark.parametrize("path,why", [
    ("v05_test_scorers:nope", "v05 server: scorer 'v05_test_scorers:nope': "
                              "v05_test_scorers has no 'nope'"),
])
def test_a_bad_import_path_stops_the_server_at_start(model_dir, tmp_path,
                                                     path, why):
    prefix = f"tsb{os.getpid()}"
    s = vllm_server(model_dir, tmp_path, prefix, env={"PYTHONPATH": HERE},
                    config={"scorer": path})
    try:
        rc = s.proc.wait(900)
    finally:
        s.stop()
    assert rc != 0
    with open(s.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    assert why in log, log[-3000:]
    assert segments(prefix) == []
