/* SPDX-License-Identifier: MIT */
/* Statistics core: every formula on hand-computed cases, the paper's
 * appendix examples, the k_max cap, the exact bias bound, every mode. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "v05.h"

#define EPS 1e-15

static struct v05_params params_for(uint32_t mode, uint32_t k_max)
{
	struct v05_params p;

	v05_params_default(&p);
	p.mode = mode;
	p.k_max = k_max;
	p.k_init = 1;
	if (mode == V05_MODE_ADA || mode == V05_MODE_ADA_POS)
		p.k_step = 1; /* rounds of k_init */
	if (mode == V05_MODE_KNAPSACK_PRIOR || mode == V05_MODE_KNAPSACK)
		p.k_init = V05_KNAPSACK_N_LOW; /* its least budget */
	return p;
}

/* Rewards on the [-1, 1] scale: the first `succ` are +1, the rest -1. */
static void binary_rewards(double *r, uint32_t k, uint32_t succ)
{
	for (uint32_t i = 0; i < k; i++)
		r[i] = i < succ ? 1.0 : -1.0;
}

static void test_mean(void **state)
{
	double r[] = { 1.0, -1.0, 0.5, 0.25 };
	double m;

	(void)state;
	assert_int_equal(v05_mean(r, 4, &m), 0);
	assert_true(m == 0.1875); /* (1 - 1 + 0.5 + 0.25) / 4, exact */
	assert_int_equal(v05_mean(r, 1, &m), 0);
	assert_true(m == 1.0);
}

static void test_delta2(void **state)
{
	double d;

	(void)state;
	/* (0.5 - 0.8)^2 = 0.09 <= 1/4: truncated to 0. */
	assert_int_equal(v05_delta2(0.5, 0.8, 4, &d), 0);
	assert_true(d == 0.0);
	/* (-1 - 0.8)^2 - 1 = 3.24 - 1 = 2.24. */
	assert_int_equal(v05_delta2(-1.0, 0.8, 1, &d), 0);
	assert_float_equal(d, 2.24, EPS);
	/* (1 - (-1))^2 - 1/16 = 4 - 0.0625 = 3.9375, exact in binary. */
	assert_int_equal(v05_delta2(1.0, -1.0, 16, &d), 0);
	assert_true(d == 3.9375);
	/* On the boundary (0.5)^2 == 1/4 exactly: accepted. */
	assert_int_equal(v05_delta2(0.5, 0.0, 4, &d), 0);
	assert_true(d == 0.0);
}

static void test_weight_baseline_sigma(void **state)
{
	double w, mu, s;

	(void)state;
	/* delta2 = 3.9375, k = 16: w = 3.9375 / (3.9375 + 0.0625) = 0.984375. */
	assert_int_equal(v05_weight(3.9375, 16, &w), 0);
	assert_true(w == 0.984375);
	/* mu = 0.984375 * 1 + 0.015625 * (-1) = 0.96875. */
	assert_int_equal(v05_baseline(w, 1.0, -1.0, &mu), 0);
	assert_true(mu == 0.96875);
	/* sigma* = sqrt(1 - 0.96875^2) = sqrt(0.0615234375). */
	assert_int_equal(v05_sigma_star(mu, &s), 0);
	assert_float_equal(s, sqrt(0.0615234375), EPS);
	/* w = 0 keeps the prior exactly. */
	assert_int_equal(v05_weight(0.0, 4, &w), 0);
	assert_true(w == 0.0);
	assert_int_equal(v05_baseline(w, 0.5, 0.8, &mu), 0);
	assert_true(mu == 0.8);
	/* mu = 0: sigma* = 1. */
	assert_int_equal(v05_sigma_star(0.0, &s), 0);
	assert_true(s == 1.0);
}

static void test_sigma_floor(void **state)
{
	double s, adv[4];
	double r[4] = { 1.0, 1.0, 1.0, -1.0 };

	(void)state;
	assert_int_equal(v05_sigma_star(1.0, &s), 0);
	assert_true(s == V05_SIGMA_FLOOR);
	assert_int_equal(v05_sigma_star(-1.0, &s), 0);
	assert_true(s == V05_SIGMA_FLOOR);
	/* Prior 1 not rejected by 3/4: mu = 1, floor used, finite output,
	 * a reward equal to mu has advantage exactly 0. */
	assert_int_equal(v05_advantages(r, 4, 1.0, V05_SIGMA_FLOOR, adv), 0);
	assert_true(adv[0] == 0.0);
	assert_float_equal(adv[3], -2.0 / V05_SIGMA_FLOOR, 1e-9);
}

