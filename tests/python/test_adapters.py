# SPDX-License-Identifier: MIT
"""Contract tests: the vLLM and sglang adapters driven through stand-ins with
the upstream method names and signatures (read from vLLM's
vllm/v1/engine/async_llm.py and sglang's srt/entrypoints/engine.py), and
v05.trainers.verl's estimator without verl. The real vLLM runs in tests/engines (the
engine environment), the real verl and TRL in tests/trainers/;
these stand-ins keep the driver's rules checked under Debian's Python too."""
import asyncio
import copy
import errno
import os
import types
import zlib

import numpy as np
import pytest
import torch

import v05

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def outcome(uid, sample):
    """The stand-in model's answer quality for a sample: +1 or -1."""
    return 1.0 if zlib.crc32(f"{uid}/{sample}".encode()) % 3 else -1.0


# ---- vLLM -----------------------------------------------------------------

class SamplingParams:
    """vllm.SamplingParams as far as the adapter uses it."""

    def __init__(self, n=1, temperature=1.0, seed=None):
        self.n, self.temperature, self.seed = n, temperature, seed

    def clone(self):
        return copy.copy(self)


class CompletionOutput:
    def __init__(self, text):
        self.text, self.token_ids = text, list(text.encode())


class RequestOutput:
    def __init__(self, request_id, text, finished):
        self.request_id = request_id
        self.outputs = [CompletionOutput(text)]
        self.finished = finished


class AsyncLLM:
    """vllm.v1.engine.async_llm.AsyncLLM.generate, same signature."""

    def __init__(self):
        self.calls = []

    async def generate(self, prompt, sampling_params, request_id, *,
                       prompt_text=None, lora_request=None,
                       tokenization_kwargs=None, trace_headers=None,
                       priority=0, data_parallel_rank=None, session_id=None,
                       reasoning_ended=None, reasoning_parser_kwargs=None):
        assert sampling_params.n == 1, "v05 sends single samples"
        self.calls.append((prompt, request_id, sampling_params.seed))
        await asyncio.sleep(0)
        yield RequestOutput(request_id, "partial", False)
        yield RequestOutput(request_id, f"{prompt}#{request_id}", True)


def run_rollout(segname, make, items, **kw):
    async def main():
        with v05.Plugin.create(segname, max_prompts=64, pad_multiple=1, mode="v05",
                               **kw) as plugin:
            ro = make(plugin)
            results = await ro.generate(items)
            checked = {}
            for uid, res in results.items():
                rw = [float(r) for r in res.group.rewards]
                assert rw == [outcome(uid, s) for s in range(res.group.k)]
                est = v05.estimate(dict((u, p) for u, _, p in items)[uid], rw)
                assert res.group.baseline == est["baseline"]
                assert np.array_equal(res.group.advantages,
                                      np.array(est["advantages"], dtype=np.float32))
                checked[uid] = (res.group.k, len(res.outputs))
                res.group = None  # drop the views before the slot goes
                plugin.release(res.decision)
            calls = ro.generate_calls
            ro.close()
            return checked, calls
    return asyncio.run(main())


def test_vllm_rollout(segname):
    from v05.engines.vllm import VLLMRollout

    engine = AsyncLLM()
    items = [(f"v{i}", f"prompt {i}", 0.9 if i % 2 else -0.9) for i in range(12)]
    score = lambda uid, s, out: outcome(uid, s)
    checked, calls = run_rollout(
        segname, lambda p: VLLMRollout(engine, p, SamplingParams(n=8, seed=100),
                                       score=score), items)
    # One n=1 generate per sample the plugin asked for, k per group.
    assert calls == len(engine.calls) == sum(k for k, _ in checked.values())
    assert all(k == n for k, n in checked.values())
    ids = [rid for _, rid, _ in engine.calls]
    assert len(set(ids)) == len(ids)
    for uid, prompt, _ in items:
        mine = [(p, seed) for p, rid, seed in engine.calls
                if rid.split("-")[2] == uid]
        assert {p for p, _ in mine} == {prompt}  # same prompt: prefix cache
        assert len({s for _, s in mine}) == len(mine)  # a seed per sample
    assert any(k > 4 for k, _ in checked.values())  # the plugin asked for more


# ---- sglang -----------------------------------------------------------------

