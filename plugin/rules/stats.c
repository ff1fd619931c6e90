/* SPDX-License-Identifier: MIT */
/*
 * Statistics core: docs/STATISTICS.md, paper equations (sigma), (delta),
 * (weight), (fusion) and (stop). Pure functions; every input validated.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/stats.h"

static const char *const sigma_names[V05_SIGMA_COUNT] = {
	[V05_SIGMA_RMS] = "rms",
	[V05_SIGMA_PAPER] = "paper",
};

static bool in_unit_range(double x)
{
	/* isfinite first: NaN compares false everywhere, inf must not pass. */
	return isfinite(x) && x >= -1.0 && x <= 1.0;
}

static int check_k(uint32_t k)
{
	if (k < 1 || k > V05_K_LIMIT)
		return v05__fail(-ERANGE, "k = %u is outside [1, %u]", k,
				 V05_K_LIMIT);
	return 0;
}

V05_API const char *v05_sigma_name(uint32_t sigma)
{
	return sigma < V05_SIGMA_COUNT ? sigma_names[sigma] : NULL;
}

V05_API int v05_sigma_from_name(const char *name)
{
	for (uint32_t m = 0; name && m < V05_SIGMA_COUNT; m++)
		if (strcmp(name, sigma_names[m]) == 0)
			return (int)m;
	return v05__fail(-EINVAL, "sigma '%s' is not rms or paper",
			 name ? name : "(null)");
}

V05_API const char *v05_action_name(uint32_t action)
{
	switch (action) {
	case V05_ACTION_STOP:
		return "stop";
	case V05_ACTION_MORE:
		return "more";
	case V05_ACTION_DROP:
		return "drop";
	}
	return NULL;
}

int v05__check_rewards(const double *rewards, uint32_t k)
{
	for (uint32_t i = 0; i < k; i++) {
		if (!in_unit_range(rewards[i]))
			return v05__fail(-EDOM,
					 "reward %u (%g) is not finite in [-1, 1]",
					 i, rewards[i]);
	}
	return 0;
}

V05_API int v05_mean(const double *rewards, uint32_t k, double *mean)
{
	int ret;

	if (!rewards || !mean)
		return v05__fail(-EINVAL, "mean: NULL argument");
	ret = check_k(k);
	if (!ret)
		ret = v05__check_rewards(rewards, k);
	if (ret)
		return ret;
	*mean = v05__mean_u(rewards, k);
	return 0;
}

V05_API int v05_delta2(double mean, double prior, uint32_t k, double *delta2)
{
	int ret;

	if (!delta2)
		return v05__fail(-EINVAL, "delta2: NULL argument");
	ret = check_k(k);
	if (ret)
		return ret;
	if (!in_unit_range(mean))
		return v05__fail(-EDOM, "mean %g is not finite in [-1, 1]", mean);
	if (!in_unit_range(prior))
		return v05__fail(-EDOM, "prior %g is not finite in [-1, 1]", prior);
	*delta2 = v05__delta2_u(mean, prior, k);
	return 0;
}

V05_API int v05_weight(double delta2, uint32_t k, double *weight)
{
	int ret;

	if (!weight)
		return v05__fail(-EINVAL, "weight: NULL argument");
	ret = check_k(k);
	if (ret)
		return ret;
	/* (vbar - V)^2 <= 4 on the [-1, 1] scale, so delta2 < 4. */
	if (!isfinite(delta2) || delta2 < 0.0 || delta2 > 4.0)
		return v05__fail(-EDOM, "delta2 %g is not in [0, 4]", delta2);
	*weight = v05__weight_u(delta2, k);
	return 0;
}