static void test_advantages(void **state)
{
	double r[] = { 1.0, -1.0, 0.0 };
	double adv[3];

	(void)state;
	/* mu = 0.5, sigma = 0.5: (1 - .5)/.5 = 1, (-1 - .5)/.5 = -3, -1. */
	assert_int_equal(v05_advantages(r, 3, 0.5, 0.5, adv), 0);
	assert_true(adv[0] == 1.0);
	assert_true(adv[1] == -3.0);
	assert_true(adv[2] == -1.0);
}

static void test_k_target(void **state)
{
	double kt = 0.0;

	(void)state;
	/* No target when delta2 == 0. */
	assert_int_equal(v05_k_target(0.0039, 0.0, &kt), 0);
	/* c = 1/64: 1/sqrt(c) = 8; delta2 = 0.5: 8 - 2 = 6. */
	assert_int_equal(v05_k_target(1.0 / 64.0, 0.5, &kt), 1);
	assert_true(kt == 6.0);
	/* A subnormal delta2 would give -inf; the answer stays finite. */
	assert_int_equal(v05_k_target(0.0039, DBL_MIN / 1e10, &kt), 1);
	assert_true(isfinite(kt) && kt < -1e300);
}

/* Appendix "Analysis of the Base Group Size", prior V = 0.8. */
static void test_paper_appendix(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05, 16);
	struct v05_estimate e;
	double r[4];

	(void)state;
	/* 4 of 4 right: |1 - 0.8| = 0.2 <= 0.5, the prior is kept. */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, 0.8, r, 4, &e, NULL), 0);
	assert_true(e.delta2 == 0.0 && e.weight == 0.0 && e.baseline == 0.8);
	assert_false(e.has_target);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* 3 of 4 right: |0.5 - 0.8| = 0.3 <= 0.5, the prior is kept. */
	binary_rewards(r, 4, 3);
	assert_int_equal(v05_estimate(&p, 0.8, r, 4, &e, NULL), 0);
	assert_true(e.delta2 == 0.0 && e.baseline == 0.8);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* k = 1, one failure: |-1 - 0.8| = 1.8 > 1, rejected. */
	binary_rewards(r, 1, 0);
	assert_int_equal(v05_estimate(&p, 0.8, r, 1, &e, NULL), 0);
	assert_true(e.delta2 > 0.0);
	assert_float_equal(e.delta2, 1.8 * 1.8 - 1.0, 1e-12);
	/* k = 2, one of each: |0 - 0.8| = 0.8 > 0.707, rejected. */
	binary_rewards(r, 2, 1);
	assert_int_equal(v05_estimate(&p, 0.8, r, 2, &e, NULL), 0);
	assert_float_equal(e.delta2, 0.64 - 0.5, 1e-12);
	/* k = 3: the gap 2/3 exceeds the radius 1/sqrt(3) = 0.577; one
	 * failure (|1/3 - 0.8| = 0.467) is absorbed, two (|-1/3 - 0.8| =
	 * 1.133) are not. */
	binary_rewards(r, 3, 2);
	assert_int_equal(v05_estimate(&p, 0.8, r, 3, &e, NULL), 0);
	assert_true(e.delta2 == 0.0);
	binary_rewards(r, 3, 1);
	assert_int_equal(v05_estimate(&p, 0.8, r, 3, &e, NULL), 0);
	assert_true(e.delta2 > 0.0);
	/* The appendix's inequality 1/sqrt(k) >= 2/k holds from k = 4 on. */
	for (uint32_t k = 1; k <= 16; k++)
		assert_true((1.0 / sqrt((double)k) >= 2.0 / (double)k) == (k >= 4));
}

static void test_decide_rule(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05, 16);
	struct v05_estimate e;
	double r[16];

	(void)state;
	/* Prior -0.8, 4 of 4 right: delta2 = 3.24 - 0.25 = 2.99; k_target =
	 * 1/sqrt(0.0039) - 1/2.99 = 16.0128 - 0.3344 = 15.678 > 4: more. */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, -0.8, r, 4, &e, NULL), 0);
	assert_true(e.has_target);
	assert_float_equal(e.k_target, 1.0 / sqrt(0.0039) - 1.0 / 2.99, 1e-9);
	assert_int_equal(e.action, V05_ACTION_MORE);
	/* A small conflict: prior 0, 4 of 4 right: delta2 = 1 - 0.25 = 0.75,
	 * k_target = 16.0128 - 1.333 = 14.68 > 4: more; at k = 15 (15 of 15
	 * right, delta2 = 1 - 1/15) k_target = 16.0128 - 1.071 = 14.94 < 15:
	 * stop. */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_MORE);
	binary_rewards(r, 15, 15);
	p.k_max = 16;
	assert_int_equal(v05_estimate(&p, 0.0, r, 15, &e, NULL), 0);
	assert_true(e.k_target < 15.0);
	assert_int_equal(e.action, V05_ACTION_STOP);
}

