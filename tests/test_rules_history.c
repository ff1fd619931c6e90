/* SPDX-License-Identifier: MIT */
/*
 * The published rules' cross-epoch state (include/v05/rules.h) on the
 * worked examples of docs/RULES.md: Knapsack RL's estimate from a prompt's
 * own history, GRESO's skip probabilities, runs, rate adaptation and
 * refill size; then what a bad record or input gets.
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

static void fill(double *r, uint32_t k, uint32_t wins)
{
	for (uint32_t i = 0; i < k; i++)
		r[i] = i < wins ? 1.0 : -1.0;
}

/* Epoch 1: 8 rewards, 3 successes: 3/8 (the window holds all 8). Epoch 2,
 * 2 rewards (+1, -1): fewer than 16 that epoch, so the 10 most recent:
 * 4/10. Epoch 3, 20 rewards, 5 successes: that epoch alone, 5/20. */
static void test_knapsack_estimate_example(void **state)
{
	struct v05_knapsack_hist h;
	double r[20], p = -1.0;

	(void)state;
	memset(&h, 0, sizeof(h));
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 0);
	fill(r, 8, 3);
	assert_int_equal(v05_knapsack_hist_fold(&h, 1, r, 8), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.375);
	fill(r, 2, 1);
	assert_int_equal(v05_knapsack_hist_fold(&h, 2, r, 2), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.4);
	fill(r, 20, 5);
	assert_int_equal(v05_knapsack_hist_fold(&h, 3, r, 20), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.25);
	assert_int_equal(h.seen, 30);
	assert_int_equal(h.filled, V05_KNAPSACK_WINDOW);
}

/* The window walks back across epochs, latest samples first: 12 failures
 * then 4 successes in epoch 1, 4 failures in epoch 2: the window of 16 is
 * epoch 2's 4 and epoch 1's last 12 (its 4 successes among them). */
static void test_knapsack_window_order(void **state)
{
	struct v05_knapsack_hist h;
	double r[16], p;

	(void)state;
	memset(&h, 0, sizeof(h));
	for (uint32_t i = 0; i < 16; i++)
		r[i] = i < 12 ? -1.0 : 1.0;
	assert_int_equal(v05_knapsack_hist_fold(&h, 1, r, 16), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.25); /* epoch 1 had 16: its own mean */
	fill(r, 4, 0);
	assert_int_equal(v05_knapsack_hist_fold(&h, 2, r, 4), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.25); /* 4 of the 16 most recent */
	/* Twice in one epoch: the counts add. */
	fill(r, 12, 12);
	assert_int_equal(v05_knapsack_hist_fold(&h, 2, r, 12), 0);
	assert_int_equal(h.last_n, 16);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.75);
	/* Which 16 the window keeps: epoch 1's 4 successes come first, its
	 * 12 failures after; epoch 2 adds 4 failures. The 16 most recent
	 * hold no success (the 16 oldest would hold 4). */
	memset(&h, 0, sizeof(h));
	fill(r, 16, 4);
	assert_int_equal(v05_knapsack_hist_fold(&h, 1, r, 16), 0);
	fill(r, 4, 0);
	assert_int_equal(v05_knapsack_hist_fold(&h, 2, r, 4), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.0);
	/* A reward of 0 is a failure; rewards inside (0, 1] successes. */
	memset(&h, 0, sizeof(h));
	for (uint32_t i = 0; i < 8; i++)
		r[i] = i < 4 ? 0.0 : 0.25;
	assert_int_equal(v05_knapsack_hist_fold(&h, 0, r, 8), 0);
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), 1);
	assert_true(p == 0.5);
}

static void test_knapsack_history_refusals(void **state)
{
	struct v05_knapsack_hist h;
	double r[2] = { 1.0, NAN }, p;

	(void)state;
	memset(&h, 0, sizeof(h));
	assert_int_equal(v05_knapsack_hist_fold(&h, 5, r, 2), -EDOM);
	assert_int_equal(h.seen, 0); /* nothing folded */
	assert_int_equal(v05_knapsack_hist_fold(&h, 5, r, 1), 0);
	assert_int_equal(v05_knapsack_hist_fold(&h, 4, r, 1), -EINVAL);
	assert_int_equal(v05_knapsack_hist_fold(&h, 5, r, 0), -EINVAL);
	assert_int_equal(v05_knapsack_hist_fold(&h, 5, r, 65), -EINVAL);
	assert_int_equal(v05_knapsack_hist_fold(NULL, 5, r, 1), -EINVAL);
	h.last_s = 9; /* more successes than outcomes */
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), -EINVAL);
	memset(&h, 0, sizeof(h));
	h.seen = h.filled = 8;
	h.window = 1u << 9; /* a bit outside the filled window */
	assert_int_equal(v05_knapsack_hist_estimate(&h, &p), -EINVAL);
}

