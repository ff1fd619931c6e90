/* SPDX-License-Identifier: MIT */
/*
 * Pilot-Commit (mode "pilot-commit", docs/RULES.md) on worked examples: a
 * pilot of 8 classed by its successes at the band's edges (0 too hard,
 * 1 and 6 committed, 7 too easy, 8 solved), fractional rewards, the
 * per-group answer (commit, drop, then GRPO over pilot and commit); the
 * trainer's record across epochs (drawn once per epoch, solved ones never
 * again); what bad input gets; and the mode through a plugin under both
 * schedules, with the default band and a narrower one.
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

/* k rewards, the first `wins` +1, the rest -1. */
static void fill(double *r, uint32_t k, uint32_t wins)
{
	for (uint32_t i = 0; i < k; i++)
		r[i] = i < wins ? 1.0 : -1.0;
}

static void test_pc_class_examples(void **state)
{
	static const int want[9] = {
		V05_PC_TOO_HARD, V05_PC_COMMIT, V05_PC_COMMIT, V05_PC_COMMIT,
		V05_PC_COMMIT, V05_PC_COMMIT, V05_PC_COMMIT, V05_PC_TOO_EASY,
		V05_PC_SOLVED,
	};
	double r[8];

	(void)state;
	/* The authors' band: p in [0.125, 0.75]; evict at 1. */
	for (uint32_t w = 0; w <= 8; w++) {
		fill(r, 8, w);
		assert_int_equal(v05_pc_class(r, 8, 0.125, 0.25, 1.0), want[w]);
	}
	/* Never evicting: 8 of 8 is merely too easy. */
	assert_int_equal(v05_pc_class(r, 8, 0.125, 0.25, NAN), V05_PC_TOO_EASY);
	/* A pilot of 4: 0 hard, 1..3 (0.25..0.75) committed, 4 solved. */
	fill(r, 4, 3);
	assert_int_equal(v05_pc_class(r, 4, 0.125, 0.25, 1.0), V05_PC_COMMIT);
	fill(r, 4, 0);
	assert_int_equal(v05_pc_class(r, 4, 0.125, 0.25, 1.0), V05_PC_TOO_HARD);
	/* The yaml's band, [0.25, 0.75]: 1 of 8 is now too hard. */
	fill(r, 8, 1);
	assert_int_equal(v05_pc_class(r, 8, 0.25, 0.25, 1.0), V05_PC_TOO_HARD);
	fill(r, 8, 2);
	assert_int_equal(v05_pc_class(r, 8, 0.25, 0.25, 1.0), V05_PC_COMMIT);
	/* Fractional rewards: p is the mean of (1 + r) / 2. Two rewards of
	 * -0.5 are p = 0.25: in the band; of -0.9, p = 0.05: too hard. */
	r[0] = r[1] = -0.5;
	assert_int_equal(v05_pc_class(r, 2, 0.125, 0.25, 1.0), V05_PC_COMMIT);
	r[0] = r[1] = -0.9;
	assert_int_equal(v05_pc_class(r, 2, 0.125, 0.25, 1.0), V05_PC_TOO_HARD);
}

/* v05_estimate in mode pilot-commit (the default band): at the pilot's
 * k_init "more" to k_init + k_step, or "drop" with zero advantages;
 * beyond it GRPO's advantages over every sample. */
