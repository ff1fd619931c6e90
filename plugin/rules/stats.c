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

static const char *const mode_names[V05_MODE_COUNT] = {
	[V05_MODE_V05] = "v05",
	[V05_MODE_V05_FIXED] = "v05-fixed",
	[V05_MODE_GRPO] = "grpo",
	[V05_MODE_DAPO] = "dapo",
	[V05_MODE_V05_EB] = "v05-eb",
	[V05_MODE_ADA] = "reinforce-ada",
	[V05_MODE_ADA_POS] = "reinforce-ada-pos",
	[V05_MODE_KNAPSACK_PRIOR] = "knapsack-prior",
	[V05_MODE_KNAPSACK] = "knapsack",
	[V05_MODE_GRESO] = "greso",
	[V05_MODE_EBPO] = "ebpo",
	[V05_MODE_PILOT_COMMIT] = "pilot-commit",
};

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

V05_API void v05_params_default(struct v05_params *p)
{
	p->cost = V05_DEFAULT_COST;
	p->k_init = V05_DEFAULT_K_INIT;
	p->k_step = V05_DEFAULT_K_STEP;
	p->k_max = V05_DEFAULT_K_MAX;
	p->mode = V05_MODE_V05;
	p->sigma = V05_SIGMA_RMS;
	p->keep_n = 0;
}

V05_API int v05_params_check(const struct v05_params *p)
{
	if (!p)
		return v05__fail(-EINVAL, "params: NULL");
	if (!isfinite(p->cost) || p->cost <= 0.0 || p->cost >= 1.0)
		return v05__fail(-EINVAL, "cost %g is not in (0, 1)", p->cost);
	if (p->k_init < 1)
		return v05__fail(-EINVAL, "k_init %u is below 1", p->k_init);
	if (p->k_step < 1)
		return v05__fail(-EINVAL, "k_step %u is below 1", p->k_step);
	if (p->k_max > V05_K_LIMIT)
		return v05__fail(-EINVAL, "k_max %u is above %u", p->k_max,
				 V05_K_LIMIT);
	if (p->k_init > p->k_max)
		return v05__fail(-EINVAL, "k_init %u is above k_max %u",
				 p->k_init, p->k_max);
	/* A step past k_max can never be taken, and a huge one would wrap
	 * the u32 sum k + k_step that the stopping rule compares. */
	if (p->k_step > p->k_max)
		return v05__fail(-EINVAL, "k_step %u is above k_max %u",
				 p->k_step, p->k_max);
	if (p->mode >= V05_MODE_COUNT)
		return v05__fail(-EINVAL, "mode %u is unknown", p->mode);
	if (p->sigma >= V05_SIGMA_COUNT)
		return v05__fail(-EINVAL, "sigma %u is not rms (0) or paper (1)",
				 p->sigma);
	if (v05__mode_is_ada(p->mode)) {
		/* Rounds of M = k_init (v1 Algorithm 1). */
		if (p->k_step != p->k_init)
			return v05__fail(-EINVAL,
					 "%s samples in rounds of k_init: k_step %u must equal k_init %u",
					 v05_mode_name(p->mode), p->k_step,
					 p->k_init);
		if (p->keep_n > p->k_init)
			return v05__fail(-EINVAL,
					 "keep_n %u is above k_init %u (the group trained on is at most one round)",
					 p->keep_n, p->k_init);
	} else if (p->keep_n) {
		return v05__fail(-EINVAL,
				 "keep_n %u: only reinforce-ada keeps part of a group (give 0)",
				 p->keep_n);
	}
	if (p->mode == V05_MODE_EBPO && p->k_init < 2)
		return v05__fail(-EINVAL,
				 "ebpo: k_init %u: a group needs 2 samples or more (its within-group variance)",
				 p->k_init);
	if (v05__mode_is_knapsack(p->mode) && p->k_init < V05_KNAPSACK_N_LOW)
		return v05__fail(-EINVAL,
				 "%s: k_init %u (the budget per prompt) is below the minimum per prompt, %u",
				 mode_names[p->mode], p->k_init, V05_KNAPSACK_N_LOW);
	return 0;
}

V05_API const char *v05_mode_name(uint32_t mode)
{
	return mode < V05_MODE_COUNT ? mode_names[mode] : NULL;
}

V05_API int v05_mode_from_name(const char *name)
{
	for (uint32_t m = 0; name && m < V05_MODE_COUNT; m++)
		if (strcmp(name, mode_names[m]) == 0)
			return (int)m;
	return v05__fail(-EINVAL,
			 "mode '%s' is not one of v05, v05-fixed, v05-eb, grpo, dapo, reinforce-ada, reinforce-ada-pos, knapsack-prior, knapsack, greso, ebpo, pilot-commit",
			 name ? name : "(null)");
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

static int check_rewards(const double *rewards, uint32_t k)
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
		ret = check_rewards(rewards, k);
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
	ret = check_rewards(rewards, k);
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
	ret = check_rewards(rewards, k);
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

V05_API int v05_decide(const struct v05_params *p, uint32_t k, bool has_target,
		       double k_target)
{
	int ret = v05_params_check(p);

	if (ret)
		return ret;
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "k = %u is outside [1, k_max = %u]", k,
				 p->k_max);
	if (has_target && !isfinite(k_target))
		return v05__fail(-EDOM, "k_target %g is not finite", k_target);
	return (int)v05__decide_u(p, k, has_target, k_target);
}

