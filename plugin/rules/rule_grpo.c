/* SPDX-License-Identifier: MIT */
/*
 * Modes grpo and dapo: GRPO's group statistics at a fixed G = k_init
 * (grpo.c, verl's compute_grpo_outcome_advantage); dapo drops a group
 * whose rewards are all equal (zero variance: no signal).
 */
#include "rule.h"
#include "stats_core.h"

void v05__rule_grpo_estimate(const struct v05__rule_env *env,
			     const struct v05_eb_fit *fit, double prior,
			     const double *r, uint32_t k,
			     struct v05_estimate *e, double *adv)
{
	(void)env;
	(void)fit;
	(void)prior;
	v05__estimate_begin(e, r, k);
	v05__estimate_group(false, r, k, e, adv);
}

void v05__rule_dapo_estimate(const struct v05__rule_env *env,
			     const struct v05_eb_fit *fit, double prior,
			     const double *r, uint32_t k,
			     struct v05_estimate *e, double *adv)
{
	(void)env;
	(void)fit;
	(void)prior;
	v05__estimate_begin(e, r, k);
	v05__estimate_group(true, r, k, e, adv);
}

const struct v05__rule v05__rule_grpo = {
	.name = "grpo",
	.waves = V05__WAVES_STEPS,
	.estimate = v05__rule_grpo_estimate,
};

const struct v05__rule v05__rule_dapo = {
	.name = "dapo",
	.waves = V05__WAVES_STEPS,
	.estimate = v05__rule_dapo_estimate,
};
