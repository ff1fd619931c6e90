/* SPDX-License-Identifier: MIT */
/*
 * Pilot-Commit (arXiv 2605.26606; the rule as its authors' public code
 * runs it, read and not copied, the paper's text being out of reach here:
 * docs/RULES.md). A pilot of k_init samples estimates a prompt's success
 * rate; a rate in the band [lower, 1 - upper] earns the commit, k_step
 * more samples, and the whole group (pilot and commit) is trained on with
 * GRPO's advantages; any other rate drops the prompt after its pilot, its
 * rollouts spent. Which prompts come back is the trainer's state
 * (include/v05/rules.h): too hard ones next epoch, solved ones never.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/rules.h"

/* The band's edges compare with this slack, in favour of the band: the
 * authors compare a float mean of 0/1 values with the thresholds, and
 * 1 - 0.25 and 1/8 are exact there as here; a rate one rounding away from
 * an edge is on it. */
#define EDGE 1e-12

static_assert(sizeof(struct v05_pc_prompt) == 16, "pc prompt ABI");

int v05__pc_class_u(const double *r, uint32_t k, double lower, double upper,
		    double evict)
{
	double p = 0.0;

	for (uint32_t i = 0; i < k; i++)
		p += (1.0 + r[i]) / 2.0;
	p /= (double)k;
	if (!isnan(evict) && p >= evict - EDGE)
		return V05_PC_SOLVED;
	if (p < lower - EDGE)
		return V05_PC_TOO_HARD;
	if (p > 1.0 - upper + EDGE)
		return V05_PC_TOO_EASY;
	return V05_PC_COMMIT;
}

void v05__estimate_pc(const struct v05_params *p, double lower, double upper,
		      const double *r, uint32_t k, struct v05_estimate *e,
		      double *adv)
{
	v05__estimate_group(false, r, k, e, adv);
	if (k != p->k_init)
		return; /* pilot and commit in: final, GRPO's */
	if (v05__pc_class_u(r, k, lower, upper, NAN) == V05_PC_COMMIT &&
	    k + p->k_step <= p->k_max) {
		e->action = V05_ACTION_MORE;
		e->has_target = true;
		e->k_target = (double)(k + p->k_step);
		return;
	}
	/* Out of the band: not trained on. */
	e->action = V05_ACTION_DROP;
	for (uint32_t i = 0; adv && i < k; i++)
		adv[i] = 0.0;
}

/* ---- the row: mode pilot-commit, the band from the configuration ---- */

static int check_config(const struct v05__rule *r, const struct v05_config *c)
{
	(void)r;
	if (c->params.k_init + c->params.k_step != c->params.k_max)
		return v05__fail(-EINVAL,
				 "pilot-commit: k_max %u must be the pilot k_init %u plus the commit k_step %u",
				 c->params.k_max, c->params.k_init,
				 c->params.k_step);
	return 0;
}

static void estimate(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, struct v05_estimate *e,
		     double *adv)
{
	(void)fit;
	(void)prior;
	v05__estimate_begin(e, r, k);
	v05__estimate_pc(env->params, env->config->pc_lower,
			 env->config->pc_upper, r, k, e, adv);
}

const struct v05__rule v05__rule_pc = {
	.name = "pilot-commit",
	.waves = V05__WAVES_STEPS,
	.flags = V05__RULE_NO_PAD_HALT,
	/* A pilot of 8 (the authors' default), a commit of three times that
	 * (their scripts' split: p16c48, p32c96). Padding would change a commit's
	 * size, a halt cancel it. */
	.preset = { .k_init = 8, .k_step = 24, .k_max = 32 },
	.check_config = check_config,
	.estimate = estimate,
};

static int check_band(double lower, double upper, double evict)
{
	if (!(lower >= 0.0 && lower <= 1.0) || !(upper >= 0.0 && upper <= 1.0))
		return v05__fail(-EINVAL,
				 "pilot-commit: lower %g / upper %g: each in [0, 1]",
				 lower, upper);
	if (lower > 1.0 - upper)
		return v05__fail(-EINVAL,
				 "pilot-commit: lower %g is above 1 - upper %g: the band commits nothing",
				 lower, 1.0 - upper);
	/* Solved is above the band: a prompt is committed or evicted, not
	 * both. */
	if (!isnan(evict) && !(evict > 1.0 - upper && evict <= 1.0))
		return v05__fail(-EINVAL,
				 "pilot-commit: evict %g is not in (1 - upper, 1] = (%g, 1] (NaN: never)",
				 evict, 1.0 - upper);
	return 0;
}

V05_API int v05_pc_class(const double *rewards, uint32_t k, double lower,
			 double upper, double evict)
{
	int ret;

	v05__clear_error();
	if (!rewards)
		return v05__fail(-EINVAL, "pilot-commit: NULL rewards");
	if (k < 1 || k > V05_K_LIMIT)
		return v05__fail(-EINVAL, "pilot-commit: k = %u is not in [1, %u]",
				 k, V05_K_LIMIT);
	ret = check_band(lower, upper, evict);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < k; i++)
		if (!(rewards[i] >= -1.0 && rewards[i] <= 1.0))
			return v05__fail(-EDOM,
					 "pilot-commit: reward %u (%g) is not finite in [-1, 1]",
					 i, rewards[i]);
	return v05__pc_class_u(rewards, k, lower, upper, evict);
}

static int check_prompt(const struct v05_pc_prompt *x)
{
	if (!x)
		return v05__fail(-EINVAL, "pilot-commit: NULL prompt record");
	if (x->seen > 1 || x->last > V05_PC_SOLVED || (!x->seen && x->last))
		return v05__fail(-EINVAL, "pilot-commit: a prompt record that "
				 "cannot be (not one this library wrote)");
	return 0;
}

V05_API int v05_pc_fold(struct v05_pc_prompt *x, uint64_t epoch,
			const double *rewards, uint32_t k, double lower,
			double upper, double evict)
{
	int ret;

	v05__clear_error();
	ret = check_prompt(x);
	if (ret)
		return ret;
	if (x->seen && epoch < x->epoch)
		return v05__fail(-EINVAL,
				 "pilot-commit: epoch %llu is before the prompt's last pilot, %llu",
				 (unsigned long long)epoch,
				 (unsigned long long)x->epoch);
	ret = v05_pc_class(rewards, k, lower, upper, evict);
	if (ret < 0)
		return ret;
	x->epoch = epoch;
	x->last = (uint32_t)ret;
	x->seen = 1;
	return ret;
}

V05_API int v05_pc_skip(const struct v05_pc_prompt *x, uint64_t epoch)
{
	int ret;

	v05__clear_error();
	ret = check_prompt(x);
	if (ret || !x->seen)
		return ret;
	if (epoch < x->epoch)
		return v05__fail(-EINVAL,
				 "pilot-commit: epoch %llu is before the prompt's last pilot, %llu",
				 (unsigned long long)epoch,
				 (unsigned long long)x->epoch);
	return epoch == x->epoch || x->last == V05_PC_SOLVED;
}
