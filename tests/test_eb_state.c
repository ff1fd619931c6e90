/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's additive fit state: every value against a brute-force
 * evaluation (the population's log-likelihood per shape by products, every
 * grid point's by v05_eb_loglik), the fit against the brute-force argmax
 * (the shape of the largest population log-likelihood, then its plane's
 * best point); folding a batch with nothing forgotten gives the batch
 * fit's point bit for bit; two states added give the fit of their groups
 * together; the population's shape is found on synthetic populations of
 * every shape; forgetting weighs a group folded j groups ago by keep^j, so
 * the fit follows a value model whose quality changes; bad input is
 * refused.
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

/* A state is large: one of each a test needs, static. */
static struct v05_eb_state st_a, st_b, st_c;

static void shape(uint32_t c, double *a, double *b)
{
	assert_int_equal(v05_eb_shape_at(c, a, b), 0);
}

/* log of a binary sequence's probability under Beta(a, b), by products
 * in long double: other code than the library's. */
static double seq_ll(double a, double b, uint32_t k, uint32_t s)
{
	long double p = 1.0L;

	for (uint32_t i = 0; i < s; i++)
		p *= (long double)(a + i);
	for (uint32_t i = 0; i < k - s; i++)
		p *= (long double)(b + i);
	for (uint32_t i = 0; i < k; i++)
		p /= (long double)(a + b + i);
	return (double)logl(p);
}

/*
 * The brute-force fit of n binary groups: each shape's population
 * log-likelihood summed by products, the largest (first on ties); then
 * every grid point of it by v05_eb_loglik (the mixture summed group by
 * group as a log of a weighted sum, not the fold's log1p form), the
 * largest. The state st (folded from the same groups, nothing forgotten)
 * must hold those values.
 */
static void brute_fit(const double *prior, const uint32_t *k, const double *s,
		      uint32_t n, const struct v05_eb_state *st,
		      struct v05_eb_fit *out)
{
	double best = -INFINITY, second = -INFINITY, pop_best = -INFINITY;
	uint32_t cb = 0;

	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		double a, b, pop = 0.0;

		shape(c, &a, &b);
		for (uint32_t i = 0; i < n; i++)
			pop += seq_ll(a, b, k[i], (uint32_t)s[i]);
		assert_float_equal(st->pop[c], pop, 1e-9 * fabs(pop));
		if (pop > pop_best) {
			pop_best = pop;
			cb = c;
		}
	}
	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
				struct v05_eb_fit at = { v05_eb_n0_at(j),
							 v05_eb_h_at(l), 0, 0 };
				double ll;

				shape(c, &at.a2, &at.b2);
				assert_int_equal(v05_eb_loglik(&at, prior, k, s, n, &ll), 0);
				assert_float_equal(st->ll[c][j][l], ll, 1e-9 * fabs(ll));
				if (c != cb)
					continue;
				if (ll > best) {
					second = best;
					best = ll;
					*out = at;
				} else if (ll > second) {
					second = ll;
				}
			}
		}
	}
	assert_true(best - second > 1e-6 * fabs(best)); /* no near tie */
}

static bool same_fit(const struct v05_eb_fit *a, const struct v05_eb_fit *b)
{
	return a->n0 == b->n0 && a->h == b->h && a->a2 == b->a2 &&
	       a->b2 == b->b2;
}

static void test_fold_is_the_batch_fit(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_fit a, b, ref = { 0, 0, 0, 0 };

	(void)state;
	batch(prior, k, s, N, 0.2);
	v05_eb_state_init(&st_a);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(v05_eb_state_fold(&st_a, 1.0, prior[i], k[i], s[i]), 0);
	/* v05_eb_fit folds the chosen shape's plane alone: the same point,
	 * bit for bit, as the whole state's. */
	assert_int_equal(v05_eb_fit(prior, k, s, N, &a), 0);
	assert_int_equal(v05_eb_state_fit(&st_a, &b), 0);
	assert_true(same_fit(&a, &b));
	assert_true(st_a.weight == (double)N && st_a.folded == N);
	/* A hallucination share of 0.2 is found near 0.2, not at an edge. */
	assert_true(b.h > 0.05 && b.h < 0.5);
	brute_fit(prior, k, s, N, &st_a, &ref);
	assert_true(same_fit(&ref, &b));
}

/* Groups from a population of shape c (no prior says anything: 0), k
 * rewards each; the fit's shape is c. */
