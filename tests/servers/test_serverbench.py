# SPDX-License-Identifier: MIT
"""The server benchmark, small (bench/server_run.py --quick: one repetition
of 8 prompts, a short tail, a real `vllm serve` with v05's plugin beside
an in-process engine): what it promises holds, timing aside: every arm
has its row; every sample of every arm has exactly its drawn length
(bench/server_lengths.py, enforced inside both engines); the group
route's samples are the server's pushes and its groups' k; every group
has its round trip (HTTP and its parts, lanes); the server's decision
path was timed (bench/server_hooks.py); the page's section renders with
the issue's targets. No timing is asserted."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
BENCH = os.path.join(ROOT, "bench")


def test_prompt_index_round_trips():
    sys.path.insert(0, BENCH)
    import server_lengths as sl
    for run, index in ((0, 0), (7, 95), (124, 125), (15624, 15624)):
        ids = sl.encode([1, 5, 6, 7], run, index)
        assert ids[:4] == [1, 5, 6, 7] and sl.decode(ids) == index
    assert sl.decode([1, 5, 6, 7]) is None
    with pytest.raises(ValueError):
        sl.encode([1, 5, 6, 7], 0, 125 ** 2)


def test_server_benchmark_small(tmp_path):
    env = dict(os.environ)
    env.pop("V05_LIB", None)
    r = subprocess.run([sys.executable, os.path.join(BENCH, "server_run.py"),
                        "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    with open(tmp_path / "server-vllm-s1-origin.json") as f:
        run = json.load(f)
    a = run["args"]
    rows = {row["arm"]: row for row in run["rows"]}
    assert set(rows) == set(run["arms"]) and len(run["rows"]) == 3
    for arm, row in rows.items():
        assert row["groups"] == a["prompts"], arm
        assert row["length_mismatch"] == 0, arm
        assert row["tokens"] > 0 and row["wall_s"] > 0, arm
        assert sum(row["k_hist"]) == a["prompts"], arm
        assert row["calls"]["poll"][0] > 0 and row["calls"]["submit"][0] > 0
    route = rows["group route"]
    assert route["samples"] == sum(k * n for k, n in
                                   enumerate(route["k_hist"]))
    assert route["pushes"] == route["samples"] == route["rewards"]
    assert len(route["post_s"]) == route["samples"]
    # Gathered by the client's default key (the records' origin): at most
    # a POST a reward.
    assert a["batch_rewards"] == "origin"
    assert 1 <= route["reward_posts"] <= route["rewards"]
    assert len(route["rtt_http_s"]) == a["prompts"]
    assert len(route["rtt_split_s"]) == a["prompts"]
    # Causal order on one clock: the POST, the route, the push, the
    # decision, the record read.
    for parts in route["rtt_split_s"]:
        assert len(parts) == 4 and min(parts) >= 0, parts
    assert all(x > 0 for x in route["rtt_http_s"])
    assert len(route["idle_get_s"]) == 20
    for arm in ("in-process batch", "in-process one at a time"):
        assert len(rows[arm]["rtt_lanes_s"]) == a["prompts"], arm
        assert all(x >= 0 for x in rows[arm]["rtt_lanes_s"]), arm
    assert run["load_start"] and run["load_end"]
    sys.path.insert(0, BENCH)
    import server_report
    page = "\n".join(server_report.section(run))
    assert page.startswith(server_report.HEAD)
    assert "rewards gathered per front end (the default)" in page
    assert f"in {route['reward_posts']} POSTs" in page
    for target in ("wall per token at most 1.05x", "under 1% of wall",
                   "p50 at most 2.00 ms", "p99 at most 10.00 ms"):
        assert target in page
