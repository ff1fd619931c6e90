/* SPDX-License-Identifier: MIT */
/* Rendering of a segment snapshot: the stat table, its JSON, top's rates. */
#include "stat_view.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "v05-internal/shm.h"
#include "v05-internal/vocab.h"

int stat_take(struct v05_observer *o, const char *name, struct stat_view *v)
{
	int ret;

	memset(v, 0, sizeof(*v));
	v->name = name;
	ret = v05_observer_info(o, &v->info);
	if (ret)
		return ret;
	ret = v05_observer_counters(o, v->c, V05_COUNTER_SLOTS);
	if (ret < 0)
		return ret;
	ret = v05_observer_lanes(o, v->lanes, STAT_MAX_LANES);
	if (ret < 0)
		return ret;
	v->nlanes = (uint32_t)ret;
	v->taken_ns = v05__now_ns();
	return 0;
}

uint64_t stat_latency_quantile(const uint64_t *c, double q)
{
	uint64_t total = 0, seen = 0;

	for (int b = 0; b < V05_C_LAT_BUCKETS; b++)
		total += c[V05_C_LAT_HIST + b];
	if (!total)
		return 0;
	for (int b = 0; b < V05_C_LAT_BUCKETS; b++) {
		seen += c[V05_C_LAT_HIST + b];
		if ((double)seen >= q * (double)total)
			return (uint64_t)1 << (b + 1);
	}
	return (uint64_t)1 << V05_C_LAT_BUCKETS;
}

static uint64_t rejected(const uint64_t *c)
{
	uint64_t n = 0;

	for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
		n += c[r];
	return n;
}

static void human_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns < 10000)
		snprintf(buf, len, "%" PRIu64 " ns", ns);
	else if (ns < 10000000)
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	else if (ns < 10000000000ull)
		snprintf(buf, len, "%.1f ms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.1f s", (double)ns / 1e9);
}

static void human_bytes(char *buf, size_t len, uint64_t b)
{
	if (b < 10240)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else if (b < 10ull << 20)
		snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
	else
		snprintf(buf, len, "%.1f MiB", (double)b / 1048576.0);
}

static void id_list(FILE *f, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%s%u", i ? ", " : "", ids[i]);
}

/* Who produces: the broker's allow-list and refusals, the cut-off. */
static void print_guard(FILE *f, const struct stat_view *v)
{
	const struct v05_observer_info *in = &v->info;
	const uint64_t *c = v->c;

	if (in->broker) {
		fprintf(f, "broker    admits the owner's uid");
		if (in->n_broker_uids) {
			fprintf(f, ", uid%s ", in->n_broker_uids > 1 ? "s" : "");
			id_list(f, in->broker_uids, in->n_broker_uids);
		}
		if (in->n_broker_gids) {
			fprintf(f, ", gid%s ", in->n_broker_gids > 1 ? "s" : "");
			id_list(f, in->broker_gids, in->n_broker_gids);
		}
		fprintf(f, "; refused %" PRIu64, c[V05_C_BROKER_REFUSED]);
		if (c[V05_C_BROKER_REFUSED])
			fprintf(f, " (last: uid %u, gid %u)", in->broker_refused_uid,
				in->broker_refused_gid);
		fprintf(f, "; sent away in a backoff %" PRIu64 "\n",
			c[V05_C_BROKER_BACKOFF]);
	}
	fprintf(f, "cut-off   %" PRIu64 " lane window%s cut off; a window is cut at >= %u records with more than %.1f%% rejected\n",
		c[V05_C_LANES_CUT_OFF], c[V05_C_LANES_CUT_OFF] == 1 ? "" : "s",
		in->lane_cut_records, in->lane_cut_permille / 10.0);
}

static double rate(const struct stat_view *v, const struct stat_view *prev,
		   int counter)
{
	double dt = (double)(v->taken_ns - prev->taken_ns) / 1e9;

	return dt > 0 ? (double)(v->c[counter] - prev->c[counter]) / dt : 0.0;
}

