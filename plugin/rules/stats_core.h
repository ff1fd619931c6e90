/* SPDX-License-Identifier: MIT */
/*
 * The statistics' arithmetic, once, without input checks. stats.c's public
 * functions validate and then call these; the plugin calls them directly
 * on inputs it validated on the way in (rewards when applied, priors at
 * submit, parameters at create), so both give bit-identical results.
 */
#ifndef V05_PLUGIN_STATS_CORE_H
#define V05_PLUGIN_STATS_CORE_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "v05/stats.h"

/* The bits of samples 0..k-1 (k <= 64). */
static inline uint64_t v05__first_bits(uint32_t k)
{
	return k >= 64 ? ~0ull : (1ull << k) - 1;
}

/*
 * A reward as v05 keeps it: float32 in the lanes, the slots and the
 * journal. A threshold or an equality on rewards is decided on this value,
 * against the threshold rounded the same way, so a reward gets one answer
 * whichever path it took: pushed through the plugin (float32), passed to
 * v05_estimate as a double, or folded by a trainer from a float32 tensor
 * (docs/RULES.md, "Rewards are float32"). In double, float32(0.4) > 0.4:
 * Reinforce-Ada's threshold made a success of a reward the double path
 * called a failure.
 */
static inline float v05__r32(double r)
{
	return (float)r;
}

/* Summed in sample order: the plugin and v05ctl estimate add the same
 * values in the same order. */
static inline double v05__mean_u(const double *r, uint32_t k)
{
	double sum = 0.0;

	for (uint32_t i = 0; i < k; i++)
		sum += r[i];
	return sum / (double)k;
}

/* 1/k is the guaranteed variance bound of the mean of k rewards in [-1, 1]
 * (eq. sigma); the max() is the truncation test (appendix A.4). */
static inline double v05__delta2_u(double mean, double prior, uint32_t k)
{
	double d = mean - prior, excess = d * d - 1.0 / (double)k;

	return excess > 0.0 ? excess : 0.0;
}

static inline double v05__weight_u(double delta2, uint32_t k)
{
	return delta2 / (delta2 + 1.0 / (double)k);
}

/* A convex combination of two values in [-1, 1] stays there; the clamp
 * only removes a last-bit rounding excursion. */
static inline double v05__baseline_u(double w, double mean, double prior)
{
	double m = w * mean + (1.0 - w) * prior;

	return m > 1.0 ? 1.0 : (m < -1.0 ? -1.0 : m);
}

static inline double v05__sigma_u(double mu)
{
	double s = sqrt(1.0 - mu * mu);

	return s > V05_SIGMA_FLOOR ? s : V05_SIGMA_FLOOR;
}

/* The rms normaliser: the paper's 1 - mu^2 floored by the group's mean
 * squared deviation from mu. Then (1/k) sum A_i^2 <= 1, so |A_i| <= sqrt(k)
 * (docs/STATISTICS.md); 0 only when every r_j == mu. */
static inline double v05__sigma_rms_u(double mu, const double *r, uint32_t k)
{
	double ss = 0.0, v = 1.0 - mu * mu;

	for (uint32_t i = 0; i < k; i++)
		ss += (r[i] - mu) * (r[i] - mu);
	ss /= (double)k;
	return sqrt(v > ss ? v : ss);
}

/* The normaliser p->sigma selects, for the fused modes. */
static inline double v05__sigma_of(const struct v05_params *p, double mu,
				   const double *r, uint32_t k)
{
	return p->sigma == V05_SIGMA_PAPER ? v05__sigma_u(mu) :
					     v05__sigma_rms_u(mu, r, k);
}

/* A_i = (r_i - mu) / sigma; sigma == 0 means every r_i == mu: A_i = 0.
 * Always finite: sigma is 0, >= V05_SIGMA_FLOOR, or >= |r_i - mu| / sqrt(k). */
static inline void v05__advantages_u(const double *r, uint32_t k, double mu,
				     double sigma, double *adv)
{
	for (uint32_t i = 0; adv && i < k; i++)
		adv[i] = sigma > 0.0 ? (r[i] - mu) / sigma : 0.0;
}

