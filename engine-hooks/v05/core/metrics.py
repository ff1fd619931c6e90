# SPDX-License-Identifier: MIT
"""Prometheus metrics for v05, in the style of vLLM's and sglang's (a
prefix, ``_total`` counters, histograms for sizes and latencies), read from
the segment's counters at scrape time through a read-only Observer.

Add them to the engine's existing ``/metrics`` (vLLM and sglang serve
``prometheus_client``'s default registry)::

    from prometheus_client import REGISTRY
    import v05.metrics
    REGISTRY.register(v05.metrics.Collector("run1"))

The collector reads shared memory by segment name, so it can live in
whichever process serves ``/metrics`` (the API server), not only the one
running the plugin. With ``PROMETHEUS_MULTIPROC_DIR`` set, vLLM builds a
fresh registry per scrape: register the collector there, or serve v05's
metrics on a port of their own with :func:`serve`.

Series (every one labelled ``segment="<name>"``):

- counters: ``v05_rewards_applied_total``, ``v05_rewards_rejected_total``
  {reason}, ``v05_prompts_submitted_total``, ``v05_prompts_refused_total``,
  ``v05_samples_issued_total``, ``v05_samples_padded_total``,
  ``v05_samples_saved_total`` (against k_max), ``v05_decisions_total``
  {kind}, ``v05_rounds_total``, ``v05_halts_total``,
  ``v05_batches_submitted_total``, ``v05_batches_done_total``,
  ``v05_releases_total``, ``v05_lane_claims_total``,
  ``v05_lane_reclaims_total``, ``v05_lane_overruns_total``,
  ``v05_lanes_cut_off_total``, ``v05_broker_refused_total``,
  ``v05_broker_backoff_total``, ``v05_side_files_replaced_total``,
  ``v05_replaces_undone_total``, ``v05_replaces_cleaned_total``,
  ``v05_eb_parts_refused_total``,
  ``v05_waits_total``, ``v05_wakeups_total``, ``v05_journal_records_total``,
  ``v05_journal_bytes_total``, ``v05_journal_errors_total``,
  ``v05_takeovers_total``;
- gauges: ``v05_prompts`` {state: collecting, held, final_unreleased},
  ``v05_lane_fill`` and ``v05_lane_high_water`` {lane} for lanes ever
  claimed, ``v05_owner_alive``, ``v05_journal_ok``;
- histograms: ``v05_group_size`` (k of each final group) and
  ``v05_decision_latency_seconds`` (from the reward completing a group's
  samples to its decision).
"""

from .observer import Observer

__all__ = ["Collector", "serve", "REJECT_REASONS"]

REJECT_REASONS = ("nonfinite", "range", "unknown", "not_issued", "duplicate",
                  "late", "corrupt")

# (metric name without _total, counter name, help)
_COUNTERS = [
    ("v05_rewards_applied", "rewards_applied", "Rewards applied to a group."),
    ("v05_prompts_submitted", "prompts_submitted", "Prompts accepted by submit."),
    ("v05_prompts_refused", "submit_rejected", "Prompts refused by submit."),
    ("v05_samples_issued", "samples_issued", "Samples handed out to generate."),
    ("v05_samples_padded", "samples_padded",
     "Samples added to round dispatches by padding."),
    ("v05_samples_saved", "samples_saved",
     "Samples not generated against k_max, over final groups."),
    ("v05_rounds", "rounds", "Round releases (rounds schedule)."),
    ("v05_halts", "halts", "Batch halts."),
    ("v05_batches_submitted", "batches_submitted", "Batches submitted."),
    ("v05_batches_done", "batches_done", "Batches with every prompt final."),
    ("v05_releases", "releases", "Final groups released by their reader."),
    ("v05_lane_claims", "lane_claims", "Producer lane claims."),
    ("v05_lane_reclaims", "lane_reclaims", "Lanes of dead producers reclaimed."),
    ("v05_lane_overruns", "lane_overruns",
     "Times a lane claimed more records than it holds."),
    ("v05_lanes_cut_off", "lanes_cut_off",
     "Lane windows cut off: most of their records were rejected."),
    ("v05_broker_refused", "broker_refused",
     "Connections the producer broker refused (not on the allow-list)."),
    ("v05_broker_backoff", "broker_backoff",
     "Connections the broker sent away while their uid's backoff ran."),
    ("v05_side_files_replaced", "side_files_replaced",
     "Broken side files (lanes, doorbell) a takeover made again."),
    ("v05_replaces_undone", "replaces_undone",
     "Replaces killed between their exchanges, undone: the old segment whole."),
    ("v05_replaces_cleaned", "replaces_cleaned",
     "Temporaries of killed replaces removed by the next owner."),
    ("v05_eb_parts_refused", "eb_parts_refused",
     "Other engines' parts of v05-eb's fit refused: no fold makes them."),
    ("v05_prompts_skipped", "prompts_skipped",
     "Prompts the rule took no sample of (v05-pg's skip: a DROP, k = 0)."),
    ("v05_waits", "waits", "Doorbell waits armed."),
    ("v05_wakeups", "wakeups", "Waits that woke to work."),
    ("v05_journal_records", "journal_records", "Groups written to the journal."),
    ("v05_journal_bytes", "journal_bytes", "Bytes written to the journal."),
    ("v05_journal_errors", "journal_errors", "Journal write or sync failures."),
    ("v05_takeovers", "takeovers", "Segment takeovers after an owner died."),
]

