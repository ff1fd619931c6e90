/* SPDX-License-Identifier: MIT */
/*
 * The published allocation rules as modes (docs/RULES.md): Reinforce-Ada's
 * exit test, keep set and advantages on the worked examples of the spec
 * (E1-E6), Knapsack RL's allocation on K1-K3, and both through a plugin:
 * Reinforce-Ada's rounds end where its own rewards say under either
 * schedule, the keep mask reaches v05_group; knapsack-prior's first
 * dispatch is the allocation of the submitted priors.
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

static struct v05_params ada(uint32_t mode)
{
	struct v05_config c;

	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, mode), 0);
	return c.params;
}

static uint64_t bits(const uint32_t *idx, uint32_t n)
{
	uint64_t m = 0;

	for (uint32_t i = 0; i < n; i++)
		m |= 1ull << idx[i];
	return m;
}

/* rewards: -1 everywhere but +1 at the listed samples. */
static void fill(double *r, uint32_t k, const uint32_t *plus, uint32_t n)
{
	for (uint32_t i = 0; i < k; i++)
		r[i] = -1.0;
	for (uint32_t i = 0; i < n; i++)
		r[plus[i]] = 1.0;
}

struct ada_case {
	uint32_t mode, k;
	uint32_t plus[4], n_plus;
	int action;            /* at k */
	uint32_t keep[4], n_keep;
	double baseline;
	double a_plus, a_minus; /* advantages of kept successes, failures */
};

static void check_ada(const struct ada_case *c)
{
	struct v05_params p = ada(c->mode);
	struct v05_estimate e;
	double r[64], adv[64];
	uint64_t keep;

	fill(r, c->k, c->plus, c->n_plus);
	assert_int_equal(v05_estimate(&p, 0.0, r, c->k, &e, adv), 0);
	assert_int_equal(e.action, c->action);
	assert_int_equal(v05_keep(&p, r, c->k, &keep), 0);
	if (c->action == V05_ACTION_MORE)
		return;
	assert_true(fabs(e.baseline - c->baseline) < 1e-12);
	assert_true(e.sigma == 1.0);
	assert_int_equal(keep, bits(c->keep, c->n_keep));
	for (uint32_t i = 0; i < c->k; i++) {
		double want = !(keep >> i & 1) ? 0.0 :
			      r[i] > 0 ? c->a_plus : c->a_minus;

		assert_true(fabs(adv[i] - want) < 1e-12);
	}
}