static double keep_at(double p, uint32_t z, uint32_t kind)
{
	struct v05_greso g;
	struct v05_greso_prompt x = { z, z ? kind : V05_GRESO_MIXED };
	double keep = -1.0;

	v05_greso_init(&g, 1);
	g.p_easy = g.p_hard = p;
	assert_int_equal(v05_greso_keep_p(&g, &x, &keep), 0);
	return keep;
}

/* Skip probability 1 - max(p^z, 0.01). */
static void test_greso_keep_examples(void **state)
{
	(void)state;
	assert_float_equal(1 - keep_at(0.5, 1, V05_GRESO_EASY), 0.5, 1e-12);
	assert_float_equal(1 - keep_at(0.5, 2, V05_GRESO_EASY), 0.75, 1e-12);
	assert_float_equal(1 - keep_at(0.5, 3, V05_GRESO_HARD), 0.875, 1e-12);
	assert_float_equal(1 - keep_at(0.5, 7, V05_GRESO_EASY), 0.99, 1e-12);
	assert_float_equal(1 - keep_at(0.5, 10, V05_GRESO_EASY), 0.99, 1e-12);
	assert_float_equal(1 - keep_at(0.05, 1, V05_GRESO_HARD), 0.95, 1e-12);
	assert_float_equal(1 - keep_at(0.95, 1, V05_GRESO_EASY), 0.05, 1e-12);
	assert_true(keep_at(0.5, 0, V05_GRESO_MIXED) == 1.0);
}

/* all +1 -> (1, easy); all +1 -> (2, easy); all -1 -> (1, hard); mixed ->
 * (0, -); all -1 -> (1, hard). */
static void test_greso_runs(void **state)
{
	static const uint32_t wins[5] = { 8, 8, 0, 3, 0 };
	static const uint32_t z[5] = { 1, 2, 1, 0, 1 };
	static const uint32_t kind[5] = { V05_GRESO_EASY, V05_GRESO_EASY,
					  V05_GRESO_HARD, V05_GRESO_MIXED,
					  V05_GRESO_HARD };
	struct v05_greso g;
	struct v05_greso_prompt x = { 0, 0 };
	double r[8];

	(void)state;
	v05_greso_init(&g, 7);
	for (uint32_t i = 0; i < 5; i++) {
		fill(r, 8, wins[i]);
		assert_int_equal(v05_greso_fold(&g, &x, r, 8), (int)kind[i]);
		assert_int_equal(x.z, z[i]);
		assert_int_equal(x.kind, kind[i]);
	}
	assert_true(g.total == 5 && g.easy == 2 && g.hard == 2);
	/* Rewards inside (-1, 1): zero variance at 0.97 is easy, at -0.8
	 * hard, at 0.5 neither. */
	for (uint32_t i = 0; i < 4; i++)
		r[i] = 0.97;
	assert_int_equal(v05_greso_fold(&g, &x, r, 4), V05_GRESO_EASY);
	for (uint32_t i = 0; i < 4; i++)
		r[i] = -0.8;
	assert_int_equal(v05_greso_fold(&g, &x, r, 4), V05_GRESO_HARD);
	for (uint32_t i = 0; i < 4; i++)
		r[i] = 0.5;
	assert_int_equal(v05_greso_fold(&g, &x, r, 4), V05_GRESO_MIXED);
	assert_int_equal(x.z, 0);
}

/* 400 groups, 40 all-correct (0.10 >= 0.0833) and 60 all-failed (0.15 <
 * 0.1667): p_easy 0.50 -> 0.49, p_hard 0.50 -> 0.51. At the bound, p_easy
 * stays 0.05. A step that rolled nothing out changes nothing. */
static void test_greso_adaptation(void **state)
{
	struct v05_greso g;

	(void)state;
	v05_greso_init(&g, 0);
	g.total = 400;
	g.easy = 40;
	g.hard = 60;
	assert_int_equal(v05_greso_step_end(&g), 0);
	assert_float_equal(g.p_easy, 0.49, 1e-12);
	assert_float_equal(g.p_hard, 0.51, 1e-12);
	assert_true(g.total == 0 && g.easy == 0 && g.hard == 0);
	g.p_easy = V05_GRESO_P_MIN;
	g.total = 10;
	g.easy = 10;
	assert_int_equal(v05_greso_step_end(&g), 0);
	assert_true(g.p_easy == V05_GRESO_P_MIN);
	assert_float_equal(g.p_hard, 0.52, 1e-12);
	assert_int_equal(v05_greso_step_end(&g), 0);
	assert_float_equal(g.p_hard, 0.52, 1e-12);
	g.easy = 3; /* more than total: not a state the fold made */
	assert_int_equal(v05_greso_step_end(&g), -EINVAL);
}

