/* SPDX-License-Identifier: MIT */
/* The plugin in one process: configuration, submit, results equal to the
 * statistics core bit for bit, both schedules' halt and padding on batches
 * checked by hand, bad input counted per reason, zero-copy groups, a
 * reader in another process, the support buffer, attach and recover. */
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

#include "plugin/internal.h"
#include "shm/proc.h"
#include "util/seg.h"

#define MAXD 1024

struct fx {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
};

static void fx_config(struct fx *f)
{
	v05_config_default(&f->c);
	/* These tests check the paper's rule, its halt and padding by hand
	 * (v05-eb has its own, tests/test_plugin_eb.c). */
	f->c.params.mode = V05_MODE_V05;
	f->c.max_prompts = 64;
	f->c.max_producers = 4;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 4;
}

static void fx_open(struct fx *f)
{
	test_name(f->name, sizeof(f->name), "plugin");
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
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

/* Submit uids "u<i>" with the given priors. */
static int submit(struct fx *f, const double *priors, uint32_t n,
		  uint64_t *keys)
{
	struct v05_prompt_in in[64];
	char uids[64][16];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "u%u", i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = priors[i];
		keys[i] = v05_key(uids[i], in[i].uid_len);
	}
	return v05_submit(f->p, in, n, f->d, NULL);
}

static void push_samples(struct fx *f, uint64_t key, uint64_t samples,
			 const float *r)
{
	for (uint32_t s = 0; s < 64; s++)
		if (samples >> s & 1)
			assert_int_equal(v05_producer_push(f->w, key, s, r[s]), 0);
}

static int find(const uint64_t *keys, uint32_t n, uint64_t key)
{
	for (uint32_t i = 0; i < n; i++)
		if (keys[i] == key)
			return (int)i;
	return -1;
}

/* ---- configuration and submit -------------------------------------------- */

static void test_config_rejects(void **state)
{
	struct v05_config c;

	(void)state;
#define BAD(stmt)                                             \
	do {                                                  \
		v05_config_default(&c);                       \
		stmt;                                         \
		assert_int_equal(v05_config_check(&c), -EINVAL); \
	} while (0)
	BAD(c.size = 8);
	BAD(c.params.cost = 1.0);
	BAD(c.params.k_max = 2);
	/* A step larger than k_max can never be taken; 2^32 - 1 used to wrap
	 * k + k_step and open a prompt for good. */
	BAD(c.params.k_step = UINT32_MAX);
	BAD(c.params.k_step = 17);
	BAD(c.halt_fraction = 1.5);
	BAD(c.halt_fraction = NAN);
	BAD(c.pad_multiple = 0);
	BAD(c.schedule = 7);
	BAD(c.stream_deadline_us = 20000000);
	BAD(c.max_prompts = 0);
	BAD(c.max_producers = 1000);
	BAD(c.lane_capacity = 1000);
	BAD(c.max_batches = 0);
	BAD(c.file_mode = 0400);
	BAD(c.file_mode = 01600);
	BAD(c.flags = 0x100);
	BAD(c.journal_sync = 9);
	BAD(c.journal_path = "");
#undef BAD
	v05_config_default(&c);
	c.params.k_step = c.params.k_max; /* the largest step that fits */
	assert_int_equal(v05_config_check(&c), 0);
	v05_config_default(&c);
	assert_int_equal(v05_config_check(&c), 0);
	assert_int_equal(v05_config_check(NULL), -EINVAL);
}

static void test_submit_errors(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char big[200];
	struct v05_prompt_in in[6] = {
		{ "a", 1, 0.5 }, { "a", 1, 0.5 }, { big, 129, 0.0 },
		{ "b", 0, 0.0 }, { "c", 1, NAN }, { "d", 1, -1.5 },
	};
	int st[6];

	(void)state;
	memset(big, 'x', sizeof(big));
	fx_config(f);
	f->c.max_prompts = 2;
	f->c.max_batches = 1;
	fx_open(f);
	assert_int_equal(v05_submit(f->p, in, 6, f->d, st), 1);
	assert_int_equal(st[0], 0);
	assert_int_equal(st[1], -EEXIST); /* only that prompt fails */
	assert_int_equal(st[2], -EINVAL);
	assert_int_equal(st[3], -EINVAL);
	assert_int_equal(st[4], -EDOM);
	assert_int_equal(st[5], -EDOM);
	assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
	assert_true(f->d[0].samples == 0xf); /* k_init = 4: samples 0..3 */
	assert_int_equal(ctr(f, V05_C_SUBMIT_REJECTED), 5);
	/* The only batch record is taken. */
	assert_int_equal(v05_submit(f->p, &in[3], 1, f->d, st), -EBUSY);
	fx_close(f);
	/* Out of slots: -ENOSPC for the prompt. */
	fx_config(f);
	f->c.max_prompts = 1;
	fx_open(f);
	in[1].uid = "z";
	assert_int_equal(v05_submit(f->p, in, 2, f->d, st), 1);
	assert_int_equal(st[1], -ENOSPC);
	fx_close(f);
	free(f);
}

