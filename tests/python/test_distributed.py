# SPDX-License-Identifier: MIT
"""Several engines, one batch: 3 processes on loopback, each with its own
segment and a third of the prompts, sum their halt counts with
torch.distributed (gloo). They must reach the same verdict at the same
round, and together produce exactly the groups one engine produces for the
whole batch (with pad_multiple 1, where padding cannot differ)."""
import json
import multiprocessing as mp


import v05
from v05.trainers.distributed import HaltCoordinator
from v05.demos.sim import SimEngine, make_prompts

WORLD, N, SEED = 3, 96, 11


def prompts():
    return make_prompts(N, seed=SEED, noise=0.2, hallucination=0.4)


def groups_of(eng):
    return {uid: [int(k), float(b), [float(x) for x in adv], bool(h)]
            for uid, (k, b, _r, adv, h) in eng.groups.items()}


def rank_main(rank, rdzv, prefix, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=rdzv,
                            rank=rank, world_size=WORLD)
    mine = prompts()[rank::WORLD]
    with v05.Plugin.create(f"{prefix}-{rank}", max_prompts=64, pad_multiple=1,
                           external_halt=True, mode="v05") as p:
        coord = HaltCoordinator(p)  # the plugin's halt fraction (0.25)
        assert coord.halt_fraction == 0.25
        with SimEngine(p, mine, workers=1, latency="uniform:0:2", seed=SEED,
                       on_barrier=coord.barrier,
                       on_done=lambda pl, batch, n: coord.finish(batch, n)) as eng:
            eng.run(keep_groups=True)
    with open(out, "w") as f:
        json.dump({"groups": groups_of(eng),
                   "log": [[r, m, s, h] for _b, r, m, s, h in coord.log]}, f)
    dist.destroy_process_group()


def test_three_engines_halt_together(segname, tmp_path):
    # The reference: one engine, the whole batch, the local halt rule.
    with v05.Plugin.create(segname, max_prompts=128, pad_multiple=1,
                           mode="v05", schedule="rounds") as p:
        with SimEngine(p, prompts(), workers=2, latency="uniform:0:2",
                       seed=SEED) as eng:
            res = eng.run(keep_groups=True)
        ref = groups_of(eng)
        rounds, halts = res.stats["rounds"], res.stats["halts"]
    assert rounds >= 1  # the batch really went through barriers

    ctx = mp.get_context("fork")
    # A file rendezvous: no port to pick and lose to another process.
    rdzv = f"file://{tmp_path}/rdzv"
    outs = [str(tmp_path / f"rank{r}.json") for r in range(WORLD)]
    procs = [ctx.Process(target=rank_main, args=(r, rdzv, segname, outs[r]))
             for r in range(WORLD)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(120)
        assert pr.exitcode == 0
    got = [json.load(open(o)) for o in outs]
    # Same verdicts, same rounds, on every engine.
    assert got[0]["log"] == got[1]["log"] == got[2]["log"]
    log = got[0]["log"]
    assert len(log) == rounds + halts
    assert [m for _r, m, s, _h in log][0] > 0 and all(s == N for *_x, s, _h in log)
    assert log[-1][3] == (halts == 1)
    # Together, exactly the single engine's groups.
    merged = {}
    for g in got:
        merged.update(g["groups"])
    assert merged == ref
