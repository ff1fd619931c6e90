/* SPDX-License-Identifier: MIT */
/*
 * Mode v05-pg's row (plugin/rules/rule_pg.c, docs/STATISTICS.md "Mode
 * v05-pg"), its functions called as the plugin calls them, on a state of
 * its own: the prior predictive it looks ahead with against the
 * beta-binomial mixture computed here by lgamma; the first wave it picks
 * against its expected cost enumerated here over every reward sequence;
 * the skip; the second wave; its running sums.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/config.h"
#include "v05-internal/plugin.h"
#include "v05-internal/rules.h"
#include "v05.h"

struct pg_fx {
	struct v05_params params;
	struct v05_config config;
	struct v05_fit_store state;
	struct v05__rule_env env;
	const struct v05__rule *r;
};

static void pg_init(struct pg_fx *f)
{
	memset(f, 0, sizeof(*f));
	v05_config_default(&f->config);
	assert_int_equal(v05_config_mode(&f->config, V05_MODE_PG), 0);
	f->params = f->config.params;
	f->env.params = &f->params;
	f->env.config = &f->config;
	f->env.state = &f->state;
	f->r = v05__rule_of(V05_MODE_PG);
	assert_non_null(f->r);
	assert_string_equal(f->r->name, "v05-pg");
}

/* Fold `n` prompts of this prior under fit into the sums: a warm rule
 * whose prompts look like these. */
static void pg_warm(struct pg_fx *f, const struct v05_eb_fit *fit,
		    double prior, uint32_t n)
{
	for (uint32_t g = 0; g < n; g++)
		f->r->fold_prompt(&f->env, fit, prior, true);
}

/* log of the beta-binomial probability of t successes in n under
 * Beta(a, b), by lgamma: the independent path. */
static double lbb(double a, double b, uint32_t n, uint32_t t)
{
	return lgamma(n + 1.0) - lgamma(t + 1.0) - lgamma(n - t + 1.0) +
	       lgamma(a + t) + lgamma(b + n - t) - lgamma(a + b + n) -
	       (lgamma(a) + lgamma(b) - lgamma(a + b));
}

static void test_predictive(void **state)
{
	/* The uniform second component, a U shape, a skewed one. */
	static const struct v05_eb_fit fits[] = {
		{ 1.0, 0.9, 1.0, 1.0 }, { 10.0, 0.1, 0.3, 0.3 },
		{ 1000.0, 0.005, 0.2, 0.6 }, { 30.0, 0.5, 0.15, 1.35 }
	};

	(void)state;
	for (size_t i = 0; i < sizeof(fits) / sizeof(fits[0]); i++) {
		for (int v = -4; v <= 4; v++) {
			double prior = v / 4.0, q = (1.0 + prior) / 2.0;
			double a = fits[i].n0 * q + 1.0, b = fits[i].n0 * (1.0 - q) + 1.0;

			for (uint32_t n = 1; n <= 8; n++) {
				double sum = 0.0;

				for (uint32_t t = 0; t <= n; t++) {
					double want = (1.0 - fits[i].h) *
							      exp(lbb(a, b, n, t)) +
						      fits[i].h * exp(lbb(fits[i].a2,
									  fits[i].b2,
									  n, t));
					double got = v05__eb_pred_u(&fits[i], prior, n, t);

					assert_true(fabs(got - want) <= 1e-9 * want + 1e-15);
					sum += got;
				}
				assert_true(fabs(sum - 1.0) < 1e-12);
			}
		}
	}
}

/* The posterior of p after s successes in k under the fit, by the
 * mixture's components directly: (4 E[p (1 - p)], 4 Var(p)). */
