# SPDX-License-Identifier: MIT
"""v05 as sglang's plugin (entry point group ``sglang.srt.plugins``, name
``v05``): the /v05 routes on sglang's HTTP server, over its
TokenizerManager.

    SGLANG_PLUGINS=v05 python -m sglang.launch_server --model-path M ...

sglang 0.5.23 runs every plugin of the group in every process it starts
(``load_plugins()``: the server's main process, each scheduler, the
detokenizer; sglang/srt/plugins/__init__.py) unless ``SGLANG_PLUGINS``
names the ones to run. v05 acts only where it is asked to: when
``SGLANG_PLUGINS`` names it, and in the main process, where the HTTP app
(``sglang.srt.entrypoints.http_server.app``) and the TokenizerManager live;
anywhere else ``load`` returns having done nothing. There it registers a
hook run before ``http_server.launch_server`` (HookRegistry, BEFORE),
which adds the routes to the app and creates the segment; the
TokenizerManager is looked up per request (``get_global_state()``), as
sglang's own routes do. Tensor parallelism changes nothing here: the
ranks are scheduler processes behind the TokenizerManager.

With ``--tokenizer-worker-num N > 1`` uvicorn's worker processes import
the app by path (``SGLANG_HTTP_SERVER_APP_PATH``) and never run the
plugins: not supported by this spike (docs/SERVERS.md says what it
takes).
"""

import asyncio
import copy
import itertools
import logging
import multiprocessing
import os

from ..engines.driver import sample_seed
from .placement import dp_rank

__all__ = ["load", "SGLangEngine", "install", "placement_settings"]

log = logging.getLogger("v05.servers")
_ids = itertools.count()
_service = None
_installed = False


def _asked() -> bool:
    names = os.environ.get("SGLANG_PLUGINS", "")
    return "v05" in {x.strip() for x in names.split(",")}


def load() -> None:
    """The entry point: sglang calls it in each of its processes."""
    if not _asked() or multiprocessing.parent_process() is not None:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    HookRegistry.register("sglang.srt.entrypoints.http_server.launch_server",
                          _before_launch, HookType.BEFORE)


def _before_launch(*args, **kwargs):
    install(owner=0)


def _tokenizer_manager():
    from sglang.srt.entrypoints.http_server import get_global_state
    st = get_global_state()
    if st is None:
        raise RuntimeError("sglang's tokenizer manager is not up yet")
    return st.tokenizer_manager


def placement_settings(num_dp_ranks, schedule, *, affinity: bool,
                       priority: bool):
    """(ranks to pin over, second-wave priority or None) from sglang's
    data-parallel rank count (the range ``routed_dp_rank`` is checked
    against) and its schedule settings (``get_schedule()``)."""
    ranks = max(1, int(num_dp_ranks)) if affinity else 1
    prio = None
    if priority and schedule.enable_priority_scheduling:
        # One step ahead of a request without a priority, which gets the
        # default value: less than sglang's preemption threshold, so the
        # queue is reordered and nothing running is evicted for it. With
        # no default value those requests take the last place
        # (scheduler.py, _set_or_validate_priority) and a second wave may
        # preempt them (docs/SERVERS.md).
        base = schedule.default_priority_value or 0
        prio = base - 1 if schedule.schedule_low_priority_values_first \
            else base + 1
    return ranks, prio


class SGLangEngine:
    """The group service's view of sglang's TokenizerManager. affinity:
    pin a group's requests to one data-parallel rank (``routed_dp_rank``)
    when the server has several; priority: second-wave samples ahead of
    the rest when sglang schedules by priority
    (``--enable-priority-scheduling``). Both read from sglang's own
    settings on first use (the server's are set up by then)."""

    def __init__(self, *, affinity: bool = True, priority: bool = True):
        self.affinity, self.want_priority = affinity, priority
        self._placed = None  # (dp ranks, second wave's priority or None)

    def _settings(self):
        if self._placed is None:
            from sglang.srt.runtime_context import get_parallel, get_schedule
            self._placed = placement_settings(
                get_parallel().num_dp_ranks, get_schedule(),
                affinity=self.affinity, priority=self.want_priority)
        return self._placed

    def placement(self, uid, *, second_wave: bool) -> dict:
        """GenerateReqInput's fields that place a request of `uid`: its
        uid as ``routing_key`` always (sglang's ``--schedule-policy
        routing-key`` keeps a running key's requests together)."""
        ranks, prio = self._settings()
        kw = {"routing_key": uid}
        if ranks > 1:
            kw["routed_dp_rank"] = dp_rank(uid, ranks)
        if prio is not None and second_wave:
            kw["priority"] = prio
        return kw

    @staticmethod
    def prompt(p):
        return p if isinstance(p, str) else [int(t) for t in p]

    @staticmethod
    def params(sampling: dict, uid, batch: int, sample: int) -> dict:
        out = {"n": 1}
        for ours, theirs in (("max_tokens", "max_new_tokens"),
                             ("temperature", "temperature"),
                             ("top_p", "top_p"), ("top_k", "top_k"),
                             ("ignore_eos", "ignore_eos"),
                             ("stop_token_ids", "stop_token_ids")):
            if ours in sampling:
                out[theirs] = copy.copy(sampling[ours])
        if sampling.get("seed") is not None:
            out["sampling_seed"] = sample_seed(sampling["seed"], uid, batch,
                                               sample)
        return out

    async def generate(self, prompt, sampling, uid, sample: int, batch: int,
                       *, second_wave: bool):
        from sglang.srt.managers.io_struct import GenerateReqInput
        tm = _tokenizer_manager()
        rid = f"v05-{uid}-{batch}-{sample}-{next(_ids)}"
        kw = {"text": prompt} if isinstance(prompt, str) else \
            {"input_ids": prompt}
        obj = GenerateReqInput(
            sampling_params=self.params(sampling, uid, batch, sample),
            rid=rid, stream=False, **kw,
            **self.placement(uid, second_wave=second_wave))
        try:
            out = await tm.generate_request(obj, None).__anext__()
        except asyncio.CancelledError:
            tm.abort_request(rid)  # a second abort of a rid is ignored
            raise
        reason = (out.get("meta_info") or {}).get("finish_reason")
        if isinstance(reason, dict) and reason.get("type") == "abort":
            raise RuntimeError(f"sglang aborted request {rid}: "
                               f"{reason.get('message')}")
        return out

    @staticmethod
    def describe(out) -> dict:
        meta = out.get("meta_info") or {}
        reason = meta.get("finish_reason")
        return {"token_ids": list(out.get("output_ids") or ()),
                "text": out.get("text", ""),
                "finish_reason": reason.get("type")
                if isinstance(reason, dict) else reason,
                "prompt_tokens": meta.get("prompt_tokens"),
                "cached_tokens": meta.get("cached_tokens", 0)}


def install(owner: int):
    """The routes on sglang's app and this process's GroupService (once).
    Imported here: sglang imports this module in every process it starts,
    and only the server's main process gets this far."""
    global _service, _installed
    from sglang.srt.entrypoints import http_server

    from .config import from_env
    from .routes import make_router
    from .startup import start
    if _service is None:
        cfg = from_env()
        _service = start(cfg, SGLangEngine(affinity=cfg.affinity,
                                           priority=cfg.priority),
                         owner=owner)
        log.info("v05: sglang front end %d serves /v05 with segment %s",
                 owner, _service.plugin.name)
    if not _installed:
        http_server.app.include_router(make_router(lambda request:
                                                   _service))
        _installed = True
    return _service

