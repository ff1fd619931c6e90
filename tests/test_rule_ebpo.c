/* SPDX-License-Identifier: MIT */
/*
 * EBPO's baseline (mode "ebpo", docs/RULES.md) on worked examples: the
 * Welford statistics after three groups by hand, the shrinkage and the
 * non-vanishing advantage of an all-failure group, the cold start, the
 * forgetting; what bad input gets; and the mode through a plugin: each
 * final group's baseline and advantages are the pure functions' over the
 * groups folded before it and itself, in the order they finished.
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

#include "util/plugin_fx.h"
#include "v05.h"

static void near(double got, double want)
{
	if (fabs(got - want) > 1e-12 * (1.0 + fabs(want)))
		fail_msg("got %.17g, want %.17g", got, want);
}

/* g1 = (+1, +1, -1, -1): mean 0, Bessel variance 4/3; g2 = (+1, +1, +1,
 * -1): mean 1/2, variance 1; g3 = four failures: mean -1, variance 0. */
static const double G[3][4] = { { 1, 1, -1, -1 }, { 1, 1, 1, -1 },
				{ -1, -1, -1, -1 } };

/* After the three: the mean of the means -1/6; squared deviations 1/36
 * + 16/36 + 25/36 = 7/6; within 7/9; noise 7/36. var_m = (7/6) / 2 =
 * 7/12, tau^2 = 7/12 - 7/36 = 7/18, S = (7/36) / (7/36 + 14/36) = 1/3.
 * The all-failure group's baseline: (1/3)(-1/6) + (2/3)(-1) = -13/18,
 * not -1: each of its samples gets (-1 + 13/18) / (sqrt(7) / 3), about
 * -0.315, where GRPO gives 0. */
static void test_ebpo_worked_example(void **state)
{
	struct v05_ebpo s;
	struct v05_estimate e;
	double S, adv[4];

	(void)state;
	v05_ebpo_init(&s);
	for (int g = 0; g < 3; g++)
		assert_int_equal(v05_ebpo_fold(&s, 1.0, G[g], 4), 0);
	assert_int_equal(s.groups, 3);
	near(s.weight, 3.0);
	near(s.mean, -1.0 / 6.0);
	near(s.m2, 7.0 / 6.0);
	near(s.within, 7.0 / 9.0);
	near(s.noise, 7.0 / 36.0);
	assert_int_equal(v05_ebpo_shrinkage(&s, 4, &S), 0);
	near(S, 1.0 / 3.0);
	assert_int_equal(v05_ebpo_estimate(&s, G[2], 4, &e, adv), 0);
	near(e.mean, -1.0);
	near(e.baseline, -13.0 / 18.0);
	near(e.weight, 2.0 / 3.0);
	near(e.sigma, sqrt(7.0) / 3.0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	for (int i = 0; i < 4; i++)
		near(adv[i], (-5.0 / 18.0) / (sqrt(7.0) / 3.0 + V05_GRPO_EPSILON));
	assert_true(adv[0] < -0.31 && adv[0] > -0.32);
	/* A mixed group: A = (r - b) / s_w with b = (1/3)(-1/6) + (2/3)(1/2). */
	assert_int_equal(v05_ebpo_estimate(&s, G[1], 4, &e, adv), 0);
	near(e.baseline, -1.0 / 18.0 + 1.0 / 3.0);
	near(adv[3], (-1.0 - e.baseline) / (sqrt(7.0) / 3.0 + V05_GRPO_EPSILON));
	/* S shrinks with k: a larger group's own mean is worth more. */
	assert_int_equal(v05_ebpo_shrinkage(&s, 16, &S), 0);
	near(S, (7.0 / 144.0) / (7.0 / 144.0 + 7.0 / 18.0));
}

/* Before two groups' worth of weight: no shrinkage, the group's own mean,
 * scale 1 until a within-group variance was seen. */
static void test_ebpo_cold_start(void **state)
{
	struct v05_ebpo s;
	struct v05_estimate e;
	double S = -1.0, adv[4];

	(void)state;
	v05_ebpo_init(&s);
	assert_int_equal(v05_ebpo_estimate(&s, G[1], 4, &e, adv), 0);
	near(e.baseline, 0.5);
	near(e.sigma, 1.0);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, G[2], 4), 0);
	assert_int_equal(v05_ebpo_shrinkage(&s, 4, &S), 0);
	near(S, 0.0);
	assert_int_equal(v05_ebpo_estimate(&s, G[2], 4, &e, adv), 0);
	near(e.baseline, -1.0);
	near(e.sigma, 1.0); /* only an all-same group so far */
	near(adv[0], 0.0);
	/* Two all-same groups, equal: nothing varies, no shrinkage. */
	assert_int_equal(v05_ebpo_fold(&s, 1.0, G[2], 4), 0);
	assert_int_equal(v05_ebpo_shrinkage(&s, 4, &S), 0);
	near(S, 0.0);
	/* Two groups whose means differ and no within-group spread: the
	 * spread is all between groups, tau^2 > 0, S = 0. */
	v05_ebpo_init(&s);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, G[2], 4), 0);
	{
		const double up[4] = { 1, 1, 1, 1 };

		assert_int_equal(v05_ebpo_fold(&s, 1.0, up, 4), 0);
	}
	assert_int_equal(v05_ebpo_shrinkage(&s, 4, &S), 0);
	near(S, 0.0);
}