class SGLangEngine:
    """sglang Engine.async_generate, the keyword arguments v05 uses."""

    def __init__(self):
        self.calls = []

    async def async_generate(self, prompt=None, sampling_params=None,
                             input_ids=None, image_data=None, audio_data=None,
                             video_data=None, return_logprob=False,
                             logprob_start_len=None, top_logprobs_num=None,
                             token_ids_logprob=None, lora_path=None,
                             custom_logit_processor=None,
                             return_hidden_states=False, stream=False,
                             bootstrap_host=None, bootstrap_port=None,
                             bootstrap_room=None, routed_dp_rank=None,
                             external_trace_header=None, rid=None,
                             session_params=None, priority=None):
        assert stream is False and sampling_params["n"] == 1
        self.calls.append((prompt, rid, dict(sampling_params)))
        await asyncio.sleep(0)
        return {"text": f"{prompt}#{rid}", "meta_info": {"id": rid}}


def test_sglang_rollout(segname):
    from v05.engines.sglang import SGLangRollout

    engine = SGLangEngine()
    items = [(f"s{i}", f"q {i}", 0.5 - 0.1 * i) for i in range(10)]
    score = lambda uid, s, out: outcome(uid, s)
    checked, calls = run_rollout(
        segname, lambda p: SGLangRollout(engine, p,
                                         {"temperature": 1.0, "sampling_seed": 7},
                                         score=score), items)
    assert calls == len(engine.calls) == sum(k for k, _ in checked.values())
    seeds = {}
    for prompt, rid, params in engine.calls:
        assert params["temperature"] == 1.0
        seeds.setdefault(prompt, []).append(params["sampling_seed"])
    assert all(len(set(v)) == len(v) for v in seeds.values())


# ---- the driver's rules: one loop, scoring off it, clean-up -------------------

class GatedLLM(AsyncLLM):
    """Generation that finishes only for `fast` uids until the gate opens,
    and records the generators closed before they finished."""

    def __init__(self, fast):
        super().__init__()
        self.fast, self.gate = fast, None
        self.started, self.closed = 0, 0

    async def generate(self, prompt, sampling_params, request_id, **kw):
        if self.gate is None:
            self.gate = asyncio.Event()
        self.started += 1
        self.calls.append((prompt, request_id, sampling_params.seed))
        try:
            if request_id.split("-")[2] not in self.fast:
                await self.gate.wait()
            yield RequestOutput(request_id, f"{prompt}#{request_id}", True)
        except (asyncio.CancelledError, GeneratorExit):
            self.closed += 1  # vLLM aborts the request here
            raise


def test_rollout_refuses_a_second_event_loop(segname):
    from v05.engines.vllm import VLLMRollout

    engine = AsyncLLM()
    items = [(f"l{i}", "p", 0.0) for i in range(4)]
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1) as plugin:
        ro = VLLMRollout(engine, plugin, SamplingParams(),
                         score=lambda u, s, o: outcome(u, s), release=True)
        assert len(asyncio.run(ro.generate(items))) == 4
        with pytest.raises(RuntimeError, match="different event loop"):
            asyncio.run(ro.generate(items))
        ro.close()


@pytest.mark.parametrize("is_async", [False, True])
def test_score_error_cancels_the_batch(segname, is_async):
    """A scorer that raises mid-batch: the error surfaces, every request
    still running is closed (aborted), no prompt or slot of the batch is
    left in the plugin, and the next batch runs."""
    from v05.engines.vllm import VLLMRollout

    engine = GatedLLM(fast={"e3"})
    boom = {"on": True}

    def sync_score(uid, s, out):
        if boom["on"] and uid == "e3" and s == 2:
            raise ValueError("verifier crashed")
        return outcome(uid, s)

    async def async_score(uid, s, out):
        return sync_score(uid, s, out)

    items = [(f"e{i}", f"p{i}", 0.9) for i in range(24)]
    with v05.Plugin.create(segname, max_prompts=32, pad_multiple=1,
                           mode="v05-eb") as plugin:
        with VLLMRollout(engine, plugin, SamplingParams(),
                         score=async_score if is_async else sync_score,
                         release=True) as ro:
            async def main():
                with pytest.raises(ValueError, match="verifier crashed"):
                    await ro.generate(items)
                first = (engine.started, engine.closed)
                st = plugin.stats()
                boom["on"] = False
                engine.gate.set()
                res = await ro.generate(items)
                return first, st, res
            (started, closed), st, res = asyncio.run(main())
        # Everything but e3's 4 samples was still generating: all closed.
        assert started == 24 * 4 and closed == started - 4
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        assert st["prompts_cancelled"] == 24
        assert len(res) == len(items)
        assert plugin.stats()["prompts_final"] == 0  # released