static double gamma_draw(double a)
{
	double d, cc;

	if (a < 1.0)
		return gamma_draw(a + 1.0) * pow(unif() + 1e-300, 1.0 / a);
	d = a - 1.0 / 3.0;
	cc = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double u1 = unif() + 1e-300, u2 = unif();
		double x = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
		double v = 1.0 + cc * x;

		if (v <= 0.0)
			continue;
		v = v * v * v;
		if (log(unif() + 1e-300) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v;
	}
}

static void test_population_shape_found(void **state)
{
	enum { G = 4000, K = 8 };
	static double prior[G], s[G];
	static uint32_t k[G];

	(void)state;
	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		struct v05_eb_fit f;
		double a, b;

		shape(c, &a, &b);
		v05_eb_state_init(&st_a);
		for (uint32_t i = 0; i < G; i++) {
			double x = gamma_draw(a), y = gamma_draw(b);
			double p = x + y > 0.0 ? x / (x + y) : 0.5;

			/* Half the prompts with a useless prior, half with
			 * none: the population shows through both. */
			prior[i] = i & 1 ? -1.0 + 2.0 * unif() : 0.0;
			k[i] = K;
			s[i] = 0.0;
			for (uint32_t j = 0; j < K; j++)
				s[i] += unif() < p ? 1.0 : 0.0;
			assert_int_equal(v05_eb_state_fold(&st_a, 1.0, prior[i], K, s[i]), 0);
		}
		assert_int_equal(v05_eb_state_fit(&st_a, &f), 0);
		print_message("Beta(%g, %g): fit Beta(%g, %g), n0 %g, h %g\n", a, b,
			      f.a2, f.b2, f.n0, f.h);
		assert_true(f.a2 == a && f.b2 == b);
		assert_int_equal(v05_eb_fit(prior, k, s, G, &f), 0);
		assert_true(f.a2 == a && f.b2 == b);
	}
}

static void test_add_is_the_union(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_fit a, b;

	(void)state;
	batch(prior, k, s, N, 0.3);
	v05_eb_state_init(&st_a);
	v05_eb_state_init(&st_b);
	v05_eb_state_init(&st_c);
	/* Odd prompts on one engine, even on another. */
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(v05_eb_state_fold(i & 1 ? &st_a : &st_b, 1.0,
						   prior[i], k[i], s[i]), 0);
		assert_int_equal(v05_eb_state_fold(&st_c, 1.0, prior[i], k[i],
						   s[i]), 0);
	}
	assert_int_equal(v05_eb_state_add(&st_a, &st_b), 0);
	assert_true(st_a.weight == st_c.weight && st_a.folded == st_c.folded);
	for (uint32_t c = 0; c < V05_EB_SHAPES; c++) {
		assert_float_equal(st_a.pop[c], st_c.pop[c], 1e-9 * fabs(st_c.pop[c]));
		for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
				assert_float_equal(st_a.ll[c][j][l], st_c.ll[c][j][l],
						   1e-9 * fabs(st_c.ll[c][j][l]));
	}
	assert_int_equal(v05_eb_state_fit(&st_a, &a), 0);
	assert_int_equal(v05_eb_fit(prior, k, s, N, &b), 0);
	assert_true(same_fit(&a, &b));
}

static void test_forgetting_follows_a_change(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_fit fk, ff, fresh;
	const double keep = 1.0 - 1.0 / 128.0;
	/* One grid step of h, a factor. */
	const double step = pow(V05_EB_H_MAX / V05_EB_H_MIN,
				1.0 / (V05_EB_H_GRID - 1));

	(void)state;
	v05_eb_state_init(&st_a);
	v05_eb_state_init(&st_b);
	/* Weights: keep^j summed, exactly as folded. */
	assert_int_equal(v05_eb_state_fold(&st_b, 0.5, 0.0, 4, 2.0), 0);
	assert_int_equal(v05_eb_state_fold(&st_b, 0.5, 0.0, 4, 2.0), 0);
	assert_int_equal(v05_eb_state_fold(&st_b, 0.5, 0.0, 4, 2.0), 0);
	assert_true(st_b.weight == 1.75 && st_b.folded == 3);
	v05_eb_state_init(&st_b);
	/* A good value model for 4 batches, then a bad one for 1. */
	for (int b = 0; b < 5; b++) {
		batch(prior, k, s, N, b < 4 ? 0.02 : 0.6);
		for (uint32_t i = 0; i < N; i++) {
			v05_eb_state_fold(&st_a, 1.0, prior[i], k[i], s[i]);
			v05_eb_state_fold(&st_b, keep, prior[i], k[i], s[i]);
		}
	}
	assert_int_equal(v05_eb_fit(prior, k, s, N, &fresh), 0);
	assert_int_equal(v05_eb_state_fit(&st_a, &fk), 0);
	assert_int_equal(v05_eb_state_fit(&st_b, &ff), 0);
	/* With a window of 128 groups the state sees mostly the last batch:
	 * its h is the last batch's own fit's, within a grid step; the
	 * state that forgets nothing is still held by the four good
	 * batches. */
	print_message("h: last batch %g, forgetting %g, not %g\n", fresh.h, ff.h,
		      fk.h);
	assert_true(fabs(log(ff.h / fresh.h)) < 1.01 * log(step));
	assert_true(fk.h < ff.h / 2.0);
	assert_true(st_b.weight < 128.0 && st_b.weight > 127.0);
}

