/* SPDX-License-Identifier: MIT */
/*
 * The bounded (rms) normaliser on hand-computed cases and its bound, and
 * v05-eb: posterior on hand-computed cases, the likelihood and its fit
 * against a brute-force evaluation (products, no lgamma), the expected
 * posterior variance, the choice of m and the first wave's risk and choice
 * against direct enumeration of every reward sequence, for several shapes
 * of the second component, and fractional (non-binary) rewards.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "v05.h"

static struct v05_params params(uint32_t mode, uint32_t sigma)
{
	struct v05_params p;

	v05_params_default(&p);
	p.mode = mode;
	p.sigma = sigma;
	return p;
}

static void binary_rewards(double *r, uint32_t k, uint32_t succ)
{
	for (uint32_t i = 0; i < k; i++)
		r[i] = i < succ ? 1.0 : -1.0;
}

/* ---- rms normaliser ------------------------------------------------- */

static void test_rms_prior_pm1(void **state)
{
	struct v05_params p = params(V05_MODE_V05, V05_SIGMA_RMS);
	struct v05_params pp = params(V05_MODE_V05, V05_SIGMA_PAPER);
	double r[4] = { 1.0, 1.0, 1.0, -1.0 }, adv[4];
	struct v05_estimate e;

	(void)state;
	/* Prior 1, 3 of 4: (0.5 - 1)^2 = 1/4 is inside the bound, mu = 1.
	 * rms: sigma^2 = max(0, (0 + 0 + 0 + 4) / 4) = 1: A = 0, 0, 0, -2. */
	assert_int_equal(v05_estimate(&p, 1.0, r, 4, &e, adv), 0);
	assert_true(e.baseline == 1.0 && e.sigma == 1.0);
	assert_true(adv[0] == 0.0 && adv[1] == 0.0 && adv[2] == 0.0);
	assert_true(adv[3] == -2.0); /* = -sqrt(k): the bound is tight */
	/* paper: sigma = 0.01, A = -200. */
	assert_int_equal(v05_estimate(&pp, 1.0, r, 4, &e, adv), 0);
	assert_true(e.sigma == V05_SIGMA_FLOOR);
	assert_float_equal(adv[3], -200.0, 1e-9);
	/* The mirror image: prior -1, 1 of 4 right. */
	binary_rewards(r, 4, 1);
	assert_int_equal(v05_estimate(&p, -1.0, r, 4, &e, adv), 0);
	assert_true(e.baseline == -1.0 && e.sigma == 1.0);
	assert_true(adv[0] == 2.0 && adv[1] == 0.0 && adv[3] == 0.0);
	/* Prior 0.999 (issue 13: about -45 with the paper's normaliser):
	 * (0.5 - 0.999)^2 = 0.249001 <= 1/4, mu = 0.999; rms sigma^2 =
	 * max(1 - 0.998001, (3 * 0.001^2 + 1.999^2) / 4). */
	binary_rewards(r, 4, 3);
	assert_int_equal(v05_estimate(&p, 0.999, r, 4, &e, adv), 0);
	assert_float_equal(e.sigma,
			   sqrt((3 * 0.001 * 0.001 + 1.999 * 1.999) / 4), 1e-15);
	assert_true(fabs(adv[3]) <= 2.0);
	assert_int_equal(v05_estimate(&pp, 0.999, r, 4, &e, adv), 0);
	assert_float_equal(adv[3], -1.999 / sqrt(1 - 0.999 * 0.999), 1e-9);
	assert_true(adv[3] < -44.0 && adv[3] > -45.0);
}