/* ---- results ----------------------------------------------------------- */

static void check_group_against_core(struct fx *f, uint32_t slot,
				     double prior)
{
	struct v05_estimate e;
	struct v05_group g;
	double r[64], adv[64];

	assert_int_equal(v05_group(f->p, slot, &g), 0);
	for (uint32_t i = 0; i < g.k; i++)
		r[i] = (double)g.rewards[i];
	assert_int_equal(v05_estimate(&f->p->params, prior, r, g.k, &e, adv), 0);
	assert_true(g.baseline == e.baseline);
	assert_true(g.sigma == e.sigma);
	assert_true(g.mean == e.mean);
	for (uint32_t i = 0; i < g.k; i++)
		assert_true(g.advantages[i] == (float)adv[i]);
}

static void test_results_match_core(void **state)
{
	static const double priors[6] = { 0.8, -0.8, 0.0, 0.3, -0.2, 1.0 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[6];
	uint32_t finals = 0;
	int n;

	(void)state;
	fx_config(f);
	fx_open(f);
	n = submit(f, priors, 6, keys);
	assert_int_equal(n, 6);
	for (;;) {
		for (int i = 0; i < n; i++) {
			struct v05_decision *d = &f->d[i];
			int j = find(keys, 6, d->key);

			if (d->kind == V05_DECISION_SAMPLE) {
				float r[64];

				for (int s = 0; s < 64; s++)
					r[s] = (float)((j * 7 + s * 3) % 5 - 2) / 2.0f;
				push_samples(f, d->key, d->samples, r);
			} else {
				check_group_against_core(f, d->slot, priors[j]);
				finals++;
			}
		}
		if (finals == 6)
			break;
		n = v05_poll(f->p, f->d, MAXD);
		assert_true(n > 0);
	}
	assert_int_equal(ctr(f, V05_C_PROMPTS_OPEN), 0);
	assert_int_equal(ctr(f, V05_C_PROMPTS_FINAL), 6);
	fx_close(f);
	free(f);
}

/* ---- rounds ------------------------------------------------------------ */

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

/* ---- stream ------------------------------------------------------------ */

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

/* ---- bad input --------------------------------------------------------- */

static void test_bad_input_counted(void **state)
{
	static const double priors[2] = { 0.8, 0.5 };
	static const float r[64] = { 1, 1, 1, -1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_decision first[2];
	struct v05_group g0;
	uint64_t keys[2];
	float adv_before[4];

	(void)state;
	fx_config(f);
	fx_open(f);
	submit(f, priors, 2, keys);
	memcpy(first, f->d, sizeof(first));
	assert_int_equal(v05_producer_push(f->w, keys[0], 0, NAN), 0);
	assert_int_equal(v05_producer_push(f->w, keys[0], 0, INFINITY), 0);
	assert_int_equal(v05_producer_push(f->w, keys[0], 0, 1.5f), 0);
	assert_int_equal(v05_producer_push(f->w, 12345, 0, 1.0f), 0);
	/* Key 0 is no prompt's (it marks an empty table entry): unknown. */
	assert_int_equal(v05_producer_push(f->w, 0, 0, 1.0f), 0);
	assert_int_equal(v05_producer_push(f->w, keys[0], 4, 1.0f), 0);
	assert_int_equal(v05_producer_push(f->w, keys[0], 999, 1.0f), 0);
	push_samples(f, keys[0], 0x7, r);
	assert_int_equal(v05_producer_push(f->w, keys[0], 1, -1.0f), 0); /* dup */
	push_samples(f, keys[0], 0x8, r);
	push_samples(f, keys[1], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 2);
	assert_int_equal(v05_group(f->p, f->d[0].slot, &g0), 0);
	memcpy(adv_before, g0.advantages, sizeof(adv_before));
	assert_int_equal(v05_producer_push(f->w, keys[0], 2, -1.0f), 0); /* late */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	assert_int_equal(ctr(f, V05_C_REJ_NONFINITE), 2);
	assert_int_equal(ctr(f, V05_C_REJ_RANGE), 1);
	assert_int_equal(ctr(f, V05_C_REJ_UNKNOWN), 2);
	assert_int_equal(ctr(f, V05_C_REJ_NOT_ISSUED), 2);
	assert_int_equal(ctr(f, V05_C_REJ_DUPLICATE), 1);
	assert_int_equal(ctr(f, V05_C_REJ_LATE), 1);
	assert_int_equal(ctr(f, V05_C_REWARDS_APPLIED), 8);
	/* Nothing rejected touched the result: the duplicate -1 and the
	 * late -1 would have changed these. */
	assert_true(g0.rewards[1] == 1.0f && g0.rewards[2] == 1.0f);
	assert_memory_equal(adv_before, g0.advantages, sizeof(adv_before));
	check_group_against_core(f, g0.slot, 0.8);
	fx_close(f);
	free(f);
}

/* ---- zero copy, readers ---------------------------------------------------- */

static void test_zero_copy_views(void **state)
{
	static const double priors[1] = { -0.5 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_group g;
	uint64_t keys[1], roff, aoff;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 1, keys);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	assert_int_equal(v05_group(f->p, f->d[0].slot, &g), 0);
	assert_int_equal(v05_slot_offsets(f->p, g.slot, &roff, &aoff), 0);
	/* The view is the segment itself, rewards and advantages beside. */
	assert_ptr_equal(g.rewards, f->p->seg.base + roff);
	assert_ptr_equal(g.advantages, f->p->seg.base + aoff);
	assert_true(aoff - roff == 64); /* k_max 16 floats */
	assert_int_equal(v05_group(f->p, 9999, &g), -EINVAL);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen, f->d[0].key), 0);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen, f->d[0].key), -EALREADY);
	assert_int_equal(v05_group(f->p, f->d[0].slot, &g), -EAGAIN);
	fx_close(f);
	free(f);
}

