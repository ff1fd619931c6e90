# SPDX-License-Identifier: MIT
"""v05 driving a real vLLM: the README's example, run as it is by
tests/engines/test_example.py.

    python examples/vllm_rollout.py MODEL_DIR [STEPS]

(in the engine environment: `scripts/setup-engine --print` names its
Python). The same prompts come back each step, as in epochs of RL
training; a HistoryPrior turns their earlier groups into priors.
"""
import asyncio
import sys

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

import v05
from v05.demos import tiny
from v05.core.prior import HistoryPrior
from v05.engines.vllm import VLLMRollout


def score(uid, sample, out):                    # runs off the event loop
    return tiny.reward(out.prompt_token_ids, out.outputs[0].token_ids)


def learn(prior, uid, group, outputs):          # a trainer's step goes here
    rewards, advantages = group.torch()         # views of the slot, no copy
    tokens = [o.outputs[0].token_ids for o in outputs]
    assert len(tokens) == group.k == len(advantages)
    prior.update(uid, rewards.tolist())


async def main(model_dir, steps=3):
    # One event loop for the engine's life: create it here, in main().
    engine = tiny.vllm_engine(tiny.make_model(model_dir))   # a vLLM AsyncLLM
    prompts = {f"q{i}": p for i, p in enumerate(tiny.make_prompts(64))}
    prior = HistoryPrior()
    sp = SamplingParams(temperature=1.0, max_tokens=8, detokenize=False)
    # on_stale="remove": a segment left by a killed run of this example
    # goes (the default, "takeover", would recover its groups instead).
    with v05.Plugin.create("example-vllm", max_prompts=256,
                           on_stale="remove") as plugin, \
            VLLMRollout(engine, plugin, sp, score=score) as rollout:
        for step in range(steps):
            items = [(uid, TokensPrompt(prompt_token_ids=prompts[uid]), v)
                     for uid, v in prior.priors(prompts)]
            results = await rollout.generate(items)  # k differs per prompt
            for uid, r in results.items():
                learn(prior, uid, r.group, r.outputs)
                r.group = None               # drop the views, then the
                plugin.release(r.decision)   # slot may be reused
            ks = [r.decision.k for r in results.values()]
            print(f"step {step}: {len(results)} groups, k {min(ks)}..{max(ks)}, "
                  f"{sum(ks)} samples")
    engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3))
