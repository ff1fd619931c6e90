# SPDX-License-Identifier: MIT
"""What only vLLM has, on the real vLLM (the CPU build from PyPI): its
AsyncLLM binds its output handler to the first event loop it runs on, and
the adapter refuses another loop with vLLM's reason. What both engines do
(groups, padding, advantages, errors, cancellation, the fill, TP 2):
tests/engines-common, run with this environment by scripts/test."""
import asyncio

import pytest

import v05
from v05.engines.vllm import VLLMRollout

from vllm import SamplingParams  # noqa: E402

from engine_kit import PARAMS, VLLMKit, batch_items  # noqa: E402


def test_second_event_loop_refused(engine_loop, segname):
    kit = VLLMKit()
    with v05.Plugin.create(segname, pad_multiple=1, max_prompts=64,
                           mode="v05-eb", **PARAMS) as plugin:
        ro = VLLMRollout(engine_loop.engine, plugin,
                         SamplingParams(max_tokens=1, detokenize=False),
                         score=lambda u, s, o: 1.0, release=True)
        engine_loop.run(ro.generate(batch_items(kit, 0, n=4)[0]))
        # The same rollout, or a new one, on a new loop: refused, as the
        # engine is bound to its first loop (the driver's own check is in
        # tests/python/test_adapters.py).
        with pytest.raises(RuntimeError, match="output handler runs on another"):
            asyncio.run(ro.generate(batch_items(kit, 1, n=4)[0]))
        ro.close()
        ro = VLLMRollout(engine_loop.engine, plugin,
                         SamplingParams(max_tokens=1, detokenize=False),
                         score=lambda u, s, o: 1.0, release=True)
        with pytest.raises(RuntimeError, match="output handler runs on another"):
            asyncio.run(ro.generate(batch_items(kit, 2, n=4)[0]))
        ro.close()
        assert plugin.stats()["prompts_open"] == 0