static void post_here(const struct v05_eb_fit *fit, double prior, uint32_t k,
		      uint32_t s, double *tau, double *e2)
{
	double q = (1.0 + prior) / 2.0;
	double a[2] = { fit->n0 * q + 1.0, fit->a2 };
	double b[2] = { fit->n0 * (1.0 - q) + 1.0, fit->b2 };
	double w[2] = { 1.0 - fit->h, fit->h }, m1 = 0.0, m2 = 0.0, z = 0.0;

	for (int c = 0; c < 2; c++) {
		double l = log(w[c]) + lbb(a[c], b[c], k, s), A = a[c] + s,
		       B = b[c] + k - s;

		w[c] = exp(l);
		z += w[c];
		m1 += w[c] * A / (A + B);
		m2 += w[c] * A * (A + 1.0) / ((A + B) * (A + B + 1.0));
	}
	m1 /= z;
	m2 /= z;
	*tau = 4.0 * (m1 - m2);
	if (*tau < 1e-3)
		*tau = 1e-3;
	*e2 = 4.0 * (m2 - m1 * m1);
}

/* The mixture's probability of t successes in n (binomial coefficient
 * included), by lgamma. */
static double joint(const struct v05_eb_fit *fit, double prior, uint32_t n,
		    uint32_t t)
{
	double q = (1.0 + prior) / 2.0;
	double a = fit->n0 * q + 1.0, b = fit->n0 * (1.0 - q) + 1.0;

	return (1.0 - fit->h) * exp(lbb(a, b, n, t)) +
	       fit->h * exp(lbb(fit->a2, fit->b2, n, t));
}

static double lchoose(uint32_t n, uint32_t k)
{
	return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0);
}

/* The expected cost of a first wave of n, the way the rule is documented
 * to weigh it, computed here by enumerating both waves' outcomes with the
 * independent posterior above. */
static double cost_here(const struct pg_fx *f, const struct v05_eb_fit *fit,
			double prior, uint32_t n, double lambda)
{
	double c = lambda * n;

	for (uint32_t t = 0; t <= n; t++) {
		double pt = joint(fit, prior, n, t), tau, e2, best;

		post_here(fit, prior, n, t, &tau, &e2);
		best = (1.0 + e2 / tau) / n;
		for (uint32_t m = f->params.k_step; n + m <= f->params.k_max;
		     m += f->params.k_step) {
			double ev = 0.0, cm;

			/* E over the second wave's u successes, given t, of
			 * the posterior variance after n + m. */
			for (uint32_t u = 0; u <= m; u++) {
				double tt, e2u, pu;

				post_here(fit, prior, n + m, t + u, &tt, &e2u);
				pu = joint(fit, prior, n + m, t + u) / pt *
				     exp(lchoose(n, t) + lchoose(m, u) -
					 lchoose(n + m, t + u));
				ev += pu * e2u;
			}
			cm = (1.0 + ev / tau) / (n + m) + lambda * m;
			if (cm < best)
				best = cm;
		}
		c += pt * best;
	}
	return c;
}

/* The rule's price as documented: the grid's (0.02 to 5, V05_PG_GRID
 * log-spaced) least E[n] E[a + b / n]; a + 1 before 32 prompts. */
static double lambda_here(const struct pg_fx *f)
{
	double best = INFINITY, lambda = f->config.pg_between + 1.0;

	if (f->state.pg.weight < 32.0)
		return lambda;
	for (uint32_t j = 0; j < V05_PG_GRID; j++) {
		double v = f->state.pg.rollouts[j] * f->state.pg.error[j];

		if (v < best) {
			best = v;
			lambda = 0.02 * pow(5.0 / 0.02, j / (V05_PG_GRID - 1.0));
		}
	}
	return lambda;
}

