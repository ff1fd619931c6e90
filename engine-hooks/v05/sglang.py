# SPDX-License-Identifier: MIT
"""sglang adapter.

Target: ``sglang.srt.entrypoints.engine.Engine.async_generate(prompt=...,
sampling_params=dict, ..., stream=False, rid=...)``, which returns a dict
(``"text"``, ``"output_ids"``, ``"meta_info"``) for one request; the
``TokenizerManager`` in that same (main) process broadcasts requests to the
tensor-parallel ranks, so the plugin lives there.

The ``sglang.srt.plugins`` entry point (``v05 = v05.sglang:register``) is
loaded by sglang's ``load_plugins()`` in every process (main, scheduler,
workers); ``register`` does nothing outside the main process.

Not run against a real sglang here: the contract tests drive it with a
stand-in that has the same method name and keyword arguments.
"""

import copy
import itertools
import logging
import os
from typing import Optional

from .plugin import Plugin, Uid
from .rollout import EngineRollout, ScoreFn
from .vllm import is_frontend

__all__ = ["SGLangRollout", "register"]

log = logging.getLogger("v05.sglang")
_counter = itertools.count()


def register() -> None:
    """sglang.srt.plugins entry point: inert outside the main process."""
    if not is_frontend():
        return
    log.info("v05 available in the sglang main process (pid %d)", os.getpid())


class SGLangRollout(EngineRollout):
    """Groups through an sglang Engine, following the plugin's decisions."""

    def __init__(self, engine, plugin: Plugin, sampling_params: dict, *,
                 score: Optional[ScoreFn] = None, on_output=None,
                 on_barrier=None, release: bool = False):
        self.engine = engine
        self.sampling_params = dict(sampling_params or {})
        super().__init__(plugin, score=score, on_output=on_output,
                         on_barrier=on_barrier, release=release)

    async def _generate_one(self, prompt, uid: Uid, sample: int):
        params = copy.deepcopy(self.sampling_params)
        params["n"] = 1
        if params.get("sampling_seed") is not None:
            params["sampling_seed"] = params["sampling_seed"] + sample
        rid = f"v05-{uid}-{sample}-{next(_counter)}"
        return await self.engine.async_generate(prompt=prompt,
                                                sampling_params=params,
                                                rid=rid, stream=False)