static void test_rms_all_equal(void **state)
{
	struct v05_params p = params(V05_MODE_V05_FIXED, V05_SIGMA_RMS);
	double r[8], adv[8], s;
	struct v05_estimate e;

	(void)state;
	/* Every reward equals the baseline: sigma 0, every A exactly 0. */
	binary_rewards(r, 8, 8);
	assert_int_equal(v05_estimate(&p, 1.0, r, 8, &e, adv), 0);
	assert_true(e.baseline == 1.0 && e.sigma == 0.0);
	for (int i = 0; i < 8; i++)
		assert_true(adv[i] == 0.0);
	binary_rewards(r, 8, 0);
	assert_int_equal(v05_estimate(&p, -1.0, r, 8, &e, adv), 0);
	assert_true(e.baseline == -1.0 && e.sigma == 0.0 && adv[7] == 0.0);
	/* Equal rewards, baseline not equal to them: prior 0.5 and 4 of 4,
	 * (1 - 0.5)^2 = 1/4 accepted, mu = 0.5; sigma^2 = max(0.75, 0.25). */
	binary_rewards(r, 4, 4);
	assert_int_equal(v05_estimate(&p, 0.5, r, 4, &e, adv), 0);
	assert_true(e.baseline == 0.5);
	assert_float_equal(e.sigma, sqrt(0.75), 1e-15);
	assert_float_equal(adv[0], 0.5 / sqrt(0.75), 1e-15);
	/* The single formulas agree. */
	assert_int_equal(v05_sigma_rms(0.5, r, 4, &s), 0);
	assert_true(s == e.sigma);
	assert_int_equal(v05_sigma_rms(1.0, r, 4, &s), 0);
	assert_true(s == 0.0);
	assert_int_equal(v05_advantages(r, 4, 1.0, 0.0, adv), 0);
	assert_true(adv[0] == 0.0 && adv[3] == 0.0);
	/* sigma 0 with spread is refused, not divided by. */
	r[3] = -1.0;
	assert_int_equal(v05_advantages(r, 4, 1.0, 0.0, adv), -EDOM);
}

static void test_rms_k1(void **state)
{
	struct v05_params p = params(V05_MODE_V05, V05_SIGMA_RMS);
	struct v05_estimate e;
	double r[1], adv[1];

	(void)state;
	p.k_init = 1;
	/* Prior 0, reward 1: (1 - 0)^2 - 1 = 0, mu = 0, sigma = 1, A = 1. */
	r[0] = 1.0;
	assert_int_equal(v05_estimate(&p, 0.0, r, 1, &e, adv), 0);
	assert_true(e.baseline == 0.0 && e.sigma == 1.0 && adv[0] == 1.0);
	/* Prior 1, reward -1: delta2 = 4 - 1 = 3, w = 3/4, mu = -0.5;
	 * sigma^2 = max(0.75, 0.25): A = -0.5 / sqrt(0.75). */
	r[0] = -1.0;
	assert_int_equal(v05_estimate(&p, 1.0, r, 1, &e, adv), 0);
	assert_float_equal(e.baseline, -0.5, 1e-15);
	assert_float_equal(e.sigma, sqrt(0.75), 1e-15);
	assert_float_equal(adv[0], -0.5 / sqrt(0.75), 1e-15);
	/* Prior 1, reward 1: mu = 1, sigma 0, A = 0. */
	r[0] = 1.0;
	assert_int_equal(v05_estimate(&p, 1.0, r, 1, &e, adv), 0);
	assert_true(e.sigma == 0.0 && adv[0] == 0.0);
}

/* (1/k) sum A^2 <= 1 and |A| <= sqrt(k) for every binary group, every
 * prior on a grid, both fused modes; the paper's normaliser breaks it. */
