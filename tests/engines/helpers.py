# SPDX-License-Identifier: MIT
"""What the real-engine tests share: a recording wrapper of the engine, the
plugin's decisions as they are handed out, the engine found idle, and a
batch of the tiny model's prompts."""
import numpy as np

from v05.demos import tiny

from vllm.inputs import TokensPrompt

PROMPTS = 64
PARAMS = dict(cost=0.0039, k_init=4, k_step=2, k_max=16)


class Recorder:
    """The real AsyncLLM, with each generate call's request id and prompt
    kept; everything else is the engine's own."""

    def __init__(self, engine):
        self.engine, self.calls, self.prompts = engine, [], []

    def generate(self, prompt, sampling_params, request_id, **kw):
        self.calls.append(request_id)
        self.prompts.append(prompt)
        return self.engine.generate(prompt, sampling_params, request_id, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def record_decisions(plugin):
    """Every submit/poll call's decisions, one list per call."""
    calls = []

    def wrap(fn):
        def recorded(*a, **kw):
            out = fn(*a, **kw)
            calls.append(out)
            return out
        return recorded
    plugin.poll, plugin.submit = wrap(plugin.poll), wrap(plugin.submit)
    return calls


async def engine_idle(engine, tries=100):
    """No request left in the front end or in the engine core. The core
    reports an aborted request as finished in its next step, so has_work
    may read True once or twice after an abort: each utility call is a
    round trip to the core's busy loop, which steps in between."""
    if engine.get_num_unfinished_requests() != 0:
        return False
    for _ in range(tries):
        if not await engine.engine_core.call_utility_async("has_work"):
            return True
    return False


def batch_items(step, n=PROMPTS, seed=0):
    prompts = tiny.make_prompts(n, seed=seed)
    priors = np.linspace(-0.9, 0.9, n)
    return [(f"s{step}-p{i}", TokensPrompt(prompt_token_ids=p), float(v))
            for i, (p, v) in enumerate(zip(prompts, priors))]