/* k never passes k_max, even when 1/sqrt(c) is far above it or not an
 * integer. */
static void test_k_max_cap(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05, 16);
	struct v05_estimate e;
	double r[17];

	(void)state;
	/* Huge conflict at k = 16: prior 1, all wrong, c = 1e-4 so k_target
	 * = 100 - 1/3.9375 = 99.75. 16 + 2 > 16: stop. */
	p.cost = 1e-4;
	binary_rewards(r, 16, 0);
	assert_int_equal(v05_estimate(&p, 1.0, r, 16, &e, NULL), 0);
	assert_true(e.k_target > 99.0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* Default cost, k = 15 < k_target = 15.76 but 15 + 2 > 16: stop. */
	p.cost = 0.0039;
	binary_rewards(r, 15, 0);
	assert_int_equal(v05_estimate(&p, 1.0, r, 15, &e, NULL), 0);
	assert_true(15.0 < e.k_target);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* c = 0.003: 1/sqrt(c) = 18.26, not an integer; k_max = 17. k = 16,
	 * step 2 would reach 18 > 17: stop; step 1 reaches 17: more. */
	p.cost = 0.003;
	p.k_max = 17;
	binary_rewards(r, 16, 0);
	assert_int_equal(v05_estimate(&p, 1.0, r, 16, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	p.k_step = 1;
	assert_int_equal(v05_estimate(&p, 1.0, r, 16, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_MORE);
	binary_rewards(r, 17, 0);
	assert_int_equal(v05_estimate(&p, 1.0, r, 17, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* More rewards than k_max is an error, not a silent truncation. */
	p.k_max = 16;
	assert_int_equal(v05_estimate(&p, 1.0, r, 17, &e, NULL), -ERANGE);
}

/* log C(n, x) via lgamma keeps the binomial weights accurate to k = 32. */
static double binom_pmf(uint32_t k, uint32_t x, double p)
{
	double lc = lgamma(k + 1.0) - lgamma(x + 1.0) - lgamma(k - x + 1.0);

	if (p == 0.0)
		return x == 0 ? 1.0 : 0.0;
	if (p == 1.0)
		return x == k ? 1.0 : 0.0;
	return exp(lc + x * log(p) + (k - x) * log1p(-p));
}

/* thm:bias_bound, property 1, exactly: for binary rewards the estimator is
 * a function of the number of successes x ~ Bin(k, p), so E[mu] is a
 * finite sum. |E[mu] - mu_true| <= 1/sqrt(k) for every k, V, p. */
static void test_bias_bound_exact(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05_FIXED, 64);
	double r[32];
	double worst_ratio = 0.0;

	(void)state;
	for (uint32_t k = 1; k <= 32; k++) {
		double mu_of_x[33];

		for (int vi = 0; vi <= 40; vi++) {
			double prior = -1.0 + vi * 0.05;

			for (uint32_t x = 0; x <= k; x++) {
				struct v05_estimate e;

				binary_rewards(r, k, x);
				assert_int_equal(v05_estimate(&p, prior, r, k, &e,
							      NULL), 0);
				mu_of_x[x] = e.baseline;
			}
			for (int pi = 0; pi <= 40; pi++) {
				double ps = pi / 40.0, mu_true = 2.0 * ps - 1.0;
				double expect = 0.0, total = 0.0, bias;

				for (uint32_t x = 0; x <= k; x++) {
					double w = binom_pmf(k, x, ps);

					expect += w * mu_of_x[x];
					total += w;
				}
				assert_float_equal(total, 1.0, 1e-9);
				bias = fabs(expect - mu_true);
				assert_true(bias <= 1.0 / sqrt((double)k) + 1e-12);
				if (bias * sqrt((double)k) > worst_ratio)
					worst_ratio = bias * sqrt((double)k);
			}
		}
	}
	/* The bound is not vacuous on this grid: some case uses over half. */
	assert_true(worst_ratio > 0.5);
}

static void test_mode_v05_fixed(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05_FIXED, 16);
	struct v05_estimate e;
	double r[4], adv[4];

	(void)state;
	/* Same conflict that makes v05 ask for more: fixed never does. */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, -0.8, r, 4, &e, adv), 0);
	assert_false(e.has_target);
	assert_int_equal(e.action, V05_ACTION_STOP);
	assert_float_equal(e.weight, 2.99 / 3.24, 1e-12);
}

static void test_mode_grpo(void **state)
{
	struct v05_params p = params_for(V05_MODE_GRPO, 16);
	struct v05_estimate e;
	double r[4] = { 1.0, -1.0, 1.0, 1.0 };
	double adv[4];

	(void)state;
	/* mean 0.5; Bessel std = sqrt((3 * 0.25 + 2.25) / 3) = 1. */
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, adv), 0);
	assert_true(e.mean == 0.5 && e.baseline == 0.5 && e.sigma == 1.0);
	assert_true(adv[0] == 0.5 / (1.0 + 1e-6));
	assert_true(adv[1] == -1.5 / (1.0 + 1e-6));
	assert_int_equal(e.action, V05_ACTION_STOP);
	assert_false(e.has_target);
	/* verl: a group of one has mean 0 and std 1. */
	assert_int_equal(v05_estimate(&p, 0.0, r, 1, &e, adv), 0);
	assert_true(e.baseline == 0.0 && e.sigma == 1.0);
	assert_true(adv[0] == 1.0 / (1.0 + 1e-6));
	/* All equal: advantages exactly 0, not dropped in grpo. */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, adv), 0);
	assert_true(adv[0] == 0.0 && e.sigma == 0.0);
	assert_int_equal(e.action, V05_ACTION_STOP);
}