/*
 * Release checks the decision's identity: a stale decision whose slot now
 * holds another prompt, and another plugin's decision, are refused and
 * free nothing.
 */
static void test_release_identity(void **state)
{
	static const double priors[1] = { 0.0 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f)), *o = calloc(1, sizeof(*o));
	struct v05_decision stale, fresh;
	struct v05_group g;
	uint64_t keys[1], okeys[1];

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	f->c.max_prompts = 1; /* one slot: the resubmit reuses it */
	fx_open(f);
	assert_int_equal(submit(f, priors, 1, keys), 1);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	stale = f->d[0];
	assert_int_equal(stale.kind, V05_DECISION_FINAL);
	assert_int_equal(v05_release(f->p, stale.slot, stale.gen, stale.key), 0);
	/* The same uid again, in the same slot, a new generation. */
	assert_int_equal(submit(f, priors, 1, keys), 1);
	assert_int_equal(f->d[0].slot, stale.slot);
	assert_true(f->d[0].gen != stale.gen);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	fresh = f->d[0];
	/* The stale decision is refused and the new group stays. */
	assert_int_equal(v05_release(f->p, stale.slot, stale.gen, stale.key),
			 -ESTALE);
	assert_int_equal(v05_group(f->p, fresh.slot, &g), 0);
	assert_true(g.key == fresh.key && g.gen == fresh.gen);

	/* Another plugin, same uid, same slot number. */
	fx_config(o);
	o->c.params.mode = V05_MODE_V05_FIXED;
	o->c.max_prompts = 1;
	fx_open(o);
	assert_int_equal(submit(o, priors, 1, okeys), 1);
	push_samples(o, okeys[0], 0xf, r);
	assert_int_equal(v05_poll(o->p, o->d, MAXD), 1);
	assert_int_equal(o->d[0].slot, fresh.slot);
	assert_true(okeys[0] == keys[0]);
	assert_int_equal(v05_release(o->p, fresh.slot, fresh.gen, fresh.key),
			 -ESTALE);
	assert_int_equal(v05_group(o->p, o->d[0].slot, &g), 0);
	assert_int_equal(v05_release(o->p, o->d[0].slot, o->d[0].gen,
				     o->d[0].key), 0);
	assert_int_equal(v05_release(f->p, fresh.slot, fresh.gen, fresh.key), 0);
	assert_int_equal(v05_release(f->p, fresh.slot, fresh.gen, fresh.key),
			 -EALREADY);
	fx_close(o);
	fx_close(f);
	free(o);
	free(f);
}

