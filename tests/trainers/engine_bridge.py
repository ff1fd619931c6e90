# SPDX-License-Identifier: MIT
"""A real vLLM AsyncLLM behind a pipe, run with the engine environment's
Python (build-venv/engine, scripts/setup-engine) by tiny.EngineServer in
the trainers' environment, where vLLM cannot be installed.

    python engine_bridge.py MODEL_DIR

stdin: one JSON object a line, {"id", "prompt_ids", "max_tokens",
"temperature", "seed"} (a request) or {"abort": id}. stdout: {"ready":
true} once the engine is up, then {"id", "token_ids", "log_probs"} or
{"id", "error"} per request, in completion order. vLLM's own output goes
to stderr. EOF on stdin: the engine shuts down and the bridge exits."""
import asyncio
import json
import os
import sys


async def main(path):
    # The protocol keeps the real stdout; everything else printed goes to
    # stderr (vLLM logs to stdout).
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from v05.demos import tiny

    engine = tiny.vllm_engine(path, max_num_seqs=32)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 sys.stdin)

    def send(obj):
        proto.write(json.dumps(obj) + "\n")

    tasks = {}

    async def one(req):
        rid = req["id"]
        try:
            sp = SamplingParams(n=1, max_tokens=req["max_tokens"],
                                temperature=req["temperature"], seed=req["seed"],
                                logprobs=0, output_kind=RequestOutputKind.FINAL_ONLY)
            final = None
            async for out in engine.generate({"prompt_token_ids": req["prompt_ids"]},
                                             sp, rid):
                final = out
            c = final.outputs[0]
            ids = list(c.token_ids)
            lps = [float(c.logprobs[i][t].logprob) for i, t in enumerate(ids)] \
                if c.logprobs else None
            send({"id": rid, "token_ids": ids, "log_probs": lps})
        except asyncio.CancelledError:  # aborted: the generator's close aborts it
            pass
        except Exception as e:  # reported to the caller
            send({"id": rid, "error": repr(e)})
        finally:
            tasks.pop(rid, None)

    send({"ready": True})
    while True:
        line = await reader.readline()
        if not line:
            break
        req = json.loads(line)
        if "abort" in req:
            t = tasks.get(req["abort"])
            if t is not None:
                t.cancel()
            continue
        tasks[req["id"]] = asyncio.create_task(one(req))
    for t in list(tasks.values()):
        t.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
