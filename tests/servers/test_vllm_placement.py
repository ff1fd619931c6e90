# SPDX-License-Identifier: MIT
"""Affinity and priority in a real `vllm serve` with v05's plugin:
`--data-parallel-size 2` (two engine cores) behind one API server
(`--api-server-count 1`: the priority test needs one front end, see
there) and `--scheduling-policy priority`, one request at a time per rank
(`--max-num-seqs 1`) so that a queue forms. Seen from the engine itself:
every request of a group runs on the rank its uid hashes to (per-rank
request counts), and second-wave samples go ahead of requests queued
before them (what the rank ran first, by its prefix cache)."""
import asyncio
import os
import re

import httpx
import numpy as np
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402
from v05.servers.placement import dp_rank  # noqa: E402

from server_proc import poll  # noqa: E402
from test_vllm_server import PLUGIN, alternate, vllm_server  # noqa: E402

PREFIX = f"tpl{os.getpid()}"
DP = 2


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("pl"), PREFIX,
                    "--data-parallel-size", str(DP),
                    "--scheduling-policy", "priority",
                    "--max-num-seqs", "1",
                    "--api-server-count", "1",
                    # "Added request <id>." and the stock requests' cached
                    # prompt tokens, for the priority test.
                    "--enable-log-requests", "--enable-prompt-tokens-details",
                    # Dev mode: /pause, /resume, /reset_prefix_cache.
                    env={"VLLM_SERVER_DEV_MODE": "1"},
                    # The priority test holds a group's rewards back while
                    # it queues stock requests: no reward timeout in that.
                    config={"reward_timeout_s": 600})
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


def added(server, offset):
    """The request ids vLLM's front end logged as handed to the engine
    core since byte `offset` of the server's log (--enable-log-requests:
    "Added request <id>." comes after the send to the core's socket,
    v1/engine/async_llm.py, _add_request)."""
    with open(server.log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return re.findall(r"Added request (\S+)\.$", text, re.M)


def second_wave_ids(ids, uid):
    """Of `ids`, v05's requests for samples >= k_init (4) of group `uid`
    (v05 names them v05-<uid>-<batch>-<sample>-<n>, servers/vllm.py)."""
    pat = re.compile(rf"v05-{re.escape(uid)}-\d+-(\d+)-")
    return [i for i in ids if (m := pat.match(i)) and int(m.group(1)) >= 4]


def test_second_wave_goes_ahead_of_queued_requests(server):
    """Three stock requests queued on a group's rank before its second
    wave, all held with the engine paused, then resumed: the rank runs the
    second wave first. Nothing here depends on how fast anything runs:
    - paused (dev mode's /pause, mode keep), the engine schedules nothing,
      so all five requests wait however long the test takes to queue them;
    - one front end (--api-server-count 1) sends them all and the resume
      on one socket per engine core, which the core reads in order: the
      resume is sent after vLLM logged each of the five as sent, so the
      core has all five waiting when it resumes (its gauges cannot show
      that: they are published by scheduler steps, and a paused engine
      takes none);
    - the witness of what ran first is the engine's own prefix cache: it
      is emptied while paused and every request has the group's prompt
      (201 tokens, more than one 128-token block), so exactly one request
      finds nothing of it cached, the first the rank ran after the resume;
      a second-wave sample under priority, a stock one in arrival order
      (fcfs, or the priority not passed);
    - the rank's finished count read after each stock response has come
      back includes everything the rank finished before it (vLLM counts a
      request in the same pass of its output handler that delivers it)."""
    rank = 1
    uid = uid_on(rank, "prio-")
    prompt = [tiny.BOS] + [int(x) for x in np.random.default_rng(7).integers(
        3, tiny.VOCAB, size=200)]
    model = httpx.get(server.url + "/v1/models",
                      timeout=10).json()["data"][0]["id"]

    def done_on_rank():
        return finished(server.url)[rank]

    async def stock(c):
        r = await c.post("/v1/completions", headers={
            "X-data-parallel-rank": str(rank)}, json={
            "model": model, "prompt": prompt, "max_tokens": 2,
            "ignore_eos": True})
        assert r.status_code == 200, r.text
        return (r.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
                await asyncio.to_thread(done_on_rank))

    async def dev(c, path, **params):
        r = await c.post(path, params=params)
        assert r.status_code == 200, f"{path}: {r.text}"
        return r.json()

    async def main():
        async with V05Client(server.url, timeout=600) as v, \
                httpx.AsyncClient(base_url=server.url, timeout=600) as c:
            first, extra, tasks, final, n0 = [], [], [], None, None
            async for rec in v.group(uid, prompt_ids=prompt, prior=0.9,
                                     sampling={"max_tokens": 2,
                                               "ignore_eos": True}):
                if rec["type"] != "sample":
                    final = rec
                    break
                if rec["sample"] >= 4:
                    extra.append(rec)
                    await v.reward(rec, alternate(rec))
                    continue
                first.append(rec)
                if len(first) < 4:
                    continue
                await dev(c, "/pause", mode="keep")
                try:
                    assert (await dev(c, "/reset_prefix_cache"))["success"]
                    offset = os.path.getsize(server.log_path)
                    tasks = [asyncio.ensure_future(stock(c))
                             for _ in range(3)]
                    await asyncio.to_thread(
                        poll, lambda: sum(i.startswith("cmpl-") for i in
                                          added(server, offset)) == 3,
                        300, "the 3 stock requests sent to the engine")
                    await v.rewards([(r, alternate(r)) for r in first])
                    await asyncio.to_thread(
                        poll, lambda: len(second_wave_ids(
                            added(server, offset), uid)) == PLUGIN["k_step"],
                        300, "the second wave sent to the engine")
                    n0 = await asyncio.to_thread(done_on_rank)
                finally:
                    await dev(c, "/resume")
            return final, extra, await asyncio.gather(*tasks), n0

    other = finished(server.url)[1 - rank]
    final, extra, stocks, n0 = asyncio.run(main())
    assert final is not None and final["type"] == "final", final
    assert final["k"] > 4, "a second wave ran"
    # On the stock requests' rank, or the queue they passed was not theirs.
    assert finished(server.url)[1 - rank] == other
    # The first request the rank ran after the resume: a second-wave one.
    cold = [r["sample"] for r in extra if r["cached_tokens"] == 0]
    assert len(cold) == 1 and 4 <= cold[0] < 4 + PLUGIN["k_step"], \
        f"not a second-wave sample first: samples with nothing cached " \
        f"{cold}, the stock requests' cached tokens {[c for c, _ in stocks]}"
    assert all(c > 0 for c, _ in stocks), stocks
    # Both queued second-wave samples before any stock request ended.
    assert min(n for _, n in stocks) - n0 >= PLUGIN["k_step"], (n0, stocks)
    # The engine idle again.
    poll(lambda: per_engine(server.url, "vllm:num_requests_running")[rank] +
         per_engine(server.url, "vllm:num_requests_waiting")[rank] == 0,
         120, "the rank to be idle")
