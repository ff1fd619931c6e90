# SPDX-License-Identifier: MIT
"""sglang adapter.

Target: ``sglang.srt.entrypoints.engine.Engine.async_generate(prompt=...,
sampling_params=dict, ..., stream=False, rid=...)``, which returns a dict
(``"text"``, ``"output_ids"``, ``"meta_info"``) for one request; the
``TokenizerManager`` in that same (main) process broadcasts requests to the
tensor-parallel ranks, so v05 lives there, imported by the rollout code.

Not run against a real sglang: PyPI's sglang is the CUDA build and its CPU
path needs a source build (docs/ENGINE_HOOKS.md says what was tried). The
tests drive this module with a stand-in of the same method and keywords.
The event-loop, scoring and clean-up rules are the shared driver's
(v05.engines.driver): sglang's ``TokenizerManager`` binds the first loop it sees,
so every batch runs inside one ``asyncio.run(main())``.
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
                 score_threads: int = 1):
        self.engine = engine
        self.sampling_params = dict(sampling_params or {})
        super().__init__(plugin, score=score, on_output=on_output,
                         on_barrier=on_barrier, release=release,
                         score_threads=score_threads)

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
        try:
            return await self.engine.async_generate(
                prompt=prompt, sampling_params=params, rid=rid, stream=False)
        except asyncio.CancelledError:
            # Cancelling the awaiting task does not stop the scheduler's
            # request by itself: abort it by rid.
            self._abort(rid)
            raise