static void test_rms_bound(void **state)
{
	double r[16], adv[16], worst_paper = 0.0;

	(void)state;
	for (uint32_t mode = V05_MODE_V05; mode <= V05_MODE_V05_FIXED; mode++) {
		struct v05_params p = params(mode, V05_SIGMA_RMS);
		struct v05_params pp = params(mode, V05_SIGMA_PAPER);

		p.k_init = pp.k_init = 1;
		for (uint32_t k = 1; k <= 16; k++) {
			for (uint32_t x = 0; x <= k; x++) {
				binary_rewards(r, k, x);
				for (int vi = -20; vi <= 20; vi++) {
					struct v05_estimate e;
					double ms = 0.0;

					assert_int_equal(v05_estimate(&p, vi / 20.0, r,
								      k, &e, adv), 0);
					for (uint32_t i = 0; i < k; i++) {
						ms += adv[i] * adv[i];
						assert_true(fabs(adv[i]) <=
							    sqrt((double)k) + 1e-12);
					}
					assert_true(ms / k <= 1.0 + 1e-12);
					assert_int_equal(v05_estimate(&pp, vi / 20.0,
								      r, k, &e, adv), 0);
					for (uint32_t i = 0; i < k; i++)
						if (fabs(adv[i]) > worst_paper)
							worst_paper = fabs(adv[i]);
				}
			}
		}
	}
	assert_true(worst_paper >= 199.0); /* prior +-1 not rejected */
}

static void test_sigma_names(void **state)
{
	struct v05_params p = params(V05_MODE_V05, V05_SIGMA_RMS);

	(void)state;
	assert_string_equal(v05_sigma_name(V05_SIGMA_RMS), "rms");
	assert_string_equal(v05_sigma_name(V05_SIGMA_PAPER), "paper");
	assert_null(v05_sigma_name(2));
	assert_int_equal(v05_sigma_from_name("paper"), V05_SIGMA_PAPER);
	assert_int_equal(v05_sigma_from_name("rms"), V05_SIGMA_RMS);
	assert_int_equal(v05_sigma_from_name("floor"), -EINVAL);
	assert_string_equal(v05_mode_name(V05_MODE_V05_EB), "v05-eb");
	assert_int_equal(v05_mode_from_name("v05-eb"), V05_MODE_V05_EB);
	p.sigma = 2;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	p.sigma = 0;
	p.keep_n = 1; /* only reinforce-ada keeps part of a group */
	assert_int_equal(v05_params_check(&p), -EINVAL);
	v05_params_default(&p);
	assert_int_equal(p.sigma, V05_SIGMA_RMS);
}

/* ---- v05-eb ----------------------------------------------------------- */

/* Beta-binomial sequence probability by products (integer s). */
static double seq_prob(double a, double b, uint32_t k, uint32_t s)
{
	double v = 1.0;
	uint32_t i = 0, j = 0;

	for (uint32_t l = 0; l < k; l++) {
		double num = i < s ? a + i++ : b + j++;

		v *= num / (a + b + l);
	}
	return v;
}

static double brute_loglik(const struct v05_eb_fit *f, const double *prior,
			   const uint32_t *k, const double *s, uint32_t n)
{
	double ll = 0.0;

	for (uint32_t i = 0; i < n; i++) {
		double q = (1.0 + prior[i]) / 2.0;
		double m1 = seq_prob(f->n0 * q + 1, f->n0 * (1 - q) + 1, k[i],
				     (uint32_t)s[i]);
		double m2 = seq_prob(f->a2, f->b2, k[i], (uint32_t)s[i]);

		ll += log((1 - f->h) * m1 + f->h * m2);
	}
	return ll;
}

/* A small deterministic batch: priors near the truth, a few random ones. */
static uint32_t make_batch(double *prior, uint32_t *k, double *s, uint32_t n,
			   uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++) {
		double p, u;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p = (double)(seed >> 11) / 9007199254740992.0;
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		u = (double)(seed >> 11) / 9007199254740992.0;
		prior[i] = i % 7 == 0 ? 2 * u - 1 :
			   fmin(1.0, fmax(-1.0, 2 * p - 1 + 0.2 * (u - 0.5)));
		k[i] = 4;
		s[i] = 0;
		for (uint32_t j = 0; j < k[i]; j++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			s[i] += (double)(seed >> 11) / 9007199254740992.0 < p;
		}
	}
	return n;
}

