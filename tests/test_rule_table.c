/* SPDX-License-Identifier: MIT */
/*
 * The rule table (plugin/rules/rule.h, table.c): every mode has its row,
 * and the row is what the library answers by: the mode's name both ways,
 * v05_config_mode's preset passing the mode's own checks and making a
 * plugin, v05_estimate refusing exactly the rows that need a plugin, the
 * row's shape matching its waves. And a prompt's first wave as the rule
 * sets it at submit (the table entry's k_first): an entry an older
 * library wrote (k_first 0) decides as k_init, bit for bit.
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
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05.h"

static void test_every_mode_has_a_row(void **state)
{
	(void)state;
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++) {
		const struct v05__rule *r = v05__rule_of(m);

		assert_non_null(r);
		assert_non_null(r->name);
		assert_true(r->name[0] != 0);
		assert_ptr_equal(v05_mode_name(m), r->name);
		assert_int_equal(v05_mode_from_name(r->name), (int)m);
		assert_non_null(r->estimate);
		/* A row fits in waves iff it plans a first wave's more. */
		assert_int_equal(r->waves == V05__WAVES_FIT, r->more != NULL);
		if (r->fold_first || (r->flags & (V05__RULE_MERGES |
						  V05__RULE_EARLY)))
			assert_int_equal(r->waves, V05__WAVES_FIT);
		if (r->flags & (V05__RULE_OSLA | V05__RULE_HALTS))
			assert_int_equal(r->waves, V05__WAVES_STEPS);
		/* Names are distinct: from_name found this row, not another. */
		for (uint32_t o = 0; o < m; o++)
			assert_string_not_equal(v05__rule_of(o)->name, r->name);
	}
	assert_null(v05__rule_of(V05_MODE_COUNT));
	assert_null(v05_mode_name(V05_MODE_COUNT));
}

/* An unknown name is refused, the message listing every row's name. */
static void test_unknown_name(void **state)
{
	(void)state;
	assert_int_equal(v05_mode_from_name("v06"), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "'v06'"));
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++)
		assert_non_null(strstr(v05_errmsg(), v05_mode_name(m)));
	assert_int_equal(v05_mode_from_name(NULL), -EINVAL);
}

/* v05_config_mode's preset passes the mode's checks and makes a plugin;
 * a preset's rule gets one wave or rounds nothing pads or halts. */
static void test_presets(void **state)
{
	(void)state;
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++) {
		const struct v05__rule *r = v05__rule_of(m);
		struct v05_plugin *p;
		struct v05_config c;
		char name[64];

		v05_config_default(&c);
		c.max_prompts = 16;
		c.max_producers = 1;
		c.lane_capacity = 64;
		c.max_batches = 2;
		assert_int_equal(v05_config_mode(&c, m), 0);
		assert_int_equal(c.params.mode, m);
		if (r->preset.k_init) {
			assert_int_equal(c.params.k_init, r->preset.k_init);
			assert_int_equal(c.params.k_step, r->preset.k_step);
			assert_int_equal(c.params.k_max, r->preset.k_max);
			assert_int_equal(c.params.sigma, r->preset.sigma);
			assert_int_equal(c.pad_multiple, 1);
			assert_true(c.halt_fraction == 0.0);
		}
		assert_int_equal(v05_config_check(&c), 0);
		test_name(name, sizeof(name), "rows");
		assert_int_equal(v05_plugin_create(name, &c, &p), 0);
		assert_ptr_equal(p->rule, r);
		assert_ptr_equal(p->env.params, &p->params);
		assert_ptr_equal(p->env.state, p->fit);
		assert_ptr_equal(p->env.config, &p->config);
		assert_int_equal(p->config.params.mode, m);
		assert_int_equal(v05_plugin_close(p, V05_CLOSE_UNLINK), 0);
	}
	/* A preset's pad and halt are what a NO_PAD_HALT rule's check
	 * wants; other values are refused by that check. */
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++) {
		struct v05_config c;

		if (!(v05__rule_of(m)->flags & V05__RULE_NO_PAD_HALT))
			continue;
		v05_config_default(&c);
		assert_int_equal(v05_config_mode(&c, m), 0);
		c.pad_multiple = 2;
		assert_int_equal(v05_config_check(&c), -EINVAL);
	}
}

/* The settings v05_config_mode writes, side by side. */
static bool same_mode_settings(const struct v05_config *a,
			       const struct v05_config *b)
{
	return a->params.mode == b->params.mode &&
	       a->params.cost == b->params.cost &&
	       a->params.k_init == b->params.k_init &&
	       a->params.k_step == b->params.k_step &&
	       a->params.k_max == b->params.k_max &&
	       a->params.sigma == b->params.sigma &&
	       a->params.keep_n == b->params.keep_n &&
	       a->pad_multiple == b->pad_multiple &&
	       a->halt_fraction == b->halt_fraction;
}

/* A mode's settings do not depend on the mode they replace: from the
 * default through any mode to mode m is mode m from the default (a
 * preset's k, normaliser, pad and halt did stay behind, so v05-eb after
 * v05-pg ran with v05-pg's k 2 and normaliser). The modes without a
 * preset get the library's settings (tests/util/config.h), whatever the
 * default mode is. */
