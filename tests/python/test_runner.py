# SPDX-License-Identifier: MIT
"""The decision runner alone (v05.engines.runner.DecisionRunner), as a
host inside an HTTP server would use it: the host submits one group per
request, streams each finished sample out, takes the rewards back from
elsewhere (a RewardWriter of its own here, the reward route's), polls on
its own loop and hands the decisions to the runner. Every issued sample
is generated once, every group comes back whole with the rewards pushed,
a group's abort reaches only its own requests and batch, a generate that
fails is reported, and the host's cancellation leaves nothing behind."""
import asyncio

import pytest

import v05
from v05.engines.runner import DecisionRunner, Flight

K = 4


class Engine:
    """A stand-in engine: `gate` holds the samples of the uids in `held`."""

    def __init__(self):
        self.started, self.cancelled = [], []
        self.gate = asyncio.Event()
        self.held = set()
        self.fail = None  # (uid, sample) whose generate raises

    async def generate(self, prompt, uid, sample, batch):
        self.started.append((uid, sample))
        try:
            await asyncio.sleep(0)
            if (uid, sample) == self.fail:
                raise RuntimeError(f"engine failed on {uid}/{sample}")
            if uid in self.held:
                await self.gate.wait()
            return f"{prompt}/{sample}"
        except asyncio.CancelledError:
            self.cancelled.append((uid, sample))
            raise


def reward(uid, sample):
    return 1.0 if (sum(map(ord, uid)) + sample) % 2 else -1.0


class Host:
    """What a server route does around the runner: the outbox is the
    samples streamed out; push() is the reward route."""

    def __init__(self, plugin, engine):
        self.plugin = plugin
        self.outbox = asyncio.Queue()
        self.errors = []
        self.runner = DecisionRunner(plugin, engine.generate,
                                     finish=self.finish,
                                     on_error=self.errors.append)
        self.flight = Flight()
        self.finals = {}
        self.writer = v05.RewardWriter.attach(plugin.name)

    async def finish(self, d, sample, out):
        await self.outbox.put((d, sample, out))

    async def rewards(self):
        """The clients: every sample streamed out gets its reward back."""
        while True:
            d, sample, out = await self.outbox.get()
            self.writer.push(d, sample, reward(d.uid, sample))

    async def serve(self, until):
        """Poll on this loop until `until()` holds."""
        while not until():
            fault = await self.runner.take(self.flight, self.plugin.poll(),
                                           self.keep)
            assert fault is None
            if not until():
                await self.plugin.wait(0.05)

    def keep(self, d):
        self.finals[d.uid] = d


def test_runner_alone_serves_groups(segname):
    eng = Engine()

    async def main(p):
        host = Host(p, eng)
        clients = asyncio.ensure_future(host.rewards())
        uids = [f"g{i}" for i in range(6)]
        batches = {}
        for i, u in enumerate(uids):  # one request, one group, one batch
            (d,) = host.runner.submit(host.flight, [(u, f"prompt {u}",
                                                     0.2 * i - 0.5)])
            batches[u] = d.batch
        await host.serve(lambda: len(host.finals) == len(uids))
        await host.runner.settle(host.flight.tasks)
        out = {u: host.runner.result(d, host.flight.outputs)
               for u, d in host.finals.items()}
        clients.cancel()
        host.writer.close()
        return host, out, batches

    with v05.Plugin.create(segname, mode="v05", k_init=K, k_step=2,
                           k_max=8, pad_multiple=1, max_prompts=64) as p:
        host, out, batches = asyncio.run(main(p))
        issued = p.stats()["samples_issued"]
        assert len(set(batches.values())) == len(batches)
        for u, r in out.items():
            g = r.group
            assert K <= g.k <= 8 and not r.dropped
            assert r.outputs == [f"prompt {u}/{s}" for s in range(g.k)]
            assert g.rewards[:g.k].tolist() == [reward(u, s)
                                                for s in range(g.k)]
            r.group = g = None
            p.release(r.decision)
        # Every issued sample was generated once, by the runner.
        assert host.runner.generate_calls == issued == len(eng.started)
        assert len(set(eng.started)) == len(eng.started)
        assert not host.errors and not host.flight.tasks
        st = p.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0


