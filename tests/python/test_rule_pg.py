# SPDX-License-Identifier: MIT
"""Mode v05-pg from Python (docs/STATISTICS.md, "Mode v05-pg"): its
parameters through Plugin.create and the config mirror, refused with the
field named; and a host running the decision runner (as a server or the
in-process engines do): once the running fit is warm, first waves of the
sizes pg_first allows only, and the prompts a sure prior says carry no
gradient skipped: nothing generated for them, each back as a dropped
group of k = 0 with its prior as the baseline, counted, its slot freed."""
import asyncio
import random

import pytest

import v05
from v05.core.names import SIGMAS
from test_runner import Engine, Host  # the runner's host and engine stand-ins


def test_pg_parameters(segname):
    with v05.Plugin.create(segname, mode="v05-pg",
                           pg=dict(between=0.2, first=[1, 2], skip=0.1)) as p:
        c = p.config
        assert c.pg_between == pytest.approx(0.2)
        assert c.pg_first == (1 << 1) | (1 << 2) and c.pg_skip == 100
    with v05.Plugin.create(segname, mode="v05-pg") as p:
        c = p.config  # the library's defaults (include/v05/stats.h)
        assert c.pg_between == pytest.approx(0.13)
        assert c.pg_first == (1 << 1) | (1 << 2) | (1 << 4)
        assert c.pg_skip == 750  # the bar measured best (STATISTICS.md)
        assert c.params.sigma == SIGMAS["paper"]  # its preset's
    with v05.Plugin.create(segname, mode="v05-pg", sigma="rms") as p:
        assert p.config.params.sigma == SIGMAS["rms"]
    with pytest.raises(v05.V05Error, match="pg_first"):
        v05.Plugin.create(segname, mode="v05-pg", pg=dict(first=[16]))
    with pytest.raises((ValueError, TypeError), match="pg"):
        v05.Plugin.create(segname, mode="v05-pg", pg=dict(nonsense=1))


def test_pg_under_verl_config(segname):
    """verl's algorithm.v05_plugin takes v05-pg's parameters (pg, a nested
    dict: it was refused as an unknown key) and hands them to
    Plugin.create as plain dicts and lists."""
    from v05.trainers.verl.agent_loop import plugin_params

    class Node(dict):  # a DictConfig stand-in: items(), not a plain dict
        pass

    params = plugin_params({"algorithm": {"v05_plugin": Node(
        mode="v05-pg", pad_multiple=1,
        pg=Node(skip=0.75, first=(1, 2)))}})
    assert params == {"mode": "v05-pg", "pad_multiple": 1,
                      "pg": {"skip": 0.75, "first": [1, 2]}}
    assert type(params["pg"]) is dict
    with v05.Plugin.create(segname, **params) as p:
        assert p.config.pg_skip == 750 and p.config.pg_first == 0b110


class Truth:
    """Rewards drawn with each prompt's true success rate, by a fixed
    stream: the stand-in engine's verifier."""

    def __init__(self):
        self.p = {}
        self.rng = random.Random(7)

    def reward(self, uid, sample):
        return 1.0 if self.rng.random() < self.p[uid] else -1.0


def run_batch(host, truth, tag, rates):
    """One batch of prompts through the runner, prior = 2 p - 1."""
    async def main():
        clients = asyncio.ensure_future(rewards(host, truth))
        items = []
        for i, q in enumerate(rates):
            uid = f"{tag}-{i}"
            truth.p[uid] = q
            items.append((uid, f"prompt {uid}", 2.0 * q - 1.0))
        first = host.runner.submit(host.flight, items)
        uids = {u for u, *_ in items}
        await host.serve(lambda: uids <= set(host.finals))
        await host.runner.settle(host.flight.tasks)
        clients.cancel()
        out = {u: host.runner.result(host.finals.pop(u), host.flight.outputs)
               for u in uids}
        return first, out
    return asyncio.get_event_loop().run_until_complete(main())


async def rewards(host, truth):
    while True:
        d, sample, _ = await host.outbox.get()
        host.writer.push(d, sample, truth.reward(d.uid, sample))


def test_pg_skips_and_first_waves_through_the_runner(segname):
    n = 32
    asyncio.set_event_loop(asyncio.new_event_loop())
    eng, truth = Engine(), Truth()
    # The batches are drawn for the skip bar 0.25: the warm-up's spread
    # stays above it, half of batch "b" is far below it.
    with v05.Plugin.create(segname, mode="v05-pg", max_prompts=4 * n,
                           eb_cold=8, pg=dict(skip=0.25)) as p:
        host = Host(p, eng)
        spread = [0.05 + 0.9 * i / (n - 1) for i in range(n)]
        sizes = set()
        for w in range(3):  # the fit warms: the priors are right
            first, out = run_batch(host, truth, f"w{w}", spread)
            sizes |= {len(d.samples) for d in first}
            assert all(not r.dropped and r.group.k >= 1 for r in out.values())
            for r in out.values():
                r.group = None
                p.release(r.decision)
        assert p.stats()["prompts_skipped"] == 0
        hopeless = [0.0005 if i % 2 else 0.1 + 0.8 * i / n for i in range(n)]
        started = len(eng.started)
        first, out = run_batch(host, truth, "b", hopeless)
        sizes_after = {len(d.samples) for d in first}
        assert sizes_after <= {1, 2, 4} and sizes_after
        skipped = {u for u, r in out.items() if r.decision.k == 0}
        assert skipped == {f"b-{i}" for i in range(1, n, 2)}
        for u in skipped:
            r = out[u]
            assert r.dropped and r.outputs == []
            assert r.decision.baseline == pytest.approx(2 * truth.p[u] - 1)
            assert not any(s[0] == u for s in eng.started[started:])
        for u, r in out.items():
            if u not in skipped:
                assert r.group.k >= 1 and len(r.outputs) == r.group.k
            r.group = None
            p.release(r.decision)
        st = p.stats()
        assert st["prompts_skipped"] == n // 2
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        host.writer.close()