static void test_mode_after_mode(void **state)
{
	struct v05_config def;

	(void)state;
	tc_config(&def);
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++) {
		struct v05_config want;

		v05_config_default(&want);
		assert_int_equal(v05_config_mode(&want, m), 0);
		if (!v05__rule_of(m)->preset.k_init) {
			def.params.mode = m;
			def.params.cost = want.params.cost;
			assert_true(same_mode_settings(&want, &def));
		}
		for (uint32_t before = 0; before < V05_MODE_COUNT; before++) {
			struct v05_config c;

			v05_config_default(&c);
			assert_int_equal(v05_config_mode(&c, before), 0);
			assert_int_equal(v05_config_mode(&c, m), 0);
			assert_true(same_mode_settings(&c, &want));
		}
	}
}

/* v05_estimate runs a row without a plugin unless the row says it needs
 * one, and then says why. */
static void test_estimate_without_plugin(void **state)
{
	const double r[8] = { 1, -1, 1, 1, -1, 1, -1, -1 };

	(void)state;
	for (uint32_t m = 0; m < V05_MODE_COUNT; m++) {
		const struct v05__rule *r_ = v05__rule_of(m);
		struct v05_estimate e;
		struct v05_config c;
		double adv[8];
		int ret;

		v05_config_default(&c);
		assert_int_equal(v05_config_mode(&c, m), 0);
		ret = v05_estimate(&c.params, 0.2, r, c.params.k_init < 8 ?
				   c.params.k_init : 8, &e, adv);
		if (r_->needs_plugin) {
			assert_int_equal(ret, -EINVAL);
			assert_string_equal(v05_errmsg(), r_->needs_plugin);
		} else {
			assert_int_equal(ret, 0);
			for (uint32_t i = 0; i < e.k; i++)
				assert_true(isfinite(adv[i]));
		}
	}
}

/*
 * v05-eb under the stream schedule, one batch of 16 prompts, run to the
 * end with rewards a function of (prompt, sample); the decisions as text.
 * older: after submit, every entry's k_first is zeroed, as an entry an
 * older library wrote.
 */
#define NP 16u

static float reward_of(uint32_t i, uint32_t s)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + s * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	/* Prompt i's success rate is i / NP. */
	return (double)(x >> 11) / 9007199254740992.0 < (double)i / NP ?
		       1.0f : -1.0f;
}

static uint32_t run_batch(bool older, char *log, size_t cap)
{
	struct v05_decision d[4 * NP];
	struct v05_prompt_in in[NP];
	struct v05_producer *w;
	struct v05_plugin *p;
	struct v05_config c;
	char uid[NP][8], name[64];
	uint64_t key[NP];
	uint32_t final = 0, second = 0;
	size_t at = 0;
	int n;

	tc_config(&c);
	c.eb_cold = 4;
	c.params.cost = 0.001;
	c.pad_multiple = 1;
	c.max_prompts = NP;
	c.max_producers = 1;
	c.lane_capacity = 1024;
	c.max_batches = 2;
	test_name(name, sizeof(name), "kfirst");
	assert_int_equal(v05_plugin_create(name, &c, &p), 0);
	assert_int_equal(v05_producer_open(name, 0, &w), 0);
	for (uint32_t i = 0; i < NP; i++) {
		snprintf(uid[i], sizeof(uid[i]), "q%u", i);
		in[i] = (struct v05_prompt_in){ .uid = uid[i], .uid_len = (uint32_t)strlen(uid[i]),
						.prior = i % 2 ? 0.9 - 2.0 * i / NP : 2.0 * i / NP - 0.9 };
		key[i] = v05_key(uid[i], in[i].uid_len);
	}
	n = v05_submit(p, in, NP, d, NULL);
	assert_int_equal(n, (int)NP);
	for (uint32_t i = 0; i < NP; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, key[i]);

		assert_true(e && e->k_first == c.params.k_init);
		if (older && e)
			e->k_first = 0;
	}
	while (final < NP) {
		for (int j = 0; j < n; j++) {
			uint32_t i = 0;

			while (key[i] != d[j].key)
				i++;
			at += (size_t)snprintf(log + at, cap - at,
					       "%u:%u:%u:%llx:%.17g;", i,
					       d[j].kind, d[j].k,
					       (unsigned long long)d[j].samples,
					       d[j].baseline);
			assert_true(at < cap);
			if (d[j].kind == V05_DECISION_SAMPLE) {
				second += d[j].samples >> c.params.k_init != 0;
				for (uint32_t s = 0; s < 64; s++)
					if (d[j].samples >> s & 1)
						assert_int_equal(v05_producer_push(
							w, d[j].key, d[j].gen, s,
							reward_of(i, s)), 0);
			} else {
				final++;
			}
		}
		n = v05_poll(p, d, 4 * NP);
		assert_true(n >= 0);
	}
	assert_int_equal(v05_producer_close(w), 0);
	assert_int_equal(v05_plugin_close(p, V05_CLOSE_UNLINK), 0);
	return second;
}

static void test_first_wave_of_an_older_entry(void **state)
{
	static char now[16384], older[16384];

	(void)state;
	uint32_t second = run_batch(false, now, sizeof(now));

	assert_int_equal(run_batch(true, older, sizeof(older)), second);
	assert_string_equal(now, older);
	/* Some prompts got a second wave and some did not: first waves were
	 * decided, not all alike. */
	assert_true(second > 0 && second < NP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_mode_has_a_row),
		cmocka_unit_test(test_unknown_name),
		cmocka_unit_test(test_mode_after_mode),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_estimate_without_plugin),
		cmocka_unit_test(test_first_wave_of_an_older_entry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
