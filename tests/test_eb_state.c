/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's additive fit state: folding a batch with nothing forgotten
 * gives the batch fit's point bit for bit; two states added give the fit of
 * their groups together; forgetting weighs a group folded j groups ago by
 * keep^j, so the fit follows a value model whose quality changes; bad
 * input is refused.
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

#define N 400u

/* A reproducible batch: priors spread over [-0.9, 0.9]; a fraction
 * `halluc` of the prompts get successes unrelated to the prior, the rest
 * successes that follow it closely (k = 4, binary). */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double unif(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static void batch(double *prior, uint32_t *k, double *s, uint32_t n,
		  double halluc)
{
	for (uint32_t i = 0; i < n; i++) {
		double v = -0.9 + 1.8 * unif(), p = (1.0 + v) / 2.0;

		if (unif() < halluc)
			p = unif();
		prior[i] = v;
		k[i] = 4;
		s[i] = 0.0;
		for (uint32_t j = 0; j < 4; j++)
			s[i] += unif() < p ? 1.0 : 0.0;
	}
}

static void test_fold_is_the_batch_fit(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_state st;
	struct v05_eb_fit a, b;

	(void)state;
	batch(prior, k, s, N, 0.2);
	v05_eb_state_init(&st);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(v05_eb_state_fold(&st, 1.0, prior[i], k[i], s[i]), 0);
	assert_int_equal(v05_eb_fit(prior, k, s, N, &a), 0);
	assert_int_equal(v05_eb_state_fit(&st, &b), 0);
	assert_true(a.n0 == b.n0 && a.h == b.h);
	assert_true(st.weight == (double)N && st.folded == N);
	/* A hallucination share of 0.2 is found near 0.2, not at an edge. */
	assert_true(b.h > 0.05 && b.h < 0.5);
	{
		/* v05_eb_fit is this same fold, so the comparison above holds
		 * whatever the fold computes. The reference: v05_eb_loglik,
		 * the mixture's log-likelihood summed group by group by other
		 * code (log of the weighted sum, not the fold's log1p form):
		 * the state's value at every grid point is the batch
		 * log-likelihood there, and the fit is its best point. */
		double ll, best = -INFINITY, second = -INFINITY;
		struct v05_eb_fit at, arg = { 0, 0 };

		for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
				at.n0 = v05_eb_n0_at(j);
				at.h = v05_eb_h_at(l);
				assert_int_equal(v05_eb_loglik(&at, prior, k, s, N, &ll), 0);
				assert_float_equal(st.ll[j][l], ll, 1e-9 * fabs(ll));
				if (ll > best) {
					second = best;
					best = ll;
					arg = at;
				} else if (ll > second) {
					second = ll;
				}
			}
		}
		assert_true(best - second > 1e-6 * fabs(best)); /* no near tie */
		assert_true(arg.n0 == b.n0 && arg.h == b.h);
	}
}

static void test_add_is_the_union(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_state one, two, all;
	struct v05_eb_fit a, b;

	(void)state;
	batch(prior, k, s, N, 0.3);
	v05_eb_state_init(&one);
	v05_eb_state_init(&two);
	v05_eb_state_init(&all);
	/* Odd prompts on one engine, even on another. */
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(v05_eb_state_fold(i & 1 ? &one : &two, 1.0,
						   prior[i], k[i], s[i]), 0);
		assert_int_equal(v05_eb_state_fold(&all, 1.0, prior[i], k[i],
						   s[i]), 0);
	}
	assert_int_equal(v05_eb_state_add(&one, &two), 0);
	assert_true(one.weight == all.weight && one.folded == all.folded);
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			assert_float_equal(one.ll[j][l], all.ll[j][l],
					   1e-9 * fabs(all.ll[j][l]));
	assert_int_equal(v05_eb_state_fit(&one, &a), 0);
	assert_int_equal(v05_eb_fit(prior, k, s, N, &b), 0);
	assert_true(a.n0 == b.n0 && a.h == b.h);
}

