/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's fit as the plugin holds it (and EBPO's running statistics,
 * beside it in the state region): the running fit of the schedule
 * without a barrier (its own part and the other engines', in the state
 * region; warm once eb_cold first waves are in), the barrier's per-batch
 * fit in the batch record, and what depends on them alone: a prompt's
 * successes, the early start's choice at submit.
 */
#include "mechanics.h"
#include "../rules/stats_core.h"
#include "vocab.h"

/* The successes in the prompt's first k received rewards. */
double v05__prompt_successes(struct v05_plugin *p, const struct v05_prompt *e,
			     uint32_t k)
{
	const float *rw = v05__slot_rewards(v05__slot(&p->seg, e->slot));
	double r[V05_K_LIMIT];

	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
	return v05__eb_successes(r, k);
}

void v05__ebpo_fold_prompt(struct v05_plugin *p, const struct v05_prompt *e)
{
	const float *rw = v05__slot_rewards(v05__slot(&p->seg, e->slot));
	double r[V05_K_LIMIT];
	double keep = p->cfg.ebpo_window ? 1.0 - 1.0 / p->cfg.ebpo_window : 1.0;
	uint32_t k = v05__group_k(e);

	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
	v05__ebpo_fold_u(&p->fit->ebpo, keep, r, k);
}

static double weight(const struct v05_plugin *p)
{
	return p->fit->own.weight + p->fit->remote.weight;
}

/* Counted in first waves folded, forgetting aside: with a window the
 * weight only tends to eb_window. */
bool v05__eb_warm(const struct v05_plugin *p)
{
	return p->fit->own.folded + p->fit->remote.folded >= p->cfg.eb_cold;
}

bool v05__eb_running_fit(struct v05_plugin *p, struct v05_eb_fit *fit)
{
	if (!(weight(p) > 0.0))
		return false;
	if (!p->fit_memo_ok) {
		v05__eb_argmax_u(&p->fit->own, &p->fit->remote, &p->fit_memo);
		p->fit_memo_ok = true;
	}
	*fit = p->fit_memo;
	return true;
}

bool v05__eb_warm_fit(struct v05_plugin *p, struct v05_eb_fit *fit)
{
	return v05__eb_warm(p) && v05__eb_running_fit(p, fit);
}

uint32_t v05__eb_early(struct v05_plugin *p, struct v05_prompt *e,
		       const struct v05_eb_fit *fit)
{
	uint32_t k = p->params.k_init + p->params.k_step;

	if (1000.0 * v05__eb_p_more_u(&p->params, fit, e->prior) <
	    (double)p->cfg.eb_early)
		return 0;
	e->pad8 |= V05_PF_EARLY;
	e->issued = k == 64 ? ~0ull : (1ull << k) - 1;
	return p->params.k_step;
}

bool v05__eb_fit_of(struct v05_plugin *p, uint32_t b,
		    struct v05_eb_fit *fit)
{
	/* No barrier: the running fit. */
	if (p->cfg.schedule == V05_SCHEDULE_STREAM)
		return v05__eb_running_fit(p, fit);
	/* One read of each field; the grid's bounds with rounding room. */
	double n0 = p->batch_recs[b].eb_n0, h = p->batch_recs[b].eb_h;

	if (!(n0 >= 0.999 && n0 <= 1000.001 && h >= V05_EB_H_MIN * 0.999 &&
	      h <= V05_EB_H_MAX * 1.001))
		return false;
	fit->n0 = n0;
	fit->h = h;
	return true;
}