/* The spec's E1-E6 (balanced: M 8, N_max 32, n 4, K 2/2; positive: K 1). */
static void test_ada_worked_examples(void **state)
{
	static const struct ada_case cases[] = {
		/* E1: exits in round 1. */
		{ V05_MODE_ADA, 8, { 0, 3 }, 2, V05_ACTION_STOP,
		  { 0, 3, 1, 2 }, 4, -0.5, 1.5, -0.5 },
		/* E2: after round 2 one success, not enough; round 3. */
		{ V05_MODE_ADA, 16, { 11 }, 1, V05_ACTION_MORE, { 0 }, 0,
		  0, 0, 0 },
		{ V05_MODE_ADA, 24, { 11, 17 }, 2, V05_ACTION_STOP,
		  { 11, 17, 0, 1 }, 4, -20.0 / 24, 1 + 20.0 / 24,
		  -1 + 20.0 / 24 },
		/* E3: one success in 32: N_max, kept with the fill rule. */
		{ V05_MODE_ADA, 32, { 5 }, 1, V05_ACTION_STOP,
		  { 5, 0, 1, 2 }, 4, -30.0 / 32, 1 + 30.0 / 32,
		  -1 + 30.0 / 32 },
		/* E5: positive exit at the first success. */
		{ V05_MODE_ADA_POS, 8, { 5 }, 1, V05_ACTION_STOP,
		  { 5, 0, 1, 2 }, 4, -0.75, 1.75, -0.25 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_ada(&cases[i]);
}

/* E4, E6: a pool of one outcome keeps n samples with A = 0 (balanced: at
 * N_max; positive: all successes exit at once). */
static void test_ada_one_outcome(void **state)
{
	struct v05_params bal = ada(V05_MODE_ADA), pos = ada(V05_MODE_ADA_POS);
	struct v05_estimate e;
	double r[32], adv[32];
	uint64_t keep;

	(void)state;
	for (uint32_t i = 0; i < 32; i++)
		r[i] = 1.0;
	for (uint32_t k = 8; k < 32; k += 8) {
		assert_int_equal(v05_estimate(&bal, 0.0, r, k, &e, adv), 0);
		assert_int_equal(e.action, V05_ACTION_MORE); /* no failure */
	}
	assert_int_equal(v05_estimate(&bal, 0.0, r, 32, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	assert_int_equal(v05_keep(&bal, r, 32, &keep), 0);
	assert_int_equal(keep, 0xfull);
	for (uint32_t i = 0; i < 32; i++)
		assert_true(adv[i] == 0.0);
	assert_int_equal(v05_estimate(&pos, 0.0, r, 8, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	assert_int_equal(v05_keep(&pos, r, 8, &keep), 0);
	assert_int_equal(keep, 0xfull);
	/* A success is above 0.4 (0.7 on a 0/1 scale): 0.4 itself fails. */
	for (uint32_t i = 0; i < 8; i++)
		r[i] = 0.4;
	assert_int_equal(v05_estimate(&pos, 0.0, r, 8, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_MORE);
}

static void test_ada_params(void **state)
{
	struct v05_config c;
	struct v05_params p;
	uint64_t keep;
	double r[8] = { 1, -1, 1, -1, 1, -1, 1, -1 };

	(void)state;
	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_ADA), 0);
	assert_int_equal(c.pad_multiple, 1);
	assert_true(c.halt_fraction == 0.0);
	assert_int_equal(v05_config_check(&c), 0);
	c.pad_multiple = 32; /* padding would add samples to the pool */
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "pad_multiple 1"));
	assert_int_equal(v05_config_mode(&c, V05_MODE_COUNT), -EINVAL);
	p = ada(V05_MODE_ADA);
	p.k_step = 4; /* rounds are of k_init */
	assert_int_equal(v05_params_check(&p), -EINVAL);
	p = ada(V05_MODE_ADA);
	p.keep_n = 9;
	assert_int_equal(v05_params_check(&p), -EINVAL);
	p.keep_n = 6; /* n 6: 3 and 3 */
	assert_int_equal(v05_keep(&p, r, 8, &keep), 0);
	assert_int_equal(keep, 0x3full);
	v05_params_default(&p);
	p.keep_n = 2; /* only reinforce-ada keeps part of a group */
	assert_int_equal(v05_params_check(&p), -EINVAL);
	p.keep_n = 0;
	assert_int_equal(v05_keep(&p, r, 8, &keep), 0);
	assert_int_equal(keep, 0xffull);
}

/* The spec's K1-K3, each checked against the authors' allocation there. */
static void test_knapsack_worked_examples(void **state)
{
	static const struct {
		uint32_t n, per, up;
		double p[8];
		uint32_t want[8];
	} cases[] = {
		{ 4, 8, 16, { 0.5, 0.1, 1.0, 0.0 }, { 7, 16, 2, 7 } },
		{ 4, 8, 64, { 0.5, 0.25, 0.75, 0.05 }, { 7, 11, 7, 7 } },
		{ 8, 8, 64, { 0.02, 0.3, 1, 1, 1, 1, 0.9, 0.6 },
		  { 19, 15, 2, 2, 2, 2, 12, 10 } },
	};
	uint32_t out[8];

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		assert_int_equal(v05_knapsack_plan(cases[c].p, cases[c].n,
						   cases[c].per, cases[c].up,
						   out), 0);
		for (uint32_t i = 0; i < cases[c].n; i++)
			assert_int_equal(out[i], cases[c].want[i]);
	}
}

/* Ties go to the lower index (docs/RULES.md): two prompts of the same p
 * whose last sample could go to either, wherever they stand; the other
 * prompt's gain is never equal to theirs. */
static void test_knapsack_ties(void **state)
{
	static const struct {
		uint32_t n, per;
		double p[4];
		uint32_t want[4];
	} cases[] = {
		{ 3, 3, { 0.5, 0.5, 0.1 }, { 4, 3, 2 } },
		{ 3, 3, { 0.1, 0.5, 0.5 }, { 2, 4, 3 } },
		{ 3, 3, { 0.5, 0.1, 0.5 }, { 4, 2, 3 } },
		{ 3, 6, { 0.5, 0.3, 0.5 }, { 6, 7, 5 } },
		{ 4, 5, { 0.3, 0.5, 0.25, 0.5 }, { 5, 5, 6, 4 } },
	};
	uint32_t out[4];

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		assert_int_equal(v05_knapsack_plan(cases[c].p, cases[c].n,
						   cases[c].per, 64, out), 0);
		for (uint32_t i = 0; i < cases[c].n; i++)
			assert_int_equal(out[i], cases[c].want[i]);
	}
}

/* Every prompt alike: the budget spread evenly; all solved: uniform; a
 * tight cap leaves budget unspent rather than pass k_max. */
static void test_knapsack_edges(void **state)
{
	double half[6] = { 0.5, 0.5, 0.5, 0.5, 0.5, 0.5 };
	double solved[3] = { 1.0, 1.0, 1.0 };
	double nan_p[1] = { NAN }, over[1] = { 1.5 };
	uint32_t out[6];

	(void)state;
	assert_int_equal(v05_knapsack_plan(half, 6, 4, 64, out), 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_int_equal(out[i], 4);
	assert_int_equal(v05_knapsack_plan(solved, 3, 8, 64, out), 0);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(out[i], 8);
	assert_int_equal(v05_knapsack_plan(half, 2, 8, 8, out), 0);
	assert_int_equal(out[0] + out[1], 16);
	/* NaN: no estimate, the uniform share outside the knapsack. */
	assert_int_equal(v05_knapsack_plan(nan_p, 1, 4, 64, out), 0);
	assert_int_equal(out[0], 4);
	assert_int_equal(v05_knapsack_plan(over, 1, 4, 64, out), -EDOM);
	assert_int_equal(v05_knapsack_plan(half, 6, 1, 64, out), -EINVAL);
	assert_int_equal(v05_knapsack_plan(half, 6, 4, 65, out), -EINVAL);
}

/* knapsack-prior's advantages are GRPO's clipped to +-5: one success in
 * 40 is +6.2 under GRPO, +5 here; the others are the same. */
static void test_knapsack_clip(void **state)
{
	struct v05_config c;
	struct v05_params grpo;
	struct v05_estimate e;
	double r[40], a_knap[40], a_grpo[40];

	(void)state;
	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_KNAPSACK_PRIOR), 0);
	grpo = c.params;
	grpo.mode = V05_MODE_GRPO;
	for (uint32_t i = 0; i < 40; i++)
		r[i] = i == 7 ? 1.0 : -1.0;
	assert_int_equal(v05_estimate(&c.params, 0.0, r, 40, &e, a_knap), 0);
	assert_int_equal(v05_estimate(&grpo, 0.0, r, 40, &e, a_grpo), 0);
	assert_true(a_grpo[7] > 6.0);
	assert_true(a_knap[7] == V05_KNAPSACK_ADV_CLIP);
	for (uint32_t i = 0; i < 40; i++)
		if (i != 7)
			assert_true(a_knap[i] == a_grpo[i]);
}

