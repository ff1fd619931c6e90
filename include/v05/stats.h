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
 * Floor of the paper's sigma* = sqrt(1 - mu^2) (normaliser V05_SIGMA_PAPER).
 * sigma* reaches 0 when the baseline is exactly -1 or 1 (a prior of +-1 that
 * the rewards did not reject). The floor keeps advantages finite, but only
 * just: with rewards in [-1, 1], |A| <= 2 / 0.01 = 200. The default
 * normaliser (V05_SIGMA_RMS) bounds |A| by sqrt(k) instead.
 */
#define V05_SIGMA_FLOOR 0.01

/* verl's compute_grpo_outcome_advantage: A = (r - mean) / (std + 1e-6). */
#define V05_GRPO_EPSILON 1e-6

/* Defaults (docs/STATISTICS.md). */
#define V05_DEFAULT_COST 0.0039
#define V05_DEFAULT_K_INIT 4u
#define V05_DEFAULT_K_STEP 2u
#define V05_DEFAULT_K_MAX 16u

enum v05_mode {
	V05_MODE_V05 = 0,   /* fusion + OSLA stopping rule            */
	V05_MODE_V05_FIXED, /* fusion, fixed group size k_init        */
	V05_MODE_GRPO,      /* group mean / group std, fixed G=k_init */
	V05_MODE_DAPO,      /* grpo + drop of zero-variance groups    */
	V05_MODE_V05_EB,    /* empirical-Bayes baseline, two waves    */
	/* The published allocation rules (docs/RULES.md): */
	V05_MODE_ADA,       /* Reinforce-Ada, balanced exit           */
	V05_MODE_ADA_POS,   /* Reinforce-Ada, positive exit           */
	V05_MODE_KNAPSACK_PRIOR, /* Knapsack RL's allocation, p from
				  * the prior, at submit; one wave    */
	V05_MODE_KNAPSACK,  /* the same, p from the prompt's own history
			     * (v05/rules.h), the authors' defaults */
	V05_MODE_GRESO,     /* dapo's groups, G = 8; the skip filter is
			     * the trainer's (v05/rules.h)           */
	V05_MODE_EBPO,      /* EBPO's baseline: each group's mean shrunk
			     * toward a running global mean; one wave */
	V05_MODE_PILOT_COMMIT, /* Pilot-Commit: a pilot of k_init, then
				* k_step more for a pilot success rate in
				* the band, else dropped; the evictions
				* are the trainer's (v05/rules.h)      */
	V05_MODE_PG,        /* v05-pg: samples and prompts allocated by the
			     * policy gradient's error per rollout (first
			     * waves of 1, 2 or 4 from the running fit, 0:
			     * the prompt skipped), the v05-eb baseline  */
	V05_MODE_COUNT
};

/*
 * Advantage normaliser of the fused modes (v05, v05-fixed, v05-eb).
 * rms:   sigma^2 = max(1 - mu^2, (1/k) sum_j (r_j - mu)^2). Then
 *        (1/k) sum_i A_i^2 <= 1, so |A_i| <= sqrt(k); sigma == 0 only when
 *        every reward equals mu, and then every advantage is exactly 0.
 * paper: sigma = max(sqrt(1 - mu^2), V05_SIGMA_FLOOR) (|A| up to 200).
 * grpo and dapo ignore it (group std, as verl).
 */
enum v05_sigma {
	V05_SIGMA_RMS = 0,
	V05_SIGMA_PAPER = 1,
	V05_SIGMA_COUNT
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
	uint32_t sigma;  /* enum v05_sigma (0: rms, the default)           */
	uint32_t keep_n; /* reinforce-ada: samples trained on per group, n;
			  * 0 = k_init / 2. Other modes: 0               */
};

/*
 * Reinforce-Ada (arXiv 2510.04996 v1, section 2.2 and Algorithm 1): rounds
 * of k_init samples (M) per prompt until the group holds at least K_pos
 * successes and K_neg failures (balanced exit: K_pos = n/2, K_neg = n -
 * n/2) or K_pos = 1 success (positive exit), or k_max (N_max) is reached;
 * k_step must equal k_init. A success is a reward above V05_ADA_TAU (the
 * authors' 0.7 on a 0/1 scale), both rounded to float32, as rewards are
 * kept (every threshold on a reward is: docs/RULES.md). The baseline is
 * the mean of all k rewards; n = keep_n of them are trained on (the keep
 * mask: v05_keep), with A_i = r_i - baseline; the others get A_i = 0.
 */
