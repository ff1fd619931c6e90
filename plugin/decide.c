/* SPDX-License-Identifier: MIT */
/*
 * Rewards in, decisions out: the per-reward path (apply), the per-group
 * decision once every issued sample is in (decide), and finalization.
 *
 * Crash consistency: every step below writes shared state in an order such
 * that a takeover after any prefix can finish it (plugin.c's rebuild):
 * a reward is stored before its received bit; a group's results before its
 * FINAL state; a slot is FINAL before its completion and journal record.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "plugin/internal.h"
#include "plugin/journal.h"
#include "plugin/probes.h"
#include "plugin/stats_core.h"
#include "shm/proc.h"

uint32_t v05__group_k(const struct v05_prompt *e)
{
	return (uint32_t)__builtin_popcountll(e->issued);
}

void v05__record_latency(struct v05_plugin *p, uint64_t ns)
{
	uint32_t b = ns ? 63u - (uint32_t)__builtin_clzll(ns) : 0;

	if (b >= V05_C_LAT_BUCKETS)
		b = V05_C_LAT_BUCKETS - 1;
	v05__count(p, V05_C_LATENCY_COUNT, 1);
	v05__count(p, V05_C_LATENCY_SUM_NS, ns);
	v05__count(p, V05_C_LAT_HIST + (int)b, 1);
}

static uint64_t latency_of(const struct v05_prompt *e, uint64_t now)
{
	return e->last_ts && now > e->last_ts ? now - e->last_ts : 0;
}

void v05__clock_refresh(struct v05_plugin *p)
{
	p->now_ns = v05__now_ns();
	p->wall_offset_ns = (int64_t)(v05__wall_ns() - p->now_ns);
}

/*
 * The statistics over the slot's rewards, in sample order, through the
 * unchecked core: the rewards were checked when applied, the prior at
 * submit, the parameters at create; the arithmetic is v05_estimate's.
 */
static void estimate(struct v05_plugin *p, const struct v05_prompt *e,
		     struct v05_estimate *est, double *adv)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, e->slot);
	const float *rw = v05__slot_rewards(h);
	double r[V05_K_LIMIT];
	uint32_t k = v05__group_k(e);

	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
	if (p->params.mode == V05_MODE_V05_EB) {
		/* The fit of this prompt's batch (eb_policy.c). */
		struct v05_eb_fit fit;

		if (v05__eb_fit_of(p, e->batch, &fit)) {
			v05__eb_estimate_u(&p->params, &fit, e->prior, r, k, est,
					   adv);
			return;
		}
	}
	v05__estimate_core(&p->params, e->prior, r, k, est, adv);
}

void v05__prefetch_key(void *ctx, uint64_t key, int stage)
{
	struct v05_plugin *p = ctx;
	const struct v05_prompt *e;

	if (stage == 0) {
		__builtin_prefetch(&p->table.e[v05__table_home(&p->table, key)], 1, 3);
		return;
	}
	/* The entry came in at stage 0: where its rewards go. A key that is
	 * not there (garbage, unknown) costs a probe and nothing else. */
	e = v05__table_find(&p->table, key);
	if (e && e->slot < p->seg.hdr.geo.slot_count)
		__builtin_prefetch(v05__slot_rewards(v05__slot(&p->seg, e->slot)), 1, 3);
}

static void reject(struct v05_plugin *p, const struct v05_record *rec,
		   int reason)
{
	v05__count(p, reason, 1);
	V05_PROBE3(reward_rejected, rec->key, rec->sample, reason);
}