/* The first wave is the allowed n of least expected cost. */
static void test_first_wave_least_cost(void **state)
{
	static const struct v05_eb_fit fits[] = {
		{ 1.0, 0.9, 1.0, 1.0 }, { 3.0, 0.3, 0.3, 0.3 },
		{ 10.0, 0.1, 1.0, 1.0 }, { 100.0, 0.02, 0.2, 0.6 },
		{ 1000.0, 0.005, 1.0, 1.0 }
	};
	struct pg_fx f;
	int sizes_seen = 0;

	(void)state;
	pg_init(&f);
	f.config.pg_skip = 0;
	pg_warm(&f, &fits[2], 0.0, 40);
	for (size_t i = 0; i < sizeof(fits) / sizeof(fits[0]); i++) {
		for (int v = -3; v <= 3; v++) {
			double prior = v / 4.0, lambda = lambda_here(&f);
			double best = INFINITY;
			uint32_t early = 99, want = 0;
			uint32_t got = f.r->first_wave(&f.env, &fits[i], prior,
						       &early);

			for (uint32_t n = 1; n <= 4; n++) {
				double c;

				if (!(f.config.pg_first & (1u << n)))
					continue;
				c = cost_here(&f, &fits[i], prior, n, lambda);
				if (c < best - 1e-12) {
					best = c;
					want = n;
				}
			}
			assert_int_equal(early, 0);
			assert_int_equal(got, want);
			sizes_seen |= 1 << got;
		}
	}
	/* A sure prior wants one sample, a vague one more: both happen. */
	assert_true(sizes_seen & (1 << 1));
	assert_true(sizes_seen & ~(1 << 1));
	/* Cold (no fit): k_init. */
	{
		uint32_t early;

		assert_int_equal(f.r->first_wave(&f.env, NULL, 0.5, &early),
				 f.params.k_init);
	}
	/* Only the sizes pg_first allows. */
	f.config.pg_first = 1u << 4;
	for (size_t i = 0; i < sizeof(fits) / sizeof(fits[0]); i++) {
		uint32_t early;

		assert_int_equal(f.r->first_wave(&f.env, &fits[i], 0.25, &early),
				 4);
	}
}

/* A prompt the fit is sure of never succeeding (or always) is skipped
 * once the rule is warm; not before; not with pg_skip 0; never one of
 * the usual kind. */
static void test_skip(void **state)
{
	const struct v05_eb_fit sure = { 1000.0, 0.005, 1.0, 1.0 };
	struct pg_fx f;
	uint32_t early;

	(void)state;
	pg_init(&f);
	assert_int_equal(f.config.pg_skip, V05_PG_SKIP);
	pg_warm(&f, &sure, 0.0, 16);
	/* Below the warm weight: taken. */
	assert_true(f.r->first_wave(&f.env, &sure, -0.999, &early) > 0);
	pg_warm(&f, &sure, 0.0, 32);
	assert_int_equal(f.r->first_wave(&f.env, &sure, -0.999, &early), 0);
	assert_int_equal(f.r->first_wave(&f.env, &sure, 0.999, &early), 0);
	assert_true(f.r->first_wave(&f.env, &sure, 0.0, &early) > 0);
	assert_true(f.r->first_wave(&f.env, &sure, -0.5, &early) > 0);
	f.config.pg_skip = 0;
	assert_true(f.r->first_wave(&f.env, &sure, -0.999, &early) > 0);
	/* A vague fit is not sure of anything: taken. */
	f.config.pg_skip = V05_PG_SKIP;
	{
		const struct v05_eb_fit vague = { 1.0, 0.9, 1.0, 1.0 };

		assert_true(f.r->first_wave(&f.env, &vague, -0.999, &early) > 0);
	}
}

/* The skip's bar is pg_skip per mille of the mean signal over every
 * prompt submitted, skipped ones included, so a high pg_skip settles:
 * prompts submitted as submit does (first wave, then the fold, taken or
 * not), a spread of priors in cycles; after many cycles each prior is
 * skipped exactly when its signal is below the bar over the whole
 * spread. (Over the prompts taken alone each skip raised the bar: this
 * spread lost two priors more, and on bench/train's sparse task nearly
 * every prompt.) */