#define V05_ADA_TAU 0.4

/*
 * Knapsack RL (arXiv 2509.25849), its allocation fed by v05's prior: at
 * submit, a budget of k_init samples per prompt is split over the batch to
 * maximise sum_i (1 - p_i^N_i - (1 - p_i)^N_i) p_i (1 - p_i)^2 with
 * p_i = (1 + prior_i) / 2, each N_i in [V05_KNAPSACK_N_LOW, k_max]; a
 * prompt whose prior is +-1 gets N_LOW; under mode "knapsack" one submitted
 * with a NaN prior (no estimate yet) gets k_init outside the knapsack. One
 * wave; GRPO advantages clipped to +-V05_KNAPSACK_ADV_CLIP. docs/RULES.md
 * has the fallback and the worked examples. Mode "knapsack" is the same
 * rule with p from each prompt's own past rewards
 * (v05_knapsack_hist_estimate, passed as its prior), as the authors run
 * it.
 */
#define V05_KNAPSACK_N_LOW 2u
#define V05_KNAPSACK_ALPHA 0.9
#define V05_KNAPSACK_ADV_CLIP 5.0

/*
 * Pilot-Commit (arXiv 2605.26606; its authors' code, read: docs/RULES.md):
 * a pilot of k_init samples per prompt; a prompt whose pilot success rate
 * p (the mean of (1 + r) / 2) lies in the band [lower, 1 - upper] gets
 * k_step more (the commit), and its group of k_init + k_step is trained on
 * with GRPO's advantages; any other is dropped after its pilot (too hard:
 * deferred; too easy: skipped; the trainer keeps which, v05/rules.h). The
 * band is the plugin's configuration (struct v05_config: pc_lower,
 * pc_upper); v05_estimate, which has no configuration, uses these, the
 * authors' (their scripts' lower 0.125, upper 0.25: p in [0.125, 0.75]).
 */
#define V05_PC_LOWER 0.125
#define V05_PC_UPPER 0.25

/*
 * v05-pg (docs/STATISTICS.md, "Mode v05-pg"): the default between-prompt
 * variance of the normalised gradient, relative to one sample's
 * within-prompt variance (bench/train/PROBE.md), and the first waves it
 * may choose (bit n: n samples).
 */
#define V05_PG_BETWEEN 0.13
#define V05_PG_FIRST ((1u << 1) | (1u << 2) | (1u << 4))
/* v05-pg skips a prompt whose expected signal, sqrt(4 p (1 - p)), is
 * below this share (per mille) of the mean over the prompts submitted
 * (docs/STATISTICS.md, "Mode v05-pg": the bar measured best). */
#define V05_PG_SKIP 750u

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

/* Mode name ("v05", "v05-fixed", "grpo", "dapo", "v05-eb",
 * "reinforce-ada", "reinforce-ada-pos", "knapsack-prior", "knapsack",
 * "greso", "ebpo", "pilot-commit", "v05-pg") or NULL. */
V05_API const char *v05_mode_name(uint32_t mode);
/* Mode by name; returns the mode or -EINVAL. */
V05_API int v05_mode_from_name(const char *name);
/* Normaliser name ("rms", "paper") or NULL; by name: the value or -EINVAL. */
V05_API const char *v05_sigma_name(uint32_t sigma);
V05_API int v05_sigma_from_name(const char *name);
/* "stop", "more", "drop" or NULL. */
V05_API const char *v05_action_name(uint32_t action);

/* ---- single formulas (docs/STATISTICS.md) ------------------------------ */

/* vbar = sum(r) / k; rewards finite and in [-1, 1], 1 <= k <= 64. */
V05_API int v05_mean(const double *rewards, uint32_t k, double *mean);

/* delta2 = max(0, (vbar - V)^2 - 1/k). */
V05_API int v05_delta2(double mean, double prior, uint32_t k, double *delta2);

/* w = delta2 / (delta2 + 1/k). */
V05_API int v05_weight(double delta2, uint32_t k, double *weight);

/* mu = w * vbar + (1 - w) * V, clamped to [-1, 1] against rounding. */
V05_API int v05_baseline(double weight, double mean, double prior, double *mu);

/* sigma* = max(sqrt(1 - mu^2), V05_SIGMA_FLOOR) (the paper's normaliser). */
V05_API int v05_sigma_star(double mu, double *sigma);

/* sigma = sqrt(max(1 - mu^2, (1/k) sum (r_j - mu)^2)) (the rms normaliser);
 * may be 0 (every reward equals mu). */