void v05__apply_record(void *ctx, const struct v05_record *rec, uint32_t lane)
{
	struct v05_plugin *p = ctx;
	struct v05_prompt *e;
	uint64_t bit;
	float r = rec->reward;

	(void)lane;
	if (!isfinite(r)) {
		reject(p, rec, V05_C_REJ_NONFINITE);
		return;
	}
	if (r < -1.0f || r > 1.0f) {
		reject(p, rec, V05_C_REJ_RANGE);
		return;
	}
	e = v05__table_find(&p->table, rec->key);
	if (!e) {
		reject(p, rec, V05_C_REJ_UNKNOWN);
		return;
	}
	/* Pushed before this prompt was submitted: a late reward for an
	 * earlier instance of the same uid (released, then submitted again),
	 * never one for this instance, whose samples did not exist yet. */
	if (e->state == V05_P_FINAL || rec->timestamp_ns < e->born_ns) {
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
	e->last_ts = rec->timestamp_ns;
	v05__count(p, V05_C_REWARDS_APPLIED, 1);
	/* Arguments are computed even with no tracer attached: keep them
	 * to loads (the tracer can count the mask's bits). */
	V05_PROBE4(reward_applied, rec->key, rec->sample, e->received,
		   p->now_ns - rec->timestamp_ns);
	/* A clock read per 64 records, or when this record is newer than the
	 * last read (a latency is never computed against an older clock). */
	if ((++p->clock_tick & 63) == 0 || p->now_ns < rec->timestamp_ns)
		v05__clock_refresh(p);
	if (e->received == e->issued && e->state == V05_P_COLLECTING)
		v05__decide(p, e);
}

int v05__journal_slot(struct v05_plugin *p, uint32_t slot)
{
	struct v05_slot_hdr *h;
	struct v05_jrec jr;
	int ret;

	if (!p->journal || v05__journal_error(p->journal, NULL))
		return -ENOENT;
	h = v05__slot(&p->seg, slot);
	memset(&jr, 0, sizeof(jr));
	jr.seq = h->seq;
	jr.key = h->key;
	jr.batch = h->batch_id;
	jr.prior = h->prior;
	jr.baseline = h->baseline;
	jr.sigma = h->sigma;
	jr.mean = h->mean;
	jr.submit_ns = h->submit_ns;
	jr.final_ns = h->final_ns;
	/* Bounded: after a takeover these come from the segment. */
	jr.k = h->k <= p->params.k_max ? h->k : 0;
	jr.action = h->action;
	jr.mode = p->params.mode;
	jr.uid_len = h->uid_len <= V05_UID_MAX ? h->uid_len : 0;
	ret = v05__journal_append(p->journal, &jr, h->uid, v05__slot_rewards(h),
				  v05__slot_advantages(&p->seg, h));
	if (ret == 0) {
		v05__count(p, V05_C_JOURNAL_RECORDS, 1);
		v05__count(p, V05_C_JOURNAL_BYTES, v05__jrec_size(jr.uid_len, jr.k));
	}
	return ret;
}

void v05__batch_leave(struct v05_plugin *p, const struct v05_prompt *e)
{
	struct batch_local *bl = &p->batches[e->batch];

	if (e->state == V05_P_COLLECTING) {
		bl->n_collecting--;
	} else if (e->state == V05_P_HELD) {
		bl->n_held--;
		bl->held_samples -= p->params.k_step;
		v05__gauge(p, V05_C_PROMPTS_HELD, -1);
	}
	bl->n_open--;
}

static void finalize_with(struct v05_plugin *p, struct v05_prompt *e,
			  const struct v05_estimate *est, const double *adv,
			  uint32_t flags, uint64_t latency)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, e->slot);
	float *a = v05__slot_advantages(&p->seg, h);
	struct batch_local *bl = &p->batches[e->batch];
	uint32_t b = e->batch, k = est->k;
	uint32_t action = est->action == V05_ACTION_DROP ? V05_ACTION_DROP :
							  V05_ACTION_STOP;
	struct v05_decision d;

	for (uint32_t i = 0; i < k; i++)
		a[i] = (float)adv[i];
	h->k = k;
	h->action = action;
	h->baseline = est->baseline;
	h->sigma = est->sigma;
	h->mean = est->mean;
	h->final_ns = (uint64_t)((int64_t)p->now_ns + p->wall_offset_ns);
	h->seq = ++p->st->last_seq;
	V05_PROBE4(final, e->key, k, latency, h->seq);
	/* R4: the results above before FINAL; pairs with A4 in v05_group and
	 * the reader (directly, or through the completion's R2/A2). */
	v05_store_release(&h->state, (uint32_t)V05_S_FINAL);

	v05__batch_leave(p, e);
	e->state = V05_P_FINAL;

	v05__count(p, action == V05_ACTION_DROP ? V05_C_DEC_DROP : V05_C_DEC_FINAL, 1);
	v05__count(p, V05_C_K_HIST + (int)k, 1);
	v05__count(p, V05_C_SAMPLES_SAVED, p->params.k_max - k);
	v05__gauge(p, V05_C_PROMPTS_OPEN, -1);
	v05__gauge(p, V05_C_PROMPTS_FINAL, 1);
	v05__support_add(p, e->key, (float)est->mean, k);
	v05__publish_completion(p, e->slot);
	if (v05__journal_slot(p, e->slot) == 0)
		h->flags |= V05_SF_JOURNALED;
	if (!p->silent) {
		memset(&d, 0, sizeof(d));
		d.kind = action == V05_ACTION_DROP ? V05_DECISION_DROP :
						     V05_DECISION_FINAL;
		d.key = e->key;
		d.slot = e->slot;
		d.gen = h->gen;
		d.k = k;
		d.baseline = est->baseline;
		d.batch = p->batch_recs[b].id;
		d.flags = flags;
		d.latency_ns = latency;
		v05__enqueue(p, &d);
		if (latency)
			v05__record_latency(p, latency);
	}
	if (bl->n_open == 0) {
		/* The batch is done: its record is free for the next one. */
		p->batch_recs[b].id = 0;
		p->batch_recs[b].state = V05_B_FREE;
		bl->n_held = bl->n_collecting = bl->held_samples = 0;
		v05__count(p, V05_C_BATCHES_DONE, 1);
	}
}

