# SPDX-License-Identifier: MIT
"""A front end's start, the same for vLLM's endpoint plugin and sglang's
plugin: its configuration's scorer loaded, its segment created (or a
dead front end's taken over), its reaper started, its GroupService made
and closed at the process's exit.

The scorer is loaded before the segment is created: a bad import path
stops the server with the scorer's message (v05.servers.scorer.load) and
leaves nothing behind.
"""

import logging
import multiprocessing.util

from ..core.plugin import Plugin
from ..trainers.reaper import start_reaper
from ..trainers.report import report
from .config import ServerConfig
from .scorer import Scorer
from .service import GroupService, segment_name
from .takeover import settle

__all__ = ["start"]

log = logging.getLogger("v05.servers")


def start(cfg: ServerConfig, engine, *, owner: int,
          front_ends: int = 1) -> GroupService:
    scorer = Scorer(cfg.scorer, cfg.scorer_threads) if cfg.scorer else None
    try:
        # A dead front end's segment of the name is taken over (a config
        # that differs from the one it keeps is refused, naming it).
        plugin = Plugin.create(segment_name(cfg.segment, owner),
                               **cfg.plugin_args())
    except BaseException:
        if scorer is not None:
            scorer.close()
        raise
    try:
        taken = settle(plugin) if plugin.taken_over else None
        if not cfg.keep_segment:
            # vLLM force-kills its API servers at once on shutdown (its
            # --shutdown-timeout is 0 by default): the reaper removes the
            # segment then, and counts the groups it had in flight.
            start_reaper(plugin.name, cfg.report, {"owner": owner})
        svc = GroupService(plugin, engine, owner=owner, prefix=cfg.segment,
                           reward_timeout=cfg.reward_timeout_s,
                           front_ends=front_ends, scorer=scorer,
                           keep_segment=cfg.keep_segment)
    except BaseException:
        if scorer is not None:
            scorer.close()
        plugin.close(unlink=not cfg.keep_segment, force=True)
        raise
    if taken is not None:
        svc.counts["takeover_groups_lost"] = taken["groups_lost"]
        svc.counts["takeover_finals_lost"] = taken["finals_lost"]
        report(cfg.report, dict(taken, kind="takeover", owner=owner))
        log.warning("v05: front end %d took segment %s over: %d groups in "
                    "flight and %d final groups undelivered lost (their "
                    "clients are gone); %d rewards applied before, kept",
                    owner, plugin.name, taken["groups_lost"],
                    taken["finals_lost"], taken["rewards_applied"])
    # Run at this process's exit, also in the API-server processes that
    # multiprocessing started (they leave through os._exit, which skips
    # atexit): the segment is removed when the server stops (kept with
    # keep_segment); a killed server's is its reaper's, or the next
    # start's to take over.
    multiprocessing.util.Finalize(svc, svc.close, exitpriority=10)
    return svc