/* keep 0 forgets everything before the latest group; keep 1/2 halves the
 * old weight: g1 then g2 gives weight 1.5, mean 0 + (1/2) / 1.5 = 1/3,
 * m2 = (1/2)(1/2 - 1/3) = 1/12, within 4/3 + (1 - 4/3) / 1.5 = 10/9. */
static void test_ebpo_forgetting(void **state)
{
	struct v05_ebpo s;

	(void)state;
	v05_ebpo_init(&s);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, G[0], 4), 0);
	assert_int_equal(v05_ebpo_fold(&s, 0.0, G[1], 4), 0);
	near(s.weight, 1.0);
	near(s.mean, 0.5);
	near(s.m2, 0.0);
	near(s.within, 1.0);
	assert_int_equal(s.groups, 2);
	v05_ebpo_init(&s);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, G[0], 4), 0);
	assert_int_equal(v05_ebpo_fold(&s, 0.5, G[1], 4), 0);
	near(s.weight, 1.5);
	near(s.mean, 1.0 / 3.0);
	near(s.m2, 1.0 / 12.0);
	near(s.within, 10.0 / 9.0);
}

static void test_ebpo_refusals(void **state)
{
	struct v05_ebpo s, bad;
	struct v05_estimate e;
	double r[2] = { 1.0, NAN }, ok[2] = { 1.0, -1.0 }, S;
	struct v05_params p;

	(void)state;
	v05_ebpo_init(&s);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, r, 2), -EDOM);
	assert_int_equal(s.groups, 0); /* nothing folded */
	assert_int_equal(v05_ebpo_fold(&s, 1.0, ok, 1), -EINVAL);
	assert_int_equal(v05_ebpo_fold(&s, 1.0, ok, 65), -EINVAL);
	assert_int_equal(v05_ebpo_fold(&s, 1.5, ok, 2), -EINVAL);
	assert_int_equal(v05_ebpo_fold(&s, NAN, ok, 2), -EINVAL);
	assert_int_equal(v05_ebpo_fold(NULL, 1.0, ok, 2), -EINVAL);
	assert_int_equal(v05_ebpo_estimate(&s, ok, 2, NULL, NULL), -EINVAL);
	assert_int_equal(v05_ebpo_shrinkage(&s, 1, &S), -EINVAL);
	bad = s;
	bad.m2 = -1.0; /* not a state this library wrote */
	assert_int_equal(v05_ebpo_estimate(&bad, ok, 2, &e, NULL), -EINVAL);
	bad = s;
	bad.mean = 2.0;
	assert_int_equal(v05_ebpo_fold(&bad, 1.0, ok, 2), -EINVAL);
	/* v05_estimate has no global statistics to give: refused. */
	v05_params_default(&p);
	p.mode = V05_MODE_EBPO;
	assert_int_equal(v05_estimate(&p, 0.0, ok, 2, &e, NULL), -EINVAL);
	/* A group of one has no within-group variance. */
	p.k_init = 1;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	assert_string_equal(v05_mode_name(V05_MODE_EBPO), "ebpo");
	assert_int_equal(v05_mode_from_name("ebpo"), V05_MODE_EBPO);
}

