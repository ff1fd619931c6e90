/* SPDX-License-Identifier: MIT */
/*
 * Numeric edges (issue 37): Knapsack RL's allocation is defined and
 * continuous for every p in [0, 1] (one ulp from 0 or 1, subnormal), by
 * itself and through a plugin's submit; a threshold on a reward answers
 * the same whichever path the reward took (float32 through the plugin,
 * a double to v05_estimate, a float32 a trainer folds); and every public
 * call that takes a reward, a count of successes or a fit state refuses
 * NaN and infinities with -EDOM instead of answering with them.
 */
#include <errno.h>
#include <float.h>
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

/* ---- Knapsack RL at the edges of [0, 1] ---------------------------------- */

/* The p's at the edges, each with a nearby p whose allocation it must
 * share (the objective is continuous in p: 1e-9 away changes nothing). */
static const struct {
	double p, near;
} edge_p[] = {
	{ 0x1p-54, 1e-9 },          /* the prior -1 + 2^-53, one ulp from -1 */
	{ 0x1p-1074, 1e-9 },        /* the smallest subnormal               */
	{ DBL_MIN, 1e-9 },          /* the smallest normal                  */
	{ 1e-17, 1e-9 },            /* 1 - p rounds to 1                    */
	{ 1.0 - 0x1p-53, 1 - 1e-9 },/* one ulp below 1                      */
	{ 0.5 - 0x1p-54, 0.5 },     /* one ulp below 0.5: the other branch  */
};

static void check_plan(const double *p, uint32_t n, uint32_t per,
		       uint32_t up, const uint32_t *out)
{
	uint32_t sum = 0, at_up = 0;

	for (uint32_t i = 0; i < n; i++) {
		assert_true(out[i] >= V05_KNAPSACK_N_LOW && out[i] <= up);
		sum += out[i];
		at_up += out[i] == up;
		(void)p;
	}
	assert_true(sum == n * per || at_up == n);
}

/* {edge, 0.5, 0}: the fallback (a never-solved prompt) runs, and it used
 * to cast the edge prompt's -inf sample estimate to an integer: the p = 0.5
 * prompt went from 20 samples to 2. */
static void test_knapsack_edge_p(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(edge_p) / sizeof(edge_p[0]); c++) {
		double a[3] = { edge_p[c].p, 0.5, 0.0 };
		double b[3] = { edge_p[c].near, 0.5, 0.0 };
		uint32_t oa[3], ob[3];

		assert_int_equal(v05_knapsack_plan(a, 3, 8, 64, oa), 0);
		assert_int_equal(v05_knapsack_plan(b, 3, 8, 64, ob), 0);
		check_plan(a, 3, 8, 64, oa);
		print_message("p %a: %u %u %u (near: %u %u %u)\n", edge_p[c].p,
			      oa[0], oa[1], oa[2], ob[0], ob[1], ob[2]);
		for (uint32_t i = 0; i < 3; i++)
			assert_int_equal(oa[i], ob[i]);
	}
}

/* Every edge p with others, several budgets and caps: defined, in
 * bounds, the budget spent. */
static void test_knapsack_edge_mix(void **state)
{
	double p[12];
	uint32_t out[12];
	size_t ne = sizeof(edge_p) / sizeof(edge_p[0]);

	(void)state;
	for (size_t c = 0; c < ne; c++)
		p[c] = edge_p[c].p;
	p[ne] = 0.0;
	p[ne + 1] = 1.0;
	p[ne + 2] = 0.3;
	p[ne + 3] = NAN;
	for (uint32_t up = 2; up <= 64; up += 31)
		for (uint32_t per = 2; per <= up; per += 3) {
			assert_int_equal(v05_knapsack_plan(p, (uint32_t)ne + 4,
							   per, up, out), 0);
			check_plan(p, (uint32_t)ne + 4, per, up, out);
			/* No estimate: its uniform share (or more, once
			 * every other prompt is at the cap). */
			assert_true(out[ne + 3] >= per);
		}
}

static void open_mode(struct fx *f, uint32_t mode)
{
	memset(f, 0, sizeof(*f));
	fx_config(f);
	assert_int_equal(v05_config_mode(&f->c, mode), 0);
	f->c.schedule = V05_SCHEDULE_STREAM;
	fx_open(f);
}

/* The same through submit in mode knapsack-prior: the prior -1 + 2^-53
 * is p = 2^-54. */
