/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's running fit beyond one plugin (docs/STATISTICS.md, "Several
 * engines"): an engine given the others' state decides as one engine
 * holding every prompt would; a state set as its own (a checkpoint)
 * replaces the plugin's; the fit carries through a takeover; other modes
 * and the barrier have none to give or take.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/eb_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h" /* V05_C_SAMPLES_PADDED */
#include "v05.h"

/* Two engines, each with half of a batch: the one given the other's
 * state decides its prompts as one engine folding both would. */
static void test_merged_state(void **state)
{
	struct fx *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct v05_eb_state sa, sb, ref;
	struct v05_eb_fit fit;
	int m, want, i = 1;

	(void)state;
	ebfx_config(a, 1, 1);
	ebfx_config(b, 1, 1);
	a->c.eb_window = 0; /* nothing forgotten: a sum is a union */
	b->c.eb_window = 0;
	ebfx_open_fx(a, "ebs-ma");
	ebfx_open_fx(b, "ebs-mb");
	ebfx_submit(a, 3);
	ebfx_submit(b, 3);
	v05_eb_state_init(&ref);
	/* b takes the even prompts' first waves. */
	for (int j = 0; j < N; j += 2) {
		ebfx_push_range(b, j, 0, 4);
		ebfx_settle(b, v05_poll(b->p, b->d, MAXD));
		v05_eb_state_fold(&ref, 1.0, b->prior[j], 4, ebfx_first_successes(b, j));
	}
	assert_int_equal(v05_eb_state_get(b->p, &sb), 0);
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), 0);
	/* a decides prompt 1 under b's 16 first waves plus its own. */
	ebfx_push_range(a, i, 0, 4);
	m = v05_poll(a->p, a->d, MAXD);
	v05_eb_state_fold(&ref, 1.0, a->prior[i], 4, ebfx_first_successes(a, i));
	assert_int_equal(v05_eb_state_fit(&ref, &fit), 0);
	want = v05_eb_choose(&a->c.params, &fit, a->prior[i], 4,
			     ebfx_first_successes(a, i));
	assert_int_equal(m, 1);
	assert_int_equal(a->d[0].kind, want ? V05_DECISION_SAMPLE :
					      V05_DECISION_FINAL);
	if (want)
		assert_int_equal(a->d[0].k, (uint32_t)want);
	/* Its own part is its own only; a repeated exchange adds nothing. */
	assert_int_equal(v05_eb_state_get(a->p, &sa), 0);
	assert_true(sa.folded == 1 && sa.weight == 1.0);
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), 0);
	assert_int_equal(v05_eb_state_get(a->p, &sa), 0);
	assert_true(sa.folded == 1);
	/* Bad states are refused. */
	{
		double w = sb.weight;

		sb.weight = -1;
		assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
		sb.weight = w;
	}
	sb.ll[0][3][4] = NAN;
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "[0][3][4]"));
	/* Finite, but no fold makes it: refused as well; each counted. */
	sb.ll[0][3][4] = 0.5;
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "> 0"));
	{
		uint64_t c[V05_COUNTER_SLOTS];

		v05_counters(a->p, c, V05_COUNTER_SLOTS);
		assert_int_equal(c[V05_C_EB_PARTS_REFUSED], 3);
	}
	ebfx_close_fx(a);
	ebfx_close_fx(b);
	free(a);
	free(b);
}

/* A resumed run: another plugin's own part handed in as this one's own
 * (v05_eb_state_set_own) is its state exactly, and this plugin decides a
 * prompt as the first one does. */
static void test_set_own(void **state)
{
	struct fx *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct v05_eb_state sa, sb;
	int ma, mb, i = 1;

	(void)state;
	ebfx_config(a, 1, 1);
	ebfx_config(b, 1, 1);
	ebfx_open_fx(a, "ebs-oa");
	ebfx_open_fx(b, "ebs-ob");
	ebfx_submit(a, 3);
	ebfx_submit(b, 3);
	for (int j = 0; j < N; j += 2) {
		ebfx_push_range(a, j, 0, 4);
		ebfx_settle(a, v05_poll(a->p, a->d, MAXD));
	}
	assert_int_equal(v05_eb_state_get(a->p, &sa), 0);
	assert_true(sa.folded > 0);
	assert_int_equal(v05_eb_state_set_own(b->p, &sa), 0);
	assert_int_equal(v05_eb_state_get(b->p, &sb), 0);
	assert_memory_equal(&sa, &sb, sizeof(sa));
	ebfx_push_range(a, i, 0, 4);
	ebfx_push_range(b, i, 0, 4);
	ma = v05_poll(a->p, a->d, MAXD);
	mb = v05_poll(b->p, b->d, MAXD);
	assert_int_equal(ma, 1);
	assert_int_equal(mb, 1);
	assert_int_equal(a->d[0].kind, b->d[0].kind);
	assert_int_equal(a->d[0].k, b->d[0].k);
	/* Bad states are refused. */
	sb.weight = NAN;
	assert_int_equal(v05_eb_state_set_own(b->p, &sb), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "eb_state_set_own"));
	ebfx_close_fx(a);
	ebfx_close_fx(b);
	free(a);
	free(b);
}

/* A takeover keeps the running fit. */
static void test_takeover_keeps_fit(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state before, after;
	struct v05_plugin *q;

	(void)state;
	ebfx_config(f, 1, 1);
	ebfx_open_fx(f, "ebs-take");
	ebfx_submit(f, 0);
	for (int i = 0; i < 10; i++) {
		ebfx_push_range(f, i, 0, 4);
		ebfx_settle(f, v05_poll(f->p, f->d, MAXD));
	}
	assert_int_equal(v05_eb_state_get(f->p, &before), 0);
	assert_int_equal(v05_plugin_close(f->p, 0), 0);
	assert_int_equal(v05_plugin_attach(f->name, 0, &q), 0);
	f->p = q;
	assert_int_equal(v05_eb_state_get(f->p, &after), 0);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_true(after.folded == 10);
	ebfx_close_fx(f);
	free(f);
}

/* Other modes and the barrier have no running fit. */
static void test_wrong_mode(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state st;

	(void)state;
	ebfx_config(f, 1, 1);
	f->c.schedule = V05_SCHEDULE_ROUNDS;
	ebfx_open_fx(f, "ebs-mode");
	assert_int_equal(v05_eb_state_get(f->p, &st), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "rounds"));
	v05_eb_state_init(&st);
	assert_int_equal(v05_eb_state_set_own(f->p, &st), -EINVAL);
	ebfx_close_fx(f);
	ebfx_config(f, 0, 1);
	assert_int_equal(v05_config_check(&f->c), -EINVAL); /* cold 0 */
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merged_state),
		cmocka_unit_test(test_set_own),
		cmocka_unit_test(test_takeover_keeps_fit),
		cmocka_unit_test(test_wrong_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