static void test_forgetting_follows_a_change(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_state kept, forget;
	struct v05_eb_fit fk, ff, fresh;
	const double keep = 1.0 - 1.0 / 128.0;

	(void)state;
	v05_eb_state_init(&kept);
	v05_eb_state_init(&forget);
	/* Weights: keep^j summed, exactly as folded. */
	assert_int_equal(v05_eb_state_fold(&forget, 0.5, 0.0, 4, 2.0), 0);
	assert_int_equal(v05_eb_state_fold(&forget, 0.5, 0.0, 4, 2.0), 0);
	assert_int_equal(v05_eb_state_fold(&forget, 0.5, 0.0, 4, 2.0), 0);
	assert_true(forget.weight == 1.75 && forget.folded == 3);
	v05_eb_state_init(&forget);
	/* A good value model for 4 batches, then a bad one for 1. */
	for (int b = 0; b < 5; b++) {
		batch(prior, k, s, N, b < 4 ? 0.02 : 0.6);
		for (uint32_t i = 0; i < N; i++) {
			v05_eb_state_fold(&kept, 1.0, prior[i], k[i], s[i]);
			v05_eb_state_fold(&forget, keep, prior[i], k[i], s[i]);
		}
	}
	assert_int_equal(v05_eb_fit(prior, k, s, N, &fresh), 0);
	assert_int_equal(v05_eb_state_fit(&kept, &fk), 0);
	assert_int_equal(v05_eb_state_fit(&forget, &ff), 0);
	/* With a window of 128 groups the state sees mostly the last batch:
	 * its h is the last batch's own fit's; the state that forgets
	 * nothing is still held by the four good batches. One grid step of
	 * h is a factor (0.9 / 0.005)^(1/23) = 1.25. */
	assert_true(fabs(log(ff.h / fresh.h)) < 1.01 * log(1.26));
	print_message("h: last batch %g, forgetting %g, not %g\n", fresh.h, ff.h,
		      fk.h);
	assert_true(fk.h < ff.h / 2.0);
	assert_true(forget.weight < 128.0 && forget.weight > 127.0);
}

static void test_bad_input(void **state)
{
	struct v05_eb_state st;
	struct v05_eb_fit f;

	(void)state;
	v05_eb_state_init(&st);
	assert_int_equal(v05_eb_state_fit(&st, &f), -EAGAIN);
	assert_int_equal(v05_eb_state_fold(NULL, 1.0, 0.0, 4, 1.0), -EINVAL);
	assert_int_equal(v05_eb_state_fold(&st, 1.5, 0.0, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st, NAN, 0.0, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st, 1.0, 1.5, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st, 1.0, 0.0, 0, 0.0), -ERANGE);
	assert_int_equal(v05_eb_state_fold(&st, 1.0, 0.0, 4, 5.0), -EDOM);
	assert_int_equal(v05_eb_state_add(&st, NULL), -EINVAL);
	assert_true(st.weight == 0.0 && st.folded == 0);
	assert_non_null(strstr(v05_errmsg(), "NULL"));
}

/* The fit at (n0 index, h index) of a state, from v05_eb_state_fit. */
static void fit_index(const struct v05_eb_state *st, uint32_t *j, uint32_t *l)
{
	struct v05_eb_fit f;

	assert_int_equal(v05_eb_state_fit(st, &f), 0);
	*j = *l = 0;
	while (*j < V05_EB_N0_GRID && v05_eb_n0_at(*j) != f.n0)
		(*j)++;
	while (*l < V05_EB_H_GRID && v05_eb_h_at(*l) != f.h)
		(*l)++;
}

/*
 * Every state folds and sums can make passes the checks (issue 45,
 * defect 6: they were tightened): 3000 groups of every size up to 64,
 * fractional and extreme successes, priors at the bounds, several keeps,
 * and sums of such states; the checks run on each state handed to add.
 */