static void test_eb_loglik_and_fit(void **state)
{
	double prior[64], s[64], ll, best = -INFINITY, pop_best = -INFINITY;
	uint32_t k[64], n = make_batch(prior, k, s, 64, 7), cb = 0;
	struct v05_eb_fit fit, g;

	(void)state;
	/* The library's likelihood against products, at a few points of
	 * every shape. */
	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		assert_int_equal(v05_eb_shape_at(c, &g.a2, &g.b2), 0);
		for (uint32_t j = 0; j < V05_EB_N0_GRID; j += 5) {
			for (uint32_t l = 0; l < V05_EB_H_GRID; l += 4) {
				g.n0 = v05_eb_n0_at(j);
				g.h = v05_eb_h_at(l);
				assert_int_equal(v05_eb_loglik(&g, prior, k, s, n, &ll), 0);
				assert_float_equal(ll, brute_loglik(&g, prior, k, s, n),
						   1e-9 * fabs(ll));
			}
		}
	}
	/* The grid's ends. */
	assert_float_equal(v05_eb_n0_at(0), 1.0, 1e-15);
	assert_float_equal(v05_eb_n0_at(V05_EB_N0_GRID - 1), 1000.0, 1e-9);
	assert_float_equal(v05_eb_h_at(0), V05_EB_H_MIN, 1e-15);
	assert_float_equal(v05_eb_h_at(V05_EB_H_GRID - 1), V05_EB_H_MAX, 1e-12);
	/* The fit is the brute-force argmax: the shape whose population
	 * likelihood (h -> 1) is largest, then the whole grid under it. */
	assert_int_equal(v05_eb_fit(prior, k, s, n, &fit), 0);
	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		double pop = 0.0, a, b;

		assert_int_equal(v05_eb_shape_at(c, &a, &b), 0);
		for (uint32_t i = 0; i < n; i++)
			pop += log(seq_prob(a, b, k[i], (uint32_t)s[i]));
		if (pop > pop_best) {
			pop_best = pop;
			cb = c;
		}
	}
	assert_int_equal(v05_eb_shape_at(cb, &g.a2, &g.b2), 0);
	assert_true(fit.a2 == g.a2 && fit.b2 == g.b2);
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
			g.n0 = v05_eb_n0_at(j);
			g.h = v05_eb_h_at(l);
			best = fmax(best, brute_loglik(&g, prior, k, s, n));
		}
	}
	assert_float_equal(brute_loglik(&fit, prior, k, s, n), best,
			   1e-9 * fabs(best));
	/* Priors near the truth: a concentration above the minimum. */
	assert_true(fit.n0 > 1.0);
	/* Rejections. */
	assert_int_equal(v05_eb_fit(prior, k, s, 0, &fit), -ERANGE);
	s[0] = 5.0;
	assert_int_equal(v05_eb_fit(prior, k, s, n, &fit), -EDOM);
}

static void test_eb_posterior_hand(void **state)
{
	struct v05_eb_fit fit = { 2.0, 0.5, 1.0, 1.0 };
	struct v05_eb_fit skew = { 2.0, 0.5, 0.5, 2.0 };
	double mean, var, w2, e2;

	(void)state;
	/* Prior 0: Beta(2, 2) and Beta(1, 1), one success. m1 = m2 = 1/2, so
	 * the weights stay 1/2; posteriors Beta(3, 2) (mean 0.6, E p^2 0.4)
	 * and Beta(2, 1) (mean 2/3, E p^2 0.5). */
	assert_int_equal(v05_eb_posterior(&fit, 0.0, 1, 1.0, &mean, &var, &w2), 0);
	assert_float_equal(w2, 0.5, 1e-15);
	assert_float_equal(mean, 2 * (0.3 + 1.0 / 3) - 1, 1e-14);
	assert_float_equal(var, 4 * (0.45 - pow(0.3 + 1.0 / 3, 2)), 1e-14);
	/* Nothing seen: the mixture's prior mean. */
	assert_int_equal(v05_eb_posterior(&fit, 0.6, 0, 0.0, &mean, NULL, NULL), 0);
	assert_float_equal(mean, 0.5 * (2 * (1.6 + 1) / 4 - 1) + 0.5 * 0.0, 1e-14);
	/* A skewed second component, Beta(0.5, 2): one success has m1 = 1/2,
	 * m2 = 0.5 / 2.5 = 1/5, so w2 = (1/10) / (1/4 + 1/10) = 2/7;
	 * posteriors Beta(3, 2) (mean 3/5, E p^2 2/5) and Beta(1.5, 2)
	 * (mean 3/7, E p^2 1.5 * 2.5 / (3.5 * 4.5) = 5/21). */
	assert_int_equal(v05_eb_posterior(&skew, 0.0, 1, 1.0, &mean, &var, &w2), 0);
	assert_float_equal(w2, 2.0 / 7.0, 1e-15);
	e2 = 5.0 / 7.0 * 0.4 + 2.0 / 7.0 * 5.0 / 21.0;
	assert_float_equal(mean, 2 * (27.0 / 49.0) - 1, 1e-14);
	assert_float_equal(var, 4 * (e2 - pow(27.0 / 49.0, 2)), 1e-14);
	/* A shape outside [0.01, 1000] is refused, naming it. */
	skew.a2 = 0.0;
	assert_int_equal(v05_eb_posterior(&skew, 0.0, 1, 1.0, &mean, &var, &w2), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "Beta(a2 0"));
}

