# SPDX-License-Identifier: MIT
"""The server plugin's configuration, from the environment: ``V05_SERVER``
(a JSON object) or ``V05_SERVER_CONFIG`` (the path of a file holding one),
read when the server starts; a bad one stops the server with an error
naming the key (docs/SERVERS.md, "Configuration").

    {"segment": "serve",          segment <prefix>-fe<i> (/dev/shm/v05-...)
     "plugin": {"mode": ...},     Plugin.create's keyword arguments (here
                                  abort_records true, pad_multiple 1,
                                  max_batches max_prompts unless given:
                                  ServerConfig.plugin_args)
     "reward_timeout_s": 300,     a group waiting this long for a reward
                                  with nothing generating is dropped
     "report": PATH,              the reapers' report (JSON lines)
     "scorer": "pkg.mod:fn",      the rewards of samples no one pushes one
                                  for (v05.servers.scorer: its signature)
     "scorer_threads": 2,         the scorer's thread pool
     "keep_segment": false,       true: a stopped or killed front end's
                                  segment stays (no reaper) and the next
                                  start takes it over (v05.servers.takeover)
     "affinity": true,            a group's requests pinned to one
                                  data-parallel rank (hash of its uid)
     "priority": true}            second-wave samples first, where the
                                  engine schedules by priority
"""

import dataclasses
import inspect
import json
import os
from typing import Any, Dict, Optional

from ..core.config import make_config
from .scorer import check_path

__all__ = ["ServerConfig", "from_env", "parse"]

DEFAULT_SEGMENT = "serve"
# The library's default max_prompts, and the most batches a segment
# holds (plugin/config.c, shm/layout.h V05_BATCHES_MAX).
DEFAULT_MAX_PROMPTS = 4096
BATCHES_MAX = 4096


@dataclasses.dataclass
class ServerConfig:
    segment: str = DEFAULT_SEGMENT
    plugin: Dict[str, Any] = dataclasses.field(default_factory=dict)
    reward_timeout_s: float = 300.0
    report: Optional[str] = None
    scorer: Optional[str] = None
    scorer_threads: int = 2
    keep_segment: bool = False
    affinity: bool = True
    priority: bool = True

    def plugin_args(self) -> Dict[str, Any]:
        """Plugin.create's keyword arguments: `plugin`, with abort records
        on (an abort posted to another front end reaches the group's
        owner as one, docs/SERVERS.md), pad_multiple 1 and max_batches
        max_prompts unless it says otherwise. A server runs each group
        as a batch of its own (v05.servers.groups): the pad of v05-eb,
        v05 and the fixed modes, which rounds a batch's second wave up to
        a multiple of 32 samples for an in-process batch of many prompts
        on tensor-parallel ranks, would take every second wave to k_max;
        and the library's 64 batches would cap the groups in flight at 64
        where the prompt table holds max_prompts."""
        prompts = self.plugin.get("max_prompts", DEFAULT_MAX_PROMPTS)
        return {"abort_records": True, "pad_multiple": 1,
                "max_batches": min(prompts, BATCHES_MAX), **self.plugin}


def _plugin_keys():
    """Plugin.create's keyword arguments: make_config's and on_stale."""
    return [p for p in inspect.signature(make_config).parameters
            if p != "name"] + ["on_stale"]


def parse(raw: Any, where: str) -> ServerConfig:
    if not isinstance(raw, dict):
        raise ValueError(f"v05 server: {where} must be a JSON object")
    known = ("segment", "plugin", "reward_timeout_s", "report", "scorer",
             "scorer_threads", "keep_segment", "affinity", "priority")
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"v05 server: {where} has unknown key "
                         f"{unknown[0]!r} (known: {', '.join(known)})")
    timeout = raw.get("reward_timeout_s", 300.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= 86400:
        raise ValueError(f"v05 server: {where} reward_timeout_s must be a "
                         f"number of seconds in (0, 86400], not {timeout!r}")
    report = raw.get("report")
    if report is not None and not isinstance(report, str):
        raise ValueError(f"v05 server: {where} report must be a path")
    seg = raw.get("segment", DEFAULT_SEGMENT)
    if not isinstance(seg, str) or not seg or "/" in seg:
        raise ValueError(f"v05 server: {where} segment must be a name "
                         f"without '/', not {seg!r}")
    plugin = raw.get("plugin", {})
    if not isinstance(plugin, dict):
        raise ValueError(f"v05 server: {where} plugin must be an object of "
                         "Plugin.create's keyword arguments")
    bad = sorted(set(plugin) - set(_plugin_keys()))
    if bad:
        raise ValueError(f"v05 server: {where} plugin.{bad[0]} is not a "
                         "Plugin.create argument")
    scorer = raw.get("scorer")
    if scorer is not None:
        check_path(scorer, where)
    threads = raw.get("scorer_threads", 2)
    if type(threads) is not int or not 1 <= threads <= 64:
        raise ValueError(f"v05 server: {where} scorer_threads must be an "
                         f"integer in [1, 64], not {threads!r}")
    flags = {}
    for key, default in (("keep_segment", False), ("affinity", True),
                         ("priority", True)):
        v = raw.get(key, default)
        if not isinstance(v, bool):
            raise ValueError(f"v05 server: {where} {key} must be true or "
                             f"false, not {v!r}")
        flags[key] = v
    return ServerConfig(seg, dict(plugin), float(timeout), report, scorer,
                        threads, **flags)


def from_env(environ=os.environ) -> ServerConfig:
    text, path = environ.get("V05_SERVER"), environ.get("V05_SERVER_CONFIG")
    if text and path:
        raise ValueError("v05 server: set V05_SERVER or V05_SERVER_CONFIG, "
                         "not both")
    if path:
        with open(path) as f:
            text, where = f.read(), path
    else:
        where = "V05_SERVER"
    if not text:
        return ServerConfig()
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ValueError(f"v05 server: {where} is not JSON: {e}") from None
    return parse(raw, where)
