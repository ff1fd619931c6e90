# SPDX-License-Identifier: MIT
"""Second-wave priority in a real sglang server with v05's plugin
(`--enable-priority-scheduling --default-priority-value 0`): sglang
labels each finished request's metrics with the priority it was given
(tokenizer_manager.py, with priority scheduling on), so the engine's own
/metrics show whether v05's second-wave samples carried one and which."""
import asyncio
import os
import re

import httpx
import pytest

pytest.importorskip("sglang", reason="the sglang environment "
                    "(scripts/setup-sglang) is not this Python")

from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402

from test_sglang_server import sglang_server  # noqa: E402

PREFIX = f"tsp{os.getpid()}"


def alternate(rec):
    """Rewards that disagree with a confident prior half the time: v05
    asks for second waves."""
    return 1.0 if rec["sample"] % 2 else -1.0


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = sglang_server(model_dir, tmp_path_factory.mktemp("sp"), PREFIX, 1,
                      "--enable-priority-scheduling",
                      "--default-priority-value", "0")
    try:
        s.wait_ready()
        print(f"sglang server (priority scheduling) with v05 ready after "
              f"{s.ready_after:.1f} s")
        yield s
    finally:
        s.stop()


def finished_by_priority(url):
    """{priority label: requests finished} from sglang's request counter
    (a request without a priority of its own is labelled with the
    default value)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for lab, val in re.findall(r"^sglang:num_requests_total\{([^}]*)\} "
                               r"([0-9.eE+-]+)$", text, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', lab))
        p = kv.get("priority")
        out[p] = out.get(p, 0.0) + float(val)
    assert out, "sglang:num_requests_total not in /metrics"
    return out


def test_second_wave_carries_its_priority(server):
    before = finished_by_priority(server.url)

    async def main():
        async with V05Client(server.url, timeout=300) as c:
            return await c.run_group("sp1", prompt_ids=tiny.make_prompts(5)[4],
                                     prior=0.9, sampling={"max_tokens": 4},
                                     score=alternate)
    final = asyncio.run(main())
    assert final["k"] > 4, "a second wave ran"
    after = finished_by_priority(server.url)
    ran = {p: after[p] - before.get(p, 0.0) for p in after
           if after[p] != before.get(p, 0.0)}
    # One above the default (higher first) for the second waves; the
    # first wave's 4 at the default. Without the priority passed: all 16
    # at "0" (seen, "priority": false).
    assert ran == {"0": 4.0, "1": float(final["k"] - 4)}, ran
