# SPDX-License-Identifier: MIT
"""What only sglang has, on the real sglang (PyPI's sglang on its CPU
engine): the CUDA driver every sglang process loads is the project's stub
(tests/fixtures/cudastub), and its greedy output is the model's. What both
engines do (groups, padding, advantages, errors aborted by rid,
cancellation, the fill, TP 2): tests/engines-common, run with this
environment by scripts/test."""
import asyncio
import os

from v05.demos import tiny


def test_stub_is_the_driver_and_output_is_the_models(engine_loop, model_dir):
    """The CUDA driver every sglang process loaded is the project's stub,
    no CUDA library comes from outside the environment, and greedy
    generation is the model's (transformers' greedy tokens)."""
    import psutil
    import torch
    from transformers import LlamaForCausalLM

    engine = engine_loop.engine
    procs = [psutil.Process()] + psutil.Process().children(recursive=True)
    stub = os.path.realpath(os.environ["LD_LIBRARY_PATH"].split(":")[0])
    prefix = os.path.realpath(os.path.join(os.path.dirname(
        torch.__file__), "..", "..", "..", ".."))
    for p in procs:
        maps = {line.split()[-1] for line in open(f"/proc/{p.pid}/maps")
                if ".so" in line}
        drivers = {m for m in maps if os.path.basename(m) == "libcuda.so.1"}
        assert drivers in (set(), {os.path.join(stub, "libcuda.so.1")}), \
            (p.name(), drivers)
        cuda = {m for m in maps if "cuda" in os.path.basename(m)}
        assert all(os.path.realpath(m).startswith(prefix) or m in drivers
                   for m in cuda), (p.name(), cuda)
    assert any("libcuda.so.1" in line for line in
               open(f"/proc/{procs[0].pid}/maps")), "the front end has no driver"

    prompts = tiny.make_prompts(8, seed=3)

    async def greedy():
        outs = await asyncio.gather(*[engine.async_generate(
            input_ids=p, sampling_params={"temperature": 0.0,
                                          "max_new_tokens": 6})
            for p in prompts])
        return [o["output_ids"] for o in outs]
    got = engine_loop.run(greedy())
    m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        want = [m.generate(torch.tensor([p]), max_new_tokens=6,
                           do_sample=False)[0, len(p):].tolist()
                for p in prompts]
    assert got == want

