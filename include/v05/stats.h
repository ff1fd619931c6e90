/* SPDX-License-Identifier: MIT */
/*
 * v05 statistics core: shrinkage fusion of a value-model prior with sampled
 * rewards, and the OSLA stopping rule (paper sections 3.3-3.4).
 *
 * Pure functions: no I/O, no allocation, no global state. Two tiers, as in
 * xxHash: v05_estimate() does everything at once; the single formulas are
 * there for callers and tests that need one step. Every function validates
 * its input and returns a negative errno instead of producing NaN or inf.
 *
 * Scales: rewards and the prior are on [-1, 1] (a success probability p maps
 * to 2p - 1, see v05_prior_from_p()).
 */
#ifndef V05_STATS_H
#define V05_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest group size anything in v05 handles (one bit per sample in a u64). */
#define V05_K_LIMIT 64u

/*
 * Floor of sigma* = sqrt(1 - mu^2). sigma* reaches 0 when the baseline is
 * exactly -1 or 1 (a prior of +-1 that the rewards did not reject). The floor
 * keeps advantages finite: with rewards in [-1, 1], |A| <= 2 / 0.01 = 200.
 * Where r_i == mu the advantage is exactly 0 whatever the floor.
 */
#define V05_SIGMA_FLOOR 0.01

/* verl's compute_grpo_outcome_advantage: A = (r - mean) / (std + 1e-6). */
#define V05_GRPO_EPSILON 1e-6

/* Defaults of DESIGN.md section 2. */
#define V05_DEFAULT_COST 0.0039
#define V05_DEFAULT_K_INIT 4u
#define V05_DEFAULT_K_STEP 2u
#define V05_DEFAULT_K_MAX 16u

enum v05_mode {
	V05_MODE_V05 = 0,   /* fusion + OSLA stopping rule            */
	V05_MODE_V05_FIXED, /* fusion, fixed group size k_init        */
	V05_MODE_GRPO,      /* group mean / group std, fixed G=k_init */
	V05_MODE_DAPO,      /* grpo + drop of zero-variance groups    */
	V05_MODE_COUNT
};

enum v05_action {
	V05_ACTION_STOP = 0, /* the group is final at its current k   */
	V05_ACTION_MORE,     /* draw k_step more samples               */
	V05_ACTION_DROP,     /* dapo: the group carries no signal      */
};

struct v05_params {
	double cost;     /* c in (0, 1): cost of one rollout in MSE units  */
	uint32_t k_init; /* first group size, 1 <= k_init <= k_max         */
	uint32_t k_step; /* samples added per "more", >= 1                 */
	uint32_t k_max;  /* hard cap, k_init <= k_max <= V05_K_LIMIT       */
	uint32_t mode;   /* enum v05_mode                                  */
};

struct v05_estimate {
	uint32_t k;        /* rewards used                                 */
	uint32_t action;   /* enum v05_action                              */
	bool has_target;   /* false: no k_target (delta2 == 0, or fixed)   */
	double mean;       /* empirical mean of the rewards                */
	double delta2;     /* truncated squared bias (0 for grpo/dapo)     */
	double weight;     /* weight of the mean in the baseline           */
	double baseline;   /* fused baseline mu (grpo/dapo: group mean)    */
	double sigma;      /* advantage scale: sigma* (grpo/dapo: std)     */
	double k_target;   /* OSLA target; meaningful iff has_target       */
};

/* Fill *p with the defaults above (mode v05). */
V05_API void v05_params_default(struct v05_params *p);

/* 0 if *p is valid, else -EINVAL (see v05_errmsg() for which field). */
V05_API int v05_params_check(const struct v05_params *p);

/* Mode name ("v05", "v05-fixed", "grpo", "dapo") or NULL. */
V05_API const char *v05_mode_name(uint32_t mode);
/* Mode by name; returns the mode or -EINVAL. */
V05_API int v05_mode_from_name(const char *name);
/* "stop", "more", "drop" or NULL. */
V05_API const char *v05_action_name(uint32_t action);

/* ---- single formulas (DESIGN.md section 2) ---------------------------- */

/* vbar = sum(r) / k; rewards finite and in [-1, 1], 1 <= k <= 64. */
V05_API int v05_mean(const double *rewards, uint32_t k, double *mean);

/* delta2 = max(0, (vbar - V)^2 - 1/k). */
V05_API int v05_delta2(double mean, double prior, uint32_t k, double *delta2);

/* w = delta2 / (delta2 + 1/k). */
V05_API int v05_weight(double delta2, uint32_t k, double *weight);

/* mu = w * vbar + (1 - w) * V, clamped to [-1, 1] against rounding. */
V05_API int v05_baseline(double weight, double mean, double prior, double *mu);

/* sigma* = max(sqrt(1 - mu^2), V05_SIGMA_FLOOR). */
V05_API int v05_sigma_star(double mu, double *sigma);

/* A_i = (r_i - mu) / sigma, in input order; sigma > 0. */
V05_API int v05_advantages(const double *rewards, uint32_t k, double mu,
			   double sigma, double *adv);

/*
 * k_target = 1/sqrt(c) - 1/delta2. Returns 1 and sets *k_target when there is
 * a target, 0 when there is none (delta2 == 0: the prior was not rejected),
 * or a negative errno.
 */
V05_API int v05_k_target(double cost, double delta2, double *k_target);

/*
 * The OSLA answer for a group of k: V05_ACTION_MORE iff there is a target,
 * k < k_target and k + k_step <= k_max; else V05_ACTION_STOP. Only mode v05
 * ever answers "more". Returns the action or a negative errno.
 */
V05_API int v05_decide(const struct v05_params *p, uint32_t k, bool has_target,
		       double k_target);

/*
 * Everything at once, for any mode. rewards[0..k) in sample order; adv (may
 * be NULL) receives k advantages in the same order. Returns 0 or -EINVAL
 * (bad params), -EDOM (a reward or the prior not finite or outside [-1, 1]),
 * -ERANGE (k == 0 or k > k_max).
 */
V05_API int v05_estimate(const struct v05_params *p, double prior,
			 const double *rewards, uint32_t k,
			 struct v05_estimate *out, double *adv);

/* Scale helpers: V = 2p - 1 for p in [0, 1]; r = 2b - 1 for b in {0, 1}. */
V05_API int v05_prior_from_p(double p, double *prior);
V05_API int v05_reward_from_binary(int b, double *reward);

#ifdef __cplusplus
}
#endif

#endif /* V05_STATS_H */