/*
 * A late reward for a uid that was released and submitted again: pushed
 * before the new instance existed, it is refused as late, not credited to
 * the new instance's sample.
 */
static void test_late_reward_not_credited_to_new_instance(void **state)
{
	static const double priors[1] = { 0.0 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[1];
	uint64_t late_before;
	struct v05_prompt *e;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	assert_int_equal(submit(f, priors, 1, keys), 1);
	push_samples(f, keys[0], 0x7, r); /* samples 0..2 of 4 */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	/* The group completes and is released. */
	assert_int_equal(v05_producer_push(f->w, keys[0], 3, 1.0f), 0);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen,
				     f->d[0].key), 0);
	/* The old instance's late reward, still in flight... */
	assert_int_equal(v05_producer_push(f->w, keys[0], 1, -1.0f), 0);
	/* ...is drained only after the uid was submitted again. Submit
	 * without polling first: add the prompt through v05_submit only. */
	{
		struct v05_prompt_in in = { "u0", 2, 0.0 };
		struct v05_decision d[1];

		assert_int_equal(v05_submit(f->p, &in, 1, d, NULL), 1);
	}
	late_before = ctr(f, V05_C_REJ_LATE);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	assert_int_equal(ctr(f, V05_C_REJ_LATE), late_before + 1);
	e = v05__table_find(&f->p->table, keys[0]);
	/* Nothing credited to the new instance. */
	assert_true(e != NULL && e->received == 0);
	fx_close(f);
	free(f);
}

static void *no_memory(size_t n)
{
	(void)n;
	return NULL;
}

/*
 * The decision queue's growth fails: the decision that did not fit is not
 * silently lost. v05_poll answers -ENOMEM, on every call, until
 * v05_recover hands out the whole state again.
 */
static void test_queue_alloc_failure(void **state)
{
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint32_t finals = 0;
	int n;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	f->c.max_prompts = 1; /* queue of 2 preallocated */
	fx_open(f);
	for (uint32_t round = 0; round < 3; round++) {
		char uid[8];
		struct v05_prompt_in in = { uid, 0, 0.0 };
		struct v05_group g;

		snprintf(uid, sizeof(uid), "q%u", round);
		in.uid_len = (uint32_t)strlen(uid);
		assert_int_equal(v05_submit(f->p, &in, 1, f->d, NULL), 1);
		push_samples(f, f->d[0].key, 0xf, r);
		if (round == 2)
			v05__queue_malloc = no_memory;
		/* Take no decision out: the queue fills. */
		n = v05_poll(f->p, NULL, 0);
		if (round < 2) {
			assert_int_equal(n, 0);
			/* Release through the group (the decision waits). */
			assert_int_equal(v05_group(f->p, 0, &g), 0);
			assert_int_equal(v05_release(f->p, 0, g.gen, g.key), 0);
		}
	}
	v05__queue_malloc = malloc;
	assert_int_equal(n, -ENOMEM);
	/* Sticky: still -ENOMEM, with memory back, until recovered. */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), -ENOMEM);
	assert_int_equal(v05_pending(f->p), 1);
	n = v05_recover(f->p, f->d, MAXD);
	assert_true(n >= 1);
	for (int i = 0; i < n; i++) {
		assert_true(f->d[i].flags & V05_DF_RECOVERED);
		if (f->d[i].kind == V05_DECISION_FINAL) {
			finals++;
			assert_int_equal(v05_release(f->p, f->d[i].slot,
						     f->d[i].gen, f->d[i].key), 0);
		}
	}
	assert_int_equal(finals, 1); /* the third group, the one not queued */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	fx_close(f);
	free(f);
}

static int reader_child(const char *name, uint32_t want, const double *priors,
			const uint64_t *keys, int go)
{
	struct v05_reader *r = NULL;
	struct v05_params params;
	uint32_t got = 0;
	char c;

	v05_params_default(&params);
	/* The plugin may not have the reader ring yet: retry the claim only
	 * while it answers busy. */
	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 1;
	/* Read nothing until the engine has released every group. */
	if (read(go, &c, 1) != 1)
		return 6;
	while (got < want) {
		struct v05_group g;
		struct v05_estimate e;
		double rw[64], adv[64];
		int i;

		if (v05_reader_next(r, &g) != 1)
			continue;
		for (i = 0; i < 8 && keys[i] != g.key; i++)
			;
		if (i == 8)
			return 5;
		for (uint32_t s = 0; s < g.k; s++)
			rw[s] = g.rewards[s];
		if (v05_estimate(&params, priors[i], rw, g.k, &e, adv) ||
		    e.baseline != g.baseline)
			return 2;
		for (uint32_t s = 0; s < g.k; s++)
			if ((float)adv[s] != g.advantages[s])
				return 3;
		if (v05_reader_release(r, &g))
			return 4;
		got++;
	}
	return v05_reader_close(r);
}

