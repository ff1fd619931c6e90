/* SPDX-License-Identifier: MIT */
/* The batch policy on batches checked by hand: both schedules' halt and
 * padding, the external halt, the stream's deadline. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/plugin_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"

/*
 * 8 prompts, k_init 4, k_step 2, k_max 16, pad 8, halt 0.25, c = 0.0039.
 * u0, u1: prior 0.8, rewards +1,+1,+1,-1: mean 0.5, (0.3)^2 <= 1/4: stop.
 * u2..u7: prior -0.8, all +1: delta2 = 3.24 - 0.25 = 2.99, k_target =
 * 16.0128 - 1/2.99 = 15.678 > 4: more. Round barrier: 6 of 8 need more,
 * 6 >= 0.25 x 8 = 2: no halt. Dispatch 6 x 2 = 12 samples, padded to 16:
 * 4 extra. All six have the same k_target - k = 11.678, so the extra
 * samples go one each to the four smallest keys (k 4 -> 7); the other two
 * get k 4 -> 6.
 */
static void test_rounds_padding(void **state)
{
	static const double priors[8] = { 0.8, 0.8, -0.8, -0.8,
					  -0.8, -0.8, -0.8, -0.8 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	float ones[64];
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[8], sorted[6];
	uint32_t samples = 0, finals = 0;
	int n;

	(void)state;
	for (int s = 0; s < 64; s++)
		ones[s] = 1.0f;
	fx_config(f);
	f->c.pad_multiple = 8;
	fx_open(f);
	n = submit(f, priors, 8, keys);
	assert_int_equal(n, 8);
	for (int i = 0; i < 8; i++)
		push_samples(f, f->d[i].key, f->d[i].samples, i < 2 ? mixed : ones);
	n = v05_poll(f->p, f->d, MAXD);
	/* The two stops, then the round's six SAMPLEs together. */
	assert_int_equal(n, 8);
	memcpy(sorted, keys + 2, sizeof(sorted));
	for (int i = 0; i < 6; i++)
		for (int j = i + 1; j < 6; j++)
			if (sorted[j] < sorted[i]) {
				uint64_t t = sorted[i];

				sorted[i] = sorted[j];
				sorted[j] = t;
			}
	for (int i = 0; i < n; i++) {
		struct v05_decision *d = &f->d[i];
		int j = find(keys, 8, d->key);

		if (d->kind == V05_DECISION_FINAL) {
			assert_true(j < 2);
			assert_int_equal(d->k, 4);
			assert_true(d->baseline == 0.8);
			continue;
		}
		assert_int_equal(d->kind, V05_DECISION_SAMPLE);
		assert_true(j >= 2);
		samples += d->k;
		if (d->key <= sorted[3]) {
			assert_true(d->samples == 0x70); /* 4, 5, 6 */
			assert_int_equal(d->flags & V05_DF_PADDED, V05_DF_PADDED);
		} else {
			assert_true(d->samples == 0x30); /* 4, 5 */
			assert_int_equal(d->flags & V05_DF_PADDED, 0);
		}
	}
	assert_int_equal(samples, 16);
	assert_int_equal(ctr(f, V05_C_SAMPLES_PADDED), 4);
	assert_int_equal(ctr(f, V05_C_ROUNDS), 1);
	assert_int_equal(ctr(f, V05_C_HALTS), 0);
	/* Play it out: every later dispatch is a multiple of 8 unless the
	 * cap forbids, and nobody passes k_max. */
	while (finals < 6) {
		uint32_t round = 0;
		int all_capped = 1;

		for (int i = 0; i < n; i++)
			if (f->d[i].kind == V05_DECISION_SAMPLE)
				push_samples(f, f->d[i].key, f->d[i].samples, ones);
		n = v05_poll(f->p, f->d, MAXD);
		assert_true(n > 0);
		for (int i = 0; i < n; i++) {
			if (f->d[i].kind == V05_DECISION_SAMPLE) {
				int top = 64 - __builtin_clzll(f->d[i].samples);

				round += f->d[i].k;
				assert_true(top <= 16);
				all_capped &= top == 16;
			} else {
				finals++;
				assert_true(f->d[i].k <= 16);
				assert_true(f->d[i].k >= 15);
			}
		}
		/* Short of a multiple only when padding hit the cap for
		 * every prompt of the dispatch. */
		if (round % 8)
			assert_true(all_capped);
	}
	assert_int_equal(ctr(f, V05_C_PROMPTS_OPEN), 0);
	fx_close(f);
	free(f);
}

/*
 * 8 prompts; u0..u6 prior 0.8 with +1,+1,+1,-1 (stop); u7 prior -0.8 all
 * +1 (more). At the barrier 1 of 8 needs more: 1 < 0.25 x 8 = 2, so the
 * batch halts and u7 finalizes at k = 4 (flag HALTED); 32 samples in all.
 */
static void test_rounds_halt(void **state)
{
	double priors[8] = { 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, -0.8 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	static const float ones[64] = { 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[8];
	int n, halted = 0;

	(void)state;
	fx_config(f);
	fx_open(f);
	n = submit(f, priors, 8, keys);
	for (int i = 0; i < n; i++)
		push_samples(f, f->d[i].key, f->d[i].samples, i < 7 ? mixed : ones);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 8);
	for (int i = 0; i < n; i++) {
		assert_int_equal(f->d[i].kind, V05_DECISION_FINAL);
		assert_int_equal(f->d[i].k, 4);
		if (f->d[i].key == keys[7]) {
			assert_true(f->d[i].flags & V05_DF_HALTED);
			halted++;
		}
	}
	assert_int_equal(halted, 1);
	assert_int_equal(ctr(f, V05_C_HALTS), 1);
	assert_int_equal(ctr(f, V05_C_SAMPLES_ISSUED), 32);
	assert_int_equal(ctr(f, V05_C_BATCHES_DONE), 1);
	fx_close(f);
	free(f);
}

/*
 * External halt: the barrier is reported (6 of 8 need more), nothing moves
 * until v05_resolve; then release, or halt.
 */
static void test_external_halt(void **state)
{
	static const double priors[8] = { 0.8, 0.8, -0.8, -0.8,
					  -0.8, -0.8, -0.8, -0.8 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	static const float ones[64] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[8], batch;
	int n, samples = 0;

	(void)state;
	fx_config(f);
	f->c.flags = V05_CONFIG_EXTERNAL_HALT;
	f->c.schedule = V05_SCHEDULE_STREAM;
	assert_int_equal(v05_config_check(&f->c), -EINVAL);
	f->c.schedule = V05_SCHEDULE_ROUNDS;
	f->c.pad_multiple = 1;
	fx_open(f);
	n = submit(f, priors, 8, keys);
	batch = f->d[0].batch;
	for (int i = 0; i < 8; i++)
		push_samples(f, keys[i], 0xf, i < 2 ? mixed : ones);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 3); /* two finals and the barrier */
	assert_int_equal(f->d[2].kind, V05_DECISION_BARRIER);
	assert_true(f->d[2].batch == batch);
	assert_int_equal(f->d[2].k, 6);
	assert_true(f->d[2].samples == 8);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0); /* waits */
	assert_int_equal(v05_resolve(f->p, batch + 7, 0), -ENOENT);
	assert_int_equal(v05_resolve(f->p, batch, 0), 0);
	assert_int_equal(v05_resolve(f->p, batch, 0), -EINVAL);
	n = v05_poll(f->p, f->d, MAXD);
	for (int i = 0; i < n; i++)
		samples += f->d[i].kind == V05_DECISION_SAMPLE;
	assert_int_equal(samples, 6);
	for (int i = 0; i < n; i++)
		push_samples(f, f->d[i].key, f->d[i].samples, ones);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 1);
	assert_int_equal(f->d[0].kind, V05_DECISION_BARRIER);
	assert_int_equal(v05_resolve(f->p, batch, 1), 0); /* halt */
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 6);
	for (int i = 0; i < n; i++) {
		assert_int_equal(f->d[i].kind, V05_DECISION_FINAL);
		assert_true(f->d[i].flags & V05_DF_HALTED);
		assert_int_equal(f->d[i].k, 6);
	}
	assert_int_equal(ctr(f, V05_C_HALTS), 1);
	fx_close(f);
	free(f);
}