void stat_print(FILE *f, const struct stat_view *v, const struct stat_view *prev)
{
	const struct v05_observer_info *in = &v->info;
	const uint64_t *c = v->c;
	uint64_t open = c[V05_C_PROMPTS_OPEN], held = c[V05_C_PROMPTS_HELD];

	/* Two relaxed loads: held may run ahead of open for a moment. */
	if (held > open)
		held = open;
	uint64_t finals = c[V05_C_DEC_FINAL] + c[V05_C_DEC_DROP];
	char a[32], b[32], when[32];
	time_t t = (time_t)(in->created_ns / 1000000000ull);
	struct tm tm;
	int any = 0;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	human_bytes(a, sizeof(a), in->size_bytes);
	fprintf(f, "segment   %s  (%s, created %s)\n", v->name, a, when);
	human_ns(b, sizeof(b), in->heartbeat_age_ns);
	if (in->owner_pid)
		fprintf(f, "owner     pid %u %s, last poll %s ago, wait path %s, doorbell %s\n",
			in->owner_pid, in->owner_alive ? "alive" : "DEAD", b,
			v05_wait_path_name(in->wait_path),
			in->asym_doorbell ? "membarrier" : "fence");
	else
		fprintf(f, "owner     none (closed)\n");
	fprintf(f, "config    mode %s, schedule %s, cost %g, k_init %u, k_step %u, "
		"k_max %u, halt %g, pad %u; %u lanes x %u, %u slots\n",
		v05_mode_name(in->mode), v05_schedule_name(in->schedule), in->cost,
		in->k_init, in->k_step, in->k_max, in->halt_fraction,
		in->pad_multiple, in->lanes, in->lane_capacity, in->slots);
	human_bytes(a, sizeof(a), in->journal_offset);
	if (in->journal_state == V05_JOURNAL_STATE_OFF)
		fprintf(f, "journal   off\n");
	else if (in->journal_state == V05_JOURNAL_STATE_OK)
		fprintf(f, "journal   ok, %s, groups <= %" PRIu64 " on disk (%s)\n",
			in->journal_path, in->journal_durable_seq, a);
	else
		fprintf(f, "journal   FAILED (%s): %s\n", in->journal_path,
			in->journal_error);

	fprintf(f, "\nprompts   submitted %" PRIu64 ", open %" PRIu64
		" (collecting %" PRIu64 ", held %" PRIu64 "), final unreleased %"
		PRIu64 ", refused at submit %" PRIu64 "\n",
		c[V05_C_PROMPTS_SUBMITTED], open, open - held, held,
		c[V05_C_PROMPTS_FINAL], c[V05_C_SUBMIT_REJECTED]);
	fprintf(f, "samples   issued %" PRIu64 " (padding %" PRIu64 "), saved "
		"against k_max %" PRIu64 " (%.1f%%)\n",
		c[V05_C_SAMPLES_ISSUED], c[V05_C_SAMPLES_PADDED],
		c[V05_C_SAMPLES_SAVED],
		finals ? 100.0 * (double)c[V05_C_SAMPLES_SAVED] /
				 ((double)finals * in->k_max) : 0.0);
	fprintf(f, "k         ");
	for (int k = 0; k <= 64; k++) {
		if (c[V05_C_K_HIST + k]) {
			fprintf(f, "%s%d: %" PRIu64, any ? "  " : "", k,
				c[V05_C_K_HIST + k]);
			any = 1;
		}
	}
	fprintf(f, "%s\n", any ? "" : "(no group final yet)");
	fprintf(f, "decisions sample %" PRIu64 ", final %" PRIu64 ", drop %" PRIu64
		" (skipped %" PRIu64 "); rounds %" PRIu64 ", halts %" PRIu64
		"; batches %" PRIu64 " submitted, %" PRIu64 " done\n",
		c[V05_C_DEC_SAMPLE], c[V05_C_DEC_FINAL], c[V05_C_DEC_DROP],
		c[V05_C_PROMPTS_SKIPPED], c[V05_C_ROUNDS], c[V05_C_HALTS], c[V05_C_BATCHES_SUBMITTED],
		c[V05_C_BATCHES_DONE]);
	fprintf(f, "rewards   applied %" PRIu64 ", rejected %" PRIu64
		" (nonfinite %" PRIu64 ", range %" PRIu64 ", unknown %" PRIu64
		", not issued %" PRIu64 ", duplicate %" PRIu64 ", late %" PRIu64
		", corrupt %" PRIu64 ")\n",
		c[V05_C_REWARDS_APPLIED], rejected(c), c[V05_C_REJ_NONFINITE],
		c[V05_C_REJ_RANGE], c[V05_C_REJ_UNKNOWN], c[V05_C_REJ_NOT_ISSUED],
		c[V05_C_REJ_DUPLICATE], c[V05_C_REJ_LATE], c[V05_C_REJ_CORRUPT]);
	if (c[V05_C_EB_PARTS_REFUSED])
		fprintf(f, "eb fit    other engines' parts refused %" PRIu64
			" (states no fold makes)\n", c[V05_C_EB_PARTS_REFUSED]);
	if (c[V05_C_LATENCY_COUNT]) {
		char p50[32], p99[32], mean[32];

		human_ns(p50, sizeof(p50), stat_latency_quantile(c, 0.5));
		human_ns(p99, sizeof(p99), stat_latency_quantile(c, 0.99));
		human_ns(mean, sizeof(mean),
			 c[V05_C_LATENCY_SUM_NS] / c[V05_C_LATENCY_COUNT]);
		fprintf(f, "latency   reward to decision: mean %s, p50 <= %s, "
			"p99 <= %s (%" PRIu64 " decisions)\n", mean, p50, p99,
			c[V05_C_LATENCY_COUNT]);
	}
	fprintf(f, "waits     %" PRIu64 " waits, %" PRIu64 " wake-ups; lanes claimed %"
		PRIu64 ", reclaimed %" PRIu64 ", overruns %" PRIu64
		"; takeovers %" PRIu64 " (side files made again %" PRIu64
		"; killed replaces undone %" PRIu64 ", their temporaries removed %"
		PRIu64 ")\n",
		c[V05_C_WAITS], c[V05_C_WAKEUPS], c[V05_C_LANE_CLAIMS],
		c[V05_C_LANE_RECLAIMS], c[V05_C_LANE_OVERRUNS], c[V05_C_TAKEOVERS],
		c[V05_C_SIDE_FILES_REPLACED], c[V05_C_REPLACES_UNDONE],
		c[V05_C_REPLACES_CLEANED]);
	print_guard(f, v);
	if (prev)
		fprintf(f, "rates     %.0f rewards/s, %.0f samples issued/s, "
			"%.0f groups final/s, %.0f rejected/s\n",
			rate(v, prev, V05_C_REWARDS_APPLIED),
			rate(v, prev, V05_C_SAMPLES_ISSUED),
			rate(v, prev, V05_C_DEC_FINAL) + rate(v, prev, V05_C_DEC_DROP),
			(double)(rejected(v->c) - rejected(prev->c)) /
				((double)(v->taken_ns - prev->taken_ns) / 1e9));
	fprintf(f, "\nlane  producer       fill/capacity   high water    consumed     applied    rejected  claims\n");
	for (uint32_t i = 0; i < v->nlanes; i++) {
		const struct v05_lane_stat *l = &v->lanes[i];

		if (!l->owner_pid && !l->consumed && !l->claims && !l->cut)
			continue;
		if (l->cut)
			snprintf(a, sizeof(a), "CUT %u", l->cut_pid);
		else if (l->owner_pid)
			snprintf(a, sizeof(a), "%u %s", l->owner_pid,
				 l->owner_alive ? "alive" : "dead");
		else
			snprintf(a, sizeof(a), "free");
		fprintf(f, "%4u  %-13s %6u/%-8u %11u %11" PRIu64 " %11" PRIu64
			" %11" PRIu64 " %7" PRIu64 "\n",
			i, a, l->fill, in->lane_capacity, l->high_water,
			l->consumed, l->applied, l->rejected, l->claims);
		if (l->cut)
			fprintf(f, "      cut off: pid %u's claim, %u of its last %u records rejected; its records are not read; the lane is free again once it closes or exits\n",
				l->cut_pid, l->cut_rejected, l->cut_records);
		else if (l->cuts)
			fprintf(f, "      cut off %u time%s before (last: %u of %u records rejected), %" PRIu64 " records dropped unread\n",
				l->cuts, l->cuts > 1 ? "s" : "", l->cut_rejected,
				l->cut_records, l->discarded);
	}
}

