/* SPDX-License-Identifier: MIT */
/* v05_cancel: a batch given up by the engine frees its open prompts and
 * slots, hands out none of its decisions afterwards, leaves finals already
 * returned to the caller, and the next batch runs normally. */
#include <errno.h>
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

#define N 16
#define MAXD 256

struct fx {
	char name[64];
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
	uint64_t keys[N];
	uint32_t gens[N]; /* of the last submit's instances */
};

static void fx_open(struct fx *f, uint32_t mode, uint32_t k_init,
		    uint32_t k_max)
{
	struct v05_config c;

	tc_config(&c);
	c.params.mode = mode;
	c.params.k_init = k_init;
	c.params.k_max = k_max;
	c.pad_multiple = 1;
	c.max_prompts = N; /* every slot in use by one batch */
	c.max_producers = 2;
	c.lane_capacity = 256;
	c.max_batches = 2;
	test_name(f->name, sizeof(f->name), "cancel");
	assert_int_equal(v05_plugin_create(f->name, &c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
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

/* Submit N prompts "<tag><i>"; returns the batch id. */
static uint64_t submit(struct fx *f, char tag)
{
	struct v05_prompt_in in[N];
	char uids[N][8];

	for (uint32_t i = 0; i < N; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%c%u", tag, i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = 0.0;
		f->keys[i] = v05_key(uids[i], in[i].uid_len);
	}
	assert_int_equal(v05_submit(f->p, in, N, f->d, NULL), N);
	for (uint32_t i = 0; i < N; i++)
		f->gens[i] = f->d[i].gen;
	return f->d[0].batch;
}

static void push_all(struct fx *f, uint32_t i, uint32_t k)
{
	for (uint32_t s = 0; s < k; s++)
		assert_int_equal(v05_producer_push(f->w, f->keys[i], f->gens[i], s,
						   s % 2 ? 1.0f : -1.0f), 0);
}

/* Open prompts go; their slots are free for a full batch after; late
 * rewards are unknown; a second cancel finds nothing. */
static void test_cancel_open(void **state)
{
	struct fx f;
	uint64_t b;

	(void)state;
	fx_open(&f, V05_MODE_GRPO, 4, 4);
	b = submit(&f, 'a');
	assert_int_equal(v05_cancel(f.p, b), N);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_CANCELLED), N);
	assert_int_equal(v05_cancel(f.p, b), -ENOENT);
	assert_non_null(strstr(v05_errmsg(), "not live"));

	push_all(&f, 3, 4);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_UNKNOWN), 4);

	/* Every slot was the old batch's: a full new batch fits. */
	b = submit(&f, 'b');
	for (uint32_t i = 0; i < N; i++)
		push_all(&f, i, 4);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), N);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(f.d[i].kind, V05_DECISION_FINAL);
		assert_int_equal(f.d[i].batch, b);
		assert_int_equal(v05_release(f.p, f.d[i].slot, f.d[i].gen,
					     f.d[i].key), 0);
	}
	fx_close(&f);
}

/* A final decided but not yet handed out is discarded and its slot
 * released; one already returned stays readable until released. */
static void test_cancel_finals(void **state)
{
	struct fx f;
	struct v05_group g;
	uint64_t b;
	uint32_t slot0, gen0;
	uint64_t key0;

	(void)state;
	fx_open(&f, V05_MODE_GRPO, 4, 4);
	b = submit(&f, 'a');
	push_all(&f, 0, 4);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 1);
	assert_int_equal(f.d[0].kind, V05_DECISION_FINAL);
	slot0 = f.d[0].slot;
	gen0 = f.d[0].gen;
	key0 = f.d[0].key;
	push_all(&f, 1, 4);
	assert_int_equal(v05_poll(f.p, f.d, 0), 0); /* decided, kept queued */
	assert_int_equal(ctr(&f, V05_C_PROMPTS_FINAL), 2);

	assert_int_equal(v05_cancel(f.p, b), N - 2);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_FINAL), 1);
	assert_int_equal(ctr(&f, V05_C_RELEASES), 1);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 0);
	assert_int_equal(v05_group(f.p, slot0, &g), 0);
	assert_int_equal(g.k, 4);
	assert_int_equal(g.key, f.keys[0]);
	assert_int_equal(v05_release(f.p, slot0, gen0, key0), 0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_FINAL), 0);
	fx_close(&f);
}

/* Held prompts and queued SAMPLE decisions of an OSLA batch go too, and
 * the other live batch is untouched. */
static void test_cancel_held(void **state)
{
	struct fx f;
	uint64_t b1 = 0, b2 = 0;
	uint32_t n;

	(void)state;
	fx_open(&f, V05_MODE_V05, 4, 16);
	/* Half the slots each. */
	{
		struct v05_prompt_in in[N / 2];
		char uids[N][8];

		for (uint32_t i = 0; i < N; i++) {
			snprintf(uids[i], sizeof(uids[i]), "h%u", i);
			f.keys[i] = v05_key(uids[i], (uint32_t)strlen(uids[i]));
		}
		for (uint32_t half = 0; half < 2; half++) {
			for (uint32_t i = 0; i < N / 2; i++) {
				in[i].uid = uids[half * N / 2 + i];
				in[i].uid_len = (uint32_t)strlen(in[i].uid);
				/* A prior of 1 against rewards of mean 0:
				 * conflict, OSLA asks for more. */
				in[i].prior = 1.0;
			}
			assert_int_equal(v05_submit(f.p, in, N / 2, f.d, NULL),
					 N / 2);
			for (uint32_t i = 0; i < N / 2; i++)
				f.gens[half * N / 2 + i] = f.d[i].gen;
			if (half == 0)
				b1 = f.d[0].batch;
			else
				b2 = f.d[0].batch;
		}
	}
	for (uint32_t i = 0; i < N / 2; i++)
		push_all(&f, i, 4);
	/* Decided "more" and released as one round: SAMPLE decisions queue. */
	assert_int_equal(v05_poll(f.p, f.d, 0), 0);
	assert_true(ctr(&f, V05_C_DEC_SAMPLE) >= N / 2);
	assert_int_equal(v05_cancel(f.p, b1), N / 2);
	n = (uint32_t)v05_poll(f.p, f.d, MAXD);
	for (uint32_t i = 0; i < n; i++)
		assert_int_not_equal(f.d[i].batch, b1);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), N / 2);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_HELD), 0);
	/* The second batch still completes. */
	assert_int_equal(v05_cancel(f.p, b2), N / 2);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 0);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel_open),
		cmocka_unit_test(test_cancel_finals),
		cmocka_unit_test(test_cancel_held),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