/*
 * stream, pad 4, k_step 2: u0, u1 want more (prior -0.8, all +1), u2, u3
 * still collecting. u0's "more" is held (2 < 4 samples); u1's makes 4:
 * both released at once, without waiting for u2 and u3.
 */
static void test_stream_release_on_pad(void **state)
{
	static const double priors[4] = { -0.8, -0.8, 0.8, 0.8 };
	static const float ones[64] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_decision first[4];
	uint64_t keys[4];
	int n;

	(void)state;
	fx_config(f);
	f->c.schedule = V05_SCHEDULE_STREAM;
	f->c.pad_multiple = 4;
	f->c.stream_deadline_us = 10000000; /* not the trigger here */
	fx_open(f);
	n = submit(f, priors, 4, keys);
	memcpy(first, f->d, sizeof(first));
	push_samples(f, first[0].key, first[0].samples, ones);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0); /* held */
	assert_int_equal(ctr(f, V05_C_PROMPTS_HELD), 1);
	push_samples(f, first[1].key, first[1].samples, ones);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 2);
	assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
	assert_int_equal(f->d[1].kind, V05_DECISION_SAMPLE);
	assert_int_equal(f->d[0].k + f->d[1].k, 4);
	assert_int_equal(ctr(f, V05_C_PROMPTS_HELD), 0);
	fx_close(f);
	free(f);
}

