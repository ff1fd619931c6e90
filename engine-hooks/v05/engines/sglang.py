# SPDX-License-Identifier: MIT
"""sglang adapter.

Run for real against PyPI's sglang 0.5.23 on its CPU engine
(``SGLANG_USE_CPU_ENGINE=1``, ``device="cpu"``; docs/ENGINE_HOOKS.md says
how, with the CUDA driver stub the CUDA-linked kernel package needs to
load). Target: ``sglang.srt.entrypoints.engine.Engine.async_generate(
prompt=... | input_ids=..., sampling_params=dict, rid=..., stream=False)``,
which returns one dict per request (``"output_ids"``, ``"text"`` unless
``skip_tokenizer_init``, ``"meta_info"`` with ``"finish_reason"``). The
``TokenizerManager`` in that same (main) process sends requests to the
scheduler, which broadcasts them to the tensor-parallel ranks, so v05
lives there, imported by the rollout code.

A prompt that is a string goes in as ``prompt``; a sequence of token ids
as ``input_ids`` (with ``skip_tokenizer_init=True`` there is no tokenizer).
The event-loop, scoring and clean-up rules are the shared driver's
(v05.engines.driver): sglang's ``TokenizerManager`` binds the first loop
it sees, so every batch runs inside one ``asyncio.run(main())`` (or on the
loop the engine was created in).
"""

import asyncio
import copy
import itertools
from typing import Optional

from ..core.decision import Uid
from ..core.plugin import Plugin
from .driver import EngineRollout, ScoreFn, sample_seed

__all__ = ["SGLangRollout"]

_counter = itertools.count()


class SGLangRollout(EngineRollout):
    """Groups through an sglang Engine, following the plugin's decisions."""

    def __init__(self, engine, plugin: Plugin, sampling_params: dict, *,
                 score: Optional[ScoreFn] = None, on_output=None,
                 on_barrier=None, release: bool = False,
                 score_threads: int = 1, wait_on: str = "auto"):
        self.engine = engine
        self.sampling_params = dict(sampling_params or {})
        super().__init__(plugin, score=score, on_output=on_output,
                         on_barrier=on_barrier, release=release,
                         score_threads=score_threads, wait_on=wait_on)

    def engine_slots(self):
        """sglang's max_running_requests, when it was set."""
        args = getattr(self.engine, "server_args", None)
        n = getattr(args, "max_running_requests", None)
        return n if isinstance(n, int) and n > 0 else None

    def _abort(self, rid: str) -> None:
        tm = getattr(self.engine, "tokenizer_manager", None)
        abort = getattr(tm, "abort_request", None)
        if abort is not None:
            abort(rid)

    async def _generate_one(self, prompt, uid: Uid, sample: int, batch: int):
        params = copy.deepcopy(self.sampling_params)
        params["n"] = 1
        if params.get("sampling_seed") is not None:
            params["sampling_seed"] = sample_seed(params["sampling_seed"],
                                                  uid, batch, sample)
        rid = f"v05-{batch}-{uid}-{sample}-{next(_counter)}"
        if isinstance(prompt, str):
            kw = {"prompt": prompt}
        else:  # token ids
            kw = {"input_ids": [int(t) for t in prompt]}
        try:
            out = await self.engine.async_generate(
                sampling_params=params, rid=rid, stream=False, **kw)
        except asyncio.CancelledError:
            # sglang 0.5.23 aborts a cancelled request itself; older ones
            # left it running in the scheduler. Abort it by rid either way
            # (a second abort of the same rid is ignored).
            self._abort(rid)
            raise
        reason = (out.get("meta_info") or {}).get("finish_reason") \
            if isinstance(out, dict) else None
        if isinstance(reason, dict) and reason.get("type") == "abort":
            # Aborted by someone else (an abort_request, pause_generation
            # with mode="abort"): a partial output must not be scored.
            why = reason.get("message")
            raise RuntimeError(f"sglang aborted request {rid}" +
                               (f": {why}" if why else ""))
        return out
