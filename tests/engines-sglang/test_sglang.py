# SPDX-License-Identifier: MIT
"""v05 driving a real sglang (PyPI's sglang on its CPU engine, with the
CUDA driver stub) on a tiny local model: every async_generate call is one
sample the plugin issued, with n=1 and the caller's sampling parameters;
groups end within [k_init, k_max] with the configured padding; the
advantages in the slot are v05.estimate's on the rewards this test saw;
a scorer that raises or returns a bad reward, and the caller's
cancellation, abort the requests in flight by their rid, leave nothing in
sglang (its tokenizer manager and scheduler) nor in the plugin, and the
next batch runs."""
import asyncio
import collections
import os

import numpy as np
import pytest

import v05
from v05.demos import tiny
from v05.engines.sglang import SGLangRollout

from group_expect import (ADA, check_ada_run, check_eb_waves,  # noqa: E402
                          expected)
from sgl_helpers import (PARAMS, PROMPTS, Recorder, batch_items,  # noqa: E402
                         record_decisions, rid_uid_sample, sglang_idle)

SAMPLING = {"temperature": 1.0, "max_new_tokens": 4}


def test_stub_is_the_driver_and_output_is_the_models(engine_loop, model_dir):
    """The CUDA driver every sglang process loaded is the project's stub,
    no CUDA library comes from outside the environment, and greedy
    generation is the model's (transformers' greedy tokens)."""
    import psutil
    import torch
    from transformers import LlamaForCausalLM

    engine = engine_loop.engine
    procs = [psutil.Process()] + psutil.Process().children(recursive=True)
    stub = os.path.realpath(os.environ["LD_LIBRARY_PATH"].split(":")[0])
    prefix = os.path.realpath(os.path.join(os.path.dirname(
        torch.__file__), "..", "..", "..", ".."))
    for p in procs:
        maps = {line.split()[-1] for line in open(f"/proc/{p.pid}/maps")
                if ".so" in line}
        drivers = {m for m in maps if os.path.basename(m) == "libcuda.so.1"}
        assert drivers in (set(), {os.path.join(stub, "libcuda.so.1")}), \
            (p.name(), drivers)
        cuda = {m for m in maps if "cuda" in os.path.basename(m)}
        assert all(os.path.realpath(m).startswith(prefix) or m in drivers
                   for m in cuda), (p.name(), cuda)
    assert any("libcuda.so.1" in line for line in
               open(f"/proc/{procs[0].pid}/maps")), "the front end has no driver"

    prompts = tiny.make_prompts(8, seed=3)

    async def greedy():
        outs = await asyncio.gather(*[engine.async_generate(
            input_ids=p, sampling_params={"temperature": 0.0,
                                          "max_new_tokens": 6})
            for p in prompts])
        return [o["output_ids"] for o in outs]
    got = engine_loop.run(greedy())
    m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        want = [m.generate(torch.tensor([p]), max_new_tokens=6,
                           do_sample=False)[0, len(p):].tolist()
                for p in prompts]
    assert got == want


def run_batches(engine_loop, segname, mode, schedule="rounds", pad=8,
                steps=2, sampling=SAMPLING, **params):
    params = {**PARAMS, **params}
    rewards = {}
    prompt_of = {}

    def score(uid, sample, out):
        r = tiny.reward(prompt_of[uid], out["output_ids"])
        rewards[(uid, sample)] = r
        return r

    async def main(plugin):
        rec = Recorder(engine_loop.engine)
        out = []
        with SGLangRollout(rec, plugin, sampling, score=score) as ro:
            for step in range(steps):
                before = plugin.stats()["samples_issued"]
                items = batch_items(step)
                prompt_of.update({uid: p for uid, p, _ in items})
                res = await ro.generate(items)
                issued = plugin.stats()["samples_issued"] - before
                groups = {}
                for uid, r in res.items():
                    g = r.group
                    groups[uid] = (g.k, g.rewards.copy(), g.advantages.copy(),
                                   g.baseline, r.outputs, r.dropped)
                    r.group = None
                    plugin.release(r.decision)
                out.append((items, groups, issued))
            idle = await sglang_idle(engine_loop.engine)
        return out, rec, idle

    with v05.Plugin.create(segname, mode=mode, schedule=schedule,
                           pad_multiple=pad, max_prompts=256,
                           **params) as plugin:
        seen = record_decisions(plugin)
        out, rec, idle = engine_loop.run(main(plugin))
        stats = plugin.stats()
    return out, rec, idle, seen, rewards, stats, params, prompt_of


