/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's batch barrier: when every open prompt of a batch has its k_init
 * rewards, fit the batch's prior (eb.c), choose each prompt's extra samples
 * m, finalize the prompts with m = 0 and release the rest in one wave,
 * padded as configured. The second wave's groups finalize as they come in
 * (decide.c), so a batch takes at most two waves. No halt applies. This
 * is v05-eb under the rounds schedule.
 *
 * Crash consistency: the fit is stored in the batch record before anything
 * is finalized or planned, and a stored fit is reused; m is a pure function
 * of the fit and the prompt's rewards. A takeover that finds the barrier
 * half done therefore computes the same plan for the prompts still held.
 */
#include "schedule.h"
#include "../rules/stats_core.h"


static void fit_batch(struct v05_plugin *p, uint32_t b, const uint64_t *keys,
		      uint32_t n)
{
	struct v05_batch_rec *rec = &p->batch_recs[b];
	struct v05_eb_fit fit;
	uint32_t m = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (!e || e->state != V05_P_HELD)
			continue;
		p->eb_k[m] = v05__group_k(e);
		p->eb_prior[m] = e->prior;
		p->eb_s[m] = v05__prompt_successes(p, e, p->eb_k[m]);
		m++;
	}
	if (m == 0)
		return;
	rec->eb_shape = v05__eb_fit_u(p->eb_prior, p->eb_k, p->eb_s, m, &fit);
	/* n0 >= 1 on the grid: a non-zero n0 marks the record fitted, so it
	 * is written last. */
	rec->eb_h = fit.h;
	v05_compiler_barrier(); /* the same order for a killed owner */
	rec->eb_n0 = fit.n0;
	v05__eb_barrier_fitted(p, &fit, m);
}

static void eb_barrier(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	struct v05_batch_rec *rec = &p->batch_recs[b];
	struct v05_eb_fit fit;
	uint64_t *keys, total = 0, id = rec->id;
	uint32_t n;

	if (!id || bl->n_collecting || !bl->n_held)
		return;
	n = v05__held_keys(p, b, &keys);
	if (!v05__eb_fit_of(p, b, &fit)) {
		fit_batch(p, b, keys, n);
		if (!v05__eb_fit_of(p, b, &fit))
			return;
	}
	/* Plans first, finals after: finalizing the last open prompt frees
	 * the batch record, and the held list must not change under us. */
	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);
		double r[V05_K_LIMIT];
		float gap = 0.0f;
		uint32_t k, m;

		if (!e || e->state != V05_P_HELD)
			continue;
		k = v05__group_k(e);
		v05__prompt_rewards(p, e, k, r);
		m = p->rule->more(&p->env, &fit, e->prior, r, k, &gap);
		e->k_planned = (uint8_t)(k + m);
		/* Padding priority: the rule's (v05-eb: the posterior
		 * variance over the plan, so padding goes to the most
		 * uncertain prompts). */
		if (m) {
			e->gap = gap;
			total += m;
		}
	}
	for (uint32_t i = 0; i < n && rec->id == id; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (e && e->state == V05_P_HELD &&
		    e->k_planned == v05__group_k(e))
			v05__finalize(p, e, 0, 0);
	}
	if (rec->id == id && total)
		v05__pad_and_issue(p, b, total, p->cfg.pad_multiple);
}

const struct v05__schedule v05__sched_eb_barrier = {
	.name = "v05-eb barrier",
	.progress = eb_barrier,
};
