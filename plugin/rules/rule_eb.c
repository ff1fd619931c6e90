/* SPDX-License-Identifier: MIT */
/*
 * Mode v05-eb (docs/STATISTICS.md, "Mode v05-eb"): an empirical-Bayes
 * baseline under a fit of the prior (eb.c: the posterior and the
 * allocation; eb_state.c: the fit as an additive state), in two waves.
 * A prompt's first wave is 2 or 4 (eb_first), whichever the fit says
 * leaves the least expected final risk (k_init while the fit is cold); at
 * its first wave it gets the m extra samples that minimise its expected
 * posterior variance plus c m (0: final now); its second wave is final. Under the stream schedule each first wave is
 * folded into the running fit (own part, forgetting by eb_window), which
 * other engines may merge, and a prompt the fit says likely needs more
 * may start its second wave early (eb_early); under rounds the batch's
 * barrier fits its own first waves.
 */

#include "rule.h"
#include "stats_core.h"

/* Without a fit (none can be had: a barrier's record a takeover found
 * unusable) the paper's fusion is a defined answer. */
static void estimate(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, struct v05_estimate *e,
		     double *adv)
{
	if (fit) {
		v05__eb_estimate_u(env->params, fit, prior, r, k, e, adv);
		return;
	}
	v05__estimate_begin(e, r, k);
	v05__estimate_fused(env->params, prior, r, k, e, adv);
}

static uint32_t more(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, float *gap)
{
	double s = v05__eb_successes(r, k), mean, var, w2;
	uint32_t m = v05__eb_choose_u(env->params, fit, prior, k, s);

	/* Padding priority: the posterior variance (<= 1) over the plan,
	 * so padding goes to the most uncertain prompts. */
	if (m) {
		v05__eb_posterior_u(fit, prior, k, s, &mean, &var, &w2);
		*gap = (float)((double)m + 4.0 * var); /* var of mu = 2p - 1 */
	}
	return m;
}

double v05__eb_keep(const struct v05__rule_env *env)
{
	uint32_t window = env->config->eb_window;

	return window ? 1.0 - 1.0 / (double)window : 1.0;
}

void v05__eb_fold_first(const struct v05__rule_env *env, double prior,
			const double *r, uint32_t k)
{
	v05__eb_fold_u(&env->state->own, v05__eb_keep(env), prior, k,
		       v05__eb_successes(r, k));
}

/*
 * The first wave from the fit (eb_first: the sizes it may be; rule.h's
 * fit is NULL while cold: k_init), the one of least expected final risk
 * (eb.c); and the early start: k_step more with it when the fit gives it
 * a chance of at least eb_early per mille to get more.
 */
static uint32_t first_wave(const struct v05__rule_env *env,
			   const struct v05_eb_fit *fit, double prior,
			   uint32_t *early)
{
	const struct v05_params *p = env->params;
	uint32_t permille = env->config->eb_early, waves = env->config->eb_first;
	uint32_t k1 = p->k_init;
	double risk, more = 0.0;

	*early = 0;
	if (!fit)
		return k1;
	if (waves)
		k1 = v05__eb_first_u(p, fit, prior, waves, &risk, &more);
	else if (permille)
		more = v05__eb_p_more_u(p, fit, prior);
	if (permille && 1000.0 * more >= (double)permille)
		*early = p->k_step;
	return k1;
}

const struct v05__rule v05__rule_eb = {
	.name = "v05-eb",
	.waves = V05__WAVES_FIT,
	.flags = V05__RULE_MERGES | V05__RULE_EARLY | V05__RULE_FIRST,
	.cost = V05_EB_DEFAULT_COST,
	.needs_plugin = "mode v05-eb needs its batch's fit: use v05_eb_estimate",
	.first_wave = first_wave,
	.fold_first = v05__eb_fold_first,
	.estimate = estimate,
	.more = more,
};
