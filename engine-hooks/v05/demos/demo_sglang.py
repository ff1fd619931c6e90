# SPDX-License-Identifier: MIT
"""The demo on sglang: one batch per mode through sglang's Engine (PyPI's
sglang on its CPU engine, with the CUDA driver stub) and v05's sglang
adapter, on the same tiny local model, verifier and priors as the vLLM
demo (demo_vllm), with the same table. Run by ``python3 -m v05.demos
--engine sglang`` with the sglang environment's python (scripts/demo
--engine sglang sets it up first).
"""

import asyncio
import json
import os
import sys
import time

import numpy as np

from ..core.plugin import Plugin
from ..engines.sglang import SGLangRollout
from .common import schedule_text, with_schedule
from .demo_vllm import _Meter, table
from .sim import Progress

__all__ = ["run"]


class _SGLangMeter(_Meter):
    def stop(self, out):
        self.inflight -= 1
        self.tokens += len(out["output_ids"]) if out else 0
        if self.inflight == 0:
            self.idle_since = time.perf_counter()


class _Metered:
    """The sglang Engine as the adapter sees it, with each request's time
    in the engine counted."""

    def __init__(self, engine, meter):
        self.engine, self.meter = engine, meter
        self.tokenizer_manager = engine.tokenizer_manager

    async def async_generate(self, **kw):
        self.meter.start()
        out = None
        try:
            out = await self.engine.async_generate(**kw)
            return out
        finally:
            self.meter.stop(out)


async def _run_mode(engine, mode, label, params, args, items, truth):
    from . import tiny

    prompt_of = {uid: p for uid, p, _ in items}
    # Seeded: each sample gets a seed of its own from this one (the
    # adapter's sample_seed).
    sampling = {"temperature": 1.0, "max_new_tokens": args.max_tokens,
                "ignore_eos": True, "sampling_seed": args.seed}

    def score(uid, sample, out):
        return tiny.reward(prompt_of[uid], out["output_ids"])

    cfg = dict(max_prompts=max(len(items), 64), pad_multiple=args.pad,
               halt_fraction=args.halt,
               lane_capacity=16384)
    cfg.update(with_schedule(params, args.schedule))
    name = f"demo-{os.getpid()}-{mode}"
    with Plugin.create(name, on_stale="remove", **cfg) as plugin:
        meter = _SGLangMeter(plugin)
        prog = Progress(len(items), label, not args.no_progress)
        prog.update(0)
        with SGLangRollout(_Metered(engine, meter), plugin, sampling,
                           score=score, score_threads=2) as ro:
            t0 = time.perf_counter()
            res = await ro.generate(items)
            meter.end()
            wall = time.perf_counter() - t0
            calls = ro.generate_calls
        ks, err, dropped, lat = [], [], 0, []
        for uid, r in sorted(res.items()):
            ks.append(r.group.k)
            err.append((r.group.baseline - truth[uid]) ** 2)
            dropped += r.dropped
            lat.append(r.decision.latency_ns)
            r.group = None
            plugin.release(r.decision)
        prog.update(len(res), f"in {wall:.1f} s")
        st = plugin.stats()
    ks = np.array(ks)
    lat = np.array([x for x in lat if x]) / 1000.0
    return {
        "mode": label, "samples": calls, "mean_k": float(ks.mean()),
        "max_k": int(ks.max()), "mse": float(np.mean(err)),
        "halts": int(st["halts"]), "dropped": int(dropped),
        "wall_s": wall, "tokens": meter.tokens,
        "v05_s": meter.plugin_s, "barrier_s": meter.idle_s,
        "rounds": int(st["rounds"]),
        "lat_p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
        "lat_p99_us": float(np.percentile(lat, 99)) if len(lat) else None,
    }


def run(args, modes) -> int:
    """modes: [(mode, label, plugin params)]."""
    import sglang

    from .. import version
    from . import tiny

    model = tiny.make_model(os.path.join(args.model_dir, "tiny-llama"),
                            seed=args.seed)
    prompts = tiny.make_prompts(args.prompts, seed=args.seed)
    p = tiny.success_probs(model, prompts)
    priors = tiny.noisy_priors(p, args.noise, args.hallucination,
                               seed=args.seed + 1)
    items = [(f"q{i}", pr, float(v))
             for i, (pr, v) in enumerate(zip(prompts, priors))]
    truth = {f"q{i}": 2.0 * float(pi) - 1.0 for i, pi in enumerate(p)}

    async def main():
        t = time.perf_counter()
        # Made on this loop: sglang's tokenizer manager binds it.
        engine = tiny.sglang_engine(model, seed=args.seed)
        print(f"sglang engine up in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)
        try:
            return [await _run_mode(engine, m, label, params, args, items,
                                    truth)
                    for m, label, params in modes]
        finally:
            tiny.sglang_shutdown(engine)
            # The tokenizer manager's tasks end when cancelled.
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    rows = asyncio.run(main())
    print(f"v05 {version()} demo on sglang {sglang.__version__} (CPU engine, "
          f"float32): {args.prompts} prompts of a local 2-layer Llama, seed "
          f"{args.seed}, prior noise {args.noise}, hallucination "
          f"{args.hallucination}, {schedule_text(args.schedule)}, halt {args.halt}, "
          f"pad {args.pad}, max_tokens {args.max_tokens}")
    print(table(rows))
    print("baseline MSE: mean over prompts of (baseline - true mean)^2, the "
          "true mean from the model's exact next-token probabilities; "
          "v05 s: time in plugin calls; barrier s: time the engine had no "
          "request while the batch was not done.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()
                                if isinstance(v, (int, float, str))},
                       "sglang": sglang.__version__, "rows": rows}, f,
                      indent=1)
    return 0
