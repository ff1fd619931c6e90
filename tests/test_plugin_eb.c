/* SPDX-License-Identifier: MIT */
/*
 * Mode v05-eb in the plugin: one batch, checked against the pure functions.
 * After the first wave the fit is v05_eb_fit's on the batch's rewards; each
 * prompt gets exactly v05_eb_choose's extra samples (plus padding), in one
 * wave; every group finalizes with v05_eb_estimate's numbers under that fit;
 * a batch takes two waves at most. Rewards inside (-1, 1) are accepted as
 * fractional successes.
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

#include "v05-internal/vocab.h"

#include "util/config.h"
#include "util/seg.h"
#include "v05.h"

#define N 48

struct fx {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[4 * N];
	double prior[N], truth[N];
	uint64_t key[N];
	float r[N][V05_K_LIMIT];
	uint32_t issued[N], finals, samples_decisions, waves;
};

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

static double u01(uint64_t *s)
{
	return (double)lcg(s) / 9007199254740992.0;
}

static int idx_of(struct fx *f, uint64_t key)
{
	for (int i = 0; i < N; i++)
		if (f->key[i] == key)
			return i;
	fail_msg("unknown key");
	return -1;
}

static void fx_open(struct fx *f, uint32_t pad, int fractional, uint64_t seed)
{
	struct v05_prompt_in in[N];
	char uids[N][16];
	int m;

	memset(f, 0, sizeof(*f));
	tc_config(&f->c);
	f->c.params.mode = V05_MODE_V05_EB;
	f->c.schedule = V05_SCHEDULE_ROUNDS; /* the barrier: test_eb_stream.c */
	f->c.params.cost = 0.002;
	f->c.pad_multiple = pad;
	f->c.max_prompts = N;
	f->c.max_producers = 1;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 2;
	test_name(f->name, sizeof(f->name), "ebplug");
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
	for (uint32_t i = 0; i < N; i++) {
		double mu = 2 * u01(&seed) - 1;

		f->truth[i] = mu;
		f->prior[i] = i % 5 == 0 ? 2 * u01(&seed) - 1 :
			      fmax(-1, fmin(1, mu + 0.2 * (u01(&seed) - 0.5)));
		for (uint32_t s = 0; s < V05_K_LIMIT; s++) {
			double x = u01(&seed);

			/* Binary, or with `fractional` some rewards in between. */
			f->r[i][s] = fractional && s % 3 == 1 ? (float)(mu * 0.5) :
				     (x < (1 + mu) / 2 ? 1.0f : -1.0f);
		}
		snprintf(uids[i], sizeof(uids[i]), "e%u", i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = f->prior[i];
		f->key[i] = v05_key(uids[i], in[i].uid_len);
	}
	m = v05_submit(f->p, in, N, f->d, NULL);
	assert_int_equal(m, N);
}