static void test_real_states_pass(void **state)
{
	static const double keeps[] = { 1.0, 1.0 - 1.0 / 512, 0.5, 0.0 };
	struct v05_eb_state sum, st, zero;

	(void)state;
	v05_eb_state_init(&sum);
	for (uint32_t kk = 0; kk < 4; kk++) {
		v05_eb_state_init(&st);
		for (uint32_t i = 0; i < 750; i++) {
			uint32_t k = 1 + (uint32_t)(unif() * 64.0);
			double prior = i % 7 == 0 ? (i % 2 ? 1.0 : -1.0) :
				       -1.0 + 2.0 * unif();
			double s = i % 5 == 0 ? (double)k * unif() :
				   i % 5 == 1 ? 0.0 : i % 5 == 2 ? (double)k :
				   floor((double)k * unif() + 0.5);

			if (k > 64)
				k = 64;
			assert_int_equal(v05_eb_state_fold(&st, keeps[kk], prior, k, s), 0);
			if (i % 50 == 0) {
				v05_eb_state_init(&zero);
				if (v05_eb_state_add(&zero, &st))
					fail_msg("keep %g, after %u groups: %s", keeps[kk],
						 i + 1, v05_errmsg());
			}
		}
		if (v05_eb_state_add(&sum, &st))
			fail_msg("sum: %s", v05_errmsg());
	}
	v05_eb_state_init(&zero);
	assert_int_equal(v05_eb_state_add(&zero, &sum), 0);
	/* The bounds themselves: groups that give the most (one success
	 * under a prior of 1, one failure under -1) and the least (64
	 * rewards, half successes) a group can give, alone. */
	for (int b = 0; b < 3; b++) {
		v05_eb_state_init(&st);
		for (uint32_t i = 0; i < 1000; i++)
			assert_int_equal(v05_eb_state_fold(&st, 1.0, b == 0 ? 1.0 : b == 1 ? -1.0 : 0.0,
							   b < 2 ? 1 : 64,
							   b == 0 ? 1.0 : b == 1 ? 0.0 : 32.0), 0);
		v05_eb_state_init(&zero);
		if (v05_eb_state_add(&zero, &st))
			fail_msg("bound %d: %s", b, v05_errmsg());
	}
}

/*
 * States no fold can make, each finite and with a weight in [0, folded]
 * (all the check looked at before), are refused naming what is wrong:
 * a positive log-likelihood, one below what the groups' weight can give,
 * a row that is not concave in h (the attack: one engine's part
 * pulling every engine's fit from a small h to h = 0.9), a weight above
 * the count.
 */
static void test_impossible_states_refused(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_state good, bad, zero;
	uint32_t j0, l0, j1, l1;

	(void)state;
	batch(prior, k, s, N, 0.0);
	v05_eb_state_init(&good);
	for (uint32_t i = 0; i < 200; i++)
		assert_int_equal(v05_eb_state_fold(&good, 1.0, prior[i], k[i], s[i]), 0);
	fit_index(&good, &j0, &l0);
	assert_true(l0 < V05_EB_H_GRID / 2);

	bad = good;
	bad.ll[4][7] = 0.25;
	v05_eb_state_init(&zero);
	assert_int_equal(v05_eb_state_add(&zero, &bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "[4][7] is 0.25 > 0"));
	assert_int_equal(v05_eb_state_fit(&bad, &(struct v05_eb_fit){ 0 }), -EDOM);

	bad = good;
	bad.ll[2][3] = 1e6 * bad.ll[2][3];
	assert_int_equal(v05_eb_state_add(&zero, &bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "below"));

	/* Every row's last point (h = 0.9) raised just above the row's
	 * best, all still negative: the fit moves to h = 0.9. */
	bad = good;
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		double best = -INFINITY;

		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			best = fmax(best, bad.ll[j][l]);
		bad.ll[j][V05_EB_H_GRID - 1] = best * (1.0 - 1e-6);
	}
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			assert_true(bad.ll[j][l] < 0.0);
	{
		/* Unchecked, its best point would be h = 0.9. */
		double best = -INFINITY;
		uint32_t bl = 0;

		for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
				if (bad.ll[j][l] > best) {
					best = bad.ll[j][l];
					bl = l;
				}
		assert_int_equal(bl, V05_EB_H_GRID - 1);
	}
	assert_int_equal(v05_eb_state_add(&zero, &bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "not concave"));
	fit_index(&good, &j1, &l1);
	assert_true(j1 == j0 && l1 == l0);

	/* A count claimed without the groups (the 1e15): the
	 * log-likelihoods of 200 groups cannot be those of 1e15. */
	bad = good;
	bad.folded = 1000000000000000ull;
	bad.weight = 1e15;
	assert_int_equal(v05_eb_state_add(&zero, &bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "a count without the groups"));

	bad = good;
	bad.weight = (double)bad.folded + 1.0;
	assert_int_equal(v05_eb_state_add(&zero, &bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "weight"));
	/* Nothing was added. */
	assert_true(zero.weight == 0.0 && zero.folded == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fold_is_the_batch_fit),
		cmocka_unit_test(test_add_is_the_union),
		cmocka_unit_test(test_forgetting_follows_a_change),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_real_states_pass),
		cmocka_unit_test(test_impossible_states_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