/* ---- through a plugin ------------------------------------------------- */

static void open_mode(struct fx *f, uint32_t mode, uint32_t schedule)
{
	memset(f, 0, sizeof(*f));
	fx_config(f);
	assert_int_equal(v05_config_mode(&f->c, mode), 0);
	f->c.schedule = schedule;
	fx_open(f);
}

/* Answer every sample decision from the table r[prompt][sample] until
 * every prompt is final; returns the number of dispatches (waves). */
static uint32_t drive(struct fx *f, const uint64_t *keys, uint32_t n,
		      float r[][64], int first)
{
	uint32_t finals = 0, waves = 0;
	int got = first;

	while (finals < n) {
		for (int i = 0; i < got; i++) {
			struct v05_decision *d = &f->d[i];
			int j = find(keys, n, d->key);

			assert_true(j >= 0);
			if (d->kind == V05_DECISION_SAMPLE) {
				push_samples(f, d->key, d->samples, r[j]);
				waves++;
			} else if (d->kind == V05_DECISION_FINAL) {
				finals++;
			}
		}
		if (finals < n) {
			assert_int_equal(v05_wait(f->p, 5000), 1);
			got = v05_poll(f->p, f->d, MAXD);
			assert_true(got >= 0);
		}
	}
	return waves;
}