static void test_knapsack_edge_prior(void **state)
{
	double priors[3] = { -1.0 + 0x1p-53, 0.0, -1.0 };
	double p01[3] = { 0x1p-54, 0.5, 0.0 };
	uint32_t plan[3];
	uint64_t keys[3];
	struct fx f;
	int got;

	(void)state;
	assert_int_equal(v05_knapsack_plan(p01, 3, 8, 64, plan), 0);
	assert_int_equal(plan[1], 20);
	open_mode(&f, V05_MODE_KNAPSACK_PRIOR);
	got = submit(&f, priors, 3, keys);
	assert_int_equal(got, 3);
	for (int i = 0; i < got; i++)
		assert_int_equal(f.d[i].k, plan[find(keys, 3, f.d[i].key)]);
	fx_close(&f);
}

/* No prompt the knapsack can value, the unsolved ones full: the rest of
 * the budget goes to the others (fuzz_edges found it left unspent; -0.0
 * counts as 0). */
static void test_knapsack_unsolved_full(void **state)
{
	double p[2] = { 1.0, -0.0 }, q[3] = { 0.0, 1.0, 1.0 };
	uint32_t out[3];

	(void)state;
	assert_int_equal(v05_knapsack_plan(p, 2, 4, 4, out), 0);
	assert_int_equal(out[0], 4);
	assert_int_equal(out[1], 4);
	assert_int_equal(v05_knapsack_plan(q, 3, 6, 8, out), 0);
	assert_int_equal(out[0], 8);
	assert_int_equal(out[1] + out[2], 10);
	check_plan(q, 3, 6, 8, out);
}

/* ---- thresholds, in the precision rewards are kept in -------------------- */

static struct v05_params params_of(uint32_t mode)
{
	struct v05_config c;

	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, mode), 0);
	return c.params;
}

/* Reinforce-Ada (balanced, 8 per round, n = 4: 2 successes and 2
 * failures exit): two +1 and six rewards of exactly the threshold, 0.4
 * (the authors' 0.7 on a 0/1 scale), which is a failure. As a double, as
 * the float32 the plugin stores, or that float32 widened back to double
 * (a trainer's tensor): the same answer, STOP with keep 0b1111. */