/* Fits the enumerations run under: shapes uniform, U-shaped, skewed. */
static const struct v05_eb_fit fits[] = {
	{ 10.0, 0.1, 1.0, 1.0 }, { 1.0, 0.5, 0.3, 0.3 },
	{ 100.0, 0.02, 0.2, 0.6 }, { 30.0, 0.3, 2.0, 0.5 },
};
#define NFITS (sizeof(fits) / sizeof(fits[0]))

/* Expected posterior variance by enumerating all 2^m continuations. */
static double brute_ev(const struct v05_eb_fit *f, double prior, uint32_t k,
		       uint32_t s, uint32_t m)
{
	double q = (1 + prior) / 2, a = f->n0 * q + 1, b = f->n0 * (1 - q) + 1;
	double z = (1 - f->h) * seq_prob(a, b, k, s) +
		   f->h * seq_prob(f->a2, f->b2, k, s);
	double ev = 0.0;

	for (uint32_t bits = 0; bits < (1u << m); bits++) {
		uint32_t t = (uint32_t)__builtin_popcount(bits);
		/* Sequence probability given the past: joint / marginal
		 * (the order inside the past and the future does not matter). */
		double joint = (1 - f->h) * seq_prob(a, b, k + m, s + t) +
			       f->h * seq_prob(f->a2, f->b2, k + m, s + t);
		double var;

		assert_int_equal(v05_eb_posterior(f, prior, k + m, s + t, NULL,
						  &var, NULL), 0);
		ev += joint / z * var;
	}
	return ev;
}

static void test_eb_expected_var_and_choice(void **state)
{
	double priors[] = { -1.0, -0.3, 0.0, 0.8, 1.0 };
	uint32_t chose_some = 0, chose_zero = 0;

	(void)state;
	for (uint32_t f = 0; f < NFITS; f++) {
		for (uint32_t pi = 0; pi < 5; pi++) {
			for (uint32_t s = 0; s <= 4; s++) {
				struct v05_params p = params(V05_MODE_V05_EB, 0);
				double best = INFINITY, now;
				uint32_t m_best = 0;

				p.k_max = 12; /* m in {0, 2, 4, 6, 8} */
				p.cost = 0.002;
				assert_int_equal(v05_eb_expected_var(&fits[f],
					priors[pi], 4, s, 0, &now), 0);
				for (uint32_t m = 0; m <= 8; m += 2) {
					double ev, bv = brute_ev(&fits[f], priors[pi],
								 4, s, m);

					assert_int_equal(v05_eb_expected_var(&fits[f],
						priors[pi], 4, s, m, &ev), 0);
					assert_float_equal(ev, bv, 1e-12);
					/* Total variance: more data never
					 * raises the expected variance. */
					assert_true(ev <= now + 1e-12);
					if (bv + p.cost * m < best - 1e-15) {
						best = bv + p.cost * m;
						m_best = m;
					}
				}
				assert_int_equal(v05_eb_choose(&p, &fits[f],
					priors[pi], 4, s), (int)m_best);
				chose_some += m_best > 0;
				chose_zero += m_best == 0;
			}
		}
	}
	/* The cases exercise both answers. */
	assert_true(chose_some > 0 && chose_zero > 0);
}