# Latency buckets: the library's histogram has power-of-two buckets
# [2^b, 2^(b+1)) ns; exposed from 1 us (b = 10) to 137 s (b = 37).
_LAT_FIRST, _LAT_LAST = 10, 37


class Collector:
    """A ``prometheus_client`` collector for segment ``name``. The segment
    is opened at the first scrape (and again after it was replaced), so the
    collector can be registered before the plugin exists."""

    def __init__(self, name: str, *, any_uid: bool = False):
        self.name = name
        self.any_uid = any_uid
        self._obs = None

    def _observer(self):
        if self._obs is None:
            self._obs = Observer(self.name, any_uid=self.any_uid)
        return self._obs

    def snapshot(self):
        """(counters, info, lanes), or None when the segment is absent."""
        try:
            o = self._observer()
            return o.counters(), o.info(), o.lanes()
        except OSError:
            if self._obs is not None:
                self._obs.close()
                self._obs = None
            return None

    def describe(self):
        # Nothing to check at registration: the segment may not exist yet.
        return []

    def collect(self):
        from prometheus_client.core import (CounterMetricFamily,
                                            GaugeMetricFamily,
                                            HistogramMetricFamily)
        from prometheus_client.utils import floatToGoString

        snap = self.snapshot()
        if snap is None:
            return
        c, info, lanes = snap
        seg = [self.name]
        for metric, key, doc in _COUNTERS:
            m = CounterMetricFamily(metric, doc, labels=["segment"])
            m.add_metric(seg, c[key])
            yield m
        m = CounterMetricFamily("v05_rewards_rejected",
                                "Rewards rejected, by reason.",
                                labels=["segment", "reason"])
        for r in REJECT_REASONS:
            m.add_metric(seg + [r], c["rejected_" + r])
        yield m
        m = CounterMetricFamily("v05_decisions", "Decisions, by kind.",
                                labels=["segment", "kind"])
        for kind in ("sample", "final", "drop"):
            m.add_metric(seg + [kind], c["decisions_" + kind])
        yield m

        g = GaugeMetricFamily("v05_prompts", "Prompts in the segment, by state.",
                              labels=["segment", "state"])
        held = min(c["prompts_held"], c["prompts_open"])
        g.add_metric(seg + ["collecting"], c["prompts_open"] - held)
        g.add_metric(seg + ["held"], held)
        g.add_metric(seg + ["final_unreleased"], c["prompts_final"])
        yield g
        fill = GaugeMetricFamily("v05_lane_fill",
                                 "Records published and not yet drained.",
                                 labels=["segment", "lane"])
        high = GaugeMetricFamily("v05_lane_high_water",
                                 "Largest lane fill the plugin has seen.",
                                 labels=["segment", "lane"])
        for lane in lanes:
            if lane["claims"] or lane["consumed"]:
                fill.add_metric(seg + [str(lane["lane"])], lane["fill"])
                high.add_metric(seg + [str(lane["lane"])], lane["high_water"])
        yield fill
        yield high
        g = GaugeMetricFamily("v05_owner_alive",
                              "1 if the plugin's process is alive.",
                              labels=["segment"])
        g.add_metric(seg, 1.0 if info["owner_alive"] else 0.0)
        yield g
        g = GaugeMetricFamily("v05_journal_ok",
                              "1 if the journal is on and healthy.",
                              labels=["segment"])
        g.add_metric(seg, 1.0 if info["journal_state"] == "ok" else 0.0)
        yield g

        kh = c["k_hist"]
        buckets, acc = [], 0
        for k in range(1, max(info["k_max"], 1) + 1):
            acc += kh.get(k, 0)
            buckets.append((floatToGoString(k), acc))
        total = sum(kh.values())
        buckets.append(("+Inf", total))
        h = HistogramMetricFamily("v05_group_size",
                                  "Samples per final group (k).",
                                  labels=["segment"])
        h.add_metric(seg, buckets, float(sum(k * n for k, n in kh.items())))
        yield h

        lh = c["latency_hist"]
        buckets, acc = [], 0
        for b in range(_LAT_LAST + 1):
            acc += lh.get(b, 0)
            if b >= _LAT_FIRST:
                buckets.append((floatToGoString(2.0 ** (b + 1) / 1e9), acc))
        buckets.append(("+Inf", sum(lh.values())))
        h = HistogramMetricFamily(
            "v05_decision_latency_seconds",
            "From the reward completing a group's samples to its decision.",
            labels=["segment"])
        h.add_metric(seg, buckets, c["latency_sum_ns"] / 1e9)
        yield h


def serve(names, port: int, addr: str = "0.0.0.0"):
    """Serve the metrics of the segments ``names`` on their own port (for
    when the engine's /metrics cannot take a collector). Returns the
    registry."""
    from prometheus_client import CollectorRegistry, start_http_server

    reg = CollectorRegistry()
    for n in ([names] if isinstance(names, str) else names):
        reg.register(Collector(n))
    start_http_server(port, addr=addr, registry=reg)
    return reg