/*
 * A final group has two holders, the engine and the reader: the engine's
 * release leaves the slot to the reader (its values intact), the reader's
 * release then frees it.
 */
static void test_reader_other_process(void **state)
{
	double priors[8];
	static const float r[64] = { 1, -1, 1, 1, -1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[8], t0;
	int go[2], n = 0, st;
	pid_t pid;

	(void)state;
	for (int i = 0; i < 8; i++)
		priors[i] = -0.7 + 0.2 * i;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 8, keys);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	if (pid == 0)
		_exit(reader_child(f->name, 8, priors, keys, go[0]));
	/* Wait (state, not time) until the reader holds the ring. */
	while (!v05__completions_reader(&f->p->compl))
		;
	for (int i = 0; i < 8; i++)
		push_samples(f, keys[i], 0xf, r);
	while (n < 8) {
		int m = v05_poll(f->p, f->d, MAXD);

		for (int i = 0; i < m; i++)
			assert_int_equal(v05_release(f->p, f->d[i].slot,
						     f->d[i].gen, f->d[i].key), 0);
		n += m;
	}
	assert_int_equal(ctr(f, V05_C_RELEASES), 8);
	assert_int_equal(ctr(f, V05_C_PROMPTS_FINAL), 0);
	/* Released by the engine, still the reader's: not back yet. */
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts - 8);
	assert_int_equal(write(go[1], "g", 1), 1);
	t0 = v05__now_ns();
	while (f->p->arena.nfree < f->c.max_prompts &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(ctr(f, V05_C_COMPLETIONS), 8);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 8);
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts); /* all back */
	close(go[0]);
	close(go[1]);
	fx_close(f);
	free(f);
}

/*
 * A reader that dies holding groups: it read three of six, released one.
 * The plugin applies that release, frees the claim, and the next reader
 * gets the other five (two it had read, three it had not), in group order.
 */
static int dying_reader(const char *name, int fd)
{
	struct v05_reader *r = NULL;
	struct v05_group g;
	int got = 0;

	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 1;
	if (write(fd, "r", 1) != 1) /* holding the ring now */
		return 2;
	while (got < 3)
		got += v05_reader_next(r, &g) == 1;
	return v05_reader_release(r, &g) ? 3 : 0; /* and die, no close */
}

static int next_reader(const char *name)
{
	struct v05_reader *r = NULL;
	struct v05_group g;
	uint64_t last = 0;
	int got = 0;

	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 100;
	while (got < 5) {
		if (v05_reader_next(r, &g) != 1)
			continue;
		if (g.seq <= last)
			return 101; /* out of group order */
		last = g.seq;
		if (v05_reader_release(r, &g))
			return 102;
		got++;
	}
	v05_reader_close(r);
	return got;
}

static void test_dead_reader_republish(void **state)
{
	double priors[6] = { -0.5, -0.3, -0.1, 0.1, 0.3, 0.5 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct v05_decision finals[6];
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[6], t0;
	int go[2], st, n = 0;
	pid_t pid;
	char c;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 6, keys);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	if (pid == 0)
		_exit(dying_reader(f->name, go[1]));
	assert_int_equal(read(go[0], &c, 1), 1);
	while (!v05__completions_reader(&f->p->compl))
		;
	for (int i = 0; i < 6; i++)
		push_samples(f, keys[i], 0xf, r);
	while (n < 6) {
		int m = v05_poll(f->p, f->d, MAXD);

		for (int i = 0; i < m; i++)
			finals[n + i] = f->d[i];
		n += m;
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The plugin notices the death on a later poll (state, with a
	 * generous bound). */
	t0 = v05__now_ns();
	while (v05__completions_reader(&f->p->compl) &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(v05__completions_reader(&f->p->compl), 0);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 1);

	pid = fork();
	if (pid == 0)
		_exit(next_reader(f->name));
	t0 = v05__now_ns();
	while (ctr(f, V05_C_READER_RELEASES) < 6 &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 5);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 6);
	assert_int_equal(ctr(f, V05_C_RELEASES_BAD), 0);
	/* Every reader is done; the engine's releases free the slots. */
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts - 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(v05_release(f->p, finals[i].slot, finals[i].gen,
					     finals[i].key), 0);
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts);
	close(go[0]);
	close(go[1]);
	fx_close(f);
	free(f);
}

