# SPDX-License-Identifier: MIT
"""Where the adapters send a group's requests, without a server: what
reaches vLLM's ``AsyncLLM.generate`` (``data_parallel_rank``, ``priority``)
and sglang's ``GenerateReqInput`` (``routed_dp_rank``, ``priority``,
``routing_key``) for each engine setting, and the server configuration
that turns either off. The real servers: test_vllm_placement.py."""
import asyncio
import collections
import os
import types

import numpy as np
import pytest

from v05 import Plugin
from v05.servers import config, wire
from v05.servers.service import GroupService, segment_name
from v05.servers.placement import dp_rank
from v05.servers.sglang import SGLangEngine, placement_settings

UIDS = [f"g{i}" for i in range(64)]


def test_dp_rank_is_stable_and_spreads():
    # The same in every process and release (a salted hash() would differ
    # between the front ends): pinned values, so a change is seen here.
    assert [dp_rank(u, 2) for u in ("g0", "g1", "g2", "g3")] == [1, 0, 1, 0]
    assert [dp_rank(u, 8) for u in ("g0", "g1", "g2", "g3")] == [7, 4, 1, 4]
    assert dp_rank("g0", 1) == 0
    for size in (2, 3, 8):
        ranks = [dp_rank(u, size) for u in UIDS]
        assert set(ranks) == set(range(size)), "every rank gets groups"
    with pytest.raises(ValueError):
        dp_rank("g0", 0)


# ---- which requests are second-wave: the group service ----------------------

class Recorder:
    """An engine for the group service that finishes every request at
    once and records (uid, sample, second_wave, the group's rewards
    pushed before the request started)."""

    def __init__(self):
        self.calls, self.pushed = [], collections.Counter()

    @staticmethod
    def prompt(p):
        return p

    async def generate(self, prompt, sampling, uid, sample, batch, *,
                       second_wave):
        self.calls.append((uid, sample, second_wave, self.pushed[uid]))
        return sample

    @staticmethod
    def describe(out):
        return {"token_ids": [out]}


def test_second_wave_is_what_the_first_dispatch_did_not_ask_for():
    """The samples flagged second-wave (the engines' priority) are
    exactly those started after a reward of their group came. Under
    v05-eb (k_init 4) the running fit gives sharp priors first waves of
    2, whose second waves (samples 2 and 3) the former rule, sample >=
    k_init, did not flag."""
    prefix = f"v05t-wave-{os.getpid()}"
    plugin = Plugin.create(segment_name(prefix, 0), mode="v05-eb",
                           pad_multiple=1, max_prompts=64, max_batches=64,
                           reclaim=True)
    engine = Recorder()
    svc = GroupService(plugin, engine, owner=0, prefix=prefix)
    rng = np.random.default_rng(0)

    async def one(n):
        uid = f"g{n}"
        p = float(rng.choice([0.02, 0.3, 0.5, 0.7, 0.98]))
        req = wire.GroupRequest(uid, [1, 2, 3], 2 * p - 1, {})
        async for rec in svc.group(req):
            if rec["type"] == "sample":
                r = 1.0 if rng.random() < p else -1.0
                engine.pushed[uid] += 1
                await svc.push([wire.Reward(uid, rec["sample"], r,
                                            rec["gen"], 0)])

    async def main():
        for n in range(160):
            await one(n)
    try:
        asyncio.run(main())
    finally:
        svc.close()
    assert engine.calls
    for uid, sample, second, pushed_before in engine.calls:
        assert second == (pushed_before > 0), (uid, sample)
    first = collections.Counter(uid for uid, _, _, pushed in engine.calls
                                if pushed == 0)
    assert 2 in set(first.values()), first
    assert any(second and sample < 4
               for _, sample, second, _ in engine.calls)


# ---- vLLM -------------------------------------------------------------------

vllm = pytest.importorskip("vllm", reason="the engine environment "
                           "(scripts/setup-engine) is not this Python")
from v05.servers.vllm import VLLMEngine, dp_ranks  # noqa: E402


