# SPDX-License-Identifier: MIT
"""`v05-vllm serve` killed (SIGKILL, the whole server) with a group in
flight and started again on the same segment ("keep_segment": true): the
new front end takes the segment over, gives the dead one's group up and
counts it lost (the takeover's counters, the server's, the report), and
nothing of it is applied twice: its rewards applied before the kill stay
applied once, its late reward (over HTTP, into a lane) is refused, and
the same uid sent again is a new group with only its own rewards."""
import asyncio
import contextlib
import os
import signal

import httpx
import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

from v05.core.metrics import REJECT_REASONS  # noqa: E402
from v05.core.segments import reclaim  # noqa: E402
from v05.core.writer import RewardWriter  # noqa: E402
from v05.demos import tiny  # noqa: E402
from v05.servers.client import V05Client  # noqa: E402
from v05.trainers.report import read_report  # noqa: E402

from server_proc import poll, segments  # noqa: E402
from test_vllm_server import stats, vllm_server  # noqa: E402

PREFIX = f"trs{os.getpid()}"
SEG = f"{PREFIX}-fe0"


def rejected(plugin_stats):
    return sum(plugin_stats["rejected_" + r] for r in REJECT_REASONS)


def test_a_killed_server_restarted_takes_its_segment_over(model_dir,
                                                          tmp_path):
    report = str(tmp_path / "report.jsonl")
    cfg = {"keep_segment": True, "reward_timeout_s": 600, "report": report}
    prompt = tiny.make_prompts(2)[1]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = vllm_server(model_dir, tmp_path / "a", PREFIX, config=cfg)
    b = None
    try:
        a.wait_ready()

        async def first_life():
            async with V05Client(a.url, timeout=300) as c:
                # A group to its end first: what the segment keeps.
                done = await c.run_group("done-1", prompt_ids=prompt,
                                         prior=1.0, score=lambda r: 1.0,
                                         sampling={"max_tokens": 2})
                assert done["type"] == "final"
                base = stats(a.url)["plugin"]["rewards_applied"]
                it = c.group("lost-1", prompt_ids=prompt, prior=1.0,
                             sampling={"max_tokens": 2})
                recs = [await it.__anext__() for _ in range(4)]
                await c.rewards([(r, -1.0) for r in recs[:3]])
                # Applied (the plugin drained them), then the kill: the
                # group waits for sample 3's reward, nothing generating.
                await asyncio.to_thread(
                    poll, lambda: stats(a.url)["plugin"]["rewards_applied"]
                    == base + 3, 120, "3 rewards applied")
                st = stats(a.url)
                await asyncio.to_thread(a.stop, sig=signal.SIGKILL,
                                        kept=True)
                with contextlib.suppress(httpx.HTTPError):
                    await it.aclose()
                return recs[3], st
        late, before = asyncio.run(first_life())
        assert before["running"] == 1 and before["plugin"]["prompts_open"] == 1

        b = vllm_server(model_dir, tmp_path / "b", PREFIX, config=cfg)
        b.wait_ready()
        after = stats(b.url)
        p0, p1 = before["plugin"], after["plugin"]
        # The takeover's own counters: one takeover, the one open prompt
        # cancelled, the rewards applied before kept, nothing open.
        assert p1["takeovers"] == p0["takeovers"] + 1
        assert p1["prompts_cancelled"] == p0["prompts_cancelled"] + 1
        assert p1["rewards_applied"] == p0["rewards_applied"]
        assert p1["prompts_open"] == 0 and p1["prompts_final"] == 0
        assert after["server"]["takeover_groups_lost"] == 1
        assert after["server"]["takeover_finals_lost"] == 0
        took = [r for r in read_report(report) if r["kind"] == "takeover"]
        assert len(took) == 1
        assert took[0]["segment"] == SEG and took[0]["groups_lost"] == 1
        assert took[0]["prompts_open_at_takeover"] == 1
        assert took[0]["prompts_left_open"] == 0

        # The dead group's last reward, late: over HTTP (no such group
        # now) and straight into a lane (refused by the plugin).
        r = httpx.post(b.url + "/v05/reward", timeout=30, json={
            "uid": "lost-1", "sample": late["sample"], "gen": late["gen"],
            "reward": -1.0})
        assert r.status_code == 404 and r.json()["field"] == "body.uid"
        with RewardWriter.attach(SEG) as w:
            w.push("lost-1", late["sample"], -1.0, gen=late["gen"])

        async def second_life():
            async with V05Client(b.url, timeout=300) as c:
                return await c.run_group("lost-1", prompt_ids=prompt,
                                         prior=1.0, score=lambda r: 1.0,
                                         sampling={"max_tokens": 2})
        again = asyncio.run(second_life())
        assert again["type"] == "final" and again["rewards"] == [1.0] * 4
        end = stats(b.url)["plugin"]
        assert end["rewards_applied"] == p1["rewards_applied"] + 4
        assert rejected(end) == rejected(p1) + 1
        assert end["prompts_open"] == 0
    finally:
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(kept=True)
        if os.path.exists(f"/dev/shm/v05-{SEG}"):
            reclaim(SEG)
        assert segments(PREFIX) == []