/* ---- through a plugin ------------------------------------------------- */

/* Six prompts of 8; their groups finish in the order the rewards are
 * pushed (5, 3, 1, 0, 2, and the all-failure 4 last). Each final group's baseline and advantages are
 * the pure functions' over the groups folded so far and itself; the
 * dispatch is one wave of k_init, nothing padded. With ebpo_window 4 the
 * same holds with keep 3/4. */
static void ebpo_in_plugin(uint32_t window)
{
	static const double priors[6] = { 0.9, -0.9, 0.0, 0.5, -0.5, 0.2 };
	struct fx f;
	struct v05_ebpo s;
	uint64_t keys[6];
	float r[6][64];
	int got;

	for (uint32_t i = 0; i < 6; i++)
		for (uint32_t t = 0; t < 64; t++)
			r[i][t] = (t * 7 + i * 3) % (i + 2) == 0 ? 1.0f : -1.0f;
	for (uint32_t t = 0; t < 64; t++)
		r[4][t] = -1.0f; /* an all-failure group */
	memset(&f, 0, sizeof(f));
	fx_config(&f);
	assert_int_equal(v05_config_mode(&f.c, V05_MODE_EBPO), 0);
	assert_int_equal(f.c.params.k_init, 8);
	assert_int_equal(f.c.params.k_max, 8);
	f.c.schedule = V05_SCHEDULE_STREAM;
	f.c.ebpo_window = window;
	fx_open(&f);
	got = submit(&f, priors, 6, keys);
	assert_int_equal(got, 6);
	for (int i = 0; i < got; i++)
		assert_int_equal(f.d[i].k, 8);
	v05_ebpo_init(&s);
	static const int order[6] = { 5, 3, 1, 0, 2, 4 };

	for (int j = 0; j < 6; j++) {
		int n = order[j], m;
		struct v05_estimate e;
		struct v05_group g;
		double rr[8], adv[8];

		push_samples(&f, keys[n], 0xffull, r[n]);
		assert_int_equal(v05_wait(f.p, 5000), 1);
		m = v05_poll(f.p, f.d, MAXD);
		assert_int_equal(m, 1);
		assert_int_equal(f.d[0].kind, V05_DECISION_FINAL);
		assert_int_equal(f.d[0].key, keys[n]);
		for (int t = 0; t < 8; t++)
			rr[t] = r[n][t];
		assert_int_equal(v05_ebpo_fold(&s, window ? 1.0 - 1.0 / window :
							    1.0, rr, 8), 0);
		assert_int_equal(v05_ebpo_estimate(&s, rr, 8, &e, adv), 0);
		assert_int_equal(v05_group(f.p, f.d[0].slot, &g), 0);
		assert_int_equal(g.k, 8);
		assert_true(g.baseline == e.baseline);
		for (int t = 0; t < 8; t++)
			assert_true(g.advantages[t] == (float)adv[t]);
		if (n == 4) { /* all failures: a penalty, not GRPO's 0 */
			double S;

			assert_int_equal(v05_ebpo_shrinkage(&s, 8, &S), 0);
			assert_true(S > 0.0);
			assert_true(g.advantages[0] < 0.0f);
		}
	}
	assert_true(s.groups == 6);
	assert_int_equal(ctr(&f, V05_C_SAMPLES_PADDED), 0);
	fx_close(&f);
}

static void test_ebpo_plugin(void **state)
{
	(void)state;
	ebpo_in_plugin(0);
}

static void test_ebpo_plugin_window(void **state)
{
	(void)state;
	ebpo_in_plugin(4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ebpo_worked_example),
		cmocka_unit_test(test_ebpo_cold_start),
		cmocka_unit_test(test_ebpo_forgetting),
		cmocka_unit_test(test_ebpo_refusals),
		cmocka_unit_test(test_ebpo_plugin),
		cmocka_unit_test(test_ebpo_plugin_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