static void estimate_fused(const struct v05_params *p, double prior,
			   const double *rewards, uint32_t k,
			   struct v05_estimate *e, double *adv)
{
	e->delta2 = v05__delta2_u(e->mean, prior, k);
	e->weight = v05__weight_u(e->delta2, k);
	e->baseline = v05__baseline_u(e->weight, e->mean, prior);
	e->sigma = v05__sigma_of(p, e->baseline, rewards, k);
	if (p->mode == V05_MODE_V05) {
		e->has_target = v05__k_target_u(p->cost, e->delta2, &e->k_target);
		e->action = v05__decide_u(p, k, e->has_target, e->k_target);
	}
	v05__advantages_u(rewards, k, e->baseline, e->sigma, adv);
}

void v05__estimate_core(const struct v05_params *p, double prior,
			const double *rewards, uint32_t k,
			struct v05_estimate *e, double *adv)
{
	memset(e, 0, sizeof(*e));
	e->k = k;
	e->action = V05_ACTION_STOP;
	e->mean = v05__mean_u(rewards, k);
	/* v05-eb goes through v05__eb_estimate_u with its batch's fit; were
	 * it to come here, the paper's fusion is a defined answer. */
	if (p->mode == V05_MODE_V05 || p->mode == V05_MODE_V05_FIXED ||
	    p->mode == V05_MODE_V05_EB) {
		estimate_fused(p, prior, rewards, k, e, adv);
	} else if (v05__mode_is_ada(p->mode)) {
		v05__estimate_ada(p, rewards, k, e, adv);
	} else if (p->mode == V05_MODE_PILOT_COMMIT) {
		v05__estimate_pc(p, V05_PC_LOWER, V05_PC_UPPER, rewards, k, e,
				 adv);
	} else {
		v05__estimate_group(p, rewards, k, e, adv);
		if (v05__mode_is_knapsack(p->mode))
			v05__knapsack_clip_u(k, adv);
	}
}

/* What v05_estimate and v05_keep take: valid parameters, 1..k_max finite
 * rewards in [-1, 1], and somewhere to write (out). */
static int check_group(const struct v05_params *p, const double *rewards,
		       uint32_t k, const void *out, const char *what)
{
	int ret = v05_params_check(p);

	if (ret)
		return ret;
	if (!rewards || !out)
		return v05__fail(-EINVAL, "%s: NULL argument", what);
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "%u rewards: need 1 to k_max = %u", k,
				 p->k_max);
	return check_rewards(rewards, k);
}

uint64_t v05__keep_u(const struct v05_params *p, const double *rewards,
		     uint32_t k)
{
	if (v05__mode_is_ada(p->mode))
		return v05__ada_keep(p, rewards, k);
	return v05__first_bits(k);
}

V05_API int v05_keep(const struct v05_params *p, const double *rewards,
		     uint32_t k, uint64_t *keep)
{
	int ret;

	v05__clear_error();
	ret = check_group(p, rewards, k, keep, "keep");
	if (ret)
		return ret;
	*keep = v05__keep_u(p, rewards, k);
	return 0;
}

V05_API int v05_knapsack_plan(const double *p01, uint32_t n,
			      uint32_t per_prompt, uint32_t n_up,
			      uint32_t *out)
{
	v05__clear_error();
	if (n && (!p01 || !out))
		return v05__fail(-EINVAL, "knapsack plan: NULL argument");
	if (n_up < V05_KNAPSACK_N_LOW || n_up > V05_K_LIMIT)
		return v05__fail(-EINVAL, "n_up %u is outside [%u, %u]", n_up,
				 V05_KNAPSACK_N_LOW, V05_K_LIMIT);
	if (per_prompt < V05_KNAPSACK_N_LOW || per_prompt > n_up)
		return v05__fail(-EINVAL, "per_prompt %u is outside [%u, n_up = %u]",
				 per_prompt, V05_KNAPSACK_N_LOW, n_up);
	for (uint32_t i = 0; i < n; i++)
		if (!(p01[i] >= 0.0 && p01[i] <= 1.0) && !isnan(p01[i]))
			return v05__fail(-EDOM, "p[%u] = %g is not in [0, 1] "
					 "(or NaN: no estimate)", i, p01[i]);
	if (n > UINT32_MAX / V05_K_LIMIT)
		return v05__fail(-ERANGE, "%u prompts: too many", n);
	if (v05__knapsack_plan_u(p01, n, per_prompt, n_up, out))
		return v05__fail(-ENOMEM, "knapsack plan: out of memory");
	return 0;
}

V05_API int v05_estimate(const struct v05_params *p, double prior,
			 const double *rewards, uint32_t k,
			 struct v05_estimate *out, double *adv)
{
	int ret;

	v05__clear_error();
	ret = v05_params_check(p);
	if (ret)
		return ret;
	if (p->mode == V05_MODE_V05_EB)
		return v05__fail(-EINVAL,
				 "mode v05-eb needs its batch's fit: use v05_eb_estimate");
	if (p->mode == V05_MODE_EBPO)
		return v05__fail(-EINVAL,
				 "mode ebpo needs its running global statistics: use v05_ebpo_estimate");
	ret = check_group(p, rewards, k, out, "estimate");
	if (ret)
		return ret;
	if (!in_unit_range(prior))
		return v05__fail(-EDOM, "prior %g is not finite in [-1, 1]", prior);
	v05__estimate_core(p, prior, rewards, k, out, adv);
	return 0;
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