static void test_mode_dapo(void **state)
{
	struct v05_params p = params_for(V05_MODE_DAPO, 16);
	struct v05_estimate e;
	double r[4];

	(void)state;
	binary_rewards(r, 4, 0);
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	binary_rewards(r, 4, 2);
	assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* A group of one is kept, as verl's DAPO filter keeps it; of two,
	 * the smallest with a variance, an all-same pair is dropped. */
	assert_int_equal(v05_estimate(&p, 0.0, r, 1, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	binary_rewards(r, 2, 2);
	assert_int_equal(v05_estimate(&p, 0.0, r, 2, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	binary_rewards(r, 2, 1);
	assert_int_equal(v05_estimate(&p, 0.0, r, 2, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
}

static void test_rejected_params(void **state)
{
	static const double bad_costs[] = { 0.0, 1.0, -0.5, 2.0, NAN, INFINITY };
	struct v05_params p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad_costs) / sizeof(bad_costs[0]); i++) {
		v05_params_default(&p);
		p.cost = bad_costs[i];
		assert_int_equal(v05_params_check(&p), -EINVAL);
		assert_non_null(strstr(v05_errmsg(), "cost"));
	}
	v05_params_default(&p);
	p.k_init = 0;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	v05_params_default(&p);
	p.k_step = 0;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	v05_params_default(&p);
	p.k_max = 65;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	v05_params_default(&p);
	p.k_max = 3; /* below k_init = 4 */
	assert_int_equal(v05_params_check(&p), -EINVAL);
	v05_params_default(&p);
	p.mode = V05_MODE_COUNT;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	assert_int_equal(v05_params_check(NULL), -EINVAL);
	v05_params_default(&p);
	p.k_max = 64;
	assert_int_equal(v05_params_check(&p), 0);
	assert_int_equal(v05_mode_from_name("ppo"), -EINVAL);
	assert_int_equal(v05_mode_from_name("v05-fixed"), V05_MODE_V05_FIXED);
}

static void test_rejected_inputs(void **state)
{
	struct v05_params p = params_for(V05_MODE_V05, 16);
	struct v05_estimate e;
	double r[4] = { 1.0, 1.0, 1.0, 1.0 };
	static const double bad[] = { NAN, INFINITY, -INFINITY, 1.0000001, -2.0 };
	double out;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		double rr[4] = { 1.0, 1.0, bad[i], 1.0 };

		assert_int_equal(v05_estimate(&p, 0.5, rr, 4, &e, NULL), -EDOM);
		assert_int_equal(v05_estimate(&p, bad[i], r, 4, &e, NULL), -EDOM);
		assert_int_equal(v05_mean(rr, 4, &out), -EDOM);
		assert_int_equal(v05_delta2(0.0, bad[i], 4, &out), -EDOM);
		assert_int_equal(v05_sigma_star(bad[i], &out), -EDOM);
	}
	assert_int_equal(v05_estimate(&p, 0.5, r, 0, &e, NULL), -ERANGE);
	assert_int_equal(v05_estimate(&p, 0.5, NULL, 4, &e, NULL), -EINVAL);
	assert_int_equal(v05_estimate(&p, 0.5, r, 4, NULL, NULL), -EINVAL);
	assert_int_equal(v05_mean(r, 65, &out), -ERANGE);
	assert_int_equal(v05_weight(-0.1, 4, &out), -EDOM);
	assert_int_equal(v05_weight(NAN, 4, &out), -EDOM);
	assert_int_equal(v05_baseline(1.5, 0.0, 0.0, &out), -EDOM);
	assert_int_equal(v05_advantages(r, 4, 0.0, 0.0, &out), -EDOM);
	assert_int_equal(v05_k_target(0.0, 1.0, &out), -EINVAL);
	assert_int_equal(v05_k_target(0.5, -1.0, &out), -EDOM);
	assert_int_equal(v05_decide(&p, 17, true, 20.0), -ERANGE);
	assert_int_equal(v05_decide(&p, 4, true, NAN), -EDOM);
	assert_int_equal(v05_prior_from_p(1.5, &out), -EDOM);
	assert_int_equal(v05_reward_from_binary(2, &out), -EDOM);
	assert_int_equal(v05_prior_from_p(0.9, &out), 0);
	assert_float_equal(out, 0.8, 1e-15);
	assert_int_equal(v05_reward_from_binary(0, &out), 0);
	assert_true(out == -1.0);
}

/* Whatever valid input, every output is finite. */
static void test_outputs_finite(void **state)
{
	double r[16], adv[16];
	static const double fit_r[2] = { 1.0, -1.0 };

	(void)state;
	for (uint32_t mode = 0; mode < V05_MODE_COUNT; mode++) {
		struct v05_params p = params_for(mode, 16);

		for (uint32_t k = 1; k <= 16; k++) {
			for (uint32_t x = 0; x <= k; x++) {
				binary_rewards(r, k, x);
				for (int vi = -4; vi <= 4; vi++) {
					struct v05_estimate e;

					struct v05_eb_fit fit = { 10.0, 0.1, 1.0, 1.0 };

					struct v05_ebpo eb;
					int rc;

					/* EBPO under statistics of this and
					 * a mixed group (k >= 2). */
					v05_ebpo_init(&eb);
					rc = mode == V05_MODE_V05_EB || mode == V05_MODE_PG ?
						 v05_eb_estimate(&p, &fit, vi / 4.0,
								 r, k, &e, adv) :
					     mode == V05_MODE_EBPO ?
						 (k < 2 ? 0 :
						  v05_ebpo_fold(&eb, 1.0, r, k) ||
						  v05_ebpo_fold(&eb, 1.0, fit_r, 2) ||
						  v05_ebpo_estimate(&eb, r, k, &e,
								    adv)) :
						 v05_estimate(&p, vi / 4.0, r, k,
							      &e, adv);

					assert_int_equal(rc, 0);
					if (mode == V05_MODE_EBPO && k < 2)
						continue;
					assert_true(isfinite(e.mean) &&
						    isfinite(e.delta2) &&
						    isfinite(e.weight) &&
						    isfinite(e.baseline) &&
						    isfinite(e.sigma));
					assert_true(!e.has_target ||
						    isfinite(e.k_target));
					for (uint32_t i = 0; i < k; i++)
						assert_true(isfinite(adv[i]));
				}
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mean),
		cmocka_unit_test(test_delta2),
		cmocka_unit_test(test_weight_baseline_sigma),
		cmocka_unit_test(test_sigma_floor),
		cmocka_unit_test(test_advantages),
		cmocka_unit_test(test_k_target),
		cmocka_unit_test(test_paper_appendix),
		cmocka_unit_test(test_decide_rule),
		cmocka_unit_test(test_k_max_cap),
		cmocka_unit_test(test_bias_bound_exact),
		cmocka_unit_test(test_mode_v05_fixed),
		cmocka_unit_test(test_mode_grpo),
		cmocka_unit_test(test_mode_dapo),
		cmocka_unit_test(test_rejected_params),
		cmocka_unit_test(test_rejected_inputs),
		cmocka_unit_test(test_outputs_finite),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
