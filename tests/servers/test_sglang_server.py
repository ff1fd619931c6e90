# SPDX-License-Identifier: MIT
"""`SGLANG_PLUGINS=v05 python -m sglang.launch_server ...` (PyPI's sglang
0.5.23 on its CPU engine, scripts/setup-sglang) with v05's plugin: its own
/generate as it was, a group through the TokenizerManager over the v05
routes, and an abort that empties sglang's scheduler (its own metrics),
at tensor parallelism 1 and 2."""
import asyncio
import json
import os
import re
import sys

import httpx
import pytest

pytest.importorskip("sglang", reason="the sglang environment "
                    "(scripts/setup-sglang) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402

from conftest import CONTEXT, server_env  # noqa: E402
from server_proc import Server, free_port, poll, segments  # noqa: E402

PLUGIN = {"mode": "v05", "pad_multiple": 1}
LONG = {"max_tokens": CONTEXT - 16, "ignore_eos": True}


def sglang_server(model_dir, tmp_path, prefix, tp, *extra):
    port = free_port()
    cfg = {"segment": prefix, "plugin": PLUGIN, "reward_timeout_s": 30}
    env = {"SGLANG_PLUGINS": "v05", "V05_SERVER": json.dumps(cfg)}
    if tp > 1:  # as v05.demos.tiny.sglang_engine sets them (its text)
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(
            str(r % (os.cpu_count() or 1)) for r in range(tp))
        env["SGLANG_NCCL_SO_PATH"] = "libnccl-absent-on-cpu.so.2"
    # sys.executable is the environment's python: the stub and the CPU
    # engine's settings come from its python-cpu wrapper.
    wrapper = os.path.join(os.path.dirname(sys.executable), "python-cpu")
    argv = [wrapper, "-m", "sglang.launch_server", "--model-path", model_dir,
            "--device", "cpu", "--dtype", "float32", "--context-length",
            str(CONTEXT), "--max-total-tokens", "32768",
            "--max-running-requests", "32", "--tp-size", str(tp),
            "--enable-metrics", "--host", "127.0.0.1", "--port", str(port),
            *extra]
    s = Server(argv, server_env(**env), str(tmp_path / f"{prefix}.log"),
               prefix)
    s.port = port
    return s


@pytest.fixture(scope="module", params=[1, 2], ids=["tp1", "tp2"])
def server(request, model_dir, tmp_path_factory):
    prefix = f"tsg{os.getpid()}tp{request.param}"
    s = sglang_server(model_dir, tmp_path_factory.mktemp("sg"), prefix,
                      request.param)
    try:
        s.wait_ready()
        print(f"sglang server (TP {request.param}) with v05 ready after "
              f"{s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


def gauge(url, name):
    text = httpx.get(url + "/metrics", timeout=10).text
    vals = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$",
                      text, re.M)
    assert vals, f"{name} not in /metrics"
    return sum(float(v) for v in vals)


def busy(url):
    return gauge(url, "sglang:num_running_reqs") + \
        gauge(url, "sglang:num_queue_reqs")


def test_plugin_routes_and_stock_generate(server):
    assert f"v05-{server.prefix}-fe0" in segments(server.prefix)
    r = httpx.post(server.url + "/generate", timeout=60, json={
        "input_ids": [1, 5, 6, 7],
        # ignore_eos: 4 tokens whatever the tiny model samples (it ended
        # a sample at EOS by chance once)
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
    assert r.status_code == 200, r.text
    assert len(r.json()["output_ids"]) == 4
    if "tp2" in server.prefix:
        import psutil
        ranks = sorted(p.name() for p in psutil.process_iter(["name"])
                       if p.info["name"].startswith("sglang::scheduler_TP")
                       and os.getpgid(p.pid) == server.pgid)
        assert ranks == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]


def test_group_through_the_tokenizer_manager(server):
    seen = []

    def score(rec):
        seen.append(rec)
        return 1.0 if rec["sample"] % 2 else -1.0

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            return await c.run_group("s1", prompt_ids=tiny.make_prompts(1)[0],
                                     prior=0.9, sampling={"max_tokens": 4,
                                                          "ignore_eos": True},
                                     score=score)
    final = asyncio.run(main())
    assert final["k"] > 4
    assert sorted(r["sample"] for r in seen) == list(range(final["k"]))
    assert all(len(r["token_ids"]) == 4 for r in seen)
    s = httpx.get(server.url + "/v05/stats", timeout=10).json()
    assert s["plugin"]["rewards_applied"] >= final["k"]
    assert s["plugin"]["prompts_open"] == 0


def test_abort_empties_the_scheduler(server):
    async def main():
        async with V05Client(server.url, timeout=300) as c:
            async def drain():
                return [rec async for rec in c.group(
                    "sab", prompt_ids=tiny.make_prompts(3)[2],
                    sampling=LONG)]
            t = asyncio.ensure_future(drain())
            await asyncio.to_thread(poll, lambda: busy(server.url) >= 4, 120,
                                    "4 requests in sglang's scheduler")
            res = await c.abort("sab")
            await asyncio.to_thread(poll, lambda: busy(server.url) == 0, 60,
                                    "sglang's scheduler to be empty")
            return res, await t
    res, recs = asyncio.run(main())
    assert res["aborted"] and res["requests"] == 4
    assert recs[-1]["type"] == "aborted"
    s = httpx.get(server.url + "/v05/stats", timeout=10).json()
    assert s["plugin"]["prompts_open"] == 0