def test_refused_submit_leaves_nothing(segname):
    """A batch the plugin refuses in part (here: one prompt more than it has
    slots) raises, naming the refused uid and why, and the prompts it did
    accept are cancelled, not left open."""
    from v05.engines.vllm import VLLMRollout

    items = [(f"r{i}", "p", 0.0) for i in range(5)]
    with v05.Plugin.create(segname, max_prompts=4, pad_multiple=1) as plugin:
        with VLLMRollout(AsyncLLM(), plugin, SamplingParams(),
                         score=lambda u, s, o: outcome(u, s)) as ro:
            with pytest.raises(v05.SubmitError) as ei:
                asyncio.run(ro.generate(items))
        assert ei.value.rejected == {"r4": errno.ENOSPC}
        assert f"submit to segment {segname}: 1 of 5 prompts refused" in str(ei.value)
        assert "uid 'r4': no free slot" in str(ei.value)
        st = plugin.stats()
        assert st["prompts_open"] == 0 and st["prompts_cancelled"] == 4
        assert plugin._uids == {} and plugin._batch_keys == {}


def test_bad_batch_refused_before_submit(segname):
    """A uid twice, a None prior, an int uid: refused with the uid named,
    before anything reaches the plugin."""
    from v05.engines.vllm import VLLMRollout

    bad = [([("a", "p", 0.0), ("b", "p", 0.1), ("a", "p", 0.5)],
            ValueError, "uid 'a' appears twice in one batch"),
           ([("a", "p", None)], TypeError, "the prior of uid 'a' is None"),
           ([(7, "p", 0.0)], TypeError, "uid 7 is of type int"),
           ([("a", "p", float("nan"))], ValueError,
            "the prior of uid 'a' is nan: not finite"),
           ([("a", "p", 1.5)], ValueError, "1.5: outside [-1, 1]")]

    async def main(ro):
        for items, exc, words in bad:
            with pytest.raises(exc) as ei:
                await ro.generate(items)
            assert f"submit to segment {segname}: " in str(ei.value)
            assert words in str(ei.value)

    with v05.Plugin.create(segname, max_prompts=4) as plugin:
        with VLLMRollout(AsyncLLM(), plugin, SamplingParams(),
                         score=lambda u, s, o: outcome(u, s)) as ro:
            asyncio.run(main(ro))
        assert plugin.stats()["prompts_submitted"] == 0


class GatedSGLang(SGLangEngine):
    """async_generate that finishes only for `fast` uids; the tokenizer
    manager records the rids aborted."""

    def __init__(self, fast):
        super().__init__()
        self.fast, self.gate = fast, None
        self.aborted = []
        self.tokenizer_manager = types.SimpleNamespace(
            abort_request=self.aborted.append)

    async def async_generate(self, prompt=None, sampling_params=None,
                             rid=None, stream=False, **kw):
        if self.gate is None:
            self.gate = asyncio.Event()
        if rid.split("-")[2] not in self.fast:
            await self.gate.wait()
        return await super().async_generate(prompt=prompt,
                                            sampling_params=sampling_params,
                                            rid=rid, stream=stream)


def test_sglang_score_error_aborts_requests(segname):
    from v05.engines.sglang import SGLangRollout

    engine = GatedSGLang(fast={"g1"})

    def score(uid, s, out):
        if uid == "g1" and s == 0:
            raise ValueError("verifier crashed")
        return outcome(uid, s)

    items = [(f"g{i}", f"p{i}", 0.0) for i in range(8)]
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1,
                           mode="v05-eb") as plugin:
        with SGLangRollout(engine, plugin, {"temperature": 1.0},
                           score=score) as ro:
            with pytest.raises(ValueError, match="verifier crashed"):
                asyncio.run(ro.generate(items))
        # Every request still waiting (all but g1's 4) was aborted by rid.
        assert len(engine.aborted) == 7 * 4
        assert all(rid.split("-")[2] != "g1" for rid in engine.aborted)
        assert plugin.stats()["prompts_open"] == 0