V05_API int v05_sigma_rms(double mu, const double *rewards, uint32_t k,
			  double *sigma);

/* A_i = (r_i - mu) / sigma, in input order; sigma > 0, or sigma == 0 when
 * every r_i == mu (then every A_i is 0). */
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
 * Everything at once, for any mode but v05-eb (which needs its batch's fit:
 * v05_eb_estimate). rewards[0..k) in sample order; adv (may be NULL)
 * receives k advantages in the same order. Returns 0 or -EINVAL (bad params,
 * or mode v05-eb), -EDOM (a reward or the prior not finite or outside
 * [-1, 1]), -ERANGE (k == 0 or k > k_max).
 */
V05_API int v05_estimate(const struct v05_params *p, double prior,
			 const double *rewards, uint32_t k,
			 struct v05_estimate *out, double *adv);

/*
 * Which of a final group's k samples are trained on: bit i for sample i.
 * Every k bits for every mode but reinforce-ada, whose keep_n are chosen as
 * its authors do (docs/RULES.md). Returns 0 or a negative errno as
 * v05_estimate.
 */
V05_API int v05_keep(const struct v05_params *p, const double *rewards,
		     uint32_t k, uint64_t *keep);

/*
 * Knapsack RL's allocation of budget = n * per_prompt samples over n
 * prompts with success probabilities p01[i] in [0, 1] (any: one ulp from
 * 0 or 1 and subnormals too, each valued exactly): out[i] in
 * [V05_KNAPSACK_N_LOW, n_up], summing to the budget unless every prompt is
 * at n_up. Exactly optimal (the objective is separable and concave in
 * N_i: a greedy by marginal value). A p01[i] of NaN is a prompt with no
 * estimate yet: it gets per_prompt, outside the knapsack (Knapsack RL's
 * first epoch). Returns 0, -EINVAL (NULL, or n_up outside [N_LOW,
 * V05_K_LIMIT], or per_prompt outside [N_LOW, n_up]), -EDOM (a p01
 * outside [0, 1]) or -ENOMEM.
 */
V05_API int v05_knapsack_plan(const double *p01, uint32_t n,
			      uint32_t per_prompt, uint32_t n_up,
			      uint32_t *out);

/* ---- v05-eb: empirical-Bayes baseline (docs/STATISTICS.md) ------------
 *
 * A two-component prior on each prompt's success probability p: with
 * q = (1 + V)/2, Beta(n0 q + 1, n0 (1 - q) + 1) with weight 1 - h (the
 * prior is right up to a concentration n0) and Beta(a2, b2) with weight h
 * (the prior is a hallucination, which carries no information: its
 * prompt's p follows the population of prompts, whose shape the second
 * component is). A group of k rewards counts as s = sum (1+r)/2
 * successes: for rewards in {-1, 1} this is the binomial likelihood; a
 * reward strictly inside (-1, 1) is a fractional observation ((1+r)/2 of a
 * success and (1-r)/2 of a failure), so continuous rewards have a defined,
 * bounded effect rather than an error.
 *
 * The fit: the second component's shape is the one of V05_EB_SHAPES Beta
 * shapes (v05_eb_shape_at; shape 0 is Beta(1, 1)) under which the groups'
 * marginal likelihood, each group's p drawn from that shape alone, is the
 * largest (the population's shape); then (n0, h) is the maximum-likelihood
 * point, under that shape, of the grid n0 = 10^(3 j / (V05_EB_N0_GRID -
 * 1)), j = 0 .. V05_EB_N0_GRID - 1 (1 to 1000), times V05_EB_H_GRID values
 * of h, log-spaced from V05_EB_H_MIN to V05_EB_H_MAX (the first point on
 * ties, shapes as grid points).
 */
#define V05_EB_N0_GRID 16u
#define V05_EB_H_GRID 12u
#define V05_EB_SHAPES 12u
#define V05_EB_H_MIN 0.005
#define V05_EB_H_MAX 0.9

/* v05-eb's default cost per rollout (v05_config_mode; every other
 * mode's is V05_DEFAULT_COST): with the first wave chosen from the fit it
 * reaches the paper rule's MSE at fewer rollouts (docs/STATISTICS.md,
 * "Defaults"). */
#define V05_EB_DEFAULT_COST 0.0026

struct v05_eb_fit {
	double n0; /* concentration of the "prior right" component, >= 0  */
	double h;  /* weight of the hallucination component, in (0, 1)   */
	double a2; /* the hallucination component, Beta(a2, b2): a2, b2  */
	double b2; /* in [0.01, 1000]; 1, 1 is the uniform                */
};