/* 1 and *t when there is a target, 0 when delta2 == 0. A subnormal delta2
 * overflows 1/delta2; -DBL_MAX says "far below any k" without infinity. */
static inline int v05__k_target_u(double cost, double delta2, double *t)
{
	double v;

	if (delta2 == 0.0)
		return 0;
	v = 1.0 / sqrt(cost) - 1.0 / delta2;
	*t = isfinite(v) ? v : -DBL_MAX;
	return 1;
}

/* The paper's stopping rule (OSLA): "more" iff there is a target, k is
 * below it and k + k_step <= k_max. Compare in double: k_target is
 * continuous, 1/sqrt(c) need not be an integer. The k_max test is on
 * integers, so k never passes it. */
static inline uint32_t v05__osla_u(const struct v05_params *p, uint32_t k,
				   bool has_target, double k_target)
{
	if (!has_target)
		return V05_ACTION_STOP;
	if ((double)k < k_target && k + p->k_step <= p->k_max)
		return V05_ACTION_MORE;
	return V05_ACTION_STOP;
}

/* Every estimate starts here: zero, k, "stop", the mean. */
static inline void v05__estimate_begin(struct v05_estimate *e,
				       const double *r, uint32_t k)
{
	memset(e, 0, sizeof(*e));
	e->k = k;
	e->action = V05_ACTION_STOP;
	e->mean = v05__mean_u(r, k);
}

/* stats.c: 0, or -EDOM naming the first reward that is not finite in
 * [-1, 1]. */
int v05__check_rewards(const double *rewards, uint32_t k);
/* The paper's fusion of the prior with the group (delta2, weight,
 * baseline, the normaliser p->sigma selects, advantages); e->mean already
 * set. Modes v05, v05-fixed, and v05-eb without a fit. */
static inline void v05__estimate_fused(const struct v05_params *p,
				       double prior, const double *rewards,
				       uint32_t k, struct v05_estimate *e,
				       double *adv)
{
	e->delta2 = v05__delta2_u(e->mean, prior, k);
	e->weight = v05__weight_u(e->delta2, k);
	e->baseline = v05__baseline_u(e->weight, e->mean, prior);
	e->sigma = v05__sigma_of(p, e->baseline, rewards, k);
	v05__advantages_u(rewards, k, e->baseline, e->sigma, adv);
}

struct v05_eb_fit;
struct v05_eb_state;
/* eb_state.c, unchecked: the fit of n groups (its shape's index
 * returned); one group folded into an additive state (its old weight
 * times keep first); the fit of a state, or of two states' sum (b may be
 * NULL), its shape's index returned. */
uint32_t v05__eb_fit_u(const double *prior, const uint32_t *k,
		       const double *s, uint32_t n, struct v05_eb_fit *fit);
void v05__eb_fold_u(struct v05_eb_state *st, double keep, double prior,
		    uint32_t k, double s);
uint32_t v05__eb_argmax_u(const struct v05_eb_state *a,
			  const struct v05_eb_state *b, struct v05_eb_fit *fit);
/* 0, or -EDOM naming `what` and the value: a state with a value that is
 * not finite, or a weight outside [0, folded] (eb_state.c). */
int v05__eb_state_check(const struct v05_eb_state *st, const char *what);
/* eb.c, unchecked: the posterior mean and variance of p (not of mu = 2p
 * - 1) and the hallucination weight; one group under a fit. */
void v05__eb_posterior_u(const struct v05_eb_fit *fit, double prior,
			 uint32_t k, double s, double *mean, double *var,
			 double *w2);
void v05__eb_estimate_u(const struct v05_params *p,
			const struct v05_eb_fit *fit, double prior,
			const double *rewards, uint32_t k,
			struct v05_estimate *e, double *adv);
uint32_t v05__eb_choose_u(const struct v05_params *p,
			  const struct v05_eb_fit *fit, double prior,
			  uint32_t k, double s);
