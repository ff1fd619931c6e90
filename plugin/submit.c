/* SPDX-License-Identifier: MIT */
/* Submit: register a batch of prompts and hand out the first dispatch. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mechanics/mechanics.h"
#include "rules/stats_core.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "../shm/testpoint.h"
#include "mechanics/one_thread.h"

static int alloc_batch(struct v05_plugin *p, uint32_t *b)
{
	for (uint32_t i = 0; i < p->seg.hdr.geo.batch_count; i++) {
		if (p->batch_recs[i].id == 0) {
			*b = i;
			return 0;
		}
	}
	return v05__fail(-EBUSY, "all %u batches are in flight",
			 p->seg.hdr.geo.batch_count);
}

/* One prompt with a first wave of k0 samples and early more issued with
 * it: 0 or its error. On success *e is its table entry. */
static int add_prompt(struct v05_plugin *p, const struct v05_prompt_in *in,
		      uint32_t k0, uint32_t early, uint32_t b,
		      uint64_t batch_id, uint64_t now, struct v05_prompt **out)
{
	struct v05_slot_hdr *h;
	struct v05_prompt *e;
	double prior = in->prior;
	uint64_t key;
	uint32_t slot;
	int ret;

	if (!in->uid || in->uid_len < 1 || in->uid_len > V05_UID_MAX_BYTES)
		return -EINVAL;
	/* A rule may take NaN for "no estimate yet" (mode knapsack: its
	 * plan_batch gives it k_init); the prompt's state keeps a prior of
	 * 0, as nothing reads it. Elsewhere a NaN is a value model that
	 * failed: refused. */
	if (isnan(prior) && (p->rule->flags & V05__RULE_NAN_PRIOR))
		prior = 0.0;
	if (!isfinite(prior) || prior < -1.0 || prior > 1.0)
		return -EDOM;
	key = v05_key(in->uid, in->uid_len);
	ret = v05__table_insert(&p->table, key, &e);
	if (ret)
		return ret == -EEXIST ? -EEXIST : -ENOSPC;
	if (v05__arena_alloc(&p->arena, &slot)) {
		v05__table_delete(&p->table, e);
		return -ENOSPC;
	}
	h = v05__slot(&p->seg, slot);
	h->key = key;
	h->prior = prior;
	h->uid_len = in->uid_len;
	memcpy(h->uid, in->uid, in->uid_len);
	h->submit_ns = now;
	h->batch_id = batch_id;
	h->seq = 0;
	e->prior = prior;
	e->gen = h->gen;
	e->last_ts = 0;
	e->slot = slot;
	e->batch = b;
	e->round = 0;
	/* The early start's samples are issued with the first wave; the
	 * first decision still waits for k0 (decide.c). */
	e->pad8 = early ? V05_PF_EARLY : 0;
	e->k_planned = (uint8_t)k0;
	e->k_first = (uint8_t)k0;
	/* The entry is complete before it is marked issued. */
	e->issued = v05__first_bits(k0 + early);
	e->state = V05_P_COLLECTING;
	*out = e;
	return 0;
}

/*
 * The batch's first waves planned together, where the rule plans them so
 * (knapsack, knapsack-prior: rules/rule.h, plan_batch), in *plan (to
 * free), from the priors as submitted. NULL plan: each prompt's own.
 */
static int plan_first(struct v05_plugin *p, const struct v05_prompt_in *in,
		      uint32_t n, uint32_t **plan)
{
	double *q;
	int ret;

	*plan = NULL;
	if (!p->rule->plan_batch)
		return 0;
	/* The budget, n * k_init, is a u32 (k_init <= 64). */
	if (n > UINT32_MAX / V05_K_LIMIT)
		return v05__fail(-EINVAL, "submit: %u prompts in one batch", n);
	q = malloc((size_t)n * sizeof(*q));
	*plan = malloc((size_t)n * sizeof(**plan));
	if (!q || !*plan) {
		free(q);
		free(*plan);
		*plan = NULL;
		return v05__fail(-ENOMEM, "submit: no memory for the %s plan",
				 p->rule->name);
	}
	for (uint32_t i = 0; i < n; i++)
		q[i] = in[i].prior;
	ret = p->rule->plan_batch(&p->params, q, n, *plan);
	free(q);
	if (ret) {
		free(*plan);
		*plan = NULL;
		return v05__fail(ret, "submit: no memory for the %s plan",
				 p->rule->name);
	}
	return 0;
}

/* One prompt's first wave (and early start) under the rule: the batch's
 * plan if there is one, else the rule's first_wave, else k_init. A prior
 * add_prompt will refuse is not the rule's to see. */