/* n0 of grid index j (0 .. V05_EB_N0_GRID - 1) and h of grid index j
 * (0 .. V05_EB_H_GRID - 1). */
V05_API double v05_eb_n0_at(uint32_t j);
V05_API double v05_eb_h_at(uint32_t j);
/* The Beta(a, b) of shape j (0 .. V05_EB_SHAPES - 1); -ERANGE for another
 * j. Shape 0 is Beta(1, 1). */
V05_API int v05_eb_shape_at(uint32_t j, double *a, double *b);

/* Log marginal likelihood of n groups (prior[i], k[i] rewards, s[i]
 * successes with 0 <= s <= k <= 64) under *fit: sum_i log[(1-h) m1 + h m2]
 * with m the beta-binomial probability of the observed sequence. */
V05_API int v05_eb_loglik(const struct v05_eb_fit *fit, const double *prior,
			  const uint32_t *k, const double *s, uint32_t n,
			  double *ll);

/* The fit of n >= 1 groups (above): the population's shape, then the grid
 * point with the largest v05_eb_loglik under it (first on ties). */
V05_API int v05_eb_fit(const double *prior, const uint32_t *k, const double *s,
		       uint32_t n, struct v05_eb_fit *fit);

/*
 * The fit's state, additive: for every shape, the groups' log-likelihood
 * under that shape alone (pop), and the log-likelihood of every grid point
 * with that shape as the second component (ll), summed over the groups
 * folded in, each first weighed down by what came after it (forgetting).
 * The state of two disjoint sets of groups is the sum of theirs, so
 * engines holding parts of a batch merge by adding (v05_eb_state_add);
 * the fit is the state's best shape and its best grid point. The barrier
 * schedule's per-batch fit is this state over the batch with keep = 1.
 * Plain data: copy it, send it, add it.
 */
struct v05_eb_state {
	double ll[V05_EB_SHAPES][V05_EB_N0_GRID][V05_EB_H_GRID];
	double pop[V05_EB_SHAPES];
	double weight;   /* sum of the folded groups' weights (<= folded) */
	uint64_t folded; /* groups ever folded in, forgetting aside        */
};

/* Zero: no group, no preference (v05_eb_state_fit refuses it). */
V05_API void v05_eb_state_init(struct v05_eb_state *st);

/* st = keep * st + one group's log-likelihoods (prior, k rewards, s
 * successes), keep in [0, 1]: a group folded j groups ago then weighs
 * keep^j. Returns 0, -EINVAL or -EDOM. */
V05_API int v05_eb_state_fold(struct v05_eb_state *st, double keep,
			      double prior, uint32_t k, double s);

/* dst += src (every value, the weight and the count). -EDOM when
 * either state has a value that is not finite or a weight outside [0,
 * folded] (then nothing is written), -EOVERFLOW when the counts would. */
V05_API int v05_eb_state_add(struct v05_eb_state *dst,
			     const struct v05_eb_state *src);

/* The state's fit (first on ties): the one v05_eb_fit gives for the same
 * groups when none was forgotten. -EAGAIN for a state with no weight;
 * -EDOM for one no fold could have made (a value not finite, a weight
 * outside [0, folded]), as v05_eb_state_fold answers for such a state. */
V05_API int v05_eb_state_fit(const struct v05_eb_state *st,
			     struct v05_eb_fit *fit);

/* Posterior mean and variance of mu = 2p - 1 after k rewards with s
 * successes, and the posterior probability of the hallucination component. */
V05_API int v05_eb_posterior(const struct v05_eb_fit *fit, double prior,
			     uint32_t k, double s, double *mean, double *var,
			     double *p_halluc);

/* Expected posterior variance of mu after m more binary rewards: the sum
 * over t = 0..m successes of the mixture's beta-binomial predictive times
 * the posterior variance at (k + m, s + t). m = 0: the current variance. */
V05_API int v05_eb_expected_var(const struct v05_eb_fit *fit, double prior,
				uint32_t k, double s, uint32_t m, double *ev);

/* The m in {0, k_step, 2 k_step, ...}, k + m <= k_max, minimising
 * v05_eb_expected_var + cost * m (the smaller m on ties). Returns m >= 0 or
 * a negative errno. */
V05_API int v05_eb_choose(const struct v05_params *p,
			  const struct v05_eb_fit *fit, double prior,
			  uint32_t k, double s);

