# SPDX-License-Identifier: MIT
"""What a front end does with the segment it took over at its start
(docs/SERVERS.md, "Restart"): the groups the dead front end had in flight
are counted lost and given up, nothing of them is applied twice.

A front end restarted on the same segment name (``"keep_segment": true``,
so that no reaper removed the dead one's segment) gets it through
``Plugin.create``'s takeover: the library rebuilds the prompt table, the
counters, v05-eb's running fit and the lanes from the segment, and
``recover()`` hands out again what the dead owner had handed out. The
groups cannot be recovered: each was a client's stream, and that
connection died with the process (no RL client re-attaches to a uid). So:
- every final group still held (decided, its final record not delivered)
  is released: counted ``finals_lost``;
- every batch with open prompts is cancelled (``Plugin.cancel``: its
  prompts leave the table, their slots are freed; the library counts them
  in ``prompts_cancelled``): counted ``groups_lost``;
- rewards still in the lanes for those prompts are refused when the new
  owner drains them (the prompt is gone, or its key is reused with a new
  gen): counted by the plugin as rejected, never applied; a reward the
  dead owner had applied stays applied once, in ``rewards_applied``.
A client that sends the same uid again starts a new group (a new gen).
"""

import logging
from typing import Any, Dict

from ..core.plugin import Plugin

__all__ = ["settle"]

log = logging.getLogger("v05.servers")


def settle(plugin: Plugin) -> Dict[str, Any]:
    """After a takeover: the dead owner's groups given up; what was lost,
    from the segment's own counters before and after."""
    before = plugin.stats()
    decisions = plugin.recover()
    finals = [d for d in decisions if d.kind in ("final", "drop")]
    for d in finals:
        plugin.release(d)
    batches = sorted({d.batch for d in decisions
                      if d.kind not in ("final", "drop")})
    lost = sum(plugin.cancel(b) for b in batches)
    after = plugin.stats()
    out = {"segment": plugin.name, "takeovers": after["takeovers"],
           "groups_lost": lost, "finals_lost": len(finals),
           "prompts_open_at_takeover": before["prompts_open"],
           "prompts_final_at_takeover": before["prompts_final"],
           "rewards_applied": after["rewards_applied"],
           "prompts_left_open": after["prompts_open"]}
    if after["prompts_open"] or after["prompts_final"]:
        # Not expected: recover() hands out every open prompt's batch.
        log.error("v05: segment %s taken over: %d prompts still open and "
                  "%d finals held after giving up the dead owner's groups",
                  plugin.name, after["prompts_open"], after["prompts_final"])
    return out