static void test_skip_bar_is_over_every_prompt(void **state)
{
	const struct v05_eb_fit fit = { 1000.0, 0.005, 1.0, 1.0 };
	enum { NP = 21, CYCLES = 60 };
	double prior[NP], s0[NP], mean = 0.0, tau, e2;
	uint32_t early, skipped = 0;
	struct pg_fx f;

	(void)state;
	pg_init(&f);
	f.config.eb_window = 0;
	f.config.pg_skip = 750;
	for (int i = 0; i < NP; i++) {
		prior[i] = -0.999 + 1.998 * i / (NP - 1);
		post_here(&fit, prior[i], 0, 0, &tau, &e2);
		s0[i] = sqrt(tau);
		mean += s0[i] / NP;
	}
	for (int c = 0; c < CYCLES; c++)
		for (int i = 0; i < NP; i++) {
			uint32_t k0 = f.r->first_wave(&f.env, &fit, prior[i],
						      &early);

			f.r->fold_prompt(&f.env, &fit, prior[i], k0 > 0);
		}
	assert_true(fabs(f.state.pg.signal / f.state.pg.weight - mean) <
		    1e-9);
	for (int i = 0; i < NP; i++) {
		uint32_t k0 = f.r->first_wave(&f.env, &fit, prior[i], &early);

		/* No prior of the spread sits on the bar. */
		assert_true(fabs(s0[i] - 0.75 * mean) > 1e-6);
		assert_int_equal(k0 == 0, s0[i] < 0.75 * mean);
		skipped += k0 == 0;
	}
	/* Some skipped, most of the spread not. */
	assert_true(skipped > 0 && skipped < NP / 2);
}

/* Sums that make the grid's price j the rule's. */
static void set_price(struct pg_fx *f, uint32_t j)
{
	f->state.pg.weight = 100.0;
	for (uint32_t i = 0; i < V05_PG_GRID; i++) {
		f->state.pg.rollouts[i] = i == j ? 1.0 : 10.0;
		f->state.pg.error[i] = i == j ? 1.0 : 10.0;
	}
}

/* The second wave: the cheaper a rollout, the more samples; at the
 * cheapest price that gives a first wave agreeing with a sure prior none,
 * a first wave that clashes with it still gets more (the baseline is
 * uncertain next to the prompt's variance); a plan is a multiple of
 * k_step within k_max; at the dearest price, none. */
static void test_more(void **state)
{
	const struct v05_eb_fit fit = { 30.0, 0.05, 1.0, 1.0 };
	double agree[2] = { 1.0, 1.0 }, clash[2] = { -1.0, -1.0 };
	struct pg_fx f;
	float gap = -1.0f;
	uint32_t last = 99, j;

	(void)state;
	pg_init(&f);
	for (j = 0; j < V05_PG_GRID; j++) {
		uint32_t m;

		set_price(&f, j);
		m = f.r->more(&f.env, &fit, 0.9, agree, 2, &gap);
		assert_int_equal(m % f.params.k_step, 0);
		assert_true(2 + m <= f.params.k_max);
		assert_true(m <= last);
		last = m;
		if (m == 0)
			break;
	}
	assert_true(j > 0 && j < V05_PG_GRID);
	{
		uint32_t m = f.r->more(&f.env, &fit, 0.9, clash, 2, &gap);

		assert_true(m > 0);
		assert_true(gap >= (float)m);
	}
	set_price(&f, V05_PG_GRID - 1);
	assert_true(fabs(lambda_here(&f) - 5.0) < 1e-12);
	assert_int_equal(f.r->more(&f.env, &fit, 0.9, clash, 2, &gap), 0);
}

/* The running sums: each prompt taken adds its expected signal and, per
 * price, its plan's expected samples and error, forgetting as the fit
 * does; a dearer rollout buys fewer samples and more error. The estimate
 * is v05-eb's and never asks for more. */