@pytest.mark.parametrize("wait", ["auto", "doorbell"])
def test_full_lane_does_not_stall_the_loop(segname, wait):
    """A lane far smaller than a batch's rewards cannot stall the loop (a
    push on the loop that waited for room would wait for a drain that
    never comes). auto: the loop publishes what fits of its staged
    rewards, polls, and publishes the rest, never waiting while some are
    held (a wait would end only at the poll timeout, which hid a loop
    that did not poll again: checked by counting the waits armed with
    rewards still held); doorbell: pushes wait for room in the scoring
    thread while the loop keeps polling."""
    from v05.engines.vllm import VLLMRollout

    engine = AsyncLLM()
    items = [(f"f{i}", "p", 0.0) for i in range(64)]
    with v05.Plugin.create(segname, max_prompts=64, pad_multiple=1,
                           lane_capacity=16, mode="grpo", k_init=8,
                           k_max=8) as plugin:
        with VLLMRollout(engine, plugin, SamplingParams(),
                         score=lambda u, s, o: outcome(u, s),
                         release=True, wait_on=wait) as ro:
            drv = ro._driver
            arm, held_waits, held_polls = drv._arm_scores, [], []

            def arm_scores():
                armed = arm()
                w = drv._stager
                if armed is not None and w is not None and w.staged:
                    held_waits.append(w.staged)
                return armed

            drv._arm_scores = arm_scores
            publish = drv._publish

            def publish_counted():
                held = publish()
                held_polls.append(held)
                return held

            drv._publish = publish_counted
            res = asyncio.run(ro.generate(items))
        assert len(res) == 64 and all(r.group.k == 8 for r in res.values())
        assert plugin.stats()["rewards_applied"] == 64 * 8
        if wait == "auto":
            # The lane did fill (the path was taken), and no wait was
            # armed while rewards were still held.
            assert any(held_polls)
            assert held_waits == []


def test_seeds_differ_per_step(segname):
    from v05.engines.vllm import VLLMRollout

    engine = AsyncLLM()
    items = [(f"d{i}", "p", 0.0) for i in range(4)]
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1,
                           mode="grpo", k_init=4, k_max=4) as plugin:
        with VLLMRollout(engine, plugin, SamplingParams(seed=5),
                         score=lambda u, s, o: outcome(u, s),
                         release=True) as ro:
            async def main():
                await ro.generate(items)
                await ro.generate(items)
            asyncio.run(main())
    seeds = [seed for _, _, seed in engine.calls]
    assert len(seeds) == 32 and len(set(seeds)) == 32
    # Unseeded stays unseeded: vLLM's own randomness.
    assert v05.engines.vllm.single_sample_params(SamplingParams(), "u", 1, 0).seed is None


def test_engine_plugin_entry_points_act_only_when_asked(monkeypatch):
    """v05 is a library imported where the engine client lives; the only
    engine plugins it registers are the servers' (docs/SERVERS.md): vLLM's
    endpoint plugin, which vLLM loads only when VLLM_PLUGINS names it, and
    sglang's, which sglang runs in every process it starts and which does
    nothing unless SGLANG_PLUGINS names it (and then only in the main
    process). No vllm.general_plugins: that group loads everywhere."""
    import sys
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    groups = project.get("entry-points", {})
    assert "vllm.general_plugins" not in groups
    assert groups["vllm.endpoint_plugins"] == {
        "v05": "v05.servers.vllm:V05EndpointPlugin"}
    assert groups["sglang.srt.plugins"] == {"v05": "v05.servers.sglang:load"}
    assert groups["verl.plugins"] == {"v05": "v05.trainers.verl"}  # that one acts
    from v05.servers import sglang as plug
    for value in (None, "", "other,v05x"):
        if value is None:
            monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("SGLANG_PLUGINS", value)
        # Would import sglang (absent here) if it acted.
        assert plug.load() is None and "sglang" not in sys.modules


# ---- verl -----------------------------------------------------------------------
# The estimator needs torch and numpy only; the real verl (registries, reward
# managers, compute_advantage, balancing) is exercised by
# tests/trainers/test_verl_real.py in build-venv/verl.

