# SPDX-License-Identifier: MIT
"""Affinity and priority in a real `vllm serve` with v05's plugin:
`--data-parallel-size 2` (two engine cores, two API servers, which vLLM
starts for DP 2 on this CPU build) and `--scheduling-policy priority`,
one request at a time per rank (`--max-num-seqs 1`) so that a queue
forms. Seen from the engine's own per-rank metrics: every request of a
group runs on the rank its uid hashes to, and second-wave samples go
ahead of requests queued before them."""
import asyncio
import os
import re

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402
from v05.servers.placement import dp_rank  # noqa: E402

from server_proc import poll  # noqa: E402
from test_vllm_server import alternate, vllm_server  # noqa: E402

PREFIX = f"tpl{os.getpid()}"
DP = 2


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("pl"), PREFIX,
                    "--data-parallel-size", str(DP),
                    "--scheduling-policy", "priority",
                    "--max-num-seqs", "1",
                    # The priority test holds a group's rewards back until
                    # the stock requests are queued, which under load took
                    # longer than the other tests' 10 s (seen: the group
                    # dropped by the reward timeout).
                    cfg={"reward_timeout_s": 600})
    try:
        s.wait_ready()
        print(f"vLLM server (DP {DP}, priority) with v05 ready after "
              f"{s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


def per_engine(url, name, **labels):
    """{engine index: value} of a metric of the engine's /metrics, summed
    over its other labels (those in `labels` must match); an engine
    missing from it (a gauge it has not published yet) counts 0."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for lab, val in re.findall(rf"^{re.escape(name)}{{([^}}]*)}} "
                               r"([0-9.eE+-]+)$", text, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', lab))
        if all(kv.get(k) == v for k, v in labels.items()):
            e = int(kv["engine"])
            out[e] = out.get(e, 0.0) + float(val)
    assert out, f"{name} not in /metrics"
    return {e: out.get(e, 0.0) for e in range(DP)}


def finished(url):
    return per_engine(url, "vllm:request_success_total")


def uid_on(rank, stem):
    return next(u for u in (f"{stem}{i}" for i in range(64))
                if dp_rank(u, DP) == rank)


@pytest.mark.parametrize("rank", range(DP))
def test_every_request_of_a_group_runs_on_its_rank(server, rank):
    uid = uid_on(rank, f"aff{rank}-")
    before = finished(server.url)

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            return await c.run_group(uid, prompt_ids=tiny.make_prompts(3)[2],
                                     prior=0.9, sampling={"max_tokens": 4},
                                     score=alternate)
    final = asyncio.run(main())
    assert final["k"] > 4, "a second wave ran"
    after = finished(server.url)
    ran = {e: after[e] - before[e] for e in after}
    # vLLM's own balancer would spread a wave of 4 over both ranks
    # (round-robin by requests in flight when the engines are idle).
    assert ran == {e: (final["k"] if e == rank else 0.0) for e in ran}


def test_second_wave_goes_ahead_of_queued_requests(server):
    """A group's first wave, then three long stock requests on the same
    rank (one running, two queued: one request at a time), then the
    rewards, which make v05 ask for more samples. With priority they run
    as soon as the running stock request ends, before the queued ones: when
    the first of them is back, the rank has finished the running stock
    request and one or two of the group's (2 tokens each); in arrival order
    (fcfs, or the priority not passed) all three stock requests first.
    Counted by the engine (its requests finished on the rank); the stock
    requests are 1500 tokens (within the 2048 context) so that the next
    cannot end while the count is read."""
    rank = 1
    uid = uid_on(rank, "prio-")
    model = httpx.get(server.url + "/v1/models",
                      timeout=10).json()["data"][0]["id"]

    async def stock(c, i):
        r = await c.post("/v1/completions", headers={
            "X-data-parallel-rank": str(rank)}, json={
            "model": model, "prompt": f"stock {i}", "max_tokens": 1500,
            "ignore_eos": True})
        assert r.status_code == 200, r.text

    def queued():
        w = per_engine(server.url, "vllm:num_requests_waiting")[rank]
        n = per_engine(server.url, "vllm:num_requests_running")[rank]
        return w >= 2 and n >= 1

    def done_on_rank():
        return finished(server.url)[rank]

    async def main():
        async with V05Client(server.url, timeout=600) as v, \
                httpx.AsyncClient(base_url=server.url, timeout=600) as c:
            first, tasks, final, ahead = [], [], None, None
            async for rec in v.group(uid, prompt_ids=tiny.make_prompts(4)[3],
                                     prior=0.9,
                                     sampling={"max_tokens": 2,
                                               "ignore_eos": True}):
                if rec["type"] != "sample":
                    final = rec
                    break
                if rec["sample"] >= 4:
                    if ahead is None:
                        ahead = await asyncio.to_thread(done_on_rank) - n0
                    await v.reward(rec, alternate(rec))
                    continue
                first.append(rec)
                if len(first) == 4:
                    tasks = [asyncio.ensure_future(stock(c, i))
                             for i in range(3)]
                    await asyncio.to_thread(poll, queued, 300,
                                            "1 stock request running and "
                                            "2 waiting on the rank")
                    n0 = await asyncio.to_thread(done_on_rank)
                    await v.rewards([(r, alternate(r)) for r in first])
            for t in tasks:  # the rest is not needed: closed, so aborted
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return final, ahead

    other = finished(server.url)[1 - rank]
    final, ahead = asyncio.run(main())
    assert final is not None and final["type"] == "final", final
    assert final["k"] > 4, "a second wave ran"
    # On the stock requests' rank, or the queue they passed was not theirs.
    assert finished(server.url)[1 - rank] == other
    # The running stock request and the group's first extra (its second,
    # when it ended before the count was read): not the two queued.
    assert 2 <= ahead <= 3, f"{ahead} requests finished on the rank " \
        "before the first extra sample came back"
    # The engine idle again (the stock requests left were aborted).
    poll(lambda: per_engine(server.url, "vllm:num_requests_running")[rank] +
         per_engine(server.url, "vllm:num_requests_waiting")[rank] == 0,
         120, "the rank to be idle")