void v05__finalize(struct v05_plugin *p, struct v05_prompt *e, uint32_t flags,
		   uint64_t latency)
{
	struct v05_estimate est;
	double adv[V05_K_LIMIT];

	estimate(p, e, &est, adv);
	finalize_with(p, e, &est, adv, flags, latency);
}

void v05__decide(struct v05_plugin *p, struct v05_prompt *e)
{
	struct v05_estimate est;
	double adv[V05_K_LIMIT];
	uint32_t b = e->batch;
	uint64_t latency = latency_of(e, p->now_ns);

	if (p->params.mode == V05_MODE_V05_EB) {
		/* First wave in: wait for the batch's fit (eb_policy.c).
		 * Second wave in: final. */
		struct v05_eb_fit fit;

		if (v05__group_k(e) == p->params.k_init &&
		    !v05__eb_fit_of(p, b, &fit)) {
			struct batch_local *bl = &p->batches[b];

			e->gap = 0.0f;
			e->state = V05_P_HELD;
			bl->n_collecting--;
			bl->n_held++;
			bl->held_samples += p->params.k_step;
			v05__gauge(p, V05_C_PROMPTS_HELD, 1);
			(void)v05__batch_hold(p, b, e->key); /* else rebuilt */
			v05__policy_held(p, b);
			return;
		}
		estimate(p, e, &est, adv);
		finalize_with(p, e, &est, adv, 0, latency);
		v05__policy_after_decision(p, b);
		return;
	}
	estimate(p, e, &est, adv);
	if (est.action == V05_ACTION_MORE &&
	    p->batch_recs[b].state != V05_B_HALTED) {
		struct batch_local *bl = &p->batches[b];

		/* Priority for padding: how far the target is above k. */
		e->gap = (float)(est.k_target - (double)est.k);
		e->state = V05_P_HELD;
		bl->n_collecting--;
		bl->n_held++;
		bl->held_samples += p->params.k_step;
		v05__gauge(p, V05_C_PROMPTS_HELD, 1);
		if (v05__batch_hold(p, b, e->key)) {
			/* No memory to remember it: release it alone now
			 * rather than lose it (the policy rebuilds). */
		}
		v05__policy_held(p, b);
		return;
	}
	finalize_with(p, e, &est, adv,
		      est.action == V05_ACTION_MORE ? V05_DF_HALTED : 0, latency);
	v05__policy_after_decision(p, b);
}