/* ---- support buffer ------------------------------------------------------ */

static void test_support_sample(void **state)
{
	double priors[40];
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_support a[256], b[256], c[256];
	uint64_t keys[40];
	int n;

	(void)state;
	for (int i = 0; i < 40; i++)
		priors[i] = 0.5;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	assert_int_equal(v05_support_sample(f->p, a, 256, 1), 0);
	submit(f, priors, 40, keys);
	for (int i = 0; i < 40; i++)
		push_samples(f, keys[i], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 40);
	n = v05_support_sample(f->p, a, 256, 7);
	assert_int_equal(n, 40); /* fewer than 256 finalized: all of them */
	assert_int_equal(v05_support_sample(f->p, b, 10, 7), 10);
	assert_int_equal(v05_support_sample(f->p, c, 10, 8), 10);
	assert_memory_equal(a, b, 10 * sizeof(a[0])); /* seeded */
	assert_memory_not_equal(b, c, 10 * sizeof(b[0]));
	for (int i = 0; i < n; i++) {
		assert_true(a[i].mean == 0.5f && a[i].k == 4);
		assert_true(find(keys, 40, a[i].key) >= 0);
		for (int j = 0; j < i; j++)
			assert_true(a[i].key != a[j].key); /* no repeats */
	}
	fx_close(f);
	free(f);
}

/* ---- attach and recover -------------------------------------------------- */

static void test_attach_and_recover(void **state)
{
	static const double priors[3] = { 0.8, -0.8, 0.8 };
	static const float r[64] = { 1, 1, 1, -1 };
	static const float ones[64] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_plugin *q;
	uint64_t keys[3];
	int n, sample = 0, final = 0;

	(void)state;
	fx_config(f);
	f->c.pad_multiple = 1;
	f->c.halt_fraction = 0.0;
	fx_open(f);
	submit(f, priors, 3, keys);
	assert_int_equal(v05_plugin_attach(f->name, 0, &q), -EBUSY);
	push_samples(f, keys[0], 0xf, r);    /* final at 4 */
	push_samples(f, keys[1], 0xf, ones); /* more: 4, 5 issued */
	push_samples(f, keys[2], 0x3, r);    /* half way */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1); /* u0 final; u1 held */
	/* Hand over: state stays in the segment. */
	assert_int_equal(v05_plugin_close(f->p, 0), 0);
	assert_int_equal(v05_plugin_attach(f->name, 0, &f->p), 0);
	n = v05_recover(f->p, f->d, MAXD);
	for (int i = 0; i < n; i++) {
		struct v05_decision *d = &f->d[i];

		assert_true(d->flags & V05_DF_RECOVERED);
		if (d->kind == V05_DECISION_FINAL) {
			assert_true(d->key == keys[0]);
			final++;
		} else if (d->key == keys[2]) {
			assert_true(d->samples == 0xc); /* the two missing */
			sample++;
		}
	}
	assert_int_equal(final, 1);
	assert_int_equal(sample, 1);
	/* u1's round completes once u2 decides; the rest goes on. */
	push_samples(f, keys[2], 0xc, r);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 2); /* u2 final, u1 SAMPLE 4..5 */
	fx_close(f);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_rejects),
		cmocka_unit_test(test_submit_errors),
		cmocka_unit_test(test_results_match_core),
		cmocka_unit_test(test_rounds_padding),
		cmocka_unit_test(test_rounds_halt),
		cmocka_unit_test(test_external_halt),
		cmocka_unit_test(test_stream_release_on_pad),
		cmocka_unit_test(test_stream_release_when_idle),
		cmocka_unit_test(test_stream_deadline),
		cmocka_unit_test(test_stream_halt),
		cmocka_unit_test(test_bad_input_counted),
		cmocka_unit_test(test_zero_copy_views),
		cmocka_unit_test(test_release_identity),
		cmocka_unit_test(test_queue_alloc_failure),
		cmocka_unit_test(test_late_reward_not_credited_to_new_instance),
		cmocka_unit_test(test_reader_other_process),
		cmocka_unit_test(test_dead_reader_republish),
		cmocka_unit_test(test_support_sample),
		cmocka_unit_test(test_attach_and_recover),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