static uint32_t first_wave(struct v05_plugin *p, const uint32_t *plan,
			   uint32_t i, const struct v05_eb_fit *fit,
			   double prior, uint32_t *early)
{
	*early = 0;
	if (plan)
		return plan[i];
	if (p->rule->first_wave && isfinite(prior) && prior >= -1.0 &&
	    prior <= 1.0)
		return p->rule->first_wave(&p->env, fit, prior, early);
	return p->params.k_init;
}

V05_API int v05_submit(struct v05_plugin *p, const struct v05_prompt_in *in,
		       uint32_t n, struct v05_decision *out, int *status)
{
	V05_ONE_THREAD(p, "submit");
	struct v05_batch_rec *rec;
	struct batch_local *bl;
	uint64_t now = v05__wall_ns(), id, issued = 0;
	uint32_t b = 0, accepted = 0, decisions = 0, skipped = 0, *plan;
	struct v05_prompt **skip = NULL;
	struct v05_eb_fit fit;
	const struct v05_eb_fit *warm = NULL;
	int ret;

	v05__clear_error();
	if (!p || (n && (!in || !out)))
		return v05__fail(-EINVAL, "submit: NULL argument");
	if (n == 0)
		return 0;
	ret = alloc_batch(p, &b);
	if (ret)
		return ret;
	ret = plan_first(p, in, n, &plan);
	if (ret)
		return ret;
	rec = &p->batch_recs[b];
	bl = &p->batches[b];
	id = ++p->st->next_batch_id;
	/* The first waves see the running fit as it stands at submit; only
	 * a rule that says so skips a prompt (first_wave 0), and only its
	 * submit allocates for them. */
	if (p->rule->first_wave && v05__eb_warm_fit(p, &fit))
		warm = &fit;
	if (p->rule->flags & V05__RULE_SKIPS) {
		skip = malloc((size_t)n * sizeof(*skip));
		if (!skip) {
			free(plan);
			return v05__fail(-ENOMEM, "submit: no memory for %u prompts",
					 n);
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = NULL;
		struct v05_decision *d;
		uint32_t early, k0;

		k0 = first_wave(p, plan, i, warm, in[i].prior, &early);
		if (k0 == 0 && !skip)
			k0 = p->params.k_init; /* not a rule that skips */
		ret = add_prompt(p, &in[i], k0, early, b, id, now, &e);
		if (status)
			status[i] = ret;
		if (ret) {
			v05__count(p, V05_C_SUBMIT_REJECTED, 1);
			continue;
		}
		accepted++;
		/* Into the rule's sums before the next prompt's first wave,
		 * skipped or not (the skip's bar is over every prompt). */
		if (warm && p->rule->fold_prompt)
			p->rule->fold_prompt(&p->env, warm, e->prior, k0 > 0);
		if (k0 == 0) {
			skip[skipped++] = e;
			continue;
		}
		d = &out[decisions++];
		memset(d, 0, sizeof(*d));
		d->kind = V05_DECISION_SAMPLE;
		d->key = e->key;
		d->slot = e->slot;
		d->gen = v05__slot(&p->seg, e->slot)->gen;
		d->k = k0 + early;
		d->samples = e->issued;
		d->batch = id;
		issued += d->k;
	}
	free(plan);
	if (accepted == 0) {
		free(skip);
		--p->st->next_batch_id;
		return 0;
	}
	memset(bl, 0, offsetof(struct batch_local, held));
	bl->n_open = bl->n_collecting = accepted;
	rec->n_prompts = accepted;
	rec->round = 0;
	rec->hold_since_ns = 0;
	rec->eb_n0 = 0.0; /* not fitted yet */
	rec->eb_h = 0.0;
	rec->eb_shape = 0;
	rec->submit_ns = v05__now_ns();
	rec->state = V05_B_OPEN;
	/* Last: a batch record with an id is live (takeover scans for it). */
	rec->id = id;
	v05__count(p, V05_C_PROMPTS_SUBMITTED, accepted);
	v05__count(p, V05_C_SAMPLES_ISSUED, issued);
	v05__count(p, V05_C_DEC_SAMPLE, decisions);
	v05__count(p, V05_C_BATCHES_SUBMITTED, 1);
	v05__gauge(p, V05_C_PROMPTS_OPEN, accepted);
	/* After the batch is live: a skip is a final group of it (the last
	 * one ends the batch). A takeover between these finds a collecting
	 * prompt with nothing issued and finishes its skip (takeover.c). */
	if (skipped)
		v05__test_point("submit.skips");
	for (uint32_t i = 0; i < skipped; i++)
		v05__finalize_skip(p, skip[i]);
	free(skip);
	return (int)decisions;
}
