/* SPDX-License-Identifier: MIT */
/*
 * Finalization, the service decide.c and the batch policy both call: the
 * statistics over a prompt's rewards, the advantages into its slot, the
 * slot FINAL, then its completion, journal record, support entry and the
 * FINAL/DROP decision; and the latencies that come with decisions.
 *
 * Crash consistency: a group's results are written before its FINAL state
 * (R4 below), and a slot is FINAL before its completion and journal record,
 * so a takeover after any prefix finishes the transition (takeover.c).
 */
#include <errno.h>
#include <string.h>

#include "mechanics.h"
#include "../journal/journal.h"
#include "probes.h"
#include "../rules/stats_core.h"

void v05__record_latency(struct v05_plugin *p, uint64_t ns)
{
	uint32_t b = ns ? 63u - (uint32_t)__builtin_clzll(ns) : 0;

	if (b >= V05_C_LAT_BUCKETS)
		b = V05_C_LAT_BUCKETS - 1;
	v05__count(p, V05_C_LATENCY_COUNT, 1);
	v05__count(p, V05_C_LATENCY_SUM_NS, ns);
	v05__count(p, V05_C_LAT_HIST + (int)b, 1);
}

uint64_t v05__latency_of(const struct v05_prompt *e, uint64_t now)
{
	return e->last_ts && now > e->last_ts ? now - e->last_ts : 0;
}

/*
 * The statistics over the slot's rewards, in sample order, through the
 * unchecked core: the rewards were checked when applied, the prior at
 * submit, the parameters at create; the arithmetic is v05_estimate's.
 */
void v05__estimate_prompt(struct v05_plugin *p, const struct v05_prompt *e,
			  struct v05_estimate *est, double *adv)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, e->slot);
	const float *rw = v05__slot_rewards(h);
	double r[V05_K_LIMIT];
	uint32_t k = v05__group_k(e);

	const struct v05_eb_fit *f = NULL;
	struct v05_eb_fit fit;

	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
	/* The fit a WAVES_FIT rule's group is under (eb_fit.c). */
	if (p->rule->waves == V05__WAVES_FIT && v05__eb_fit_of(p, e->batch, &fit))
		f = &fit;
	p->rule->estimate(&p->env, f, e->prior, r, k, est, adv);
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
	jr.keep = h->keep;
	ret = v05__journal_append(p->journal, &jr, h->uid, v05__slot_rewards(h),
				  v05__slot_advantages(&p->seg, h));
	p->journal_work = true;
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
		bl->held_samples -= v05__held_share(p, e);
		v05__gauge(p, V05_C_PROMPTS_HELD, -1);
	}
	bl->n_open--;
}

/* The samples trained on: all k unless the rule keeps part (rule.h). */
static uint64_t keep_of(const struct v05_plugin *p, struct v05_slot_hdr *h,
			uint32_t k)
{
	const float *rw = v05__slot_rewards(h);
	double r[V05_K_LIMIT];

	if (!p->rule->keep)
		return v05__first_bits(k);
	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
	return p->rule->keep(&p->params, r, k);
}

void v05__finalize_with(struct v05_plugin *p, struct v05_prompt *e,
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
	h->keep = k ? keep_of(p, h, k) : 0;
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
	/* A skipped prompt (k = 0) has no success rate to teach a value
	 * model. */
	if (k)
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

void v05__finalize_skip(struct v05_plugin *p, struct v05_prompt *e)
{
	struct v05_estimate est;

	memset(&est, 0, sizeof(est));
	est.action = V05_ACTION_DROP;
	est.baseline = e->prior;
	v05__finalize_with(p, e, &est, NULL, 0, 0);
	v05__count(p, V05_C_PROMPTS_SKIPPED, 1);
}

void v05__finalize(struct v05_plugin *p, struct v05_prompt *e, uint32_t flags,
		   uint64_t latency)
{
	struct v05_estimate est;
	double adv[V05_K_LIMIT];

	v05__estimate_prompt(p, e, &est, adv);
	v05__finalize_with(p, e, &est, adv, flags, latency);
}
