# SPDX-License-Identifier: MIT
"""What the real-engine tests need of an engine, one kit per adapter
(vLLM's AsyncLLM through VLLMRollout, sglang's Engine through
SGLangRollout), so that tests/engines-common asserts the same things of
both: the engine started on a loop of its own for the session, the
adapter, sampling parameters, prompts, an output's tokens, a recording
wrapper of the engine (each request, its prompt and parameters, the
requests aborted), the requests the engine holds now, and the engine found
idle. The tests of one engine only (tests/engines, tests/engines-sglang)
use the same kit.

Engines are imported when a kit is made, so that this module imports in
either environment (and the plugin's package in neither)."""
import asyncio
import importlib.util
import threading
import time

import numpy as np

from v05.demos import tiny

PROMPTS = 64
PARAMS = dict(cost=0.0039, k_init=4, k_max=16, k_step=2)
# The engines' scheduler limit in these tests: a batch's requests queue,
# so a test can fail a batch while many of them are still in the engine.
SLOTS = 32

ENGINES = ("vllm", "sglang")


def available():
    """The engines this Python can import (scripts/setup-engine makes
    vLLM's environment, scripts/setup-sglang sglang's)."""
    return [e for e in ENGINES if importlib.util.find_spec(e) is not None]


class EngineLoop:
    """An engine on an event loop in a thread of its own, for the whole
    session: both engines bind to the first loop they run on; each test
    hands that loop its coroutine (run) and waits for the result."""

    def __init__(self, kit, model, **engine_args):
        self.kit = kit
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="engine-loop", daemon=True)
        self.thread.start()
        self.engine = self.run(self._start(model, engine_args), timeout=900)
        self.closed = False

    async def _start(self, model, engine_args):
        # Made on the running loop: the engine takes it.
        return self.kit.start(model, **engine_args)

    def run(self, coro, timeout=900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.kit.shutdown(self.engine)
        self.run(self._drain(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()
        # Gone now, while the interpreter is whole: an engine object left
        # to the interpreter's exit shuts down again there, and fails.
        self.engine = None
        for key, el in list(_loops.items()):
            if el is self:
                del _loops[key]

    @staticmethod
    async def _drain():
        """The engine's own tasks (vLLM's output handler, sglang's receive
        loop) end when cancelled; a loop closed under them would report
        them destroyed while pending."""
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


_loops = {}


def engine_loop(kit, model, **engine_args) -> EngineLoop:
    """The session's engine of this kind and these arguments (one, whoever
    asks: tests/engines and tests/engines-common share it)."""
    key = (kit.name, model, tuple(sorted(engine_args.items())))
    el = _loops.get(key)
    if el is None or el.closed:
        el = _loops[key] = EngineLoop(kit, model, **engine_args)
    return el


def rid_uid_sample(rid):
    """The adapters' request id: v05-BATCH-UID-SAMPLE-COUNTER."""
    head, sample, _ = rid.rsplit("-", 2)
    return head.split("-", 2)[2], int(sample)


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


def batch_items(kit, step, n=PROMPTS, seed=0):
    """(uid, prompt, prior) of n of the tiny model's prompts, the priors
    spread over [-0.9, 0.9]; and uid -> the prompt's token ids."""
    prompts = tiny.make_prompts(n, seed=seed)
    priors = np.linspace(-0.9, 0.9, n)
    items = [(f"s{step}-p{i}", kit.prompt(p), float(v))
             for i, (p, v) in enumerate(zip(prompts, priors))]
    return items, {u: p for (u, _, _), p in zip(items, prompts)}


class VLLMKit:
    name = "vllm"

    def __init__(self):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        self._sp, self._tp = SamplingParams, TokensPrompt

    def start(self, model, **args):
        return tiny.vllm_engine(model, **{"max_num_seqs": SLOTS, **args})

    def shutdown(self, engine):
        engine.shutdown()

    def tp2_args(self):
        """TP 2 on vLLM's CPU build: one worker process per rank, each on
        a core of its own (VLLM_CPU_OMP_THREADS_BIND, read when the engine
        starts its workers)."""
        return dict(tensor_parallel_size=2), {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}

    def tp2_processes(self, children):
        """The TP ranks' processes: vLLM's workers, each bound to its core."""
        return {p.name(): p.cpu_affinity() for p in children
                if p.name().startswith("VLLM::Worker_TP")}

    tp2_expected = {"VLLM::Worker_TP0": [0], "VLLM::Worker_TP1": [1]}

    def rollout(self, engine, plugin, sampling, **kw):
        from v05.engines.vllm import VLLMRollout
        return VLLMRollout(engine, plugin, sampling, **kw)

    def sampling(self, temperature=1.0, max_tokens=4, ignore_eos=False,
                 seed=None):
        return self._sp(temperature=temperature, max_tokens=max_tokens,
                        detokenize=False, ignore_eos=ignore_eos, seed=seed)

    def prompt(self, ids):
        return self._tp(prompt_token_ids=list(ids))

    @staticmethod
    def tokens(out):
        return list(out.outputs[0].token_ids)

    @staticmethod
    def finished(out):
        return out is not None and out.finished

    def recorder(self, engine):
        return VLLMRecorder(engine)

    @staticmethod
    def in_flight(engine):
        """The request ids the engine's front end holds now."""
        return set(engine.output_processor.external_req_ids)

    @staticmethod
    async def idle(engine, tries=100):
        """No request left in the front end or in the engine core. The
        core reports an aborted request as finished in its next step, so
        has_work may read True once or twice after an abort: each utility
        call is a round trip to the core's busy loop, which steps in
        between."""
        if engine.get_num_unfinished_requests() != 0:
            return False
        for _ in range(tries):
            if not await engine.engine_core.call_utility_async("has_work"):
                return True
        return False


class VLLMRecorder:
    """The real AsyncLLM, with each generate call's request id, prompt and
    sampling parameters kept, and the requests whose generator was closed
    before their final output (vLLM aborts those); everything else is the
    engine's own."""

    def __init__(self, engine):
        self.engine = engine
        self.calls, self.prompts, self.params, self.aborted = [], [], [], []

    def generate(self, prompt, sampling_params, request_id, **kw):
        self.calls.append(request_id)
        self.prompts.append(prompt)
        self.params.append(sampling_params)
        return self._watch(self.engine.generate(prompt, sampling_params,
                                                request_id, **kw),
                           request_id)

    async def _watch(self, gen, request_id):
        final = False
        try:
            async for out in gen:
                final = out.finished
                yield out
        finally:
            if not final:
                self.aborted.append(request_id)

    def seeds(self):
        return [sp.seed for sp in self.params]

    def check_requests(self, prompt_of, sampling):
        """What reached the engine was rendered by its Renderer (vLLM's
        recommended path), never a raw prompt (deprecated in 0.32), with
        n=1 and the caller's parameters."""
        assert self.prompts and all(isinstance(p, dict) and "type" in p
                                    for p in self.prompts)
        for rid, sp in zip(self.calls, self.params):
            assert sp.n == 1 and sp.max_tokens == sampling.max_tokens
            assert sp.temperature == sampling.temperature

    def __getattr__(self, name):
        return getattr(self.engine, name)


class SGLangKit:
    name = "sglang"

    def __init__(self):
        import sglang  # noqa: F401
        _catch_child_failures()

    def start(self, model, **args):
        return tiny.sglang_engine(model, **{"max_running_requests": SLOTS,
                                            **args})

    def shutdown(self, engine):
        # Ends the scheduler and detokenizer processes (SIGQUIT ignored
        # while it does: a dying rank reports its peer's end with one).
        tiny.sglang_shutdown(engine)

    def tp2_args(self):
        """TP 2 on sglang's CPU engine: two scheduler processes, one per
        rank, gloo between them."""
        return dict(tp_size=2), {}

    def tp2_processes(self, children):
        return {p.name(): None for p in children
                if p.name().startswith("sglang::scheduler_TP")}

    tp2_expected = {"sglang::scheduler_TP0": None,
                    "sglang::scheduler_TP1": None}

    def rollout(self, engine, plugin, sampling, **kw):
        from v05.engines.sglang import SGLangRollout
        return SGLangRollout(engine, plugin, sampling, **kw)

    def sampling(self, temperature=1.0, max_tokens=4, ignore_eos=False,
                 seed=None):
        out = {"temperature": temperature, "max_new_tokens": max_tokens}
        if ignore_eos:
            out["ignore_eos"] = True
        if seed is not None:
            out["sampling_seed"] = seed
        return out

    @staticmethod
    def prompt(ids):
        return list(ids)

    @staticmethod
    def tokens(out):
        return list(out["output_ids"])

    @staticmethod
    def finished(out):
        # sglang's own output: finished, stopped or at full length
        return out is not None and \
            out["meta_info"]["finish_reason"]["type"] in ("length", "stop")

    def recorder(self, engine):
        return SGLangRecorder(engine)

    @staticmethod
    def in_flight(engine):
        """The rids sglang's tokenizer manager holds now."""
        return set(engine.tokenizer_manager.rid_to_state)

    @staticmethod
    async def idle(engine, tries=200):
        """No request left in sglang: none in the tokenizer manager
        (rid_to_state: an aborted request leaves it when the scheduler's
        abort answer comes back), and none running or waiting in the
        scheduler, read from a load snapshot the scheduler published after
        that (it publishes one on every pass of its idle loop). Each
        get_internal_state is a round trip to the scheduler, which runs its
        loop in between."""
        tm = engine.tokenizer_manager
        for _ in range(tries):
            if not tm.rid_to_state:
                break
            await tm.get_internal_state()
        else:
            return False
        mark = time.time()
        for _ in range(tries):
            await tm.get_internal_state()
            loads = await tm.get_loads()
            if loads and all(ld.timestamp > mark for ld in loads):
                return all(ld.num_running_reqs == 0 and
                           ld.num_waiting_reqs == 0 for ld in loads) and \
                    not tm.rid_to_state
        return False


class _AbortLog:
    """The real tokenizer manager, with each abort_request the rollout
    makes kept (by rid); everything else is the manager's own."""

    def __init__(self, tm, rids):
        self.tm, self.rids = tm, rids

    def abort_request(self, rid="", abort_all=False):
        self.rids.append(rid)
        return self.tm.abort_request(rid, abort_all)

    def __getattr__(self, name):
        return getattr(self.tm, name)


class SGLangRecorder:
    """The real sglang Engine, with each async_generate call's keyword
    arguments kept; the rollout's aborts go through _AbortLog (aborted)."""

    def __init__(self, engine):
        self.engine, self.kwargs, self.aborted = engine, [], []
        self.tokenizer_manager = _AbortLog(engine.tokenizer_manager,
                                           self.aborted)

    @property
    def calls(self):
        return [kw["rid"] for kw in self.kwargs]

    async def async_generate(self, **kw):
        self.kwargs.append(dict(kw, sampling_params=dict(kw["sampling_params"])))
        return await self.engine.async_generate(**kw)

    def seeds(self):
        return [kw["sampling_params"].get("sampling_seed")
                for kw in self.kwargs]

    def check_requests(self, prompt_of, sampling):
        """Each call: n=1, the caller's sampling parameters (a seed of the
        sample's own), not streamed, the prompt's token ids."""
        for c in self.kwargs:
            params = dict(c["sampling_params"])
            if "sampling_seed" in sampling:
                params["sampling_seed"] = sampling["sampling_seed"]
            assert params == {**sampling, "n": 1}
            assert c["stream"] is False
            assert c["input_ids"] == prompt_of[rid_uid_sample(c["rid"])[0]]

    def __getattr__(self, name):
        return getattr(self.engine, name)


def _catch_child_failures():
    """sglang's scheduler and detokenizer processes send their parent
    SIGQUIT when they fail; its own handler is installed only when the
    engine is made on the main thread, and here it is not. Fail the test
    running now with a message instead of dying without one."""
    import signal

    def child_failed(signum, frame):
        raise RuntimeError("an sglang child process failed (it sent "
                           "SIGQUIT); its traceback is in the log above")
    signal.signal(signal.SIGQUIT, child_failed)


KITS = {"vllm": VLLMKit, "sglang": SGLangKit}