static void test_ada_threshold(void **state)
{
	struct v05_params p = params_of(V05_MODE_ADA);
	const double at[3] = { 0.4, (double)0.4f, (double)nextafterf(0.4f, 0.0f) };
	struct v05_estimate e;
	double r[8];
	uint64_t keep;

	(void)state;
	for (uint32_t c = 0; c < 3; c++) {
		for (uint32_t i = 0; i < 8; i++)
			r[i] = i < 2 ? 1.0 : at[c];
		assert_int_equal(v05_estimate(&p, 0.0, r, 8, &e, NULL), 0);
		assert_int_equal(e.action, V05_ACTION_STOP);
		assert_int_equal(v05_keep(&p, r, 8, &keep), 0);
		assert_int_equal(keep, 0xfull);
	}
	/* Just above the threshold as a float32 is a success. */
	for (uint32_t i = 0; i < 8; i++)
		r[i] = i < 2 ? 1.0 : (double)nextafterf(0.4f, 1.0f);
	assert_int_equal(v05_estimate(&p, 0.0, r, 8, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_MORE);
}

/* The same group through a plugin: final at k = 8, the keep mask the
 * double path gives. */
static void test_ada_threshold_plugin(void **state)
{
	double prior = 0.0;
	float r[64];
	uint64_t key;
	struct fx f;
	struct v05_group g;
	int got;

	(void)state;
	for (uint32_t i = 0; i < 64; i++)
		r[i] = i < 2 ? 1.0f : 0.4f;
	open_mode(&f, V05_MODE_ADA);
	got = submit(&f, &prior, 1, &key);
	assert_int_equal(got, 1);
	assert_int_equal(f.d[0].k, 8);
	push_samples(&f, key, f.d[0].samples, r);
	assert_int_equal(v05_wait(f.p, 5000), 1);
	got = v05_poll(f.p, f.d, MAXD);
	assert_int_equal(got, 1);
	assert_int_equal(f.d[0].kind, V05_DECISION_FINAL);
	assert_int_equal(f.d[0].k, 8);
	assert_int_equal(v05_group(f.p, f.d[0].slot, &g), 0);
	assert_int_equal(g.keep, 0xfull);
	fx_close(&f);
}

/* GRESO's easy (>= 0.96) and hard (<= -0.78) groups, from rewards a
 * trainer folds out of float32 tensors: float32(0.96) < 0.96 and
 * float32(-0.78) > -0.78 as doubles. */
static void test_greso_thresholds(void **state)
{
	struct v05_greso g;
	struct v05_greso_prompt x = { 0, 0 };
	double easy[8], hard[8], easy64[8];

	(void)state;
	for (uint32_t i = 0; i < 8; i++) {
		easy[i] = (double)0.96f;
		hard[i] = (double)-0.78f;
		easy64[i] = 0.96;
	}
	v05_greso_init(&g, 1);
	assert_int_equal(v05_greso_fold(&g, &x, easy, 8), V05_GRESO_EASY);
	assert_int_equal(v05_greso_fold(&g, &x, easy64, 8), V05_GRESO_EASY);
	assert_int_equal(x.z, 2);
	assert_int_equal(v05_greso_fold(&g, &x, hard, 8), V05_GRESO_HARD);
	/* Equal as float32 is zero variance (what the plugin stores). */
	easy[3] = nextafter(easy[3], 2.0);
	assert_true(easy[3] != easy[0] && (float)easy[3] == (float)easy[0]);
	assert_int_equal(v05_greso_fold(&g, &x, easy, 8), V05_GRESO_EASY);
}

/* dapo drops a zero-variance group: rewards equal as float32 are (the
 * plugin would have stored them equal); and Knapsack RL's success (a
 * reward above 0) of a double that is 0 as float32 is a failure. */
static void test_zero_variance_and_success(void **state)
{
	struct v05_params dapo = params_of(V05_MODE_DAPO);
	struct v05_knapsack_hist h;
	struct v05_estimate e;
	double r[4] = { 0.5, 0.5, 0.5, 0.5 }, tiny[8], p01;

	(void)state;
	dapo.k_init = 4;
	r[2] = nextafter(0.5, 1.0);
	assert_int_equal(v05_estimate(&dapo, 0.0, r, 4, &e, NULL), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	memset(&h, 0, sizeof(h));
	for (uint32_t i = 0; i < 8; i++)
		tiny[i] = 1e-50; /* 0 as float32 */
	assert_int_equal(v05_knapsack_hist_fold(&h, 1, tiny, 8), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p01), 1);
	assert_true(p01 == 0.0);
}

/* ---- NaN and infinities refused ---------------------------------------- */

static const double bad[3] = { NAN, INFINITY, -INFINITY };

static void test_rewards_nonfinite(void **state)
{
	struct v05_params p, eb, ada_p = params_of(V05_MODE_ADA);
	struct v05_eb_fit fit = { 10.0, 0.1, 1.0, 1.0 };
	struct v05_estimate e;
	struct v05_knapsack_hist h;
	struct v05_greso g;
	struct v05_greso_prompt x = { 0, 0 };
	double r[8], adv[8], v, s[1], prior[1] = { 0.0 };
	uint32_t k[1] = { 4 }, out[1];
	uint64_t keep;

	(void)state;
	v05_params_default(&p);
	eb = p;
	eb.mode = V05_MODE_V05_EB;
	v05_greso_init(&g, 1);
	for (uint32_t b = 0; b < 3; b++) {
		for (uint32_t i = 0; i < 8; i++)
			r[i] = i == 3 ? bad[b] : 1.0;
		assert_int_equal(v05_mean(r, 4, &v), -EDOM);
		assert_int_equal(v05_sigma_rms(0.0, r, 4, &v), -EDOM);
		assert_int_equal(v05_advantages(r, 4, 0.0, 1.0, adv), -EDOM);
		assert_int_equal(v05_estimate(&p, 0.0, r, 4, &e, adv), -EDOM);
		assert_int_equal(v05_keep(&ada_p, r, 8, &keep), -EDOM);
		assert_int_equal(v05_eb_estimate(&eb, &fit, 0.0, r, 4, &e, adv),
				 -EDOM);
		memset(&h, 0, sizeof(h));
		assert_int_equal(v05_knapsack_hist_fold(&h, 1, r, 8), -EDOM);
		assert_int_equal(v05_greso_fold(&g, &x, r, 8), -EDOM);
		/* Scalars derived from rewards. */
		assert_int_equal(v05_delta2(bad[b], 0.0, 4, &v), -EDOM);
		assert_int_equal(v05_delta2(0.0, bad[b], 4, &v), -EDOM);
		assert_int_equal(v05_weight(bad[b], 4, &v), -EDOM);
		assert_int_equal(v05_baseline(0.5, bad[b], 0.0, &v), -EDOM);
		assert_int_equal(v05_baseline(bad[b], 0.0, 0.0, &v), -EDOM);
		assert_int_equal(v05_sigma_star(bad[b], &v), -EDOM);
		assert_int_equal(v05_k_target(0.01, bad[b], &v), -EDOM);
		assert_int_equal(v05_prior_from_p(bad[b], &v), -EDOM);
		/* Successes. */
		s[0] = bad[b];
		assert_int_equal(v05_eb_loglik(&fit, prior, k, s, 1, &v), -EDOM);
		assert_int_equal(v05_eb_fit(prior, k, s, 1, &fit), -EDOM);
		assert_int_equal(v05_eb_posterior(&fit, 0.0, 4, bad[b], &v, &v,
						  &v), -EDOM);
		assert_int_equal(v05_eb_expected_var(&fit, 0.0, 4, bad[b], 2, &v),
				 -EDOM);
		assert_int_equal(v05_eb_choose(&eb, &fit, 0.0, 4, bad[b]), -EDOM);
		/* A success probability: NaN is "no estimate", inf is not. */
		if (b)
			assert_int_equal(v05_knapsack_plan(&bad[b], 1, 4, 8, out),
					 -EDOM);
	}
}

/* A state with a NaN or infinite value, or a weight it cannot have. */
static void spoil(struct v05_eb_state *st, uint32_t how, double x)
{
	v05_eb_state_init(st);
	assert_int_equal(v05_eb_state_fold(st, 1.0, 0.2, 4, 3.0), 0);
	if (how == 0)
		st->ll[0][7][5] = x;
	else if (how == 1)
		st->weight = x;
	else
		st->folded = 0; /* weight 1 from no group */
}

static void test_states_nonfinite(void **state)
{
	struct v05_eb_state *st = test_malloc(sizeof(*st));
	struct v05_eb_state *ok = test_malloc(sizeof(*ok));
	struct v05_eb_fit fit;

	(void)state;
	v05_eb_state_init(ok);
	assert_int_equal(v05_eb_state_fold(ok, 1.0, -0.3, 4, 1.0), 0);
	for (uint32_t how = 0; how < 3; how++) {
		for (uint32_t b = 0; b < (how == 2 ? 1u : 3u); b++) {
			spoil(st, how, bad[b]);
			assert_int_equal(v05_eb_state_fit(st, &fit), -EDOM);
			spoil(st, how, bad[b]);
			assert_int_equal(v05_eb_state_fold(st, 1.0, 0.0, 4, 2.0),
					 -EDOM);
			spoil(st, how, bad[b]);
			assert_int_equal(v05_eb_state_add(ok, st), -EDOM);
			assert_int_equal(v05_eb_state_add(st, ok), -EDOM);
		}
	}
	/* The refused adds left ok as it was: one group. */
	assert_true(ok->folded == 1 && ok->weight == 1.0);
	assert_int_equal(v05_eb_state_fit(ok, &fit), 0);
	/* Negative weight. */
	spoil(st, 1, -1.0);
	assert_int_equal(v05_eb_state_fit(st, &fit), -EDOM);
	test_free(st);
	test_free(ok);
}

/* The plugin's running fit: set_remote refuses what state_fit refuses. */
static void test_remote_nonfinite(void **state)
{
	struct v05_eb_state *st = test_malloc(sizeof(*st));
	struct fx f;

	(void)state;
	memset(&f, 0, sizeof(f));
	fx_config(&f);
	f.c.params.mode = V05_MODE_V05_EB;
	f.c.schedule = V05_SCHEDULE_STREAM;
	fx_open(&f);
	for (uint32_t how = 0; how < 3; how++) {
		spoil(st, how, how == 2 ? 0.0 : NAN);
		assert_int_equal(v05_eb_state_set_remote(f.p, st), -EDOM);
	}
	spoil(st, 1, 1.0);
	assert_int_equal(v05_eb_state_set_remote(f.p, st), 0);
	fx_close(&f);
	test_free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_knapsack_edge_p),
		cmocka_unit_test(test_knapsack_edge_mix),
		cmocka_unit_test(test_knapsack_edge_prior),
		cmocka_unit_test(test_knapsack_unsolved_full),
		cmocka_unit_test(test_ada_threshold),
		cmocka_unit_test(test_ada_threshold_plugin),
		cmocka_unit_test(test_greso_thresholds),
		cmocka_unit_test(test_zero_variance_and_success),
		cmocka_unit_test(test_rewards_nonfinite),
		cmocka_unit_test(test_states_nonfinite),
		cmocka_unit_test(test_remote_nonfinite),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
