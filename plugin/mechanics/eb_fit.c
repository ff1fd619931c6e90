/* SPDX-License-Identifier: MIT */
/*
 * The rules' running state as the plugin holds it (rules/rule.h: the
 * running fit and EBPO's statistics, in the state region) and the fits a
 * WAVES_FIT rule's groups are under: the running fit of the schedule
 * without a barrier (its own part and the other engines'; warm once
 * eb_cold first waves are in), the barrier's per-batch fit in the batch
 * record, and the last barrier's for the next batches' first waves. The rule's folds go through here (the fit's memo with them);
 * a prompt's rewards and successes as the rules take them.
 */
#include "mechanics.h"
#include "../rules/stats_core.h"
#include "vocab.h"

void v05__prompt_rewards(struct v05_plugin *p, const struct v05_prompt *e,
			 uint32_t k, double *r)
{
	const float *rw = v05__slot_rewards(v05__slot(&p->seg, e->slot));

	for (uint32_t i = 0; i < k; i++)
		r[i] = (double)rw[i];
}

double v05__prompt_successes(struct v05_plugin *p, const struct v05_prompt *e,
			     uint32_t k)
{
	double r[V05_K_LIMIT];

	v05__prompt_rewards(p, e, k, r);
	return v05__eb_successes(r, k);
}

/* Every fold of the running state goes through here: the fit's memo is
 * stale after it (the argmax is taken again when next asked for). */
static void fold(struct v05_plugin *p, const struct v05_prompt *e, uint32_t k,
		 void (*fn)(const struct v05__rule_env *, double,
			    const double *, uint32_t))
{
	double r[V05_K_LIMIT];
	uint32_t s;

	v05__prompt_rewards(p, e, k, r);
	p->fit_memo_ok = false;
	s = v05_seq_begin(&p->fit->own_seq);
	fn(&p->env, e->prior, r, k);
	v05_seq_end(&p->fit->own_seq, s);
}

void v05__fold_group(struct v05_plugin *p, const struct v05_prompt *e)
{
	fold(p, e, v05__group_k(e), p->rule->fold_group);
}

void v05__fold_first(struct v05_plugin *p, const struct v05_prompt *e,
		     uint32_t k)
{
	fold(p, e, k, p->rule->fold_first);
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

/* A fit read from the segment (a takeover's: checked, not trusted). */
static bool fit_ok(const struct v05_eb_fit *f)
{
	return f->n0 >= 0.999 && f->n0 <= 1000.001 &&
	       f->h >= V05_EB_H_MIN * 0.999 && f->h <= V05_EB_H_MAX * 1.001 &&
	       f->a2 >= 0.01 && f->a2 <= 1000.0 && f->b2 >= 0.01 &&
	       f->b2 <= 1000.0;
}

bool v05__eb_warm_fit(struct v05_plugin *p, struct v05_eb_fit *fit)
{
	if (p->cfg.schedule == V05_SCHEDULE_STREAM)
		return v05__eb_warm(p) && v05__eb_running_fit(p, fit);
	/* Rounds: the last barrier's fit, once a batch of eb_cold first
	 * waves has been fitted. */
	if (!p->fit->barrier_groups)
		return false;
	*fit = p->fit->barrier;
	return fit_ok(fit);
}

void v05__eb_barrier_fitted(struct v05_plugin *p,
			    const struct v05_eb_fit *fit, uint32_t groups)
{
	if (groups < p->cfg.eb_cold)
		return;
	/* A takeover trusts the stored fit once barrier_groups is non-zero:
	 * 0 while the fit is written, the count after. The barriers keep
	 * the compiler from dropping the first store (overwritten below) or
	 * moving the fit's stores across either: an owner killed in between
	 * leaves 0, never a count over a half-written fit. */
	p->fit->barrier_groups = 0;
	v05_compiler_barrier();
	p->fit->barrier = *fit;
	v05_compiler_barrier();
	p->fit->barrier_groups = groups;
}

bool v05__eb_fit_of(struct v05_plugin *p, uint32_t b,
		    struct v05_eb_fit *fit)
{
	const struct v05_batch_rec *rec = &p->batch_recs[b];
	uint32_t c = rec->eb_shape;

	/* No barrier: the running fit. */
	if (p->cfg.schedule == V05_SCHEDULE_STREAM)
		return v05__eb_running_fit(p, fit);
	/* One read of each field; the grid's bounds with rounding room. */
	fit->n0 = rec->eb_n0;
	fit->h = rec->eb_h;
	if (c >= V05_EB_SHAPES || v05_eb_shape_at(c, &fit->a2, &fit->b2))
		return false;
	return fit_ok(fit);
}