/*
 * The first wave from the fit: of the sizes k1 whose bit is set in waves
 * (bit k: a first wave of k samples, 1 <= k <= k_max), the one with the
 * least expected final risk before any reward, with its risk in *risk
 * (may be NULL): the sum over the prior predictive's t successes in k1 of
 * the least v05_eb_expected_var(k1, t, m) + cost * m (as v05_eb_choose)
 * plus cost * k1. The smaller k1 on ties. Returns k1 > 0 or a negative
 * errno (-EINVAL: no size in waves, or one outside [1, k_max]).
 */
V05_API int v05_eb_first_wave(const struct v05_params *p,
			      const struct v05_eb_fit *fit, double prior,
			      uint32_t waves, double *risk);

/*
 * One group in mode v05-eb under the batch's fit: baseline = posterior mean
 * (weight = posterior probability that the prior is right, delta2 = 0),
 * advantages with p->sigma's normaliser. At k == k_init the action is
 * "more" with k_target = k + m when v05_eb_choose gives m > 0; otherwise
 * "stop" (the second wave always finalizes).
 */
V05_API int v05_eb_estimate(const struct v05_params *p,
			    const struct v05_eb_fit *fit, double prior,
			    const double *rewards, uint32_t k,
			    struct v05_estimate *out, double *adv);

/* ---- EBPO: a group's mean shrunk toward a running global mean ----------
 *
 * EBPO (arXiv 2602.05165; docs/RULES.md says what of it could be read):
 * the baseline of a group of k rewards with mean m is
 *     b = S m_glob + (1 - S) m,   S = (s_w^2 / k) / (s_w^2 / k + tau^2)
 * with m_glob the running mean of the group means, s_w^2 the running mean
 * of the groups' within-group variances (Bessel), tau^2 the between-group
 * variance of the true means, max(0, var(group means) - mean(s_q^2 / k_q)),
 * all kept by Welford's online update over the groups folded so far (the
 * group itself included: fold, then estimate). Advantages are
 * (r - b) / (s_w + V05_GRPO_EPSILON): an all-same group still gets one
 * whenever the global mean disagrees with it. No extra samples: one wave
 * of k_init (>= 2, a group of one has no within-group variance).
 *
 * Forgetting (keep in [0, 1], 1: none, the paper's Welford): folding first
 * multiplies the old weight (and sums of squares) by keep, so a group folded
 * j groups ago weighs keep^j. Plain data: copy it, save it.
 */
struct v05_ebpo {
	double weight;   /* the folded groups' weight (their count, keep 1) */
	double mean;     /* weighted mean of the group means: m_glob        */
	double m2;       /* weighted sum of squared deviations of the means */
	double within;   /* weighted mean of the within-group variances     */
	double noise;    /* weighted mean of within-group variance / k      */
	uint64_t groups; /* groups ever folded                              */
};

/* Zero: no group yet (an estimate is then the group's own mean). */
V05_API void v05_ebpo_init(struct v05_ebpo *s);

/* One group's k >= 2 rewards (finite, in [-1, 1]) into s, the old weight
 * first times keep. 0, -EINVAL (NULL, k outside [2, 64], keep outside
 * [0, 1]) or -EDOM (a reward). */
V05_API int v05_ebpo_fold(struct v05_ebpo *s, double keep,
			  const double *rewards, uint32_t k);

/* S, the weight of the global mean, for a group of k under s: 0 while
 * fewer than two groups' worth of weight is in, or when nothing varies;
 * else in [0, 1]. -EINVAL for NULL or k outside [2, 64]. */
V05_API int v05_ebpo_shrinkage(const struct v05_ebpo *s, uint32_t k,
			       double *shrink);

/* One group under s (fold it into s first, as the plugin does): mean,
 * baseline b, weight = 1 - S (the group mean's), sigma = s_w (1 before any
 * within-group variance), action stop; adv (may be NULL) gets k advantages.
 * 0, -EINVAL or -EDOM as above. */
V05_API int v05_ebpo_estimate(const struct v05_ebpo *s, const double *rewards,
			      uint32_t k, struct v05_estimate *out,
			      double *adv);

/* Scale helpers: V = 2p - 1 for p in [0, 1]; r = 2b - 1 for b in {0, 1}. */
V05_API int v05_prior_from_p(double p, double *prior);
V05_API int v05_reward_from_binary(int b, double *reward);

#ifdef __cplusplus
}
#endif

#endif /* V05_STATS_H */
