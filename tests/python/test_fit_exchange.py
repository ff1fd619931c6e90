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

import pytest

import v05
from v05.trainers.fit_exchange import FitExchange

WORLD = 3
# A cost at which the probes' decisions go both ways (final and more) and
# their first waves are chosen both ways (2 and 4).
KW = dict(mode="v05-eb", schedule="stream", eb_window=0, eb_cold=1,
          cost=0.008, pad_multiple=1, max_prompts=128)


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
    """Submit, feed first waves in order (each its first wave's samples:
    2 or 4, chosen from the fit at submit once it is warm); {uid: (kind,
    extra samples, first wave)}."""
    items = [(f"{tag}{i}", prior) for i, (prior, _r) in enumerate(ws)]
    sub = {d.uid: d for d in plugin.submit(items)}
    out = {}
    for i, (_prior, r) in enumerate(ws):
        uid = f"{tag}{i}"
        for s in sub[uid].samples:
            writer.push(uid, s, r[s], gen=sub[uid].gen)
        writer.flush()
        for d in plugin.poll():
            out[d.uid] = [d.kind, len(d.samples), len(sub[d.uid].samples)]
            if d.kind != "sample":
                plugin.release(d)
    return out


def rank_main(rank, rdzv, name, out, go, late_done):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=rdzv,
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


def test_engines_share_the_fit_without_a_barrier(segname, tmp_path):
    with v05.Plugin.create(segname, **KW) as one, \
            v05.RewardWriter.attach(segname) as w:
        # One batch, submitted cold as each engine's third is: the same
        # first waves (of k_init).
        feed(one, [x for r in range(WORLD) for x in SHARED[r::WORLD]], "s", w)
        want = feed(one, PROBES, "p", w)
    ctx = mp.get_context("fork")
    go = ctx.Event()
    late_done = [ctx.Event() for _ in range(WORLD - 1)]
    # A file rendezvous: no port to pick and lose to another process.
    rdzv = f"file://{tmp_path}/rdzv"
    outs = [str(tmp_path / f"rank{r}.json") for r in range(WORLD)]
    procs = [ctx.Process(target=rank_main,
                         args=(r, rdzv, f"{segname}-{r}", outs[r], go,
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
    # The probes were decided both ways, and their first waves chosen
    # from the fit both ways.
    assert {v[0] for v in want.values()} == {"final", "sample"}
    assert {v[2] for v in want.values()} == {2, 4}
    for r in range(WORLD - 1):
        assert len(got[r]["late"]) == len(LATE)
        assert got[r]["pending_during_late"]


# ---- one bad rank (issue 45, defects 5 to 7) --------------------------------

def _attack(kind, mine):
    """Rank 2's part made bad in one way: a list of floats (or, for
    "build", a part of another build's length)."""
    from v05.core import _lib

    bad = list(mine)
    h = _lib.EB_H_GRID
    if kind == "nan":
        bad[5] = float("nan")
    elif kind == "inf":
        bad[5] = float("-inf")
    elif kind == "negative_count":
        bad[-1] = -3.0
    elif kind == "positive":
        bad[10] = 0.5
    elif kind == "count":           # the 1e15
        bad[-1] = bad[-2] = 1e15
    elif kind == "weight":          # a weight its count cannot have
        bad[-1] += 100
    elif kind == "toward_h":        # every row's h = 0.9 above its best
        for j in range(_lib.EB_N0_GRID):
            row = bad[j * h:(j + 1) * h]
            bad[j * h + h - 1] = max(row) * (1 - 1e-6)
    elif kind == "build":
        bad = bad + [0.0] * 54
    return bad


# What rank 2 sends at each exchange, and a word of the reason the
# healthy ranks must give (None: a valid part, accepted).
ATTACKS = [("nan", "finite"), ("inf", "finite"),
           ("negative_count", "count"), ("positive", "> 0"),
           ("count", "a count without the groups"),
           ("weight", "first waves weigh"), ("toward_h", "not concave"),
           ("valid", None), ("build", "another build")]


def bad_rank_main(rank, rdzv, name, out):
    import torch.distributed as dist
    from v05.core.eb_state import EbState

    dist.init_process_group("gloo", init_method=rdzv,
                            rank=rank, world_size=WORLD)
    res = {"steps": []}
    with v05.Plugin.create(name, **KW) as p, \
            v05.RewardWriter.attach(name) as w:
        ex = FitExchange(p)
        feed(p, SHARED[rank::WORLD], "s", w)
        res["own"] = p.eb_state().to_list()
        mine = list(res["own"])
        real = ex.plugin
        for kind, _ in ATTACKS:
            if rank == WORLD - 1 and kind != "valid":
                if kind == "build":     # another build: another size
                    EbState.SIZE += 54
                ex.plugin = type("P", (), {
                    "eb_state_shared": lambda self, k=kind: type("S", (), {
                        "to_list": lambda s: _attack(k, mine)})(),
                    "post_eb_remote": lambda self, o: None})()
            else:
                ex.plugin = real
            assert ex.start()
            done = ex.wait()
            res["steps"].append({
                "done": done, "error": str(ex.error) if ex.error else None,
                "refused": ex.refused.get(2, 0),
                "others": ex.others.to_list() if ex.others else None})
            ex.error = None
        res["exchanges"] = ex.exchanges
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(res, f)


def test_one_bad_rank(segname, tmp_path):
    """Rank 2 sends a bad part at each exchange (not finite, a negative
    count, finite but no fold makes it, a weight its count cannot have,
    a row pulled toward h = 0.9, another build's length), once a valid
    one: the healthy ranks go on (every exchange completes, no exception,
    no abort in gloo), refuse each bad part naming rank 2 and why, count
    it, merge each other's valid part alone, and rank 2's valid part
    again when it sends one."""
    ctx = mp.get_context("fork")
    # A file rendezvous: no port to pick and lose to another process.
    rdzv = f"file://{tmp_path}/rdzv"
    outs = [str(tmp_path / f"rank{r}.json") for r in range(WORLD)]
    procs = [ctx.Process(target=bad_rank_main,
                         args=(r, rdzv, f"{segname}-{r}", outs[r]))
             for r in range(WORLD)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(180)
    codes = [pr.exitcode for pr in procs]
    assert codes[:2] == [0, 0], f"healthy ranks' exit codes {codes}"
    got = [json.load(open(o)) for o in outs]
    for r in (0, 1):
        g = got[r]
        assert g["exchanges"] == len(ATTACKS), g
        refused = 0
        for (kind, why), step in zip(ATTACKS, g["steps"]):
            assert step["done"], (kind, step)
            if why is None:
                assert step["error"] is None, (kind, step["error"])
                want = [a + b for a, b in zip(got[1 - r]["own"],
                                              got[2]["own"])]
                assert step["others"] == pytest.approx(want, rel=1e-12)
                continue
            refused += 1
            assert step["refused"] == refused, (kind, step)
            assert "rank 2's part refused" in step["error"], (kind, step)
            assert why in step["error"], (kind, step["error"])
            # The other healthy rank's part alone was merged.
            assert step["others"] == got[1 - r]["own"], kind