def test_pg_under_the_streamed_fill(segname):
    """The fill with v05-pg: a prompt skipped at submit is admitted and
    comes back dropped (k = 0) like any other drop, so every prompt
    pulled is accounted for and nothing is generated for the skipped."""
    from v05.engines.driver import GroupRollout
    from v05.engines.fill import StreamFill

    rate = {}
    rng = random.Random(11)

    def gen_source(tag, n, hopeless):
        for i in range(n):
            uid = f"{tag}-{i}"
            q = 0.0005 if hopeless and i % 2 else 0.05 + 0.9 * ((i * 7) % n) / n
            rate[uid] = q
            yield uid, f"text of {uid}", 2.0 * q - 1.0

    started = []

    async def generate(prompt, uid, sample, batch):
        started.append(uid)
        await asyncio.sleep(0)
        return f"out {uid}/{sample}"

    def score(uid, sample, out):
        return 1.0 if rng.random() < rate[uid] else -1.0

    async def main(p):
        drv = GroupRollout(p, generate, score=score, release=True)
        fill = StreamFill(drv, inflight=16)
        for w in range(4):  # the running fit warms on right priors
            res = await fill.fill(gen_source(f"w{w}", 48, False), 1000)
            assert res.short and res.admitted == 48
        n0 = len(started)
        res = await fill.fill(gen_source("h", 64, True), 1000)
        await fill.close()
        drv.close()
        return res, started[n0:]

    # First waves of 2 or 4: groups of one teach the fit little, and the
    # skip needs it sure that the hopeless prompts are hopeless. The skip
    # bar 0.25: the spread's ends stay above it.
    with v05.Plugin.create(segname, mode="v05-pg", max_prompts=256,
                           max_batches=64, eb_cold=8,
                           pg=dict(first=[2, 4], skip=0.25)) as p:
        res, after = asyncio.run(main(p))
        skipped = p.stats()["prompts_skipped"]
        assert skipped == 32  # every hopeless prompt, no other
        assert not {u for u in after if int(u.split("-")[1]) % 2}
        assert res.admitted == 64 == res.finished + res.aborted
        assert res.dropped >= skipped
        st = p.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0


def test_pg_in_the_simulator(v05ctl):
    """v05ctl sim --mode v05-pg: its own cold first wave (k 2), then
    first waves of the sizes it may choose; a population of hopeless
    prompts with sure priors is skipped, counted, and costs nothing."""
    import json
    import subprocess

    def sim(*args, prompts=2048):
        return json.loads(subprocess.run(
            [v05ctl, "sim", "--prompts", str(prompts), "--mode", "v05-pg",
             "--seed", "3", *args],
            capture_output=True, text=True, check=True).stdout)

    d = sim("--prior-noise", "0.1")
    assert d["k"] == 2 and d["k_max"] == 16 and d["max_waves"] <= 2
    # Its own normaliser unless --sigma says otherwise; the baseline and
    # the decisions do not read it.
    assert d["sigma"] == "paper"
    rms = sim("--prior-noise", "0.1", "--sigma", "rms")
    assert rms["sigma"] == "rms"
    assert (rms["mse"], rms["rollouts_per_prompt"]) == (d["mse"], d["rollouts_per_prompt"])
    # Batches of 512: the first is cold (2 each), then 1, 2 or 4 each.
    assert 1.0 <= d["first_wave_mean"] < 2.0
    # Uniform success rates: the default bar, 0.75 of the mean signal
    # (pi / 4 for exact priors), cuts the prompts whose rate is below
    # 0.096 or above 0.904 when the prior is exact: 19% of them; noisy
    # priors, shrunk towards the middle by the fit, cut fewer.
    assert 0 < d["skipped"] < 0.19 * 2048
    # The skip is relative to the signal of the prompts submitted: when
    # every prompt is as hopeless as the others, they are the gradient,
    # and none is skipped at the bar 0.25 (--pg-skip). At the default
    # 0.75 a few are while the fit sharpens (each prompt's expected
    # signal falls, the running mean lags behind it), none once it has.
    d = sim("--p", "0.0005", "--prior-noise", "0", "--pg-skip", "0.25")
    assert d["skipped"] == 0 and d["pg_skip"] == 0.25
    d = sim("--p", "0.0005", "--prior-noise", "0", prompts=4096)
    assert d["pg_skip"] == 0.75 and 0 < d["skipped"] < 4096 // 50
    assert [b["rollouts_per_prompt"] for b in d["batches"][-4:]] == [1] * 4
    # Success rates piled at 0 (Beta(0.2, 0.6)) and exact priors: much
    # of the pile is skipped, several times the uniform rates' share.
    d = sim("--p-beta", "0.2:0.6", "--prior-noise", "0")
    assert d["skipped"] > 2048 // 8
