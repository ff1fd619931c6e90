# SPDX-License-Identifier: MIT
"""v05ctl stat/ls/top/reclaim against live segments, and the Prometheus
exporter: every number they show equals what the test drove."""
import json
import math
import os
import select
import subprocess
import sys
import time

import pytest

import v05
import v05.core.metrics
from v05.core import _lib
from v05.core.observer import Observer

N, K = 24, 4


def drive(name):
    """A live plugin with known traffic: N prompts' K rewards each, plus
    one reward of every rejected kind but corrupt; all groups final."""
    p = v05.Plugin.create(name, max_prompts=64, max_producers=4,
                          mode="v05-fixed", k_init=K, k_max=K, pad_multiple=1)
    w = v05.RewardWriter.attach(name)
    first = p.submit([(f"u{i}", 0.6 - 0.05 * i) for i in range(N)])
    gen = {d.uid: d.gen for d in first}
    # The bad ones first, while their prompts are still collecting. The
    # bad values through the C call (RewardWriter.push refuses them in
    # Python): the plugin must count what any producer sends.
    for uid, s, r in (("u0", 0, math.nan), ("u1", 0, 1.5)):
        assert _lib.lib.v05_producer_push(w._handle(), v05.key_of(uid),
                                          gen[uid], s, r) == 0
    for uid, s, r in (("nobody", 0, 1.0), ("u2", 9, 1.0)):
        w.push(uid, s, r, gen=gen.get(uid, 0))
    for d in first:
        for s in d.samples:
            w.push(d, s, 1.0 if (s + int(d.uid[1:])) % 3 else -1.0)
            if d.uid == "u3" and s == 0:
                w.push(d, s, 1.0)  # a duplicate
    w.flush()
    finals = []
    deadline = time.monotonic() + 10
    while len(finals) < N and time.monotonic() < deadline:
        finals += [d for d in p.poll() if d.kind == "final"]
        if len(finals) < N:
            asyncio_free_wait(p)
    assert len(finals) == N
    # A late reward, after the group is final (not yet released).
    w.push("u4", 1, 1.0, gen=gen["u4"])
    w.flush()
    while p.stats()["rejected_late"] == 0 and time.monotonic() < deadline:
        p.poll()
        asyncio_free_wait(p)
    return p, w, finals


def asyncio_free_wait(p):
    """Block on the plugin's fd until something may be there (100 ms cap)."""
    select.select([p.fileno()], [], [], 0.1)


def ctl(v05ctl, *args, check=True):
    r = subprocess.run([v05ctl, *args], capture_output=True, text=True,
                       timeout=30)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_stat_json_equals_traffic(segname, v05ctl):
    p, w, finals = drive(segname)
    try:
        s = json.loads(ctl(v05ctl, "stat", "--json", segname).stdout)
        assert s["name"] == segname
        assert s["owner"] == {"pid": os.getpid(), "alive": True,
                              "heartbeat_age_ns": s["owner"]["heartbeat_age_ns"]}
        assert s["config"]["mode"] == "v05-fixed" and s["config"]["k_max"] == K
        assert s["prompts"]["submitted"] == N
        assert s["prompts"]["open"] == 0
        assert s["prompts"]["final_unreleased"] == N
        assert s["samples"]["issued"] == N * K
        assert s["k_hist"] == {str(K): N}
        assert s["decisions"] == {"sample": N, "final": N, "drop": 0}
        assert s["rewards"]["applied"] == N * K
        assert s["rewards"]["rejected"] == {
            "nonfinite": 1, "range": 1, "unknown": 1, "not_issued": 1,
            "duplicate": 1, "late": 1, "corrupt": 0}
        lane = [x for x in s["lanes"] if x["claims"]]
        assert len(lane) == 1 and lane[0]["pid"] == os.getpid()
        assert lane[0]["consumed"] == N * K + 6 and lane[0]["fill"] == 0
        assert lane[0]["high_water"] >= 1
        # Every named counter agrees with the plugin's own view.
        mine = p.stats()
        for k, v in s["counters"].items():
            if k in ("lane_claims",):
                continue
            assert mine[k] == v, k
        # The human table says the same in words.
        t = ctl(v05ctl, "stat", segname).stdout
        assert f"submitted {N}" in t and f"applied {N * K}, rejected 6" in t
        assert f"pid {os.getpid()} alive" in t
    finally:
        w.close()
        p.close()