def check_run(out, rec, idle, seen, rewards, stats, params, prompt_of, mode,
              pad, sampling=SAMPLING,
              running=False):
    assert idle, "sglang still has requests"
    # Every async_generate call is one issued sample with n=1, the caller's
    # sampling parameters and the prompt's token ids, and every issued
    # sample got exactly one call.
    called = collections.Counter(rid_uid_sample(c["rid"]) for c in rec.calls)
    assert all(n == 1 for n in called.values())
    for c in rec.calls:
        assert c["sampling_params"] == {**sampling, "n": 1}
        assert c["stream"] is False
        assert c["input_ids"] == prompt_of[rid_uid_sample(c["rid"])[0]]
    issued = {(d.uid, s) for call in seen for d in call if d.kind == "sample"
              for s in d.samples}
    assert set(called) == issued
    assert len(rec.calls) == sum(iss for _, _, iss in out)
    assert not rec.tokenizer_manager.rids, "a finished batch aborted requests"
    assert stats["prompts_open"] == 0 and stats["prompts_final"] == 0
    for items, groups, _ in out:
        assert len(groups) == len(items)
        priors = {uid: v for uid, _, v in items}
        fit, tried = None, []
        if mode == "v05-eb" and not running:  # the batch's first wave's fit
            fit = v05.eb_fit([(priors[uid], [rewards[(uid, s)] for s in
                                             range(params["k_init"])])
                              for uid in groups])
        for uid, (k, rw, adv, base, outputs, dropped) in groups.items():
            assert params["k_init"] <= k <= params["k_max"]
            for o in outputs:  # sglang's own output: finished, full length
                assert o["meta_info"]["finish_reason"]["type"] in \
                    ("length", "stop")
            saw = [rewards[(uid, s)] for s in range(k)]
            assert rw.tolist() == saw
            est = expected(priors[uid], saw, params, mode, base, fit=fit,
                           running=running, tried=tried)
            assert est is not None, f"{uid}: no fit gives {base}"
            assert base == est["baseline"]
            np.testing.assert_array_equal(
                adv, np.array(est["advantages"], dtype=np.float32))
    # Padding: each dispatch (one call's SAMPLE decisions of one batch) is
    # a multiple of pad, unless a prompt in it reached k_max. Not so for
    # v05-eb without a barrier: one call may carry a padded release and
    # the stream deadline's unpadded one together (tests/test_eb_stream.c
    # checks each release).
    total = collections.Counter()
    for call in seen:
        by_batch = collections.defaultdict(list)
        for d in call:
            if d.kind == "sample":
                by_batch[d.batch].append(d)
        for ds in by_batch.values():
            n = sum(len(d.samples) for d in ds)
            for d in ds:
                total[d.uid] += len(d.samples)
            capped = any(total[d.uid] == params["k_max"] for d in ds)
            assert n % pad == 0 or capped or running, (n, pad)


@pytest.mark.parametrize("schedule", ["rounds", "stream"])
def test_v05_eb_on_sglang(engine_loop, segname, schedule):
    """The default mode, without a barrier (stream) and with it (rounds):
    at most two waves per prompt."""
    res = run_batches(engine_loop, segname, "v05-eb", schedule=schedule)
    check_run(*res, mode="v05-eb", pad=8, running=schedule == "stream")
    check_eb_waves(res[0], res[3], PARAMS["k_init"], schedule == "rounds")


def test_v05_on_sglang(engine_loop, segname):
    """The paper's OSLA rule with its 25% batch halt."""
    res = run_batches(engine_loop, segname, "v05", halt_fraction=0.25)
    check_run(*res, mode="v05", pad=8)
    ks = [g[0] for _, groups, _ in res[0] for g in groups.values()]
    assert max(ks) > PARAMS["k_init"], "OSLA never asked for more"


@pytest.mark.parametrize("schedule", ["rounds", "stream"])
def test_reinforce_ada_on_sglang(engine_loop, segname, schedule):
    """A published rule (docs/RULES.md) on sglang: rounds of 4 up to 12,
    each prompt's k where its own exit holds (group_expect)."""
    res = run_batches(engine_loop, segname, "reinforce-ada",
                      schedule=schedule, pad=1, **ADA)
    out, _, idle, _, rewards, stats, _, _ = res
    assert idle, "sglang still has requests"
    check_ada_run(out, rewards, stats)


def test_grpo_on_sglang_with_a_seed(engine_loop, segname):
    """Fixed G, and a caller's seed: each sample gets a seed of its own."""
    sampling = {**SAMPLING, "sampling_seed": 5}
    res = run_batches(engine_loop, segname, "grpo", pad=1, k_init=8, k_max=8,
                      sampling=sampling)
    out, rec = res[0], res[1]
    assert all(g[0] == 8 for _, groups, _ in out for g in groups.values())
    seeds = [c["sampling_params"].pop("sampling_seed") for c in rec.calls]
    assert len(set(seeds)) == len(seeds) == 2 * PROMPTS * 8
    check_run(*res, mode="grpo", pad=1)


# ---- errors and cancellation: aborted by rid, nothing left --------------------