/*
 * The first wave's risk by enumeration: every sequence of k1 rewards,
 * weighed by its prior predictive probability, times the least brute
 * expected variance plus cost over m; plus cost * k1.
 */
static double brute_first_risk(const struct v05_params *p,
			       const struct v05_eb_fit *f, double prior,
			       uint32_t k1)
{
	double q = (1 + prior) / 2, a = f->n0 * q + 1, b = f->n0 * (1 - q) + 1;
	double risk = 0.0;

	for (uint32_t bits = 0; bits < (1u << k1); bits++) {
		uint32_t t = (uint32_t)__builtin_popcount(bits);
		double pr = (1 - f->h) * seq_prob(a, b, k1, t) +
			    f->h * seq_prob(f->a2, f->b2, k1, t);
		double best = INFINITY;

		for (uint32_t m = 0; k1 + m <= p->k_max; m += p->k_step)
			best = fmin(best, brute_ev(f, prior, k1, t, m) +
						  p->cost * m);
		risk += pr * best;
	}
	return risk + p->cost * k1;
}

static void test_eb_first_wave(void **state)
{
	double priors[] = { -1.0, -0.6, 0.0, 0.3, 0.9 };
	uint32_t chose[7] = { 0 };

	(void)state;
	for (uint32_t f = 0; f < NFITS; f++) {
		for (uint32_t pi = 0; pi < 5; pi++) {
			struct v05_params p = params(V05_MODE_V05_EB, 0);
			double r[7], risk;
			uint32_t want = 0;

			p.k_max = 10;
			p.cost = 0.004;
			for (uint32_t k1 = 1; k1 <= 6; k1++) {
				double bf = brute_first_risk(&p, &fits[f], priors[pi], k1);

				assert_int_equal(v05_eb_first_wave(&p, &fits[f], priors[pi],
								   1u << k1, &r[k1]), (int)k1);
				assert_float_equal(r[k1], bf, 1e-12);
			}
			/* Of 2 or 4, the less risky (the smaller on ties). */
			want = r[4] < r[2] ? 4 : 2;
			assert_int_equal(v05_eb_first_wave(&p, &fits[f], priors[pi],
							   (1u << 2) | (1u << 4), &risk),
					 (int)want);
			assert_true(risk == r[want]);
			chose[want]++;
			/* Of all six, the least. */
			want = 1;
			for (uint32_t k1 = 2; k1 <= 6; k1++)
				if (r[k1] < r[want])
					want = k1;
			assert_int_equal(v05_eb_first_wave(&p, &fits[f], priors[pi],
							   0x7e, NULL), (int)want);
		}
	}
	/* The cases exercise both answers. */
	print_message("first waves of 2: %u, of 4: %u\n", chose[2], chose[4]);
	assert_true(chose[2] > 0 && chose[4] > 0);
	{
		struct v05_params p = params(V05_MODE_V05_EB, 0);

		assert_int_equal(v05_eb_first_wave(&p, &fits[0], 0.0, 0, NULL), -EINVAL);
		assert_int_equal(v05_eb_first_wave(&p, &fits[0], 0.0, 1, NULL), -EINVAL);
		assert_int_equal(v05_eb_first_wave(&p, &fits[0], 0.0, 1u << 17, NULL),
				 -EINVAL);
		assert_non_null(strstr(v05_errmsg(), "k_max = 16"));
		assert_int_equal(v05_eb_first_wave(&p, &fits[0], 1.5, 4, NULL), -EDOM);
	}
}

