/* SPDX-License-Identifier: MIT */
/*
 * EBPO's baseline (arXiv 2602.05165; its method section could not be read
 * here, docs/RULES.md says what was and what is chosen): each group's
 * mean shrunk toward the running mean of the group means, by the ratio of
 * the noise of a group mean (within-group variance over k) to that noise
 * plus the between-group variance, every statistic kept by Welford's
 * online update over the groups folded so far. No extra samples. A pure
 * rule: the state is the caller's (the plugin keeps its own in the
 * segment's state region, eb_fit.c's neighbour).
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"

static_assert(sizeof(struct v05_ebpo) == 48, "ebpo state ABI");

/* Bessel's variance of the k >= 2 rewards around their mean m. */
static double within_var(const double *r, uint32_t k, double m)
{
	double ss = 0.0;

	for (uint32_t i = 0; i < k; i++)
		ss += (r[i] - m) * (r[i] - m);
	return ss / (double)(k - 1);
}

/*
 * West's weighted Welford update with unit weight for the new group: the
 * old weight and sum of squares decay by keep first, the means move by
 * the new value's share of the weight. m2 stays >= 0 (each added term is
 * d * d * W / (W + 1)).
 */
void v05__ebpo_fold_u(struct v05_ebpo *s, double keep, const double *r,
		      uint32_t k)
{
	double m = v05__mean_u(r, k), v = within_var(r, k, m);
	double w = s->weight * keep + 1.0, d = m - s->mean;

	s->m2 *= keep;
	s->mean += d / w;
	/* A weighted mean of means in [-1, 1]: clamp a last-bit excursion. */
	s->mean = s->mean > 1.0 ? 1.0 : (s->mean < -1.0 ? -1.0 : s->mean);
	s->m2 += d * (m - s->mean);
	s->m2 = s->m2 > 0.0 ? s->m2 : 0.0;
	s->within += (v - s->within) / w;
	s->noise += (v / (double)k - s->noise) / w;
	s->weight = w;
	s->groups++;
}

/*
 * S = (s_w^2 / k) / (s_w^2 / k + tau^2), tau^2 = max(0, var_m - noise):
 * the method-of-moments split of the group means' spread into the noise
 * of a mean and the spread of the true means. The variance of the means
 * divides by weight - 1 (Bessel's, exact without forgetting), so it needs
 * more than one group's worth of weight.
 */
double v05__ebpo_shrink_u(const struct v05_ebpo *s, uint32_t k)
{
	double var_m, tau2, nv;

	if (!(s->weight > 1.0))
		return 0.0;
	var_m = s->m2 / (s->weight - 1.0);
	tau2 = var_m - s->noise > 0.0 ? var_m - s->noise : 0.0;
	nv = s->within / (double)k;
	if (!(nv + tau2 > 0.0))
		return 0.0;
	return nv / (nv + tau2);
}

void v05__ebpo_estimate_u(const struct v05_ebpo *s, const double *r,
			  uint32_t k, struct v05_estimate *e, double *adv)
{
	double S = v05__ebpo_shrink_u(s, k);
	double sigma = s->within > 0.0 ? sqrt(s->within) : 1.0;

	memset(e, 0, sizeof(*e));
	e->k = k;
	e->action = V05_ACTION_STOP;
	e->mean = v05__mean_u(r, k);
	e->weight = 1.0 - S;
	/* A convex combination of two means in [-1, 1]; the clamp only
	 * removes a last-bit excursion. */
	e->baseline = v05__baseline_u(1.0 - S, e->mean, s->mean);
	e->sigma = sigma;
	for (uint32_t i = 0; adv && i < k; i++)
		adv[i] = (r[i] - e->baseline) / (sigma + V05_GRPO_EPSILON);
}

static int check_state(const struct v05_ebpo *s)
{
	/* A record this library wrote has these; anything else would give
	 * NaN or a negative variance. */
	if (!(s->weight >= 0.0) || !isfinite(s->weight) ||
	    !(s->mean >= -1.0 && s->mean <= 1.0) || !(s->m2 >= 0.0) ||
	    !isfinite(s->m2) || !(s->within >= 0.0 && s->within <= 4.0) ||
	    !(s->noise >= 0.0 && s->noise <= 4.0))
		return v05__fail(-EINVAL, "ebpo: statistics that cannot be "
				 "(not a state this library wrote)");
	return 0;
}

