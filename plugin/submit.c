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

/* One prompt: 0 or its error. On success *e is its table entry. */
static int add_prompt(struct v05_plugin *p, const struct v05_prompt_in *in,
		      uint32_t k0, uint32_t b, uint64_t batch_id, uint64_t now,
		      struct v05_prompt **out)
{
	struct v05_slot_hdr *h;
	struct v05_prompt *e;
	double prior = in->prior;
	uint64_t key;
	uint32_t slot;
	int ret;

	if (!in->uid || in->uid_len < 1 || in->uid_len > V05_UID_MAX_BYTES)
		return -EINVAL;
	/* Mode knapsack takes NaN for "no estimate yet" (plan_first); the
	 * prompt's state keeps a prior of 0, as nothing reads it. Under
	 * knapsack-prior a NaN is a value model that failed: refused. */
	if (isnan(prior) && p->params.mode == V05_MODE_KNAPSACK)
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
	e->pad8 = 0;
	e->k_planned = (uint8_t)k0;
	/* The entry is complete before it is marked issued. */
	e->issued = v05__first_bits(k0);
	e->state = V05_P_COLLECTING;
	*out = e;
	return 0;
}

/*
 * knapsack, knapsack-prior: each prompt's one wave, planned over the whole
 * submit from the priors (rule_knapsack.c), in *plan (to free); a prompt
 * whose prior is NaN (mode knapsack: no estimate yet) gets k_init outside
 * the knapsack.
 * A prior that is not valid plans as a prior of 0 (its prompt is refused anyway,
 * and its share of the budget is not spent, as a refused prompt's never
 * is). NULL plan: every prompt gets k_init.
 */
static int plan_first(struct v05_plugin *p, const struct v05_prompt_in *in,
		      uint32_t n, uint32_t **plan)
{
	double *q;
	int ret;

	*plan = NULL;
	if (!v05__mode_is_knapsack(p->params.mode))
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
		return v05__fail(-ENOMEM, "submit: no memory for the knapsack plan");
	}
	for (uint32_t i = 0; i < n; i++) {
		double v = in[i].prior;

		q[i] = isnan(v) ? NAN :
		       isfinite(v) && v >= -1.0 && v <= 1.0 ? (1.0 + v) / 2.0 :
							      0.5;
	}
	ret = v05__knapsack_plan_u(q, n, p->params.k_init, p->params.k_max, *plan);
	free(q);
	if (ret) {
		free(*plan);
		*plan = NULL;
		return v05__fail(ret, "submit: no memory for the knapsack plan");
	}
	return 0;
}

V05_API int v05_submit(struct v05_plugin *p, const struct v05_prompt_in *in,
		       uint32_t n, struct v05_decision *out, int *status)
{
	V05_ONE_THREAD(p, "submit");
	struct v05_batch_rec *rec;
	struct batch_local *bl;
	uint64_t now = v05__wall_ns(), id, issued = 0;
	uint32_t b = 0, accepted = 0, *plan;
	struct v05_eb_fit fit;
	bool early;
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
	/* v05-eb's early start, under the fit as it stands at submit. */
	early = p->cfg.eb_early && v05__eb_warm_fit(p, &fit);
	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = NULL;
		struct v05_decision *d;

		uint32_t k0 = plan ? plan[i] : p->params.k_init;

		ret = add_prompt(p, &in[i], k0, b, id, now, &e);
		if (status)
			status[i] = ret;
		if (ret) {
			v05__count(p, V05_C_SUBMIT_REJECTED, 1);
			continue;
		}
		d = &out[accepted++];
		memset(d, 0, sizeof(*d));
		d->kind = V05_DECISION_SAMPLE;
		d->key = e->key;
		d->slot = e->slot;
		d->gen = v05__slot(&p->seg, e->slot)->gen;
		d->k = k0 + (early ? v05__eb_early(p, e, &fit) : 0);
		d->samples = e->issued;
		d->batch = id;
		issued += d->k;
	}
	free(plan);
	if (accepted == 0) {
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
	rec->submit_ns = v05__now_ns();
	rec->state = V05_B_OPEN;
	/* Last: a batch record with an id is live (takeover scans for it). */
	rec->id = id;
	v05__count(p, V05_C_PROMPTS_SUBMITTED, accepted);
	v05__count(p, V05_C_SAMPLES_ISSUED, issued);
	v05__count(p, V05_C_DEC_SAMPLE, accepted);
	v05__count(p, V05_C_BATCHES_SUBMITTED, 1);
	v05__gauge(p, V05_C_PROMPTS_OPEN, accepted);
	return (int)accepted;
}