def test_ls_stale_and_reclaim_stale(segname, v05ctl, tmp_path, monkeypatch):
    """Stale segments (owner killed, or closed without removing it) listed
    and removed in one call; a live one is left alone. In a directory of
    its own: --stale acts on every segment it can see."""
    monkeypatch.setenv("V05_SHM_DIR", str(tmp_path))
    killed, closed = segname + "-killed", segname + "-closed"
    code = ("import os, sys; sys.path.insert(0, %r); import v05; "
            "v05.Plugin.create(%r, max_prompts=8); os._exit(0)"
            % (os.path.join(os.path.dirname(__file__), "..", "..",
                            "engine-hooks"), killed))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    v05.Plugin.create(closed, max_prompts=8).close(unlink=False)
    live = v05.Plugin.create(segname, max_prompts=8)
    try:
        rows = [json.loads(r) for r in
                ctl(v05ctl, "ls", "--stale", "--json").stdout.splitlines()]
        assert {r["name"]: r["owner"] for r in rows} == {killed: "dead",
                                                        closed: "none"}
        out = ctl(v05ctl, "reclaim", "--stale").stdout
        assert f"removed {killed} (owner pid" in out
        assert f"removed {closed} (closed without removing it)" in out
        left = os.listdir(tmp_path)  # lane and doorbell files included
        assert not [f for f in left if "-killed" in f or "-closed" in f]
        assert "v05-" + segname in left
        assert ctl(v05ctl, "ls", "--stale").stdout.splitlines()[-1] == \
            f"(no stale v05 segments in {tmp_path})"
        assert "no stale" in ctl(v05ctl, "reclaim", "--stale").stdout
        assert segname in ctl(v05ctl, "ls").stdout
        r = ctl(v05ctl, "reclaim", "--stale", segname, check=False)
        assert r.returncode == 2 and "--stale takes no NAME" in r.stderr
    finally:
        live.close()


def test_stat_errors(v05ctl):
    r = ctl(v05ctl, "stat", "no-such-segment", check=False)
    assert r.returncode == 1 and "no-such-segment" in r.stderr
    r = ctl(v05ctl, "stat", check=False)
    assert r.returncode == 2 and r.stdout == ""
    r = ctl(v05ctl, "stat", "--bogus", "x", check=False)
    assert r.returncode == 2 and "--bogus" in r.stderr


def test_ls_dead_owner_and_reclaim(segname, v05ctl):
    dead = segname + "-dead"
    # An owner that dies without closing.
    code = ("import os, sys; sys.path.insert(0, %r); import v05; "
            "v05.Plugin.create(%r, max_prompts=8); os._exit(0)"
            % (os.path.join(os.path.dirname(__file__), "..", "..",
                            "engine-hooks"), dead))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    live = v05.Plugin.create(segname, max_prompts=8)
    try:
        rows = {r["name"]: r for r in map(json.loads, ctl(
            v05ctl, "ls", "--json").stdout.splitlines())}
        assert rows[dead]["owner"] == "dead"
        assert rows[segname]["owner"] == "alive"
        assert rows[segname]["owner_pid"] == os.getpid()
        assert rows[segname]["active_prompts"] == 0
        assert segname in ctl(v05ctl, "ls").stdout

        r = ctl(v05ctl, "reclaim", segname, check=False)
        assert r.returncode == 1 and "alive" in r.stderr
        assert segname in ctl(v05ctl, "ls").stdout  # still there

        assert "removed" in ctl(v05ctl, "reclaim", dead).stdout
        assert dead not in ctl(v05ctl, "ls").stdout
    finally:
        live.close()
        try:
            v05.unlink(dead)
        except OSError:
            pass