static uint32_t slot_of(struct fx *f, uint64_t key)
{
	struct v05_prompt *e = v05__table_find(&f->p->table, key);

	assert_non_null(e);
	return e ? e->slot : UINT32_MAX; /* v05_group refuses it */
}

static void ada_in_plugin(uint32_t schedule)
{
	static const double priors[3] = { 0.9, -0.9, 0.0 };
	struct fx f;
	uint64_t keys[3];
	float r[3][64];
	struct v05_group g;
	uint32_t k_want[3] = { 8, 24, 32 }, waves;
	uint64_t keep_want[3];

	/* u0: E1; u1: E2; u2: one success at 5 in 32 (E3). */
	for (uint32_t i = 0; i < 3; i++)
		for (uint32_t s = 0; s < 64; s++)
			r[i][s] = -1.0f;
	r[0][0] = r[0][3] = 1.0f;
	r[1][11] = r[1][17] = 1.0f;
	r[2][5] = 1.0f;
	keep_want[0] = 1ull << 0 | 1ull << 3 | 1ull << 1 | 1ull << 2;
	keep_want[1] = 1ull << 11 | 1ull << 17 | 1ull << 0 | 1ull << 1;
	keep_want[2] = 1ull << 5 | 1ull << 0 | 1ull << 1 | 1ull << 2;
	open_mode(&f, V05_MODE_ADA, schedule);
	waves = drive(&f, keys, 3, r, submit(&f, priors, 3, keys));
	assert_int_equal(waves, 1 + 3 + 4); /* rounds: 1, 3 and 4 */
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(v05_group(f.p, slot_of(&f, keys[i]), &g), 0);
		assert_int_equal(g.k, k_want[i]);
		assert_int_equal(g.keep, keep_want[i]);
		for (uint32_t s = 0; s < g.k; s++)
			if (!(g.keep >> s & 1))
				assert_true(g.advantages[s] == 0.0f);
			else
				assert_true(fabsf(g.advantages[s] -
						  (g.rewards[s] - (float)g.baseline)) < 1e-6f);
	}
	assert_int_equal(ctr(&f, V05_C_SAMPLES_PADDED), 0);
	assert_int_equal(ctr(&f, V05_C_HALTS), 0);
	fx_close(&f);
}

static void test_ada_rounds(void **state)
{
	(void)state;
	ada_in_plugin(V05_SCHEDULE_ROUNDS);
}

static void test_ada_stream(void **state)
{
	(void)state;
	ada_in_plugin(V05_SCHEDULE_STREAM);
}