static int check_group(const double *r, uint32_t k)
{
	if (k < 2 || k > V05_K_LIMIT)
		return v05__fail(-EINVAL, "ebpo: k = %u is not in [2, %u]", k,
				 V05_K_LIMIT);
	for (uint32_t i = 0; i < k; i++)
		if (!(r[i] >= -1.0 && r[i] <= 1.0))
			return v05__fail(-EDOM,
					 "ebpo: reward %u (%g) is not finite in [-1, 1]",
					 i, r[i]);
	return 0;
}

V05_API void v05_ebpo_init(struct v05_ebpo *s)
{
	if (s)
		memset(s, 0, sizeof(*s));
}

V05_API int v05_ebpo_fold(struct v05_ebpo *s, double keep,
			  const double *rewards, uint32_t k)
{
	int ret;

	v05__clear_error();
	if (!s || !rewards)
		return v05__fail(-EINVAL, "ebpo fold: NULL argument");
	if (!(keep >= 0.0 && keep <= 1.0))
		return v05__fail(-EINVAL, "ebpo fold: keep %g is not in [0, 1]",
				 keep);
	ret = check_state(s);
	if (!ret)
		ret = check_group(rewards, k);
	if (ret)
		return ret;
	v05__ebpo_fold_u(s, keep, rewards, k);
	return 0;
}

V05_API int v05_ebpo_shrinkage(const struct v05_ebpo *s, uint32_t k,
			       double *shrink)
{
	int ret;

	v05__clear_error();
	if (!s || !shrink)
		return v05__fail(-EINVAL, "ebpo shrinkage: NULL argument");
	if (k < 2 || k > V05_K_LIMIT)
		return v05__fail(-EINVAL, "ebpo: k = %u is not in [2, %u]", k,
				 V05_K_LIMIT);
	ret = check_state(s);
	if (ret)
		return ret;
	*shrink = v05__ebpo_shrink_u(s, k);
	return 0;
}

V05_API int v05_ebpo_estimate(const struct v05_ebpo *s, const double *rewards,
			      uint32_t k, struct v05_estimate *out,
			      double *adv)
{
	int ret;

	v05__clear_error();
	if (!s || !rewards || !out)
		return v05__fail(-EINVAL, "ebpo estimate: NULL argument");
	ret = check_state(s);
	if (!ret)
		ret = check_group(rewards, k);
	if (ret)
		return ret;
	v05__ebpo_estimate_u(s, rewards, k, out, adv);
	return 0;
}

/* ---- the row: mode ebpo, its statistics in the plugin's state -------- */

static int check_params(const struct v05__rule *r, const struct v05_params *p)
{
	(void)r;
	if (p->k_init < 2)
		return v05__fail(-EINVAL,
				 "ebpo: k_init %u: a group needs 2 samples or more (its within-group variance)",
				 p->k_init);
	return 0;
}

/* The group into the running statistics, the window's forgetting first;
 * its estimate comes after, under them (fold, then estimate). */
static void fold_group(const struct v05__rule_env *env, double prior,
		       const double *r, uint32_t k)
{
	uint32_t window = env->config->ebpo_window;
	double keep = window ? 1.0 - 1.0 / window : 1.0;

	(void)prior;
	v05__ebpo_fold_u(&env->state->ebpo, keep, r, k);
}

static void estimate(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, struct v05_estimate *e,
		     double *adv)
{
	(void)fit;
	(void)prior;
	v05__ebpo_estimate_u(&env->state->ebpo, r, k, e, adv);
}

const struct v05__rule v05__rule_ebpo = {
	.name = "ebpo",
	.waves = V05__WAVES_STEPS,
	.needs_plugin = "mode ebpo needs its running global statistics: use v05_ebpo_estimate",
	/* G = 8 per prompt (EBPO's paper could not be read here, docs/RULES.md);
	 * one wave. */
	.preset = { .k_init = 8, .k_step = 1, .k_max = 8 },
	.check_params = check_params,
	.fold_group = fold_group,
	.estimate = estimate,
};