def test_abort_one_group(segname):
    """A client that goes away: its group's requests are aborted and its
    batch cancelled; the other groups are untouched and finish."""
    eng = Engine()
    eng.held = {"gone"}

    async def main(p):
        host = Host(p, eng)
        clients = asyncio.ensure_future(host.rewards())
        (gone,) = host.runner.submit(host.flight, [("gone", "x", 0.0)])
        for u in ("a", "b"):
            host.runner.submit(host.flight, [(u, "y", 0.0)])
        await host.serve(lambda: len(host.finals) == 2)
        assert set(host.finals) == {"a", "b"}
        n = await host.runner.abort(host.flight, [gone.batch], uids=["gone"])
        assert "gone" not in host.flight.prompts
        await host.runner.settle(host.flight.tasks)
        res = {u: host.runner.result(d, host.flight.outputs)
               for u, d in host.finals.items()}
        clients.cancel()
        host.writer.close()
        return n, res

    with v05.Plugin.create(segname, mode="v05-fixed", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=16) as p:
        n, res = asyncio.run(main(p))
        assert n == K
        assert sorted(eng.cancelled) == [("gone", s) for s in range(K)]
        for r in res.values():
            assert r.group.k == K
            r.group = None
            p.release(r.decision)
        st = p.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0
        assert st["prompts_cancelled"] == 1


def test_generate_error_reported_and_abandon_cleans_up(segname):
    """A failed generate goes to on_error; the host's clean-up (abandon)
    leaves no request, no open prompt, no slot held."""
    eng = Engine()
    eng.fail = ("f1", 2)
    eng.held = {"f2"}

    async def main(p):
        host = Host(p, eng)
        clients = asyncio.ensure_future(host.rewards())
        first = host.runner.submit(host.flight, [("f0", "z", 0.0),
                                                 ("f1", "z", 0.0),
                                                 ("f2", "z", 0.0)])
        await host.serve(lambda: bool(host.errors) and "f0" in host.finals)
        err = host.errors[0]
        await host.runner.abandon(host.flight.tasks, [first[0].batch],
                                  host.finals.items(), {}, err)
        clients.cancel()
        host.writer.close()
        return err

    with v05.Plugin.create(segname, mode="v05-fixed", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=16) as p:
        err = asyncio.run(main(p))
        assert "engine failed on f1/2" in str(err)
        assert {("f2", s) for s in range(K)} <= set(eng.cancelled)
        st = p.stats()
        assert st["prompts_open"] == 0 and st["prompts_final"] == 0


def test_submit_refusal_starts_nothing(segname):
    """A refused submit (the uid is live) raises as Plugin.submit does;
    the accepted prompts are not started: the caller decides."""
    eng = Engine()

    async def main(p):
        host = Host(p, eng)
        (d,) = host.runner.submit(host.flight, [("dup", "x", 0.0)])
        with pytest.raises(v05.SubmitError) as e:
            host.runner.submit(host.flight, [("new", "y", 0.0),
                                             ("dup", "x", 0.0)])
        for _ in range(3):
            await asyncio.sleep(0)
        started = {u for u, _ in eng.started}
        assert set(host.flight.prompts) == {"dup"}
        await host.runner.abort(host.flight, [e.value.decisions[0].batch,
                                              d.batch])
        host.writer.close()
        return e.value, started

    with v05.Plugin.create(segname, mode="v05-fixed", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=16) as p:
        err, started = asyncio.run(main(p))
        assert [d.uid for d in err.decisions] == ["new"]
        assert started == {"dup"}
        st = p.stats()
        assert st["prompts_open"] == 0
