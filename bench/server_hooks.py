#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The server of bench/server_run.py, with v05's decision path timed:

    python bench/server_hooks.py serve MODEL ...

is ``v05-vllm serve MODEL ...`` (v05.servers.vllm_cli: vLLM's own command
line) with, in the API-server process (the only one with one front end,
where v05's endpoint plugin runs), the same calls timed that
bench/engine_run.py's Meter times in process:
- CPU time (time.thread_time: the calling thread's, so a wait for the GIL
  is not counted) inside Plugin.submit, poll, release and group, and in
  arming the wait (the C calls v05_arm and v05_pending of Plugin.wait),
  all on the server's event loop;
- the reward hand-off: CPU time inside RewardWriter.push, which the
  service's pusher thread calls for every reward the route takes;
- beside each timed call, the CPU a pair of clock reads counts (a system
  call each), to be taken out of the totals.
And three instants per group on the clock every process of the host
shares (time.perf_counter, CLOCK_MONOTONIC): when the reward route handed
its latest reward to the service (GroupService.push, the body parsed),
when the pusher thread started pushing it into the lane, and when a poll
handed the group's final (or drop) decision to the service.

Nothing of the server changes but these wrappers. The totals (cumulative)
and the instants (handed over once, then forgotten) ride the answer of
GET /v05/stats under "bench", with the API-server process's CPU time and
its event loop thread's (the route runs on that loop).
"""
import threading
import time

from v05.core import _lib
from v05.core.plugin import Plugin
from v05.core.writer import RewardWriter
from v05.servers import service as _service


class Tally:
    def __init__(self):
        self.calls = {}        # name -> [calls, CPU s]
        self.wait_cpu = 0.0    # arming the wait
        self.wait_calls = 0
        self.timer = 0.0       # the clocks' own cost, loop thread
        self.push_cpu = 0.0    # the hand-off (pusher thread)
        self.pushes = 0
        self.push_timer = 0.0  # the clocks' own cost, pusher thread
        self.routed = {}       # uid -> its latest reward entered push()
        self.pushed = {}       # uid -> start of its latest push
        self.decided = {}      # uid -> its final/drop left a poll
        self.lock = threading.Lock()  # pushed: pusher thread vs the loop

    def snapshot(self):
        with self.lock:
            pushed, self.pushed = self.pushed, {}
        decided, self.decided = self.decided, {}
        routed, self.routed = self.routed, {}
        return {"calls": {k: list(v) for k, v in self.calls.items()},
                "wait_cpu_s": self.wait_cpu, "wait_calls": self.wait_calls,
                "timer_cpu_s": self.timer, "push_cpu_s": self.push_cpu,
                "pushes": self.pushes, "push_timer_s": self.push_timer,
                "process_cpu_s": time.process_time(),
                "loop_cpu_s": time.thread_time(),
                "routed": routed, "pushed": pushed, "decided": decided}


TALLY = Tally()


def _clock():
    z = time.thread_time()
    return time.thread_time() - z


def _timed(name, fn):
    def timed(self, *a, **kw):
        c = time.thread_time()
        try:
            out = fn(self, *a, **kw)
        finally:
            cpu = time.thread_time() - c
            n = TALLY.calls.setdefault(name, [0, 0.0])
            n[0] += 1
            n[1] += cpu
            TALLY.timer += _clock()
        if name == "poll":
            now = time.perf_counter()
            for d in out:
                if d.kind in ("final", "drop"):
                    TALLY.decided[d.uid] = now
        return out
    return timed


def _wait_part(fn):
    def timed(*a):
        c = time.thread_time()
        try:
            return fn(*a)
        finally:
            TALLY.wait_cpu += time.thread_time() - c
            TALLY.wait_calls += 1
            TALLY.timer += _clock()
    return timed


def _push(fn):
    def timed(self, uid, *a, **kw):
        t = time.perf_counter()
        c = time.thread_time()
        try:
            return fn(self, uid, *a, **kw)
        finally:
            TALLY.push_cpu += time.thread_time() - c
            TALLY.pushes += 1
            TALLY.push_timer += _clock()
            if isinstance(uid, str):
                with TALLY.lock:
                    TALLY.pushed[uid] = t
    return timed


def _route(fn):
    """GroupService.push, on the loop: the reward route's body parsed and
    checked, about to hand the rewards to the pusher thread."""
    async def push(self, rewards):
        t = time.perf_counter()
        for r in rewards:
            TALLY.routed[r.uid] = t
        return await fn(self, rewards)
    return push


def _stats(fn):
    def stats(self):
        out = fn(self)
        out["bench"] = TALLY.snapshot()
        return out
    return stats


def install():
    for name in ("submit", "poll", "release", "group"):
        setattr(Plugin, name, _timed(name, getattr(Plugin, name)))
    for name in ("v05_arm", "v05_pending"):
        setattr(_lib.lib, name, _wait_part(getattr(_lib.lib, name)))
    RewardWriter.push = _push(RewardWriter.push)
    _service.GroupService.push = _route(_service.GroupService.push)
    _service.GroupService.stats = _stats(_service.GroupService.stats)


if __name__ == "__main__":
    install()
    from v05.servers.vllm_cli import main
    main()
