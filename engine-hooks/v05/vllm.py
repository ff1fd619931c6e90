# SPDX-License-Identifier: MIT
"""vLLM adapter.

Target: vLLM's V1 front end, ``vllm.v1.engine.async_llm.AsyncLLM``:
``generate(prompt, sampling_params, request_id, *, ...)`` is an async
generator of ``RequestOutput`` (``.finished``, ``.outputs[0].text`` /
``.token_ids``). vLLM itself splits ``n > 1`` into n=1 child requests in
that front end, so "two more samples" are two more n=1 ``generate`` calls
with the same prompt; the prefix cache shares the prompt between them.

The ``vllm.general_plugins`` entry point (``v05 = v05.vllm:register``) is
loaded by vLLM in every process it starts (front end, engine core,
workers); v05 belongs in the front end only, so ``register`` does nothing
elsewhere.

Not run against a real vLLM here (no GPU, no PyPI): the contract tests in
tests/python/test_adapters.py drive this module with a stand-in that has
the same method names and signatures.
"""

import itertools
import logging
import multiprocessing
import os
from typing import Optional

from .plugin import Plugin, Uid
from .rollout import EngineRollout, ScoreFn

__all__ = ["VLLMRollout", "register", "is_frontend"]

log = logging.getLogger("v05.vllm")
_counter = itertools.count()


def is_frontend() -> bool:
    """True in the process that owns the engine client: not a process vLLM
    spawned (engine core, workers). V05_ROLE=frontend|worker overrides."""
    role = os.environ.get("V05_ROLE", "")
    if role:
        return role == "frontend"
    return multiprocessing.parent_process() is None


def register() -> None:
    """vllm.general_plugins entry point: inert outside the front end."""
    if not is_frontend():
        return
    log.info("v05 available in the vLLM front end (pid %d)", os.getpid())


def _single(sampling_params, sample: int):
    """The caller's sampling parameters for one sample: n=1, and a distinct
    seed per sample when a seed was set (else the samples would agree)."""
    sp = sampling_params.clone() if hasattr(sampling_params, "clone") else \
        sampling_params
    sp.n = 1
    if getattr(sp, "seed", None) is not None:
        sp.seed = sp.seed + sample
    return sp


class VLLMRollout(EngineRollout):
    """Groups through an AsyncLLM, following the plugin's decisions.

        rollout = VLLMRollout(engine, plugin, sampling_params, score=score)
        results = await rollout.generate([(uid, prompt, prior), ...])
        results[uid].outputs      # RequestOutput per sample, k of them
        results[uid].group        # .advantages view, .baseline, .k
    """

    def __init__(self, engine, plugin: Plugin, sampling_params, *,
                 score: Optional[ScoreFn] = None, on_output=None,
                 on_barrier=None, release: bool = False):
        self.engine = engine
        self.sampling_params = sampling_params
        super().__init__(plugin, score=score, on_output=on_output,
                         on_barrier=on_barrier, release=release)

    async def _generate_one(self, prompt, uid: Uid, sample: int):
        request_id = f"v05-{uid}-{sample}-{next(_counter)}"
        final = None
        async for out in self.engine.generate(prompt, _single(self.sampling_params, sample),
                                              request_id):
            final = out
            if getattr(out, "finished", False):
                break
        return final