/*
 * stream, pad 32: u0 wants more while u1 still collects: held. When u1
 * stops, no prompt of the batch is collecting: nothing else can join, so
 * u0 is released at once, padded (k 4 -> 16 caps the padding: 12 samples).
 */
static void test_stream_release_when_idle(void **state)
{
	static const double priors[2] = { -0.8, 0.8 };
	static const float ones[64] = { 1, 1, 1, 1 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_decision first[2];
	uint64_t keys[2];
	int n;

	(void)state;
	fx_config(f);
	f->c.schedule = V05_SCHEDULE_STREAM;
	f->c.stream_deadline_us = 10000000;
	f->c.halt_fraction = 0.0;
	fx_open(f);
	submit(f, priors, 2, keys);
	memcpy(first, f->d, sizeof(first));
	push_samples(f, first[0].key, first[0].samples, ones);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	push_samples(f, first[1].key, first[1].samples, mixed);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 2);
	assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
	assert_int_equal(f->d[1].kind, V05_DECISION_SAMPLE);
	assert_int_equal(f->d[1].k, 12);
	assert_true(f->d[1].samples == 0xfff0);
	fx_close(f);
	free(f);
}

/*
 * stream, pad 32, deadline 200 ms: u0 wants more while u1..u3 collect.
 * Held: a poll right away has nothing; v05_wait returns once the deadline
 * has passed (its timeout is cut to the deadline), and the poll releases.
 */
static void test_stream_deadline(void **state)
{
	static const double priors[4] = { -0.8, 0.8, 0.8, 0.8 };
	static const float ones[64] = { 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[4], t0;
	int n;

	(void)state;
	fx_config(f);
	f->c.schedule = V05_SCHEDULE_STREAM;
	f->c.stream_deadline_us = 200000;
	f->c.halt_fraction = 0.0;
	fx_open(f);
	submit(f, priors, 4, keys);
	t0 = v05__now_ns();
	push_samples(f, keys[0], 0xf, ones);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	if (v05__now_ns() - t0 < 150000000ull) /* not past it yet */
		assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	assert_int_equal(v05_wait(f->p, 60000), 1);
	assert_true(v05__now_ns() - t0 >= 200000000ull);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 1);
	assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
	assert_true(f->d[0].key == keys[0]);
	fx_close(f);
	free(f);
}

/*
 * stream halt on live counts: 8 prompts, halt 0.25 (fewer than 2 open).
 * u0..u6 stop first (7 finals, 1 open); u7 then wants more: 1 < 2, the
 * batch halts and u7 finalizes at k = 4, HALTED.
 */
static void test_stream_halt(void **state)
{
	double priors[8] = { 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, -0.8 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	static const float ones[64] = { 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_decision first[8];
	uint64_t keys[8];
	int n;

	(void)state;
	fx_config(f);
	f->c.schedule = V05_SCHEDULE_STREAM;
	fx_open(f);
	submit(f, priors, 8, keys);
	memcpy(first, f->d, sizeof(first));
	for (int i = 0; i < 7; i++)
		push_samples(f, first[i].key, first[i].samples, mixed);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 7);
	assert_int_equal(ctr(f, V05_C_HALTS), 1); /* 1 open < 2: halted */
	push_samples(f, first[7].key, first[7].samples, ones);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 1);
	assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
	assert_true(f->d[0].flags & V05_DF_HALTED);
	assert_int_equal(f->d[0].k, 4);
	fx_close(f);
	free(f);
}

/*
 * The same batch under GRPO (stream, halt 0.25): GRPO never asks for
 * more, so its live count falling below the halt is no halt: none is
 * counted and no final says HALTED.
 */
static void test_stream_no_halt_without_more(void **state)
{
	double priors[8] = { 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, -0.8 };
	static const float mixed[64] = { 1, 1, 1, -1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_decision first[8];
	uint64_t keys[8];

	(void)state;
	fx_config(f);
	f->c.schedule = V05_SCHEDULE_STREAM;
	f->c.params.mode = V05_MODE_GRPO;
	f->c.params.k_init = f->c.params.k_max = 4;
	fx_open(f);
	submit(f, priors, 8, keys);
	memcpy(first, f->d, sizeof(first));
	for (int i = 0; i < 8; i++)
		push_samples(f, first[i].key, first[i].samples, mixed);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(f->d[i].kind, V05_DECISION_FINAL);
		assert_false(f->d[i].flags & V05_DF_HALTED);
	}
	assert_int_equal(ctr(f, V05_C_HALTS), 0);
	fx_close(f);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rounds_padding),
		cmocka_unit_test(test_rounds_halt),
		cmocka_unit_test(test_external_halt),
		cmocka_unit_test(test_stream_release_on_pad),
		cmocka_unit_test(test_stream_release_when_idle),
		cmocka_unit_test(test_stream_deadline),
		cmocka_unit_test(test_stream_halt),
		cmocka_unit_test(test_stream_no_halt_without_more),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
