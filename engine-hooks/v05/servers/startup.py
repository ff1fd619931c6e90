# SPDX-License-Identifier: MIT
"""A front end's start, the same for vLLM's endpoint plugin and sglang's
plugin: its configuration's scorer loaded, its segment created, its
reaper started, its GroupService made and closed at the process's exit.

The scorer is loaded before the segment is created: a bad import path
stops the server with the scorer's message (v05.servers.scorer.load) and
leaves nothing behind.
"""

import multiprocessing.util

from ..core.plugin import Plugin
from ..trainers.verl.run import start_reaper
from .config import ServerConfig
from .scorer import Scorer
from .service import GroupService, segment_name

__all__ = ["start"]


def start(cfg: ServerConfig, engine, *, owner: int,
          front_ends: int = 1) -> GroupService:
    scorer = Scorer(cfg.scorer, cfg.scorer_threads) if cfg.scorer else None
    try:
        plugin = Plugin.create(segment_name(cfg.segment, owner),
                               **cfg.plugin_args())
    except BaseException:
        if scorer is not None:
            scorer.close()
        raise
    try:
        # vLLM force-kills its API servers at once on shutdown (its
        # --shutdown-timeout is 0 by default): the reaper removes the
        # segment then, and counts the groups it had in flight.
        start_reaper(plugin.name, cfg.report, {"owner": owner})
        svc = GroupService(plugin, engine, owner=owner, prefix=cfg.segment,
                           reward_timeout=cfg.reward_timeout_s,
                           front_ends=front_ends, scorer=scorer)
    except BaseException:
        if scorer is not None:
            scorer.close()
        plugin.close(unlink=True, force=True)
        raise
    # Run at this process's exit, also in the API-server processes that
    # multiprocessing started (they leave through os._exit, which skips
    # atexit): the segment is removed when the server stops; a killed
    # server leaves it to its reaper.
    multiprocessing.util.Finalize(svc, svc.close, exitpriority=10)
    return svc