class FakeAsyncLLM:
    """What the adapter reads of an AsyncLLM (vllm_config) and a generate
    that records its keyword arguments and finishes at once."""

    def __init__(self, policy="fcfs", dp=1, dp_local=None, external=False):
        par = types.SimpleNamespace(
            data_parallel_size=dp,
            data_parallel_size_local=dp if dp_local is None else dp_local,
            local_engines_only=external)
        self.vllm_config = types.SimpleNamespace(
            scheduler_config=types.SimpleNamespace(policy=policy),
            parallel_config=par)
        self.calls = []

    async def generate(self, prompt, params, request_id, **kw):
        self.calls.append(kw)
        out = types.SimpleNamespace(finished=True, outputs=[
            types.SimpleNamespace(finish_reason="length")])
        yield out


def generate(engine, uid, sample, second_wave):
    asyncio.run(engine.generate([1, 2, 3], {"max_tokens": 2}, uid, sample,
                                0, second_wave=second_wave))
    return engine.client.calls[-1]


def test_vllm_dp_rank_and_priority_reach_generate():
    e = VLLMEngine(FakeAsyncLLM(policy="priority", dp=2))
    for uid in UIDS[:8]:
        first = [generate(e, uid, s, False) for s in range(4)]
        second = [generate(e, uid, s, True) for s in (4, 5)]
        r = dp_rank(uid, 2)
        assert first == [{"data_parallel_rank": r}] * 4
        assert second == [{"data_parallel_rank": r, "priority": -1}] * 2


def test_vllm_single_rank_fcfs_passes_nothing():
    # fcfs refuses any priority but 0; one rank needs no pinning.
    e = VLLMEngine(FakeAsyncLLM(policy="fcfs", dp=1))
    assert generate(e, "g0", 5, True) == {}


def test_vllm_rank_range_is_the_servers_own():
    # External load balancing: each server one rank of a larger DP group;
    # vLLM checks data_parallel_rank against the local ranks (1 here), so
    # the adapter must not pin by the global size.
    assert dp_ranks(FakeAsyncLLM(dp=4, dp_local=1, external=True)
                    .vllm_config.parallel_config) == 1
    assert dp_ranks(FakeAsyncLLM(dp=4, dp_local=2, external=True)
                    .vllm_config.parallel_config) == 2
    assert dp_ranks(FakeAsyncLLM(dp=4, dp_local=2)
                    .vllm_config.parallel_config) == 4
    e = VLLMEngine(FakeAsyncLLM(policy="priority", dp=4, dp_local=1,
                                external=True))
    assert generate(e, "g0", 0, False) == {}


def test_vllm_switched_off_by_the_server_config():
    e = VLLMEngine(FakeAsyncLLM(policy="priority", dp=2), affinity=False,
                   priority=False)
    assert generate(e, "g0", 5, True) == {}


# ---- sglang (its settings stood in for: not this environment's engine) -----

def schedule(enabled=True, low_first=False, default=None):
    return types.SimpleNamespace(enable_priority_scheduling=enabled,
                                 schedule_low_priority_values_first=low_first,
                                 default_priority_value=default)


@pytest.mark.parametrize("sch,want", [
    (schedule(enabled=False), None),
    (schedule(), 1),                       # higher first, no default
    (schedule(default=5), 6),
    (schedule(low_first=True), -1),        # lower first
    (schedule(low_first=True, default=5), 4),
])
def test_sglang_priority_follows_its_direction(sch, want):
    assert placement_settings(1, sch, affinity=True, priority=True) == \
        (1, want)
    assert placement_settings(1, sch, affinity=True, priority=False) == \
        (1, None)


def test_sglang_fields_of_a_group():
    e = SGLangEngine()
    e._placed = placement_settings(4, schedule(), affinity=True,
                                   priority=True)
    for uid in UIDS[:8]:
        r = dp_rank(uid, 4)
        assert e.placement(uid, second_wave=False) == {
            "routing_key": uid, "routed_dp_rank": r}
        assert e.placement(uid, second_wave=True) == {
            "routing_key": uid, "routed_dp_rank": r, "priority": 1}
    e._placed = placement_settings(4, schedule(enabled=False),
                                   affinity=False, priority=True)
    assert e.placement("g0", second_wave=True) == {"routing_key": "g0"}


# ---- the server configuration ----------------------------------------------

def test_config_affinity_and_priority():
    assert config.parse({}, "t").affinity is True
    c = config.parse({"affinity": False, "priority": False}, "t")
    assert (c.affinity, c.priority) == (False, False)
    for key in ("affinity", "priority"):
        with pytest.raises(ValueError, match=f"{key} must be true or false"):
            config.parse({key: 1}, "t")