def test_top_quits_on_q_in_a_pty(segname, v05ctl):
    """top under a pseudo-terminal (script(1)): refreshes, then q ends it."""
    p, w, _ = drive(segname)
    try:
        proc = subprocess.Popen(
            ["script", "-qfec", f"{v05ctl} top -d 0.1 {segname}", "/dev/null"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        seen, buf = 0, b""
        deadline = time.monotonic() + 20
        # Three refreshes, then q.
        while seen < 3 and time.monotonic() < deadline:
            r, _, _ = select.select([proc.stdout], [], [], 1.0)
            if r:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                seen = buf.count(b"v05ctl top  " + segname.encode())
        assert seen >= 3, buf[-2000:]
        assert b"rewards/s" in buf  # the second refresh has rates
        proc.stdin.write(b"q")
        proc.stdin.flush()
        assert proc.wait(timeout=10) == 0
        # The terminal was restored: cursor shown again.
        buf += proc.stdout.read()
        assert b"\x1b[?25h" in buf
    finally:
        w.close()
        p.close()


def test_top_count_without_tty(segname, v05ctl):
    p = v05.Plugin.create(segname, max_prompts=8)
    try:
        r = subprocess.run([v05ctl, "top", "-n", "2", "-d", "0.05", segname],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0
        assert r.stdout.count("v05ctl top  " + segname) == 2
        r = ctl(v05ctl, "top", "-d", "0.001", segname, check=False)
        assert r.returncode == 2 and "--delay" in r.stderr
    finally:
        p.close()


def test_observer_matches_plugin(segname):
    p, w, _ = drive(segname)
    try:
        with Observer(segname) as o:
            c = o.counters()
            assert c["rewards_applied"] == N * K
            assert c["k_hist"] == {K: N}
            info = o.info()
            assert info["owner_pid"] == os.getpid() and info["owner_alive"]
            assert info["mode"] == "v05-fixed" and info["k_max"] == K
            assert info["wait_path"] in ("io_uring", "thread")
            lanes = [x for x in o.lanes() if x["claims"]]
            assert lanes[0]["consumed"] == N * K + 6
    finally:
        w.close()
        p.close()


def test_prometheus_parses_with_expected_values(segname):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    p, w, finals = drive(segname)
    try:
        reg = CollectorRegistry()
        reg.register(v05.core.metrics.Collector(segname))
        text = generate_latest(reg).decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}

        def value(family, sample_name, **labels):
            want = dict(segment=segname, **labels)
            got = [s.value for s in fams[family].samples
                   if s.name == sample_name and s.labels == want]
            assert len(got) == 1, (family, sample_name, labels)
            return got[0]

        assert fams["v05_rewards_applied"].type == "counter"
        assert value("v05_rewards_applied", "v05_rewards_applied_total") == N * K
        for reason in ("nonfinite", "range", "unknown", "not_issued",
                       "duplicate", "late"):
            assert value("v05_rewards_rejected", "v05_rewards_rejected_total",
                         reason=reason) == 1
        assert value("v05_rewards_rejected", "v05_rewards_rejected_total",
                     reason="corrupt") == 0
        assert value("v05_decisions", "v05_decisions_total", kind="final") == N
        assert value("v05_samples_issued", "v05_samples_issued_total") == N * K
        assert value("v05_prompts", "v05_prompts", state="final_unreleased") == N
        assert value("v05_prompts", "v05_prompts", state="collecting") == 0
        assert value("v05_owner_alive", "v05_owner_alive") == 1
        # Issue 36's counters are exported too (nothing to count here).
        assert value("v05_broker_backoff", "v05_broker_backoff_total") == 0
        assert value("v05_side_files_replaced",
                     "v05_side_files_replaced_total") == 0
        # Histograms: group size, all N at k = K.
        assert fams["v05_group_size"].type == "histogram"
        assert value("v05_group_size", "v05_group_size_count") == N
        assert value("v05_group_size", "v05_group_size_sum") == N * K
        assert value("v05_group_size", "v05_group_size_bucket",
                     le=str(float(K - 1))) == 0
        assert value("v05_group_size", "v05_group_size_bucket",
                     le=str(float(K))) == N
        # Latency: one per decision the plugin timed, sum in seconds.
        stats = p.stats()
        assert value("v05_decision_latency_seconds",
                     "v05_decision_latency_seconds_count") == stats["latency_count"]
        assert value("v05_decision_latency_seconds",
                     "v05_decision_latency_seconds_sum") == pytest.approx(
                         stats["latency_sum_ns"] / 1e9)
        assert value("v05_lane_fill", "v05_lane_fill", lane="0") == 0
    finally:
        w.close()
        p.close()


def test_prometheus_absent_segment_is_empty():
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    reg.register(v05.core.metrics.Collector("never-created-segment"))
    assert generate_latest(reg).decode().strip() == ""