static void fx_close(struct fx *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

/* Push the rewards of every SAMPLE in d[0..m). */
static void push(struct fx *f, int m)
{
	for (int j = 0; j < m; j++) {
		const struct v05_decision *d = &f->d[j];
		int i;

		if (d->kind != V05_DECISION_SAMPLE)
			continue;
		i = idx_of(f, d->key);
		for (uint32_t s = 0; s < 64; s++) {
			if (!(d->samples >> s & 1))
				continue;
			f->issued[i]++;
			assert_int_equal(v05_producer_push(f->w, d->key, d->gen, s,
							   f->r[i][s]), 0);
		}
	}
}

static void run_batch(struct fx *f, uint32_t pad, int fractional)
{
	struct v05_params par = f->c.params;
	double pr[N], s[N];
	uint32_t k[N], total_extra = 0, planned_extra = 0, want_m[N];
	struct v05_eb_fit fit;
	int m;

	push(f, N);
	/* The fit the plugin must find, from the first wave's rewards. */
	for (uint32_t i = 0; i < N; i++) {
		pr[i] = f->prior[i];
		k[i] = par.k_init;
		s[i] = 0;
		for (uint32_t j = 0; j < k[i]; j++)
			s[i] += (1.0 + f->r[i][j]) / 2.0;
	}
	assert_int_equal(v05_eb_fit(pr, k, s, N, &fit), 0);
	for (uint32_t i = 0; i < N; i++) {
		want_m[i] = (uint32_t)v05_eb_choose(&par, &fit, pr[i], k[i], s[i]);
		planned_extra += want_m[i];
	}
	/* Wave 2 comes out of the first poll, all at once. */
	m = v05_poll(f->p, f->d, 4 * N);
	assert_true(m == N);
	for (int j = 0; j < m; j++) {
		int i = idx_of(f, f->d[j].key);

		if (f->d[j].kind == V05_DECISION_SAMPLE) {
			/* At least its own choice; padding only adds. */
			assert_true(f->d[j].k >= want_m[i]);
			assert_true(want_m[i] > 0);
			total_extra += f->d[j].k;
			f->samples_decisions++;
		} else {
			assert_int_equal(f->d[j].kind, V05_DECISION_FINAL);
			assert_int_equal(want_m[i], 0);
			f->finals++;
		}
	}
	/* The case exercises both answers. */
	assert_true(f->samples_decisions > 0 && f->finals > 0);
	assert_true(total_extra >= planned_extra);
	if (pad > 1 && planned_extra)
		assert_int_equal(total_extra % pad, 0);
	else
		assert_int_equal(total_extra, planned_extra);
	push(f, m);
	if (planned_extra) {
		m = v05_poll(f->p, f->d, 4 * N);
		/* Everything left is final: no third wave. */
		for (int j = 0; j < m; j++)
			assert_int_equal(f->d[j].kind, V05_DECISION_FINAL);
		f->finals += (uint32_t)m;
	}
	assert_int_equal(f->finals, N);
	/* Every group: v05_eb_estimate under the fit, bit for bit. */
	for (uint32_t slot = 0; slot < N; slot++) {
		struct v05_group g;
		struct v05_estimate e;
		double r[V05_K_LIMIT], adv[V05_K_LIMIT];
		int i;

		if (v05_group(f->p, slot, &g))
			continue;
		i = idx_of(f, g.key);
		assert_int_equal(g.k, f->issued[i]);
		for (uint32_t j = 0; j < g.k; j++)
			r[j] = f->r[i][j];
		assert_int_equal(v05_eb_estimate(&par, &fit, f->prior[i], r, g.k,
						 &e, adv), 0);
		assert_true(g.baseline == e.baseline);
		assert_true(g.sigma == e.sigma);
		for (uint32_t j = 0; j < g.k; j++)
			assert_true(g.advantages[j] == (float)adv[j]);
	}
	(void)fractional;
}

static void test_eb_batch(void **state)
{
	struct fx *f = test_malloc(sizeof(*f));

	(void)state;
	fx_open(f, 1, 0, 11);
	run_batch(f, 1, 0);
	fx_close(f);
	fx_open(f, 32, 0, 12);
	run_batch(f, 32, 0);
	fx_close(f);
	test_free(f);
}

static void test_eb_fractional_rewards(void **state)
{
	struct fx *f = test_malloc(sizeof(*f));
	uint64_t v[V05_COUNTER_SLOTS];

	(void)state;
	fx_open(f, 1, 1, 13);
	run_batch(f, 1, 1);
	assert_int_equal(v05_counters(f->p, v, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	assert_int_equal(v[V05_C_REJ_RANGE], 0);
	fx_close(f);
	test_free(f);
}

static void test_eb_config(void **state)
{
	struct v05_config c;

	(void)state;
	/* The default is v05-pg with its preset (docs/RULES.md, "Which mode
	 * for training"); v05-eb, the baseline's-MSE mode, and the paper's
	 * exact behaviour are one call away. */
	v05_config_default(&c);
	assert_int_equal(c.params.mode, V05_MODE_PG);
	assert_int_equal(c.params.sigma, V05_SIGMA_PAPER);
	assert_int_equal(c.params.k_init, 2);
	assert_int_equal(c.pg_skip, V05_PG_SKIP);
	assert_int_equal(c.pad_multiple, 1);
	assert_true(c.halt_fraction == 0.0);
	assert_int_equal(c.schedule, V05_SCHEDULE_STREAM);
	assert_int_equal(v05_config_check(&c), 0);
	assert_int_equal(v05_config_mode(&c, V05_MODE_V05_EB), 0);
	assert_int_equal(c.params.sigma, V05_SIGMA_RMS);
	assert_int_equal(c.params.k_init, 4);
	assert_int_equal(c.pad_multiple, 32);
	assert_int_equal(c.schedule, V05_SCHEDULE_STREAM);
	assert_int_equal(v05_config_check(&c), 0);
	v05_config_paper(&c);
	assert_int_equal(c.params.mode, V05_MODE_V05);
	assert_int_equal(c.params.sigma, V05_SIGMA_PAPER);
	assert_true(c.halt_fraction == 0.25);
	assert_int_equal(c.schedule, V05_SCHEDULE_ROUNDS);
	assert_int_equal(v05_config_check(&c), 0);
	tc_config(&c);
	c.flags = V05_CONFIG_EXTERNAL_HALT;
	assert_int_equal(v05_config_check(&c), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eb_batch),
		cmocka_unit_test(test_eb_fractional_rewards),
		cmocka_unit_test(test_eb_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
