# SPDX-License-Identifier: MIT
"""v05-eb without a barrier on several engines: 3 processes on loopback
(torch.distributed, gloo), each with its own plugin and a third of the
first waves, exchange their parts of the fit asynchronously. Each then
decides probe prompts exactly as one engine holding every first wave
does; and while one engine stays out of the next exchange, the others'
decisions go on (the exchange pending, nothing stalled)."""
import json
import multiprocessing as mp
import random
import socket

import v05
from v05.trainers.fit_exchange import FitExchange

WORLD = 3
KW = dict(mode="v05-eb", schedule="stream", eb_window=0, eb_cold=1,
          pad_multiple=1, max_prompts=128)


def waves(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        mu = rng.uniform(-1, 1)
        h = rng.random() < 0.3
        prior = rng.uniform(-1, 1) if h else \
            max(-1.0, min(1.0, mu + rng.gauss(0, 0.15)))
        out.append((prior, [1.0 if rng.random() < (1 + mu) / 2 else -1.0
                            for _ in range(4)]))
    return out


SHARED = waves(90, 5)    # dealt round-robin to the engines
PROBES = waves(12, 6)    # decided by every engine after the exchange
LATE = waves(6, 7)       # decided while one engine is out


def feed(plugin, ws, tag, writer, first=None):
    """Submit, feed first waves in order; {uid: (kind, extra samples)}."""
    items = [(f"{tag}{i}", prior) for i, (prior, _r) in enumerate(ws)]
    gens = {d.uid: d.gen for d in plugin.submit(items)}
    out = {}
    for i, (_prior, r) in enumerate(ws):
        uid = f"{tag}{i}"
        for s, x in enumerate(r):
            writer.push(uid, s, x, gen=gens[uid])
        writer.flush()
        for d in plugin.poll():
            out[d.uid] = [d.kind, len(d.samples)]
            if d.kind != "sample":
                plugin.release(d)
    return out


def rank_main(rank, port, name, out, go, late_done):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=WORLD)
    res = {}
    with v05.Plugin.create(name, **KW) as p, \
            v05.RewardWriter.attach(name) as w:
        ex = FitExchange(p)
        feed(p, SHARED[rank::WORLD], "s", w)
        assert ex.start()
        assert ex.wait() and ex.exchanges == 1
        res["probes"] = feed(p, PROBES, "p", w)
        if rank == WORLD - 1:
            go.wait()              # out of the second exchange until told
        assert ex.start()
        if rank != WORLD - 1:
            # The exchange cannot complete without the last engine, and
            # decisions go on regardless.
            res["late"] = feed(p, LATE, "l", w)
            res["pending_during_late"] = ex.pending and not ex.poll()
            with open(out, "w") as f:
                json.dump(res, f)
            late_done[rank].set()
        assert ex.wait()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_engines_share_the_fit_without_a_barrier(segname, tmp_path):
    with v05.Plugin.create(segname, **KW) as one, \
            v05.RewardWriter.attach(segname) as w:
        for r in range(WORLD):
            feed(one, SHARED[r::WORLD], f"r{r}s", w)
        want = feed(one, PROBES, "p", w)
    ctx = mp.get_context("fork")
    go = ctx.Event()
    late_done = [ctx.Event() for _ in range(WORLD - 1)]
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(WORLD)]
    procs = [ctx.Process(target=rank_main,
                         args=(r, port, f"{segname}-{r}", outs[r], go,
                               late_done))
             for r in range(WORLD)]
    for pr in procs:
        pr.start()
    # The last engine stays out of the second exchange until the others
    # have decided their late prompts with it pending.
    for ev in late_done:
        assert ev.wait(120)
    go.set()
    for pr in procs:
        pr.join(120)
        assert pr.exitcode == 0
    got = [json.load(open(o)) for o in outs]
    for r in range(WORLD):
        assert got[r]["probes"] == want, f"engine {r}"
    assert {k for k, _ in want.values()} == {"final", "sample"}
    for r in range(WORLD - 1):
        assert len(got[r]["late"]) == len(LATE)
        assert got[r]["pending_during_late"]
