/* SPDX-License-Identifier: MIT */
/*
 * Rewards in, decisions out, the top of the decision core: the per-reward
 * path (apply) and the per-group decision once every issued sample is in
 * (decide): the rule's answer (the mode's row of the rule table:
 * rules/rule.h), then the mechanics ("more" holds the prompt, "stop"
 * finalizes it: mechanics.h), then the schedule the configuration selects
 * (schedule.c), which decides when held prompts go. Nothing below calls
 * back up here.
 *
 * Crash consistency: a reward is stored before its received bit, so a
 * takeover after any prefix can finish the step (takeover.c).
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "top.h"
#include "mechanics/probes.h"
#include "rules/stats_core.h"

/*
 * Prefetch what applying a record with this key will touch, in two stages:
 * far ahead the table entry the key alone locates (its home line), nearer
 * the slot that entry names. A hint: the key may be anything.
 */
static inline void prefetch_home(struct v05_plugin *p, uint64_t key)
{
	__builtin_prefetch(&p->table.e[v05__table_home(&p->table, key)], 1, 3);
}

/* The entry came in with prefetch_home: find it and prefetch where its
 * rewards go. Returns the entry, which apply_one may reuse (after checking
 * its key: see there). A key that is not there costs a probe. */
static inline struct v05_prompt *prefetch_slot(struct v05_plugin *p,
					       uint64_t key)
{
	struct v05_prompt *e = v05__table_find(&p->table, key);

	if (e && e->slot < p->seg.hdr.geo.slot_count)
		__builtin_prefetch(v05__slot_rewards(v05__slot(&p->seg, e->slot)), 1, 3);
	return e;
}

static void reject(struct v05_plugin *p, const struct v05_record *rec,
		   int reason)
{
	v05__count(p, reason, 1);
	V05_PROBE3(reward_rejected, rec->key, rec->sample, reason);
}

/*
 * hint: the entry prefetch_slot found for this key a few records ago, or
 * NULL. Nothing on the apply path deletes an entry today (deletes come
 * from releases, cancels and submits), but a delete shifts the entries
 * behind it (table.h), so the hint is used only if it still holds this
 * key, which then is the key's one live entry (a table holds a key at
 * most once; key 0, never a prompt, is never hinted: find returns NULL).
 */
static void apply_one(struct v05_plugin *p, const struct v05_record *rec,
		      struct v05_prompt *e)
{
	uint64_t bit;
	float r = rec->reward;

	/* The lanes passed only the record kinds (V05_RECORD_KINDS): any
	 * flag is an abort, off the reward path. */
	if (__builtin_expect(rec->flags != 0, 0)) {
		v05__apply_abort(p, rec);
		return;
	}
	if (!isfinite(r)) {
		reject(p, rec, V05_C_REJ_NONFINITE);
		v05__reject_notice(p, rec, V05_DF_NONFINITE);
		return;
	}
	if (r < -1.0f || r > 1.0f) {
		reject(p, rec, V05_C_REJ_RANGE);
		v05__reject_notice(p, rec, V05_DF_RANGE);
		return;
	}
	if (!e || e->key != rec->key)
		e = v05__table_find(&p->table, rec->key);
	if (!e) {
		reject(p, rec, V05_C_REJ_UNKNOWN);
		return;
	}
	/* Another instance's: a late reward for an earlier instance of the
	 * same uid (released, then submitted again), whenever it was pushed;
	 * each instance has its own slot generation. */
	if (e->state == V05_P_FINAL || rec->gen != e->gen) {
		reject(p, rec, V05_C_REJ_LATE);
		return;
	}
	/* The sample index comes from another process: checked against
	 * the issued mask before it indexes anything. */
	bit = rec->sample < 64 ? 1ull << rec->sample : 0;
	if (!(e->issued & bit)) {
		reject(p, rec, V05_C_REJ_NOT_ISSUED);
		return;
	}
	if (e->received & bit) {
		reject(p, rec, V05_C_REJ_DUPLICATE);
		return;
	}
	/* Reward first, then the bit: a replay after a crash in between
	 * stores the same value again. */
	v05__slot_rewards(v05__slot(&p->seg, e->slot))[rec->sample] = r;
	e->received |= bit;
	/* A clock read at a poll's first record, then per 64 records: now_ns
	 * is at most that stale, which latencies (microseconds and up) do
	 * not see. */
	if (__builtin_expect(p->clock_stale, 0) || (++p->clock_tick & 63) == 0)
		v05__clock_refresh(p);
	e->last_ts = p->now_ns;
	v05__count(p, V05_C_REWARDS_APPLIED, 1);
	/* Arguments are computed even with no tracer attached: keep them
	 * to loads (the tracer can count the mask's bits). */
	V05_PROBE4(reward_applied, rec->key, rec->sample, e->received,
		   rec->gen);
	v05__collect_check(p, e);
}

