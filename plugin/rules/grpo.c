/* SPDX-License-Identifier: MIT */
/*
 * GRPO's statistics on one group, the primitive the group-relative modes
 * build on (grpo and dapo, greso, the knapsack modes, pilot-commit's
 * final group): verl's compute_grpo_outcome_advantage, each group's mean
 * and Bessel-corrected standard deviation. A pure function, below the
 * modes that call it.
 */
#include <math.h>

#include "stats_core.h"
#include "v05/stats.h"

/*
 * verl's compute_grpo_outcome_advantage: a group of one has mean 0 and std 1;
 * otherwise mean and Bessel-corrected std; A = (r - mean) / (std + 1e-6).
 */
void v05__estimate_group(bool drops, const double *rewards, uint32_t k,
			 struct v05_estimate *e, double *adv)
{
	bool all_equal = true;
	double std = 1.0, mu = 0.0;

	/* Equal as float32 (stats_core.h, v05__r32): what the plugin
	 * stores, so both paths drop (dapo) the same groups. */
	for (uint32_t i = 1; i < k; i++)
		all_equal = all_equal && v05__r32(rewards[i]) == v05__r32(rewards[0]);
	if (k > 1) {
		double ss = 0.0;

		mu = e->mean;
		/* All-equal groups get std exactly 0 (and advantages exactly
		 * 0), not whatever rounding the mean left behind. */
		if (!all_equal) {
			for (uint32_t i = 0; i < k; i++)
				ss += (rewards[i] - mu) * (rewards[i] - mu);
			std = sqrt(ss / (double)(k - 1));
		} else {
			std = 0.0;
		}
	}
	e->delta2 = 0.0;
	e->weight = 1.0;
	e->baseline = mu;
	e->sigma = std;
	if (drops && k > 1 && all_equal)
		e->action = V05_ACTION_DROP;
	if (adv) {
		for (uint32_t i = 0; i < k; i++)
			adv[i] = all_equal && k > 1 ?
				 0.0 : (rewards[i] - mu) / (std + V05_GRPO_EPSILON);
	}
}
