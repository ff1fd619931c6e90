/* SPDX-License-Identifier: MIT */
/* Counter names, as v05ctl and the Prometheus exporter show them. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mechanics/internal.h"
#include "../shm/error.h"

static const char *const named[V05_C_NAMED_END] = {
	[V05_C_REWARDS_APPLIED] = "rewards_applied",
	[V05_C_REJ_NONFINITE] = "rejected_nonfinite",
	[V05_C_REJ_RANGE] = "rejected_range",
	[V05_C_REJ_UNKNOWN] = "rejected_unknown",
	[V05_C_REJ_NOT_ISSUED] = "rejected_not_issued",
	[V05_C_REJ_DUPLICATE] = "rejected_duplicate",
	[V05_C_REJ_LATE] = "rejected_late",
	[V05_C_REJ_CORRUPT] = "rejected_corrupt",
	[V05_C_PROMPTS_SUBMITTED] = "prompts_submitted",
	[V05_C_SUBMIT_REJECTED] = "submit_rejected",
	[V05_C_SAMPLES_ISSUED] = "samples_issued",
	[V05_C_SAMPLES_SAVED] = "samples_saved",
	[V05_C_SAMPLES_PADDED] = "samples_padded",
	[V05_C_DEC_SAMPLE] = "decisions_sample",
	[V05_C_DEC_FINAL] = "decisions_final",
	[V05_C_DEC_DROP] = "decisions_drop",
	[V05_C_ROUNDS] = "rounds",
	[V05_C_HALTS] = "halts",
	[V05_C_BATCHES_SUBMITTED] = "batches_submitted",
	[V05_C_BATCHES_DONE] = "batches_done",
	[V05_C_RELEASES] = "releases",
	[V05_C_LANE_CLAIMS] = "lane_claims",
	[V05_C_LANE_RECLAIMS] = "lane_reclaims",
	[V05_C_LANE_OVERRUNS] = "lane_overruns",
	[V05_C_WAITS] = "waits",
	[V05_C_WAKEUPS] = "wakeups",
	[V05_C_JOURNAL_RECORDS] = "journal_records",
	[V05_C_JOURNAL_BYTES] = "journal_bytes",
	[V05_C_JOURNAL_WRITES] = "journal_writes",
	[V05_C_JOURNAL_ERRORS] = "journal_errors",
	[V05_C_TAKEOVERS] = "takeovers",
	[V05_C_PROMPTS_OPEN] = "prompts_open",
	[V05_C_PROMPTS_HELD] = "prompts_held",
	[V05_C_PROMPTS_FINAL] = "prompts_final",
	[V05_C_LATENCY_COUNT] = "latency_count",
	[V05_C_LATENCY_SUM_NS] = "latency_sum_ns",
	[V05_C_COMPLETIONS] = "completions",
	[V05_C_COMPLETIONS_SKIPPED] = "completions_skipped",
	[V05_C_RELEASES_BAD] = "releases_bad",
	[V05_C_PROMPTS_CANCELLED] = "prompts_cancelled",
	[V05_C_READER_RELEASES] = "reader_releases",
	[V05_C_BROKER_REFUSED] = "broker_refused",
	[V05_C_LANES_CUT_OFF] = "lanes_cut_off",
	[V05_C_BROKER_BACKOFF] = "broker_backoff",
	[V05_C_SIDE_FILES_REPLACED] = "side_files_replaced",
	[V05_C_REPLACES_UNDONE] = "replaces_undone",
	[V05_C_REPLACES_CLEANED] = "replaces_cleaned",
	[V05_C_EB_PARTS_REFUSED] = "eb_parts_refused",
	[V05_C_PROMPTS_SKIPPED] = "prompts_skipped",
	[V05_C_ABORTS_APPLIED] = "aborts_applied",
	[V05_C_REJ_KIND] = "rejected_kind",
};

static char hist_names[65 + V05_C_LAT_BUCKETS][24];
static pthread_once_t hist_once = PTHREAD_ONCE_INIT;

static void make_hist_names(void)
{
	for (int i = 0; i < 65; i++)
		snprintf(hist_names[i], sizeof(hist_names[i]), "k_hist_%d", i);
	for (int i = 0; i < V05_C_LAT_BUCKETS; i++)
		snprintf(hist_names[65 + i], sizeof(hist_names[0]),
			 "latency_hist_%d", i);
}

V05_API const char *v05_counter_name(uint32_t i)
{
	pthread_once(&hist_once, make_hist_names);
	if (i < V05_C_NAMED_END)
		return named[i];
	if (i >= V05_C_K_HIST && i < V05_C_K_HIST + 65)
		return hist_names[i - V05_C_K_HIST];
	if (i >= V05_C_LAT_HIST && i < V05_C_LAT_HIST + V05_C_LAT_BUCKETS)
		return hist_names[65 + i - V05_C_LAT_HIST];
	return NULL;
}

V05_API int v05_counters(struct v05_plugin *p, uint64_t *out, uint32_t n)
{
	if (!p || !out)
		return v05__fail(-EINVAL, "counters: NULL argument");
	if (n > V05_COUNTERS)
		n = V05_COUNTERS;
	for (uint32_t i = 0; i < n; i++)
		out[i] = v05_load_relaxed(&p->seg.state->counters[i]);
	return (int)n;
}