void v05__collect_check(struct v05_plugin *p, struct v05_prompt *e)
{
	if (e->state != V05_P_COLLECTING)
		return;
	if (__builtin_expect(e->pad8 & V05_PF_EARLY, 0)) {
		/* first wave < k_first + early <= k_max <= 64 */
		uint64_t first = (1ull << v05__first_k(p, e)) - 1;

		if ((e->received & first) == first)
			v05__schedule_of(p)->first_wave(p, e);
		return;
	}
	if (e->received == e->issued)
		v05__decide(p, e);
}

/* Far enough ahead to hide a DRAM access behind the records between:
 * stage 0 (the table entry) at 8, stage 1 (the slot it names) at 4. The
 * entries stage 1 finds wait in found[] for their record, so each record
 * is looked up once, not twice. */
#define PREFETCH_FAR 8u
#define PREFETCH_NEAR 4u

static inline void apply_chunk(struct v05_plugin *p,
			       const struct v05_record *recs, uint32_t n)
{
	struct v05_prompt *found[V05_LANE_BATCH_MAX + PREFETCH_NEAR];

	for (uint32_t j = 0; j < PREFETCH_NEAR; j++)
		found[j] = NULL;
	for (uint32_t j = 0; j < n; j++) {
		if (j + PREFETCH_FAR < n)
			prefetch_home(p, recs[j + PREFETCH_FAR].key);
		found[j + PREFETCH_NEAR] = j + PREFETCH_NEAR < n ?
			prefetch_slot(p, recs[j + PREFETCH_NEAR].key) : NULL;
		apply_one(p, &recs[j], found[j]);
	}
}

void v05__apply_records(void *ctx, const struct v05_record *recs, uint32_t n,
			uint32_t lane)
{
	struct v05_plugin *p = ctx;

	(void)lane;
	/* The drain hands out at most V05_LANE_BATCH_MAX; more would be
	 * applied a chunk at a time. */
	for (uint32_t at = 0; at < n; at += V05_LANE_BATCH_MAX)
		apply_chunk(p, recs + at, n - at < V05_LANE_BATCH_MAX ?
					  n - at : V05_LANE_BATCH_MAX);
}

/*
 * A WAVES_FIT rule's group (rules/rule.h): its first wave in, the
 * schedule decides it (no barrier), or it waits for the batch's fit (the
 * barrier); anything after (the second wave) is final.
 */
static void decide_fit(struct v05_plugin *p, struct v05_prompt *e,
		       const struct v05__schedule *s, uint64_t latency)
{
	struct v05_estimate est;
	double adv[V05_K_LIMIT];
	struct v05_eb_fit fit;
	uint32_t b = e->batch;
	bool first = v05__group_k(e) == v05__first_k(p, e);

	if (first && s->first_wave) {
		s->first_wave(p, e);
		return;
	}
	if (first && !v05__eb_fit_of(p, b, &fit)) {
		v05__hold(p, e, 0.0f, 0); /* planned at the barrier */
		s->progress(p, b);
		return;
	}
	if (p->rule->fold_group)
		v05__fold_group(p, e);
	v05__estimate_prompt(p, e, &est, adv);
	v05__finalize_with(p, e, &est, adv, 0, latency);
	s->progress(p, b);
}

void v05__decide(struct v05_plugin *p, struct v05_prompt *e)
{
	const struct v05__schedule *s = v05__schedule_of(p);
	struct v05_estimate est;
	double adv[V05_K_LIMIT];
	uint32_t b = e->batch;
	uint64_t latency = v05__latency_of(e, p->now_ns);

	if (p->rule->waves == V05__WAVES_FIT) {
		decide_fit(p, e, s, latency);
		return;
	}
	/* A rule with a running state folds the group in before its
	 * estimate (EBPO: every decision is final, under statistics that
	 * count the group). */
	if (p->rule->fold_group)
		v05__fold_group(p, e);
	v05__estimate_prompt(p, e, &est, adv);
	if (est.action == V05_ACTION_MORE &&
	    p->batch_recs[b].state != V05_B_HALTED) {
		v05__hold(p, e, (float)(est.k_target - (double)est.k),
			  p->params.k_step);
		s->progress(p, b);
		return;
	}
	v05__finalize_with(p, e, &est, adv,
			   est.action == V05_ACTION_MORE ? V05_DF_HALTED : 0,
			   latency);
	s->progress(p, b);
}