void stat_print_json(FILE *f, const struct stat_view *v)
{
	const struct v05_observer_info *in = &v->info;
	const uint64_t *c = v->c;
	uint64_t finals = c[V05_C_DEC_FINAL] + c[V05_C_DEC_DROP];
	static const struct { const char *name; int c; } rej[] = {
		{ "nonfinite", V05_C_REJ_NONFINITE }, { "range", V05_C_REJ_RANGE },
		{ "unknown", V05_C_REJ_UNKNOWN }, { "not_issued", V05_C_REJ_NOT_ISSUED },
		{ "duplicate", V05_C_REJ_DUPLICATE }, { "late", V05_C_REJ_LATE },
		{ "corrupt", V05_C_REJ_CORRUPT },
	};
	int first = 1;

	fputs("{\"name\": ", f);
	json_str(f, v->name);
	fprintf(f, ", \"size_bytes\": %" PRIu64 ", \"created_ns\": %" PRIu64
		", \"owner\": {\"pid\": %u, \"alive\": %s, \"heartbeat_age_ns\": %"
		PRIu64 "}, \"wait_path\": \"%s\", \"asym_doorbell\": %s",
		in->size_bytes, in->created_ns, in->owner_pid,
		in->owner_alive ? "true" : "false", in->heartbeat_age_ns,
		v05_wait_path_name(in->wait_path),
		in->asym_doorbell ? "true" : "false");
	fprintf(f, ", \"config\": {\"mode\": \"%s\", \"schedule\": \"%s\", \"cost\": ",
		v05_mode_name(in->mode), v05_schedule_name(in->schedule));
	json_num(f, in->cost);
	fprintf(f, ", \"k_init\": %u, \"k_step\": %u, \"k_max\": %u, \"halt_fraction\": ",
		in->k_init, in->k_step, in->k_max);
	json_num(f, in->halt_fraction);
	fprintf(f, ", \"pad_multiple\": %u, \"lanes\": %u, \"lane_capacity\": %u, "
		"\"slots\": %u, \"batches\": %u}",
		in->pad_multiple, in->lanes, in->lane_capacity, in->slots, in->batches);
	fprintf(f, ", \"journal\": {\"state\": \"%s\", \"path\": ",
		v05_journal_state_name(in->journal_state));
	json_str(f, in->journal_path);
	fprintf(f, ", \"durable_seq\": %" PRIu64 ", \"offset\": %" PRIu64
		", \"errno\": %d, \"error\": ",
		in->journal_durable_seq, in->journal_offset, in->journal_errno);
	json_str(f, in->journal_error);
	fprintf(f, "}, \"prompts\": {\"submitted\": %" PRIu64 ", \"open\": %" PRIu64
		", \"collecting\": %" PRIu64 ", \"held\": %" PRIu64
		", \"final_unreleased\": %" PRIu64 ", \"refused_at_submit\": %" PRIu64 "}",
		c[V05_C_PROMPTS_SUBMITTED], c[V05_C_PROMPTS_OPEN],
		c[V05_C_PROMPTS_OPEN] > c[V05_C_PROMPTS_HELD] ?
			c[V05_C_PROMPTS_OPEN] - c[V05_C_PROMPTS_HELD] : 0,
		c[V05_C_PROMPTS_HELD],
		c[V05_C_PROMPTS_FINAL], c[V05_C_SUBMIT_REJECTED]);
	fprintf(f, ", \"samples\": {\"issued\": %" PRIu64 ", \"padded\": %" PRIu64
		", \"saved\": %" PRIu64 ", \"saved_fraction\": ",
		c[V05_C_SAMPLES_ISSUED], c[V05_C_SAMPLES_PADDED], c[V05_C_SAMPLES_SAVED]);
	json_num(f, finals ? (double)c[V05_C_SAMPLES_SAVED] /
				     ((double)finals * in->k_max) : 0.0);
	fputs("}, \"k_hist\": {", f);
	for (int k = 0; k <= 64; k++) {
		if (!c[V05_C_K_HIST + k])
			continue;
		fprintf(f, "%s\"%d\": %" PRIu64, first ? "" : ", ", k,
			c[V05_C_K_HIST + k]);
		first = 0;
	}
	fprintf(f, "}, \"decisions\": {\"sample\": %" PRIu64 ", \"final\": %" PRIu64
		", \"drop\": %" PRIu64 "}, \"rounds\": %" PRIu64 ", \"halts\": %" PRIu64
		", \"batches\": {\"submitted\": %" PRIu64 ", \"done\": %" PRIu64 "}",
		c[V05_C_DEC_SAMPLE], c[V05_C_DEC_FINAL], c[V05_C_DEC_DROP],
		c[V05_C_ROUNDS], c[V05_C_HALTS], c[V05_C_BATCHES_SUBMITTED],
		c[V05_C_BATCHES_DONE]);
	fprintf(f, ", \"rewards\": {\"applied\": %" PRIu64 ", \"rejected\": {",
		c[V05_C_REWARDS_APPLIED]);
	for (size_t i = 0; i < sizeof(rej) / sizeof(rej[0]); i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", rej[i].name, c[rej[i].c]);
	fprintf(f, "}}, \"broker\": {\"enabled\": %s, \"uids\": [",
		in->broker ? "true" : "false");
	id_list(f, in->broker_uids, in->n_broker_uids);
	fputs("], \"gids\": [", f);
	id_list(f, in->broker_gids, in->n_broker_gids);
	fprintf(f, "], \"refused\": %" PRIu64, c[V05_C_BROKER_REFUSED]);
	if (c[V05_C_BROKER_REFUSED])
		fprintf(f, ", \"refused_uid\": %u, \"refused_gid\": %u",
			in->broker_refused_uid, in->broker_refused_gid);
	fprintf(f, "}, \"lane_cut\": {\"records\": %u, \"permille\": %u, "
		"\"cut_off\": %" PRIu64 "}", in->lane_cut_records,
		in->lane_cut_permille, c[V05_C_LANES_CUT_OFF]);
	fprintf(f, ", \"latency\": {\"count\": %" PRIu64 ", \"sum_ns\": %" PRIu64
		", \"p50_ns\": %" PRIu64 ", \"p99_ns\": %" PRIu64 "}",
		c[V05_C_LATENCY_COUNT], c[V05_C_LATENCY_SUM_NS],
		stat_latency_quantile(c, 0.5), stat_latency_quantile(c, 0.99));
	fputs(", \"lanes\": [", f);
	for (uint32_t i = 0; i < v->nlanes; i++) {
		const struct v05_lane_stat *l = &v->lanes[i];

		fprintf(f, "%s{\"lane\": %u, \"pid\": %u, \"alive\": %s, \"fill\": %u, "
			"\"high_water\": %u, \"consumed\": %" PRIu64 ", \"claims\": %"
			PRIu64 ", \"applied\": %" PRIu64 ", \"rejected\": %" PRIu64
			", \"discarded\": %" PRIu64 ", \"cut\": %s, \"cut_pid\": %u, "
			"\"cuts\": %u, \"cut_records\": %u, \"cut_rejected\": %u}",
			i ? ", " : "", i, l->owner_pid,
			l->owner_alive ? "true" : "false", l->fill, l->high_water,
			l->consumed, l->claims, l->applied, l->rejected,
			l->discarded, l->cut ? "true" : "false", l->cut_pid,
			l->cuts, l->cut_records, l->cut_rejected);
	}
	fputs("], \"counters\": {", f);
	first = 1;
	for (uint32_t i = 0; i < V05_COUNTER_SLOTS; i++) {
		const char *n = v05_counter_name(i);

		if (!n || !strncmp(n, "k_hist_", 7) || !strncmp(n, "latency_hist_", 13))
			continue;
		fprintf(f, "%s\"%s\": %" PRIu64, first ? "" : ", ", n, c[i]);
		first = 0;
	}
	fputs("}}\n", f);
}