def crashing(uid, sample, out):
    raise ValueError("verifier crashed")


def nan_reward(uid, sample, out):
    return float("nan")


def out_of_range(uid, sample, out):
    return 3.0


@pytest.mark.parametrize("bad", [crashing, nan_reward, out_of_range],
                         ids=lambda f: f.__name__)
def test_bad_scorer_aborts_by_rid(engine_loop, segname, bad):
    """A scorer that raises or returns a bad reward on one sample while
    most of the batch is in sglang: the error surfaces, the requests still
    in flight are aborted by their rid (not generated to the end), sglang
    and the plugin are left with nothing of the batch, the next batch runs."""
    engine = engine_loop.engine
    tm = engine.tokenizer_manager
    state = {"on": True, "in_flight": set(), "scored": 0}
    prompt_of = {}

    async def score(uid, sample, out):  # on the loop: sglang's state is ours
        if state["on"]:
            state["scored"] += 1
            # The first sample scored fails, whichever it is (how much of
            # the batch is done by a fixed uid's sample is the scheduler's).
            if state["scored"] == 1:
                state["in_flight"] = set(tm.rid_to_state)
                return bad(uid, sample, out)
        return tiny.reward(prompt_of[uid], out["output_ids"])

    async def main(plugin):
        rec = Recorder(engine)
        sampling = {"temperature": 1.0, "max_new_tokens": 16,
                    "ignore_eos": True}
        with SGLangRollout(rec, plugin, sampling, score=score) as ro:
            items = batch_items(0)
            prompt_of.update({u: p for u, p, _ in items})
            with pytest.raises(ValueError):
                await ro.generate(items)
            after = (await sglang_idle(engine), plugin.stats(),
                     list(rec.tokenizer_manager.rids),
                     {c["rid"] for c in rec.calls})
            state["on"] = False
            items = batch_items(1)
            prompt_of.update({u: p for u, p, _ in items})
            res = await ro.generate(items)
            for r in res.values():
                r.group = None
                plugin.release(r.decision)
            return after, len(res), await sglang_idle(engine)

    with v05.Plugin.create(segname, pad_multiple=8, max_prompts=256,
                           **PARAMS) as plugin:
        (idle, st, aborted, issued), n, idle2 = engine_loop.run(main(plugin))
        # The error came while most of the batch was still in sglang...
        assert len(state["in_flight"]) > 100
        # ...which was aborted by rid, each request once, not generated
        # to the end...
        assert len(aborted) == len(set(aborted)) > 100
        assert set(aborted) <= issued
        assert len(set(aborted) & state["in_flight"]) > 100
        assert state["scored"] < PROMPTS * PARAMS["k_init"] // 2
        # ...and nothing of it is left, in sglang or in the plugin.
        assert idle, "requests left in sglang after the error"
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        assert st["prompts_cancelled"] > 0
        assert n == PROMPTS and idle2
        assert plugin.stats()["prompts_final"] == 0


def test_caller_cancellation_aborts_by_rid(engine_loop, segname):
    engine = engine_loop.engine
    tm = engine.tokenizer_manager
    prompt_of = {}
    seen = {}

    async def main(plugin):
        first = asyncio.Event()

        async def score(uid, sample, out):
            first.set()
            return tiny.reward(prompt_of[uid], out["output_ids"])

        rec = Recorder(engine)
        sampling = {"temperature": 1.0, "max_new_tokens": 16,
                    "ignore_eos": True}
        with SGLangRollout(rec, plugin, sampling, score=score) as ro:
            items = batch_items(0)
            prompt_of.update({u: p for u, p, _ in items})
            task = asyncio.ensure_future(ro.generate(items))
            await first.wait()
            seen["in_flight"] = set(tm.rid_to_state)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            seen["aborted"] = list(rec.tokenizer_manager.rids)
            seen["idle"] = await sglang_idle(engine)
            seen["stats"] = plugin.stats()
            items = batch_items(1)
            prompt_of.update({u: p for u, p, _ in items})
            res = await ro.generate(items)
            for r in res.values():
                r.group = None
                plugin.release(r.decision)
            return len(res), await sglang_idle(engine)

    with v05.Plugin.create(segname, pad_multiple=8, max_prompts=256,
                           **PARAMS) as plugin:
        n, idle2 = engine_loop.run(main(plugin))
        assert len(seen["in_flight"]) > 100
        aborted = set(seen["aborted"])
        assert len(aborted) == len(seen["aborted"])
        # Every request in flight when the caller cancelled was aborted by
        # its rid (none finished in between: the cancel came first).
        assert seen["in_flight"] <= aborted
        assert seen["idle"], "requests left in sglang after the cancellation"
        st = seen["stats"]
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        assert n == PROMPTS and idle2
        assert plugin.stats()["prompts_final"] == 0
