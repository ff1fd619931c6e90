# SPDX-License-Identifier: MIT
"""GET /v05/metrics: Prometheus text for a front end of the server
(docs/SERVERS.md, "Counters").

Two collectors in one registry:
- the project's exporter, ``v05.core.metrics.Collector``, once per front
  end's segment (``<prefix>-fe<i>``, i < front_ends): the series of
  docs/OBSERVABILITY.md, named after the counters ``v05ctl stat`` prints.
  It reads each segment by name through a read-only Observer, so whichever
  front end the kernel hands a scrape to answers for all of them;
- this front end's own counts (``GroupService.counts``, described in
  ``COUNTS`` below) as ``v05_server_<name>_total`` counters, and the
  groups and engine requests it runs now as gauges, each labelled with its
  own segment: they live in the front end's memory, not in a segment.

prometheus_client is imported when the route first runs (both engine
environments have it: vLLM and sglang serve their own /metrics with it).
"""

from typing import List

__all__ = ["COUNTS", "registry", "exposition"]

# The service's counts: (name, help). GroupService.counts has exactly
# these keys; /v05/stats shows them under "server", the route below as
# v05_server_<name>_total.
COUNTS = [
    ("groups", "Groups started on this front end."),
    ("final", "Groups that ended with their final record."),
    ("aborted", "Groups aborted (the abort route, a client gone, an abort "
                "through another front end)."),
    ("failed", "Groups whose run failed (the stream ended with an error)."),
    ("reward_timeouts", "Groups dropped: no reward came for "
                        "reward_timeout_s with nothing generating."),
    ("rewards", "Rewards pushed over HTTP into this front end's segment."),
    ("rewards_forwarded", "Rewards pushed over HTTP into another front "
                          "end's segment."),
    ("reward_duplicates", "Rewards posted again with the value received "
                          "before (a resent POST): acknowledged, not "
                          "pushed again."),
    ("aborts_forwarded", "Aborts sent to another front end's segment."),
    ("rewards_scored", "Rewards the configured scorer gave (no reward had "
                       "been pushed for the sample)."),
    ("scores_unused", "Scorer results not used: a reward had been pushed "
                      "for the sample meanwhile, or its group had ended."),
    ("scorer_errors", "Groups dropped because the scorer raised or gave "
                      "no finite number in [-1, 1]."),
    ("takeover_groups_lost", "Groups in flight in the segment this front "
                             "end took over at its start (their clients "
                             "are gone): cancelled."),
    ("takeover_finals_lost", "Final groups of the segment taken over whose "
                             "final record had not reached a client: "
                             "released."),
]


class _ServerCollector:
    def __init__(self, svc):
        self.svc = svc

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import (CounterMetricFamily,
                                            GaugeMetricFamily)
        svc = self.svc
        seg = [svc.plugin.name]
        for name, doc in COUNTS:
            m = CounterMetricFamily(f"v05_server_{name}", doc,
                                    labels=["segment"])
            m.add_metric(seg, svc.counts[name])
            yield m
        st = svc.stats()
        for name, key, doc in (
                ("v05_server_groups_running", "running",
                 "Groups running on this front end."),
                ("v05_server_requests_running", "requests",
                 "Engine requests of v05's groups running or queued.")):
            g = GaugeMetricFamily(name, doc, labels=["segment"])
            g.add_metric(seg, st[key])
            yield g


def registry(svc, segments: List[str]):
    """The route's registry: the exporter for every front end's segment
    (`segments`, their names) and this front end's own counts. Made once
    per service (each exporter keeps its Observer open between scrapes)."""
    from prometheus_client import CollectorRegistry

    from ..core.metrics import Collector
    reg = CollectorRegistry(auto_describe=False)
    for name in segments:
        reg.register(Collector(name))
    reg.register(_ServerCollector(svc))
    return reg


def exposition(reg):
    """(body, content type) of one scrape."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    return generate_latest(reg), CONTENT_TYPE_LATEST