static void test_knapsack_in_plugin(void **state)
{
	double priors[8] = { -0.96, -0.4, 1.0, 1.0, 1.0, 1.0, 0.8, 0.2 };
	double p01[8];
	uint32_t plan[8], total = 0;
	uint64_t keys[8];
	float r[8][64];
	struct fx f;
	int got;

	(void)state;
	for (uint32_t i = 0; i < 8; i++) {
		p01[i] = (1 + priors[i]) / 2; /* K3's p */
		for (uint32_t s = 0; s < 64; s++)
			r[i][s] = s == 0 ? 1.0f : -1.0f;
	}
	assert_int_equal(v05_knapsack_plan(p01, 8, 8, 64, plan), 0);
	open_mode(&f, V05_MODE_KNAPSACK_PRIOR, V05_SCHEDULE_STREAM);
	got = submit(&f, priors, 8, keys);
	assert_int_equal(got, 8);
	for (int i = 0; i < got; i++) {
		int j = find(keys, 8, f.d[i].key);

		assert_int_equal(f.d[i].k, plan[j]);
		assert_int_equal(f.d[i].samples, (1ull << plan[j]) - 1);
		total += f.d[i].k;
	}
	assert_int_equal(total, 64); /* 8 per prompt on average */
	assert_int_equal(drive(&f, keys, 8, r, got), 8); /* one wave */
	for (uint32_t i = 0; i < 8; i++) {
		struct v05_group g;

		assert_int_equal(v05_group(f.p, slot_of(&f, keys[i]), &g), 0);
		assert_int_equal(g.k, plan[i]);
		/* Clipped (test_knapsack_clip makes the clip bind). */
		for (uint32_t s = 0; s < g.k; s++)
			assert_true(fabsf(g.advantages[s]) <= 5.0f);
	}
	fx_close(&f);
}

/* Mode knapsack, K4: a prompt submitted with a NaN prior (no estimate
 * yet) gets k_init outside the knapsack; its group records a prior of 0.
 * Other modes, knapsack-prior too, refuse a NaN prior. */
static void test_knapsack_no_estimate(void **state)
{
	double priors[4] = { 0.0, -0.8, NAN, -1.0 }; /* p 0.5, 0.1, -, 0 */
	uint32_t want[4] = { 7, 15, 8, 2 };
	uint64_t keys[4];
	struct v05_group g;
	float r[4][64];
	struct fx f;
	int got;

	(void)state;
	for (uint32_t i = 0; i < 4; i++)
		for (uint32_t s = 0; s < 64; s++)
			r[i][s] = s % 3 ? -1.0f : 1.0f;
	open_mode(&f, V05_MODE_KNAPSACK, V05_SCHEDULE_STREAM);
	assert_int_equal(f.c.params.k_init, 8);
	assert_int_equal(f.c.params.k_max, V05_K_LIMIT);
	got = submit(&f, priors, 4, keys);
	assert_int_equal(got, 4);
	for (int i = 0; i < got; i++)
		assert_int_equal(f.d[i].k, want[find(keys, 4, f.d[i].key)]);
	assert_int_equal(drive(&f, keys, 4, r, got), 4); /* one wave */
	assert_int_equal(v05_group(f.p, slot_of(&f, keys[2]), &g), 0);
	assert_int_equal(g.k, 8);
	assert_true(g.prior == 0.0);
	fx_close(&f);

	open_mode(&f, V05_MODE_V05_FIXED, V05_SCHEDULE_STREAM);
	assert_int_equal(submit(&f, priors + 2, 1, keys), 0);
	fx_close(&f);
	/* knapsack-prior's prior is a value model's: NaN is refused. */
	open_mode(&f, V05_MODE_KNAPSACK_PRIOR, V05_SCHEDULE_STREAM);
	assert_int_equal(submit(&f, priors + 2, 1, keys), 0);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ada_worked_examples),
		cmocka_unit_test(test_ada_one_outcome),
		cmocka_unit_test(test_ada_params),
		cmocka_unit_test(test_knapsack_worked_examples),
		cmocka_unit_test(test_knapsack_ties),
		cmocka_unit_test(test_knapsack_edges),
		cmocka_unit_test(test_knapsack_clip),
		cmocka_unit_test(test_ada_rounds),
		cmocka_unit_test(test_ada_stream),
		cmocka_unit_test(test_knapsack_in_plugin),
		cmocka_unit_test(test_knapsack_no_estimate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