static void test_pc_estimate(void **state)
{
	struct v05_config c;
	struct v05_estimate e, eg;
	double r[32], adv[32], ag[32];
	struct v05_params grpo;

	(void)state;
	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_PILOT_COMMIT), 0);
	assert_int_equal(c.params.k_init, 8);
	assert_int_equal(c.params.k_step, 24);
	assert_int_equal(c.params.k_max, 32);
	assert_int_equal(v05_config_check(&c), 0);
	fill(r, 8, 3);
	assert_int_equal(v05_estimate(&c.params, 0.0, r, 8, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_MORE);
	assert_true(e.has_target && e.k_target == 32.0);
	fill(r, 8, 7);
	assert_int_equal(v05_estimate(&c.params, 0.0, r, 8, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	for (int i = 0; i < 8; i++)
		assert_true(adv[i] == 0.0);
	fill(r, 8, 0);
	assert_int_equal(v05_estimate(&c.params, 0.0, r, 8, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_DROP);
	/* The full group: GRPO's. */
	fill(r, 32, 9);
	assert_int_equal(v05_estimate(&c.params, 0.0, r, 32, &e, adv), 0);
	assert_int_equal(e.action, V05_ACTION_STOP);
	v05_params_default(&grpo);
	grpo.mode = V05_MODE_GRPO;
	grpo.k_init = 1;
	grpo.k_max = 32;
	assert_int_equal(v05_estimate(&grpo, 0.0, r, 32, &eg, ag), 0);
	assert_true(e.baseline == eg.baseline && e.sigma == eg.sigma);
	for (int i = 0; i < 32; i++)
		assert_true(adv[i] == ag[i]);
	assert_string_equal(v05_mode_name(V05_MODE_PILOT_COMMIT), "pilot-commit");
}

/* The trainer's record: epoch 0 committed; drawn again in epoch 0? no;
 * epoch 1 yes, its pilot solved; epoch 1 again no; epoch 2 no (evicted),
 * nor later. A too-hard one comes back the next epoch. */
static void test_pc_epochs(void **state)
{
	struct v05_pc_prompt x, h;
	double r[8];

	(void)state;
	memset(&x, 0, sizeof(x));
	memset(&h, 0, sizeof(h));
	assert_int_equal(v05_pc_skip(&x, 0), 0);
	fill(r, 8, 3);
	assert_int_equal(v05_pc_fold(&x, 0, r, 8, 0.125, 0.25, 1.0), V05_PC_COMMIT);
	assert_int_equal(v05_pc_skip(&x, 0), 1);
	assert_int_equal(v05_pc_skip(&x, 1), 0);
	fill(r, 8, 8);
	assert_int_equal(v05_pc_fold(&x, 1, r, 8, 0.125, 0.25, 1.0), V05_PC_SOLVED);
	assert_int_equal(v05_pc_skip(&x, 1), 1);
	assert_int_equal(v05_pc_skip(&x, 2), 1);
	assert_int_equal(v05_pc_skip(&x, 50), 1);
	fill(r, 8, 0);
	assert_int_equal(v05_pc_fold(&h, 3, r, 8, 0.125, 0.25, 1.0),
			 V05_PC_TOO_HARD);
	assert_int_equal(v05_pc_skip(&h, 3), 1);
	assert_int_equal(v05_pc_skip(&h, 4), 0);
	/* Epochs do not go back. */
	assert_int_equal(v05_pc_fold(&h, 2, r, 8, 0.125, 0.25, 1.0), -EINVAL);
	assert_int_equal(v05_pc_skip(&h, 2), -EINVAL);
}

static void test_pc_refusals(void **state)
{
	struct v05_pc_prompt x;
	struct v05_config c;
	double r[2] = { 1.0, NAN }, ok[2] = { 1.0, -1.0 };

	(void)state;
	assert_int_equal(v05_pc_class(r, 2, 0.125, 0.25, 1.0), -EDOM);
	assert_int_equal(v05_pc_class(ok, 0, 0.125, 0.25, 1.0), -EINVAL);
	assert_int_equal(v05_pc_class(ok, 65, 0.125, 0.25, 1.0), -EINVAL);
	assert_int_equal(v05_pc_class(NULL, 2, 0.125, 0.25, 1.0), -EINVAL);
	assert_int_equal(v05_pc_class(ok, 2, -0.1, 0.25, 1.0), -EINVAL);
	assert_int_equal(v05_pc_class(ok, 2, 0.6, 0.5, 1.0), -EINVAL);
	/* evict inside the band, or above 1. */
	assert_int_equal(v05_pc_class(ok, 2, 0.125, 0.25, 0.5), -EINVAL);
	assert_int_equal(v05_pc_class(ok, 2, 0.125, 0.25, 1.5), -EINVAL);
	memset(&x, 0, sizeof(x));
	assert_int_equal(v05_pc_fold(&x, 0, r, 2, 0.125, 0.25, 1.0), -EDOM);
	assert_int_equal(x.seen, 0);
	x.last = 7; /* not a record this library wrote */
	assert_int_equal(v05_pc_skip(&x, 0), -EINVAL);
	/* The configuration: an empty band, a commit that does not add up,
	 * padding or a halt. */
	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_PILOT_COMMIT), 0);
	c.pc_lower = 0.8;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	c.pc_lower = V05_PC_LOWER;
	c.params.k_step = 8;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	c.params.k_step = 24;
	c.pad_multiple = 32;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	c.pad_multiple = 1;
	c.halt_fraction = 0.25;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	c.halt_fraction = 0.0;
	assert_int_equal(v05_config_check(&c), 0);
}

/* ---- through a plugin ------------------------------------------------- */

/* Eight prompts, pilots of 4 with 0..4 successes (and three more), commit
 * 12: the ones in the band get exactly their commit (one "sample"
 * decision of samples 4..15), the others drop after the pilot; the final
 * groups are GRPO's over all 16. With lower 0.5 the band is [0.5, 0.75]:
 * 1 of 4 drops too. */
static void pc_in_plugin(uint32_t schedule, double lower)
{
	static const double priors[8] = { 0 };
	static const uint32_t wins[8] = { 0, 1, 2, 3, 4, 1, 2, 0 };
	struct fx f;
	uint64_t keys[8];
	float r[8][64];
	uint32_t finals = 0, drops = 0, commits = 0;
	int got;

	for (uint32_t i = 0; i < 8; i++)
		for (uint32_t t = 0; t < 64; t++)
			/* The pilot's wins first; the commit alternates. */
			r[i][t] = t < 4 ? (t < wins[i] ? 1.0f : -1.0f) :
				  (t % 2 ? 1.0f : -1.0f);
	memset(&f, 0, sizeof(f));
	fx_config(&f);
	assert_int_equal(v05_config_mode(&f.c, V05_MODE_PILOT_COMMIT), 0);
	f.c.params.k_init = 4;
	f.c.params.k_step = 12;
	f.c.params.k_max = 16;
	f.c.pc_lower = lower;
	f.c.schedule = schedule;
	fx_open(&f);
	got = submit(&f, priors, 8, keys);
	assert_int_equal(got, 8);
	while (finals + drops < 8) {
		for (int i = 0; i < got; i++) {
			struct v05_decision *d = &f.d[i];
			int j = find(keys, 8, d->key);
			double p = wins[j] / 4.0;
			int in = p >= lower && p <= 0.75;

			assert_true(j >= 0);
			if (d->kind == V05_DECISION_SAMPLE) {
				if (d->samples != 0xfull) {
					assert_true(in);
					assert_int_equal(d->samples, 0xfff0ull);
					commits++;
				}
				push_samples(&f, d->key, d->samples, r[j]);
			} else if (d->kind == V05_DECISION_DROP) {
				assert_false(in);
				assert_int_equal(d->k, 4);
				drops++;
			} else if (d->kind == V05_DECISION_FINAL) {
				struct v05_group g;
				struct v05_params gp;
				struct v05_estimate e;
				double rr[16], a[16];

				assert_true(in);
				assert_int_equal(d->k, 16);
				assert_int_equal(v05_group(f.p, d->slot, &g), 0);
				v05_params_default(&gp);
				gp.mode = V05_MODE_GRPO;
				gp.k_init = 1;
				for (int t = 0; t < 16; t++)
					rr[t] = r[j][t];
				assert_int_equal(v05_estimate(&gp, 0.0, rr, 16, &e, a), 0);
				for (int t = 0; t < 16; t++)
					assert_true(g.advantages[t] == (float)a[t]);
				finals++;
			}
		}
		if (finals + drops < 8) {
			assert_int_equal(v05_wait(f.p, 5000), 1);
			got = v05_poll(f.p, f.d, MAXD);
			assert_true(got >= 0);
		}
	}
	assert_int_equal(commits, finals);
	assert_int_equal(finals, lower > 0.2 ? 3 : 5);
	assert_int_equal(ctr(&f, V05_C_SAMPLES_PADDED), 0);
	assert_int_equal(ctr(&f, V05_C_SAMPLES_ISSUED), 8 * 4 + finals * 12);
	fx_close(&f);
}

static void test_pc_rounds(void **state)
{
	(void)state;
	pc_in_plugin(V05_SCHEDULE_ROUNDS, V05_PC_LOWER);
}

static void test_pc_stream(void **state)
{
	(void)state;
	pc_in_plugin(V05_SCHEDULE_STREAM, V05_PC_LOWER);
}

static void test_pc_narrow_band(void **state)
{
	(void)state;
	pc_in_plugin(V05_SCHEDULE_STREAM, 0.5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pc_class_examples),
		cmocka_unit_test(test_pc_estimate),
		cmocka_unit_test(test_pc_epochs),
		cmocka_unit_test(test_pc_refusals),
		cmocka_unit_test(test_pc_rounds),
		cmocka_unit_test(test_pc_stream),
		cmocka_unit_test(test_pc_narrow_band),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