def verl_rollout(plugin, uids):
    """Rows (uid, sample, 0/1 score) and final decisions, rewards pushed as
    the v05 reward managers push them."""
    from v05.trainers import verl as vverl

    writer = v05.RewardWriter.attach(plugin.name)
    rows, finals = [], {}
    pending = plugin.submit([(u, 0.0 if i % 2 else 0.9) for i, u in enumerate(uids)])
    while len(finals) < len(uids):
        for d in pending:
            if d.kind == "sample":
                for s in d.samples:
                    score = 1 if outcome(d.uid, s) > 0 else 0
                    rows.append((d.uid, s, score))
                    writer.push(d, s, vverl.score_to_reward(score))
            elif d.kind == "final":
                finals[d.uid] = d
        if len(finals) < len(uids):
            assert plugin.wait_blocking(5.0)
            pending = plugin.poll()
    writer.close()
    return rows, finals


def verl_inputs(rows, seed):
    """token_level_rewards (score at the last valid token), response_mask,
    shuffled; returns them with the row order."""
    R = 8
    order = np.random.default_rng(seed).permutation(len(rows))
    tlr = torch.zeros(len(rows), R)
    mask = torch.zeros(len(rows), R)
    for pos, i in enumerate(order):
        n = 1 + zlib.crc32(str(i).encode()) % R
        mask[pos, :n] = 1
        tlr[pos, n - 1] = float(rows[i][2])
    return tlr, mask, order


def test_verl_estimator_any_row_order(segname):
    import pickle

    from v05.trainers import verl as vverl

    uids = [f"r{i}" for i in range(6)]
    with v05.Plugin.create(segname, max_prompts=16, pad_multiple=1) as plugin:
        vverl.groups.groups.from_segment(segname, "-", 0.0)  # the trainer's reader
        rows, finals = verl_rollout(plugin, uids)
        expect = {}
        for u, d in finals.items():
            g = plugin.group(d)
            expect[u] = (g.k, g.baseline, g.sigma, g.rewards.copy(), g.advantages.copy())
            del g
        # Same host, plain uids: groups from the segment, rows matched by
        # reward whatever their order; the reader releases every slot.
        tlr, mask, order = verl_inputs(rows, 1)
        index = np.array([rows[i][0] for i in order], dtype=object)
        adv, ret = vverl.compute_v05_advantage(
            token_level_rewards=tlr, response_mask=mask, index=index,
            config={"v05_segment": segname})
        assert torch.equal(adv, ret)
        for pos, i in enumerate(order):
            uid, s, _ = rows[i]
            assert torch.equal(adv[pos], float(expect[uid][4][s]) * mask[pos])
        plugin.poll()
        assert plugin.stats()["reader_releases"] == len(uids)
        # The rollout side, the slots' other holder, releases its own.
        for d in finals.values():
            plugin.release(d)
        assert plugin.stats()["releases"] == len(uids)
    vverl.groups.groups.close()
    vverl.groups.groups.records.clear()

    # Another host: rows carry their numbers (V05Uid, pickled as Ray does);
    # no segment, another order.
    tlr, mask, order = verl_inputs(rows, 2)
    index = np.array([pickle.loads(pickle.dumps(vverl.V05Uid(
        rows[i][0], rows[i][1], *expect[rows[i][0]][:3],
        expect[rows[i][0]][3][rows[i][1]], expect[rows[i][0]][4][rows[i][1]])))
        for i in order], dtype=object)
    assert index[0] == rows[order[0]][0] and hash(index[0]) == hash(rows[order[0]][0])
    adv, _ = vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    for pos, i in enumerate(order):
        uid, s, _ = rows[i]
        assert torch.equal(adv[pos], float(expect[uid][4][s]) * mask[pos])
    # A row whose reward is not its sample's is refused.
    tlr[0] = 0
    tlr[0, 0] = 1.0 - float(rows[order[0]][2])
    with pytest.raises(ValueError, match="reward"):
        vverl.compute_v05_advantage(tlr, mask, index=index, config={})
    # Unknown uids: zero advantages with v05_unknown=zero (GRPO needs verl).
    adv, _ = vverl.compute_v05_advantage(
        tlr, mask, index=np.array(["x"] * len(rows), dtype=object),
        config={"v05_unknown": "zero"})
    assert torch.all(adv == 0)