static void test_eb_estimate(void **state)
{
	struct v05_params p = params(V05_MODE_V05_EB, V05_SIGMA_RMS);
	struct v05_eb_fit fit = { 10.0, 0.1, 1.0, 1.0 };
	double r[4] = { 1, 1, -1, 1 }, adv[4], mean, var, w2, ms = 0;
	struct v05_estimate e;
	int m;

	(void)state;
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.2, r, 4, &e, adv), 0);
	assert_int_equal(v05_eb_posterior(&fit, 0.2, 4, 3.0, &mean, &var, &w2), 0);
	assert_true(e.baseline == mean);
	assert_true(e.weight == 1.0 - w2 && e.delta2 == 0.0);
	assert_float_equal(e.mean, 0.5, 1e-15);
	for (int i = 0; i < 4; i++)
		ms += adv[i] * adv[i];
	assert_true(ms / 4 <= 1.0 + 1e-12);
	/* The action at k_init is the two-stage choice. */
	m = v05_eb_choose(&p, &fit, 0.2, 4, 3.0);
	assert_true(m >= 0);
	assert_int_equal(e.action, m ? V05_ACTION_MORE : V05_ACTION_STOP);
	if (m)
		assert_true(e.k_target == 4.0 + m);
	/* After k_init: always stop. */
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.2, r, 3, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	/* v05_estimate refuses the mode (it needs a fit). */
	assert_int_equal(v05_estimate(&p, 0.2, r, 4, &e, adv), -EINVAL);
	/* Bad fits and inputs. */
	fit.h = 0.0;
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.2, r, 4, &e, adv), -EDOM);
	fit.h = 0.1;
	r[0] = 1.5;
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.2, r, 4, &e, adv), -EDOM);
}

/* Continuous rewards count as fractional successes (1 + r) / 2. */
static void test_eb_fractional(void **state)
{
	struct v05_params p = params(V05_MODE_V05_EB, V05_SIGMA_RMS);
	struct v05_eb_fit fit = { 10.0, 0.1, 0.3, 1.2 };
	double half[2] = { 0.0, 0.0 }, split[2] = { 1.0, -1.0 }, adv[2];
	double q[3] = { 0.5, 0.5, -0.25 }, mean, ll, prior = 0.3;
	struct v05_estimate a, b;
	uint32_t k = 3;
	double s = 1.875; /* 0.75 + 0.75 + 0.375 */

	(void)state;
	p.k_init = 2;
	/* Two rewards of 0 carry the successes of one +1 and one -1. */
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.4, half, 2, &a, adv), 0);
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.4, split, 2, &b, NULL), 0);
	assert_true(a.baseline == b.baseline);
	assert_int_equal(v05_eb_estimate(&p, &fit, prior, q, 3, &a, NULL), 0);
	assert_int_equal(v05_eb_posterior(&fit, prior, 3, s, &mean, NULL, NULL), 0);
	assert_float_equal(a.baseline, mean, 1e-15);
	/* Between its binary neighbours s = 1 and s = 2. */
	{
		double m1, m2;

		assert_int_equal(v05_eb_posterior(&fit, prior, 3, 1.0, &m1, NULL, NULL), 0);
		assert_int_equal(v05_eb_posterior(&fit, prior, 3, 2.0, &m2, NULL, NULL), 0);
		assert_true(m1 < mean && mean < m2);
	}
	/* Fractional successes are a valid likelihood input. */
	assert_int_equal(v05_eb_loglik(&fit, &prior, &k, &s, 1, &ll), 0);
	assert_true(isfinite(ll) && ll < 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rms_prior_pm1),
		cmocka_unit_test(test_rms_all_equal),
		cmocka_unit_test(test_rms_k1),
		cmocka_unit_test(test_rms_bound),
		cmocka_unit_test(test_sigma_names),
		cmocka_unit_test(test_eb_loglik_and_fit),
		cmocka_unit_test(test_eb_posterior_hand),
		cmocka_unit_test(test_eb_expected_var_and_choice),
		cmocka_unit_test(test_eb_first_wave),
		cmocka_unit_test(test_eb_estimate),
		cmocka_unit_test(test_eb_fractional),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