static void test_bad_input(void **state)
{
	struct v05_eb_fit f;
	double a, b;

	(void)state;
	v05_eb_state_init(&st_a);
	assert_int_equal(v05_eb_state_fit(&st_a, &f), -EAGAIN);
	assert_int_equal(v05_eb_state_fold(NULL, 1.0, 0.0, 4, 1.0), -EINVAL);
	assert_int_equal(v05_eb_state_fold(&st_a, 1.5, 0.0, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st_a, NAN, 0.0, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st_a, 1.0, 1.5, 4, 1.0), -EDOM);
	assert_int_equal(v05_eb_state_fold(&st_a, 1.0, 0.0, 0, 0.0), -ERANGE);
	assert_int_equal(v05_eb_state_fold(&st_a, 1.0, 0.0, 4, 5.0), -EDOM);
	assert_int_equal(v05_eb_state_add(&st_a, NULL), -EINVAL);
	assert_true(st_a.weight == 0.0 && st_a.folded == 0);
	assert_non_null(strstr(v05_errmsg(), "NULL"));
	assert_int_equal(v05_eb_shape_at(V05_EB_SHAPES, &a, &b), -ERANGE);
	assert_int_equal(v05_eb_shape_at(0, &a, &b), 0);
	assert_true(a == 1.0 && b == 1.0);
}

/* The fit's (shape, n0, h) indices, from v05_eb_state_fit. */
static void fit_index(const struct v05_eb_state *st, uint32_t *c, uint32_t *j,
		      uint32_t *l)
{
	struct v05_eb_fit f;
	double a = 0, b = 0;

	assert_int_equal(v05_eb_state_fit(st, &f), 0);
	*c = *j = *l = 0;
	while (*c < V05_EB_SHAPES && (shape(*c, &a, &b), a != f.a2 || b != f.b2))
		(*c)++;
	while (*j < V05_EB_N0_GRID && v05_eb_n0_at(*j) != f.n0)
		(*j)++;
	while (*l < V05_EB_H_GRID && v05_eb_h_at(*l) != f.h)
		(*l)++;
	assert_true(*c < V05_EB_SHAPES && *j < V05_EB_N0_GRID &&
		    *l < V05_EB_H_GRID);
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

	(void)state;
	v05_eb_state_init(&st_c);
	for (uint32_t kk = 0; kk < 4; kk++) {
		v05_eb_state_init(&st_a);
		for (uint32_t i = 0; i < 750; i++) {
			uint32_t k = 1 + (uint32_t)(unif() * 64.0);
			double prior = i % 7 == 0 ? (i % 2 ? 1.0 : -1.0) :
				       -1.0 + 2.0 * unif();
			double s = i % 5 == 0 ? (double)k * unif() :
				   i % 5 == 1 ? 0.0 : i % 5 == 2 ? (double)k :
				   floor((double)k * unif() + 0.5);

			if (k > 64)
				k = 64;
			assert_int_equal(v05_eb_state_fold(&st_a, keeps[kk], prior, k, s), 0);
			if (i % 50 == 0) {
				v05_eb_state_init(&st_b);
				if (v05_eb_state_add(&st_b, &st_a))
					fail_msg("keep %g, after %u groups: %s", keeps[kk],
						 i + 1, v05_errmsg());
			}
		}
		if (v05_eb_state_add(&st_c, &st_a))
			fail_msg("sum: %s", v05_errmsg());
	}
	v05_eb_state_init(&st_b);
	assert_int_equal(v05_eb_state_add(&st_b, &st_c), 0);
	/* The bounds themselves: groups that give the most (one success
	 * under a prior of 1, one failure under -1) and the least (64
	 * rewards, at each shape's least) a group can give, alone. */
	for (uint32_t b = 0; b < 2 + V05_EB_SHAPES; b++) {
		double sa, sb, s = b == 0 ? 1.0 : 0.0;
		uint32_t k = 1;

		if (b >= 2) {
			shape(b - 2, &sa, &sb);
			k = 64;
			s = fmin(64.0, fmax(0.0, (64.0 + sb - sa) / 2.0));
		}
		v05_eb_state_init(&st_a);
		for (uint32_t i = 0; i < 1000; i++)
			assert_int_equal(v05_eb_state_fold(&st_a, 1.0, b == 0 ? 1.0 : b == 1 ? -1.0 : 0.0,
							   k, s), 0);
		v05_eb_state_init(&st_b);
		if (v05_eb_state_add(&st_b, &st_a))
			fail_msg("bound %u: %s", b, v05_errmsg());
	}
}