V05_API int v05_baseline(double weight, double mean, double prior, double *mu)
{
	if (!mu)
		return v05__fail(-EINVAL, "baseline: NULL argument");
	if (!isfinite(weight) || weight < 0.0 || weight > 1.0)
		return v05__fail(-EDOM, "weight %g is not in [0, 1]", weight);
	if (!in_unit_range(mean))
		return v05__fail(-EDOM, "mean %g is not finite in [-1, 1]", mean);
	if (!in_unit_range(prior))
		return v05__fail(-EDOM, "prior %g is not finite in [-1, 1]", prior);
	*mu = v05__baseline_u(weight, mean, prior);
	return 0;
}

V05_API int v05_sigma_star(double mu, double *sigma)
{
	if (!sigma)
		return v05__fail(-EINVAL, "sigma: NULL argument");
	if (!in_unit_range(mu))
		return v05__fail(-EDOM, "baseline %g is not finite in [-1, 1]", mu);
	*sigma = v05__sigma_u(mu);
	return 0;
}

V05_API int v05_sigma_rms(double mu, const double *rewards, uint32_t k,
			  double *sigma)
{
	int ret;

	if (!rewards || !sigma)
		return v05__fail(-EINVAL, "sigma_rms: NULL argument");
	ret = check_k(k);
	if (ret)
		return ret;
	if (!in_unit_range(mu))
		return v05__fail(-EDOM, "baseline %g is not finite in [-1, 1]", mu);
	ret = v05__check_rewards(rewards, k);
	if (ret)
		return ret;
	*sigma = v05__sigma_rms_u(mu, rewards, k);
	return 0;
}

V05_API int v05_advantages(const double *rewards, uint32_t k, double mu,
			   double sigma, double *adv)
{
	int ret;

	if (!rewards || !adv)
		return v05__fail(-EINVAL, "advantages: NULL argument");
	ret = check_k(k);
	if (ret)
		return ret;
	if (!in_unit_range(mu))
		return v05__fail(-EDOM, "baseline %g is not finite in [-1, 1]", mu);
	if (!isfinite(sigma) || sigma < 0.0)
		return v05__fail(-EDOM, "sigma %g is not finite and >= 0", sigma);
	ret = v05__check_rewards(rewards, k);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < k; i++) {
		double a;

		/* sigma 0 is only meaningful when the group has no spread. */
		if (sigma == 0.0 && rewards[i] != mu)
			return v05__fail(-EDOM,
					 "sigma 0 with reward %u != baseline", i);
		a = sigma > 0.0 ? (rewards[i] - mu) / sigma : 0.0;

		/* Only a caller-chosen tiny sigma can overflow; say so rather
		 * than hand back inf. */
		if (!isfinite(a))
			return v05__fail(-ERANGE, "advantage %u overflows", i);
		adv[i] = a;
	}
	return 0;
}

V05_API int v05_k_target(double cost, double delta2, double *k_target)
{
	if (!k_target)
		return v05__fail(-EINVAL, "k_target: NULL argument");
	if (!isfinite(cost) || cost <= 0.0 || cost >= 1.0)
		return v05__fail(-EINVAL, "cost %g is not in (0, 1)", cost);
	if (!isfinite(delta2) || delta2 < 0.0 || delta2 > 4.0)
		return v05__fail(-EDOM, "delta2 %g is not in [0, 4]", delta2);
	/* 0: the prior was accepted, no target (stop). */
	return v05__k_target_u(cost, delta2, k_target);
}

V05_API int v05_prior_from_p(double p, double *prior)
{
	if (!prior)
		return v05__fail(-EINVAL, "prior: NULL argument");
	if (!isfinite(p) || p < 0.0 || p > 1.0)
		return v05__fail(-EDOM, "probability %g is not in [0, 1]", p);
	*prior = 2.0 * p - 1.0;
	return 0;
}

V05_API int v05_reward_from_binary(int b, double *reward)
{
	if (!reward)
		return v05__fail(-EINVAL, "reward: NULL argument");
	if (b != 0 && b != 1)
		return v05__fail(-EDOM, "binary reward %d is not 0 or 1", b);
	*reward = b ? 1.0 : -1.0;
	return 0;
}