/* E[Var(mu) after m more binary rewards] (mu's scale: 4 Var(p)). */
double v05__eb_ev_u(const struct v05_eb_fit *fit, double prior, uint32_t k,
		    double s, uint32_t m);
/* The prior predictive of t successes in n rewards, before any. */
double v05__eb_pred_u(const struct v05_eb_fit *fit, double prior, uint32_t n,
		      uint32_t t);
/* Before any reward, the probability the first wave of k_init is given
 * more. */
double v05__eb_p_more_u(const struct v05_params *p,
			const struct v05_eb_fit *fit, double prior);
/* Before any reward, a first wave of k1 (1 <= k1 <= k_max): its expected
 * final risk (v05_eb_first_wave) and the probability it is given more;
 * of the sizes in waves (bit k: k samples), the one of least risk (the
 * smaller on ties; 0 when waves has none in [1, min(k_max, 31)]), with
 * its risk and probability of more. */
double v05__eb_first_risk_u(const struct v05_params *p,
			    const struct v05_eb_fit *fit, double prior,
			    uint32_t k1, double *p_more);
uint32_t v05__eb_first_u(const struct v05_params *p,
			 const struct v05_eb_fit *fit, double prior,
			 uint32_t waves, double *risk, double *p_more);
/* eb.c: 0, or -EDOM (-EINVAL for NULL) naming what is wrong: a fit off
 * the grid's range or its shape's; a group's prior, k or successes. */
int v05__eb_check_fit(const struct v05_eb_fit *fit);
int v05__eb_check_group(double prior, uint32_t k, double s);
/* Successes of a group: sum (1 + r_i) / 2. */
double v05__eb_successes(const double *r, uint32_t k);

/* rule_ada.c: Reinforce-Ada's n, exit test (pos: the positive exit,
 * else the balanced), keep mask and estimate (the action is "more" until
 * the exit or k_max). */
uint32_t v05__ada_n(const struct v05_params *p);
bool v05__ada_exited(const struct v05_params *p, bool pos, const double *r,
		     uint32_t k);
uint64_t v05__ada_keep(const struct v05_params *p, const double *r,
		       uint32_t k);
void v05__estimate_ada(const struct v05_params *p, bool pos, const double *r,
		       uint32_t k, struct v05_estimate *e, double *adv);
/* rule_knapsack.c: the allocation, inputs valid (0 or -ENOMEM); the GRPO
 * advantages' clip. */
int v05__knapsack_plan_u(const double *p01, uint32_t n, uint32_t per_prompt,
			 uint32_t n_up, uint32_t *out);
void v05__knapsack_clip_u(uint32_t k, double *adv);
/* grpo.c: verl's GRPO advantages on one group (mean, Bessel std,
 * epsilon; an all-same group gets exactly 0, and with drops its action
 * is "drop", dapo's rule); e->mean already set. */
void v05__estimate_group(bool drops, const double *rewards, uint32_t k,
			 struct v05_estimate *e, double *adv);
/* rule_ebpo.c, unchecked: a fold, the shrinkage S, one group's estimate. */
struct v05_ebpo;
void v05__ebpo_fold_u(struct v05_ebpo *s, double keep, const double *r,
		      uint32_t k);
double v05__ebpo_shrink_u(const struct v05_ebpo *s, uint32_t k);
void v05__ebpo_estimate_u(const struct v05_ebpo *s, const double *r,
			  uint32_t k, struct v05_estimate *e, double *adv);
/* rule_pc.c, unchecked: a pilot's class (enum v05_pc_class; evict NaN:
 * never); one group of mode pilot-commit under the band [lower, 1 -
 * upper]: at k_init "more" (commit) or "drop", beyond it GRPO's. */
int v05__pc_class_u(const double *r, uint32_t k, double lower, double upper,
		    double evict);
void v05__estimate_pc(const struct v05_params *p, double lower, double upper,
		      const double *r, uint32_t k, struct v05_estimate *e,
		      double *adv);

#endif
