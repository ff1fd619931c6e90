# SPDX-License-Identifier: MIT
"""The demo on a real engine: one batch per mode through vLLM's AsyncLLM
(the CPU build) on a tiny model made locally (v05.tiny), rewards from the
task's verifier, priors from the model's exact success probabilities plus
noise. Run by ``python3 -m v05.demos --engine vllm`` (scripts/demo --engine
vllm sets up the engine environment first).

Besides the simulated demo's columns it reports the engine's side: wall
time of the batch, tokens generated, and what v05 itself costs the batch:
the time spent in plugin calls (submit, poll, release) and the time the
engine sat with no request while the batch was not done (waiting at a
round's barrier for the slowest group's rewards and the decision).
"""

import asyncio
import json
import os
import sys
import time

import numpy as np

from ..core.plugin import Plugin
from ..engines.driver import GroupRollout
from ..engines.vllm import engine_input, single_sample_params
from .common import format_table, schedule_text, with_schedule
from .sim import Progress

__all__ = ["run"]


class _Meter:
    """Counts what a batch costs: engine calls in flight, the time with
    none in flight, and the time spent inside the plugin."""

    def __init__(self, plugin):
        self.inflight = 0
        self.idle_s = 0.0
        self.idle_since = None
        self.plugin_s = 0.0
        self.tokens = 0
        for name in ("submit", "poll", "release"):
            setattr(plugin, name, self._timed(getattr(plugin, name)))

    def _timed(self, fn):
        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.plugin_s += time.perf_counter() - t
        return timed

    def start(self):
        self.inflight += 1
        if self.idle_since is not None:
            self.idle_s += time.perf_counter() - self.idle_since
            self.idle_since = None

    def stop(self, out):
        self.inflight -= 1
        self.tokens += len(out.outputs[0].token_ids) if out else 0
        if self.inflight == 0:
            self.idle_since = time.perf_counter()

    def end(self):
        # The batch is done: the last idle stretch is not a wait.
        self.idle_since = None


def _run_mode(engine, mode, label, params, args, items, truth):
    from vllm import SamplingParams

    from . import tiny

    name = f"demo-{os.getpid()}-{mode}"
    # Seeded: each sample gets a seed of its own from this one
    # (single_sample_params), so a run is the same under the same --seed.
    sp = SamplingParams(temperature=1.0, max_tokens=args.max_tokens,
                        detokenize=False, ignore_eos=True, seed=args.seed)

    def score(uid, sample, out):
        return tiny.reward(out.prompt_token_ids, out.outputs[0].token_ids)

    cfg = dict(max_prompts=max(len(items), 64), pad_multiple=args.pad,
               halt_fraction=args.halt,
               lane_capacity=16384)
    cfg.update(with_schedule(params, args.schedule))
    with Plugin.create(name, on_stale="remove", **cfg) as plugin:
        meter = _Meter(plugin)
        prog = Progress(len(items), label, not args.no_progress)
        prog.update(0)

        async def generate(prompt, uid, sample, batch):
            meter.start()
            out = None
            try:
                async for o in engine.generate(
                        engine_input(engine, prompt),
                        single_sample_params(sp, uid, batch, sample),
                        f"demo-{mode}-{batch}-{uid}-{sample}"):
                    out = o
                return out
            finally:
                meter.stop(out)

        async def main():
            drv = GroupRollout(plugin, generate, score=score,
                               score_threads=2)
            t0 = time.perf_counter()
            try:
                res = await drv.run(items)
            finally:
                drv.close()
            meter.end()
            wall = time.perf_counter() - t0
            return res, wall, drv.generate_calls

        res, wall, calls = await_main(main)
        ks, err, halted, dropped, lat = [], [], 0, 0, []
        # In uid order: sums in the order groups finished would differ in
        # the last bit from run to run.
        for uid, r in sorted(res.items()):
            ks.append(r.group.k)
            err.append((r.group.baseline - truth[uid]) ** 2)
            halted += r.halted
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


_LOOP = None


def await_main(fn):
    """Run a coroutine on the demo's one event loop (vLLM's AsyncLLM is
    bound to the loop it first ran on)."""
    return _LOOP.run_until_complete(fn())


def table(rows):
    head = ("mode", "samples", "mean k", "max k", "baseline MSE", "halts",
            "dropped", "wall s", "tokens", "v05 s", "barrier s")
    cells = [(r["mode"], str(r["samples"]), f"{r['mean_k']:.2f}",
              str(r["max_k"]), f"{r['mse']:.4f}", str(r["halts"]),
              str(r["dropped"]), f"{r['wall_s']:.2f}", str(r["tokens"]),
              f"{r['v05_s']:.3f}", f"{r['barrier_s']:.3f}") for r in rows]
    return format_table(head, cells)


def run(args, modes) -> int:
    """modes: [(mode, label, plugin params)]."""
    global _LOOP
    # vLLM logs to stdout at INFO by default: keep stdout for the table.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm.inputs import TokensPrompt

    from .. import version
    from . import tiny

    model = tiny.make_model(os.path.join(args.model_dir, "tiny-llama"),
                            seed=args.seed)
    prompts = tiny.make_prompts(args.prompts, seed=args.seed)
    p = tiny.success_probs(model, prompts)
    priors = tiny.noisy_priors(p, args.noise, args.hallucination,
                               seed=args.seed + 1)
    items = [(f"q{i}", TokensPrompt(prompt_token_ids=pr), float(v))
             for i, (pr, v) in enumerate(zip(prompts, priors))]
    truth = {f"q{i}": 2.0 * float(pi) - 1.0 for i, pi in enumerate(p)}

    _LOOP = asyncio.new_event_loop()
    asyncio.set_event_loop(_LOOP)
    t = time.perf_counter()

    async def start():
        return tiny.vllm_engine(model, seed=args.seed)
    engine = _LOOP.run_until_complete(start())
    print(f"vLLM engine up in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    try:
        rows = [_run_mode(engine, m, label, params, args, items, truth)
                for m, label, params in modes]
    finally:
        engine.shutdown()
        # vLLM's output handler tasks end when cancelled; closing the loop
        # under them would make them log "Event loop is closed".
        tasks = asyncio.all_tasks(_LOOP)
        for t in tasks:
            t.cancel()
        _LOOP.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        _LOOP.close()
    import vllm
    print(f"v05 {version()} demo on vLLM {vllm.__version__} (CPU, float32): "
          f"{args.prompts} prompts of a local 2-layer Llama, seed {args.seed}, "
          f"prior noise {args.noise}, hallucination {args.hallucination}, "
          f"{schedule_text(args.schedule)}, halt {args.halt}, pad {args.pad}, "
          f"max_tokens {args.max_tokens}")
    print(table(rows))
    print("baseline MSE: mean over prompts of (baseline - true mean)^2, the "
          "true mean from the model's exact next-token probabilities; "
          "v05 s: time in plugin calls; barrier s: time the engine had no "
          "request while the batch was not done.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()
                                if isinstance(v, (int, float, str))},
                       "vllm": vllm.__version__, "rows": rows}, f, indent=1)
    return 0