/*
 * States no fold can make, each finite and with a weight in [0, folded]
 * (all the check looked at before issue 45), are refused naming what is
 * wrong: a positive log-likelihood, one below what the groups' weight can
 * give, a row that is not concave in h (one engine's part pulling every
 * engine's fit from a small h to h = 0.9), a shape's population
 * log-likelihood above what its plane allows (a part choosing every
 * engine's shape), a weight above the count.
 */
static void test_impossible_states_refused(void **state)
{
	static double prior[N], s[N];
	static uint32_t k[N];
	struct v05_eb_state *good = &st_a, *bad = &st_b, *zero = &st_c;
	uint32_t c0, j0, l0, c1, j1, l1, cx;

	(void)state;
	batch(prior, k, s, N, 0.0);
	v05_eb_state_init(good);
	for (uint32_t i = 0; i < 200; i++)
		assert_int_equal(v05_eb_state_fold(good, 1.0, prior[i], k[i], s[i]), 0);
	fit_index(good, &c0, &j0, &l0);
	assert_true(l0 < V05_EB_H_GRID / 2);
	v05_eb_state_init(zero);

	*bad = *good;
	bad->ll[c0][4][7] = 0.25;
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "[4][7] is 0.25 > 0"));
	assert_int_equal(v05_eb_state_fit(bad, &(struct v05_eb_fit){ 0 }), -EDOM);

	*bad = *good;
	bad->ll[c0][2][3] = 1e6 * bad->ll[c0][2][3];
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "below"));

	/* Every row of the fit's shape: its last point (h = 0.9) raised just
	 * above the row's best, all still negative: the fit moves to
	 * h = 0.9. */
	*bad = *good;
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		double best = -INFINITY;

		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			best = fmax(best, bad->ll[c0][j][l]);
		bad->ll[c0][j][V05_EB_H_GRID - 1] = best * (1.0 - 1e-6);
	}
	{
		/* Unchecked, its best point would be h = 0.9. */
		double best = -INFINITY;
		uint32_t bl = 0;

		for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
				assert_true(bad->ll[c0][j][l] < 0.0);
				if (bad->ll[c0][j][l] > best) {
					best = bad->ll[c0][j][l];
					bl = l;
				}
			}
		assert_int_equal(bl, V05_EB_H_GRID - 1);
	}
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "not concave"));
	fit_index(good, &c1, &j1, &l1);
	assert_true(c1 == c0 && j1 == j0 && l1 == l0);

	/* Another shape's population log-likelihood raised above every
	 * other's, still inside what one group can give: unchecked, the
	 * fit would take that shape. */
	*bad = *good;
	cx = c0 == 1 ? 2 : 1;
	bad->pop[cx] = 0.5 * bad->pop[c0];
	fit_index(good, &c1, &j1, &l1);
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "more than its groups give"));

	/* A count claimed without the groups (issue 45's 1e15): the
	 * log-likelihoods of 200 groups cannot be those of 1e15. */
	*bad = *good;
	bad->folded = 1000000000000000ull;
	bad->weight = 1e15;
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "a count without the groups"));

	*bad = *good;
	bad->weight = (double)bad->folded + 1.0;
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "weight"));

	*bad = *good;
	bad->pop[3] = NAN;
	assert_int_equal(v05_eb_state_add(zero, bad), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "not a finite number"));
	/* Nothing was added. */
	assert_true(zero->weight == 0.0 && zero->folded == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fold_is_the_batch_fit),
		cmocka_unit_test(test_population_shape_found),
		cmocka_unit_test(test_add_is_the_union),
		cmocka_unit_test(test_forgetting_follows_a_change),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_real_states_pass),
		cmocka_unit_test(test_impossible_states_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
