/* SPDX-License-Identifier: MIT */
/* REJECT decisions: a reward refused for its value (not finite, outside
 * [-1, 1]) that a live prompt waits for is reported, with the sample, the
 * value and the reason; refused records nobody waits for are only counted;
 * a valid reward pushed afterwards still completes the group. */
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

#define MAXD 64

struct fx {
	char name[64];
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
	uint64_t key;
	uint32_t gen;
	uint64_t batch;
};

static void fx_open(struct fx *f)
{
	struct v05_config c;
	struct v05_prompt_in in = { .uid = "r0", .uid_len = 2, .prior = 0.0 };

	tc_config(&c);
	c.params.mode = V05_MODE_GRPO;
	c.params.k_init = 4;
	c.params.k_max = 4;
	c.pad_multiple = 1;
	c.max_prompts = 8;
	c.max_producers = 2;
	c.lane_capacity = 64;
	c.max_batches = 2;
	test_name(f->name, sizeof(f->name), "reject");
	assert_int_equal(v05_plugin_create(f->name, &c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
	assert_int_equal(v05_submit(f->p, &in, 1, f->d, NULL), 1);
	f->key = f->d[0].key;
	f->gen = f->d[0].gen;
	f->batch = f->d[0].batch;
}

static void fx_close(struct fx *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

static uint64_t ctr(struct fx *f, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	assert_int_equal(v05_counters(f->p, v, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	return v[c];
}

static void test_reported_with_sample_value_reason(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 2, NAN), 0);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 3, 1.5f), 0);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 2);
	assert_int_equal(f.d[0].kind, V05_DECISION_REJECT);
	assert_int_equal(f.d[0].key, f.key);
	assert_int_equal(f.d[0].gen, f.gen);
	assert_int_equal(f.d[0].batch, f.batch);
	assert_int_equal(f.d[0].samples, 1ull << 2);
	assert_int_equal(f.d[0].flags, V05_DF_NONFINITE);
	assert_true(isnan(f.d[0].baseline));
	assert_int_equal(f.d[1].kind, V05_DECISION_REJECT);
	assert_int_equal(f.d[1].samples, 1ull << 3);
	assert_int_equal(f.d[1].flags, V05_DF_RANGE);
	assert_true(f.d[1].baseline == 1.5);
	assert_int_equal(ctr(&f, V05_C_REJ_NONFINITE), 1);
	assert_int_equal(ctr(&f, V05_C_REJ_RANGE), 1);

	/* The producer pushes valid values after all: the group finishes. */
	for (uint32_t s = 0; s < 4; s++)
		assert_int_equal(v05_producer_push(f.w, f.key, f.gen, s,
						   s % 2 ? 1.0f : -1.0f), 0);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 1);
	assert_int_equal(f.d[0].kind, V05_DECISION_FINAL);
	assert_int_equal(f.d[0].k, 4);
	assert_int_equal(v05_release(f.p, f.d[0].slot, f.d[0].gen, f.d[0].key), 0);
	fx_close(&f);
}

/* Nobody waits for these: another instance's gen, a sample never issued,
 * one already rewarded, an unknown key. Counted, not reported. */
static void test_unwaited_records_only_counted(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 0, 0.5f), 0);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen + 1, 1, NAN), 0);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 9, NAN), 0);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 0, -2.0f), 0);
	assert_int_equal(v05_producer_push(f.w, f.key ^ 1, f.gen, 0, INFINITY), 0);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_NONFINITE), 3);
	assert_int_equal(ctr(&f, V05_C_REJ_RANGE), 1);
	fx_close(&f);
}

/* A cancelled batch hands out none of its decisions, REJECT included. */
static void test_cancel_drops_undelivered_reject(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f);
	assert_int_equal(v05_producer_push(f.w, f.key, f.gen, 1, NAN), 0);
	/* Drained and decided, not handed out: the REJECT waits in the queue. */
	assert_int_equal(v05_poll(f.p, f.d, 0), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_NONFINITE), 1);
	assert_int_equal(v05_pending(f.p), 1);
	assert_int_equal(v05_cancel(f.p, f.batch), 1);
	assert_int_equal(v05_pending(f.p), 0);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 0);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reported_with_sample_value_reason),
		cmocka_unit_test(test_unwaited_records_only_counted),
		cmocka_unit_test(test_cancel_drops_undelivered_reject),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