static void test_sums_and_estimate(void **state)
{
	const struct v05_eb_fit fit = { 3.0, 0.3, 0.3, 0.3 };
	double r[4] = { 1.0, -1.0, -1.0, -1.0 }, adv[4], tau, e2;
	struct v05_estimate e, want;
	struct pg_fx f;

	(void)state;
	pg_init(&f);
	f.config.eb_window = 0;
	f.r->fold_prompt(&f.env, &fit, 0.5, true);
	post_here(&fit, 0.5, 0, 0, &tau, &e2);
	assert_true(fabs(f.state.pg.weight - 1.0) < 1e-15);
	assert_true(fabs(f.state.pg.signal - sqrt(tau)) < 1e-12);
	for (uint32_t j = 1; j < V05_PG_GRID; j++) {
		assert_true(f.state.pg.rollouts[j] <= f.state.pg.rollouts[j - 1]);
		assert_true(f.state.pg.error[j] >= f.state.pg.error[j - 1]);
	}
	/* At the dearest price one sample, at the cheapest more. */
	assert_true(fabs(f.state.pg.rollouts[V05_PG_GRID - 1] - 1.0) < 1e-12);
	assert_true(f.state.pg.rollouts[0] > 2.0);
	assert_true(f.state.pg.error[0] > f.config.pg_between);
	f.config.eb_window = 8;
	f.r->fold_prompt(&f.env, &fit, 0.5, true);
	assert_true(fabs(f.state.pg.weight - (1.0 - 1.0 / 8.0 + 1.0)) < 1e-12);
	assert_int_equal(f.state.pg.prompts, 2);
	/* A skipped prompt: its signal in, the price's sums untouched. */
	{
		struct v05_pg_stats before = f.state.pg;

		f.config.eb_window = 0;
		f.r->fold_prompt(&f.env, &fit, -0.9, false);
		post_here(&fit, -0.9, 0, 0, &tau, &e2);
		assert_true(fabs(f.state.pg.weight - (before.weight + 1.0)) <
			    1e-12);
		assert_true(fabs(f.state.pg.signal -
				 (before.signal + sqrt(tau))) < 1e-12);
		assert_memory_equal(f.state.pg.rollouts, before.rollouts,
				    sizeof(before.rollouts));
		assert_memory_equal(f.state.pg.error, before.error,
				    sizeof(before.error));
		assert_int_equal(f.state.pg.prompts, before.prompts);
	}

	f.r->estimate(&f.env, &fit, 0.5, r, 4, &e, adv);
	assert_int_equal(v05_eb_estimate(&f.params, &fit, 0.5, r, 4, &want,
					 adv), 0);
	assert_true(e.baseline == want.baseline);
	assert_int_equal(e.action, V05_ACTION_STOP);
	assert_false(e.has_target);
}

/* The configuration's checks name the field. */
static void test_config_checks(void **state)
{
	struct v05_config c;

	(void)state;
	tc_config(&c);
	assert_int_equal(c.params.sigma, V05_SIGMA_RMS);
	assert_int_equal(v05_config_mode(&c, V05_MODE_PG), 0);
	/* Its preset's normaliser: the paper's (a rare success at one
	 * sample keeps its size); rms stays a valid choice. Its skip bar
	 * is the one measured best, 0.75 (docs/STATISTICS.md). */
	assert_int_equal(c.params.sigma, V05_SIGMA_PAPER);
	assert_int_equal(c.pg_skip, 750);
	assert_int_equal(v05_config_check(&c), 0);
	c.params.sigma = V05_SIGMA_RMS;
	assert_int_equal(v05_config_check(&c), 0);
	/* Another mode's preset puts the default back. */
	assert_int_equal(v05_config_mode(&c, V05_MODE_PG), 0);
	assert_int_equal(v05_config_mode(&c, V05_MODE_EBPO), 0);
	assert_int_equal(c.params.sigma, V05_SIGMA_RMS);
	assert_int_equal(v05_config_mode(&c, V05_MODE_PG), 0);
	c.pg_between = -1.0;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "pg_between"));
	c.pg_between = NAN;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	c.pg_between = V05_PG_BETWEEN;
	c.pg_first = 1u;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "pg_first"));
	c.pg_first = 1u << 20; /* above the largest first wave */
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "pg_first"));
	c.pg_first = 1u << 8;
	c.params.k_max = 4;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "k_max"));
	c.params.k_max = 16;
	c.pg_first = V05_PG_FIRST;
	c.pg_skip = 1001;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "pg_skip"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_predictive),
		cmocka_unit_test(test_first_wave_least_cost),
		cmocka_unit_test(test_skip),
		cmocka_unit_test(test_skip_bar_is_over_every_prompt),
		cmocka_unit_test(test_more),
		cmocka_unit_test(test_sums_and_estimate),
		cmocka_unit_test(test_config_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