/* 256 to train on, 200 kept, last batch 60% zero-variance: floor(1.25 *
 * 56 / 0.4) = 175 <= 384: roll out 175 more, as the step's last try. */
static void test_greso_refill(void **state)
{
	uint32_t b = 0;

	(void)state;
	assert_int_equal(v05_greso_refill(256, 200, 0.6, 384, &b), 1);
	assert_int_equal(b, 175);
	/* Too many needed: the full batch, and another may follow. */
	assert_int_equal(v05_greso_refill(256, 0, 0.5, 384, &b), 0);
	assert_int_equal(b, 384);
	assert_int_equal(v05_greso_refill(256, 0, 1.0, 384, &b), 0);
	assert_int_equal(b, 384);
	/* A small estimate is raised to the floor of 64. */
	assert_int_equal(v05_greso_refill(256, 250, 0.0, 384, &b), 1);
	assert_int_equal(b, V05_GRESO_REFILL_MIN);
	assert_int_equal(v05_greso_refill(256, 256, 0.5, 384, &b), -EINVAL);
	assert_int_equal(v05_greso_refill(256, 0, 1.5, 384, &b), -EINVAL);
	assert_int_equal(v05_greso_refill(256, 0, NAN, 384, &b), -EINVAL);
}

/* The draw is a function of (seed, key, step): the same answer every
 * time; over many keys it skips at about the rule's rate; another seed
 * or step draws again. */
static void test_greso_skip_draws(void **state)
{
	struct v05_greso g, g2;
	struct v05_greso_prompt x = { 1, V05_GRESO_EASY }, fresh = { 0, 0 };
	uint32_t skipped = 0, same_step = 0, same_seed = 0;

	(void)state;
	v05_greso_init(&g, 42);
	v05_greso_init(&g2, 43);
	for (uint64_t key = 1; key <= 10000; key++) {
		int s = v05_greso_skip(&g, &x, key, 3);

		assert_true(s == 0 || s == 1);
		assert_int_equal(v05_greso_skip(&g, &x, key, 3), s);
		skipped += (uint32_t)s;
		same_step += v05_greso_skip(&g, &x, key, 4) == s;
		same_seed += v05_greso_skip(&g2, &x, key, 3) == s;
		assert_int_equal(v05_greso_skip(&g, &fresh, key, 3), 0);
	}
	/* p_easy 0.5, z 1: half skipped (binomial sd 50). */
	assert_true(skipped > 4800 && skipped < 5200);
	/* Independent draws agree about half the time. */
	assert_true(same_step > 4800 && same_step < 5200);
	assert_true(same_seed > 4800 && same_seed < 5200);
}

static void test_greso_refusals(void **state)
{
	struct v05_greso g;
	struct v05_greso_prompt bad = { 0, V05_GRESO_EASY }, x = { 0, 0 };
	double r[2] = { 1.0, 2.0 }, keep;

	(void)state;
	v05_greso_init(&g, 0);
	assert_int_equal(v05_greso_keep_p(&g, &bad, &keep), -EINVAL);
	assert_int_equal(v05_greso_skip(&g, &bad, 1, 1), -EINVAL);
	assert_int_equal(v05_greso_fold(&g, &x, r, 2), -EDOM);
	assert_true(g.total == 0 && x.z == 0);
	assert_int_equal(v05_greso_fold(&g, &x, r, 0), -EINVAL);
	g.p_easy = 1.5;
	assert_int_equal(v05_greso_fold(&g, &x, r, 1), -EINVAL);
	assert_int_equal(v05_greso_step_end(&g), -EINVAL);
	assert_int_equal(v05_greso_step_end(NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_knapsack_estimate_example),
		cmocka_unit_test(test_knapsack_window_order),
		cmocka_unit_test(test_knapsack_history_refusals),
		cmocka_unit_test(test_greso_keep_examples),
		cmocka_unit_test(test_greso_runs),
		cmocka_unit_test(test_greso_adaptation),
		cmocka_unit_test(test_greso_refill),
		cmocka_unit_test(test_greso_skip_draws),
		cmocka_unit_test(test_greso_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
