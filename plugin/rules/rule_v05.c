/* SPDX-License-Identifier: MIT */
/*
 * The paper's rule (docs/STATISTICS.md, paper sections 3.3-3.4): mode v05,
 * the prior fused with the group's rewards (shrinkage by the truncated
 * squared bias) and the OSLA stopping rule's "more" of k_step samples,
 * which the batch's halt can cut short; mode v05-fixed, the same fusion at
 * a fixed k_init.
 */
#include "rule.h"
#include "stats_core.h"

static void estimate_v05(const struct v05__rule_env *env,
			 const struct v05_eb_fit *fit, double prior,
			 const double *r, uint32_t k, struct v05_estimate *e,
			 double *adv)
{
	const struct v05_params *p = env->params;

	(void)fit;
	v05__estimate_begin(e, r, k);
	v05__estimate_fused(p, prior, r, k, e, adv);
	e->has_target = v05__k_target_u(p->cost, e->delta2, &e->k_target);
	e->action = v05__osla_u(p, k, e->has_target, e->k_target);
}

static void estimate_fixed(const struct v05__rule_env *env,
			   const struct v05_eb_fit *fit, double prior,
			   const double *r, uint32_t k, struct v05_estimate *e,
			   double *adv)
{
	(void)fit;
	v05__estimate_begin(e, r, k);
	v05__estimate_fused(env->params, prior, r, k, e, adv);
}

const struct v05__rule v05__rule_v05 = {
	.name = "v05",
	.waves = V05__WAVES_STEPS,
	.flags = V05__RULE_OSLA | V05__RULE_HALTS,
	.estimate = estimate_v05,
};

const struct v05__rule v05__rule_v05_fixed = {
	.name = "v05-fixed",
	.waves = V05__WAVES_STEPS,
	.estimate = estimate_fixed,
};
