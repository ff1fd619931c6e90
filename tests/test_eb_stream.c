/* SPDX-License-Identifier: MIT */
/*
 * v05-eb without a barrier (schedule stream), in the plugin, against the
 * pure functions: each prompt is decided the moment its own first wave is
 * in, while the others still collect, under the fit of the first waves
 * folded so far (its own included); the cold start holds first waves
 * until eb_cold of them are in; the fit carries over to the next batch and
 * through a takeover; an engine given the others' state decides as one
 * engine holding every prompt would; the same rewards in the same order
 * give the same decisions; an early start issues k_step more with the
 * first wave and aborts them when the first wave says they are not needed.
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

#include "util/seg.h"
#include "v05-internal/plugin.h" /* V05_C_SAMPLES_PADDED */
#include "v05.h"

#define N 32
#define MAXD (4 * N)

struct fx {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
	double prior[N];
	uint64_t key[N];
	uint32_t gen[N];
	float r[N][16];
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

/* Priors and rewards of batch `batch` (the same for every plugin). */
static void world(struct fx *f, uint64_t batch)
{
	uint64_t seed = 77 + batch;

	for (uint32_t i = 0; i < N; i++) {
		double mu = 2 * u01(&seed) - 1;

		f->prior[i] = i % 4 == 0 ? 2 * u01(&seed) - 1 :
			      fmax(-1, fmin(1, mu + 0.3 * (u01(&seed) - 0.5)));
		for (uint32_t s = 0; s < 16; s++)
			f->r[i][s] = u01(&seed) < (1 + mu) / 2 ? 1.0f : -1.0f;
	}
}

static void config(struct fx *f, uint32_t cold, uint32_t pad)
{
	memset(f, 0, sizeof(*f));
	v05_config_default(&f->c);
	assert_int_equal(f->c.params.mode, V05_MODE_V05_EB);
	assert_int_equal(f->c.schedule, V05_SCHEDULE_STREAM);
	f->c.params.cost = 0.002;
	f->c.eb_cold = cold;
	f->c.eb_window = 40;
	f->c.pad_multiple = pad;
	f->c.max_prompts = N;
	f->c.max_producers = 1;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 2;
}

static void open_fx(struct fx *f, const char *tag)
{
	test_name(f->name, sizeof(f->name), tag);
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
}

static void close_fx(struct fx *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

/* Submit batch `batch`: prompts b<batch>-<i>. */
static void submit(struct fx *f, uint64_t batch)
{
	struct v05_prompt_in in[N];
	char uids[N][24];

	world(f, batch);
	for (uint32_t i = 0; i < N; i++) {
		snprintf(uids[i], sizeof(uids[i]), "b%llu-%u",
			 (unsigned long long)batch, i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = f->prior[i];
		f->key[i] = v05_key(uids[i], in[i].uid_len);
	}
	assert_int_equal(v05_submit(f->p, in, N, f->d, NULL), N);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(f->d[i].kind, V05_DECISION_SAMPLE);
		assert_int_equal(f->d[i].key, f->key[i]);
		f->gen[i] = f->d[i].gen;
	}
}

static int idx_of(const struct fx *f, uint64_t key)
{
	for (int i = 0; i < N; i++)
		if (f->key[i] == key)
			return i;
	fail_msg("unknown key");
	return -1;
}

static double first_successes(const struct fx *f, int i)
{
	double s = 0;

	for (int j = 0; j < 4; j++)
		s += (1.0 + f->r[i][j]) / 2.0;
	return s;
}

/* Push samples [from, to) of prompt i. */
static void push_range(struct fx *f, int i, uint32_t from, uint32_t to)
{
	for (uint32_t s = from; s < to; s++)
		assert_int_equal(v05_producer_push(f->w, f->key[i], f->gen[i], s,
						   f->r[i][s]), 0);
}

/* Answer every SAMPLE of d[0..m) (second waves), release every final. */
static void settle(struct fx *f, int m)
{
	while (m > 0) {
		for (int j = 0; j < m; j++) {
			const struct v05_decision *d = &f->d[j];
			int i = idx_of(f, d->key);

			if (d->kind == V05_DECISION_SAMPLE) {
				for (uint32_t s = 0; s < 64; s++)
					if (d->samples >> s & 1)
						push_range(f, i, s, s + 1);
			} else {
				assert_int_equal(v05_release(f->p, d->slot,
							     d->gen, d->key), 0);
			}
		}
		m = v05_poll(f->p, f->d, MAXD);
		assert_true(m >= 0);
	}
}

/*
 * Feed prompt i's first wave, poll: with eb_cold 1 and pad 1, the one
 * decision is prompt i's, made while every later prompt still collects,
 * and it is v05_eb_choose's under the fit of a state folded the same way.
 */
static void test_each_prompt_on_its_own(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state ref, got;
	const double keep = 1.0 - 1.0 / 40.0;
	uint32_t finals = 0, more = 0;

	(void)state;
	config(f, 1, 1);
	open_fx(f, "ebs-own");
	v05_eb_state_init(&ref);
	for (uint64_t batch = 0; batch < 2; batch++) {
		submit(f, batch);
		for (int i = 0; i < N; i++) {
			struct v05_eb_fit fit;
			int m, want;

			push_range(f, i, 0, 4);
			m = v05_poll(f->p, f->d, MAXD);
			assert_int_equal(v05_eb_state_fold(&ref, keep, f->prior[i],
							   4, first_successes(f, i)), 0);
			assert_int_equal(v05_eb_state_fit(&ref, &fit), 0);
			want = v05_eb_choose(&f->c.params, &fit, f->prior[i], 4,
					     first_successes(f, i));
			assert_true(want >= 0);
			assert_int_equal(m, 1);
			assert_int_equal(f->d[0].key, f->key[i]);
			if (want == 0) {
				assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
				finals++;
				assert_int_equal(v05_release(f->p, f->d[0].slot,
							     f->d[0].gen, f->key[i]), 0);
			} else {
				assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
				assert_int_equal(f->d[0].k, (uint32_t)want);
				more++;
				push_range(f, i, 4, 4 + (uint32_t)want);
				settle(f, v05_poll(f->p, f->d, MAXD));
			}
		}
		/* The state is the reference's, bit for bit, and carries
		 * over to the next batch (weight above one batch's). */
		assert_int_equal(v05_eb_state_get(f->p, &got), 0);
		assert_memory_equal(&got, &ref, sizeof(ref));
	}
	assert_true(finals > 0 && more > 0);
	assert_true(got.folded == 2 * N);
	close_fx(f);
	free(f);
}

static uint64_t padded_samples(struct v05_plugin *p)
{
	uint64_t v[V05_COUNTER_SLOTS];

	assert_int_equal(v05_counters(p, v, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	return v[V05_C_SAMPLES_PADDED];
}

/*
 * pad 32, deadline 1 ms: a prompt decided "more" while the others collect
 * is held to pad; at the deadline (v05_wait returns for it) it goes with
 * its own plan and nothing more: no padding sample, no PADDED flag (a
 * padded release would have filled its room up to k_max). While it is
 * held, v05_next_deadline says how long; once due, 0; with nothing held,
 * -1.
 */
static void test_deadline_unpadded(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state ref;
	const double keep = 1.0 - 1.0 / 40.0;
	int64_t ns;
	int held = 0;

	(void)state;
	config(f, 1, 32);
	f->c.stream_deadline_us = 1000;
	open_fx(f, "ebs-dl");
	v05_eb_state_init(&ref);
	submit(f, 0);
	/* Until a plan below k_max's room: padding would have room there. */
	for (int i = 0; i < N - 1 && !held; i++) {
		struct v05_eb_fit fit;
		int m, want;

		push_range(f, i, 0, 4);
		m = v05_poll(f->p, f->d, MAXD);
		assert_int_equal(v05_eb_state_fold(&ref, keep, f->prior[i], 4,
						   first_successes(f, i)), 0);
		assert_int_equal(v05_eb_state_fit(&ref, &fit), 0);
		want = v05_eb_choose(&f->c.params, &fit, f->prior[i], 4,
				     first_successes(f, i));
		if (want == 0) {
			assert_int_equal(m, 1);
			assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
			assert_int_equal(v05_release(f->p, f->d[0].slot,
						     f->d[0].gen, f->key[i]), 0);
			continue;
		}
		assert_true(want < 32);
		assert_int_equal(m, 0); /* held to pad */
		/* A caller that pushes its own rewards sleeps until then (or
		 * not at all: a slow run may be past it already). */
		assert_int_equal(v05_next_deadline(f->p, &ns), 0);
		assert_true(ns >= 0 && ns <= 1000000);
		assert_int_equal(v05_wait(f->p, 60000), 1);
		assert_int_equal(v05_next_deadline(f->p, &ns), 0);
		assert_int_equal(ns, 0); /* due: poll now */
		m = v05_poll(f->p, f->d, MAXD);
		assert_int_equal(m, 1);
		assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
		assert_int_equal(f->d[0].key, f->key[i]);
		assert_int_equal(f->d[0].k, (uint32_t)want);
		assert_int_equal(f->d[0].flags & V05_DF_PADDED, 0);
		held = want < 12;
		push_range(f, i, 4, 4 + (uint32_t)want);
		settle(f, v05_poll(f->p, f->d, MAXD));
	}
	assert_true(held);
	assert_int_equal(padded_samples(f->p), 0);
	/* Nothing held: no deadline. */
	assert_int_equal(v05_next_deadline(f->p, &ns), 0);
	assert_int_equal(ns, -1);
	assert_int_equal(v05_next_deadline(f->p, NULL), -EINVAL);
	assert_int_equal(v05_next_deadline(NULL, &ns), -EINVAL);
	close_fx(f);
	free(f);
}

/* eb_cold 8: the first seven first waves wait; the eighth decides all
 * eight at once; later ones are decided one by one. */
static void test_cold_start(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	int64_t ns;

	(void)state;
	config(f, 8, 1);
	open_fx(f, "ebs-cold");
	submit(f, 0);
	for (int i = 0; i < 7; i++) {
		push_range(f, i, 0, 4);
		assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	}
	push_range(f, 7, 0, 4);
	/* One at a time: the seven left are queued, so a caller that waits
	 * on its own pushes (v05_next_deadline) must not wait for them. */
	assert_int_equal(v05_poll(f->p, f->d, 1), 1);
	assert_int_equal(v05_next_deadline(f->p, &ns), 0);
	assert_int_equal(ns, 0);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 7);
	assert_int_equal(v05_next_deadline(f->p, &ns), 0);
	assert_true(ns != 0);
	push_range(f, 8, 0, 4);
	assert_int_equal(v05_poll(f->p, f->d, MAXD) >= 1, 1);
	close_fx(f);
	free(f);
}

/* Prompts held by a cold start are decided at once when another
 * engine's fit makes the running fit warm: set_remote itself queues their
 * decisions (v05_pending says so, the next poll returns them), with no
 * reward or deadline after it. */
static void test_cold_start_warmed_by_remote(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state other;
	int64_t ns;

	(void)state;
	config(f, 8, 1);
	f->c.stream_deadline_us = 10000000; /* no deadline in the test's time */
	open_fx(f, "ebs-warm");
	submit(f, 0);
	for (int i = 0; i < 3; i++) {
		push_range(f, i, 0, 4);
		assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	}
	assert_int_equal(v05_pending(f->p), 0);
	/* Four first waves of another engine: 3 + 4 < 8, still cold. */
	v05_eb_state_init(&other);
	for (int i = 0; i < 4; i++)
		assert_int_equal(v05_eb_state_fold(&other, 1.0, 0.1 * i, 4, 2.0), 0);
	assert_int_equal(v05_eb_state_set_remote(f->p, &other), 0);
	assert_int_equal(v05_pending(f->p), 0);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	/* Five: 3 + 5 = 8, warm. */
	assert_int_equal(v05_eb_state_fold(&other, 1.0, -0.4, 4, 1.0), 0);
	assert_int_equal(v05_eb_state_set_remote(f->p, &other), 0);
	assert_int_equal(v05_next_deadline(f->p, &ns), 0);
	assert_int_equal(ns, 0);
	assert_int_equal(v05_pending(f->p), 1);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 3);
	close_fx(f);
	free(f);
}

/* A cold batch whose last first wave comes before eb_cold decides then,
 * as at a barrier. */
static void test_cold_batch_end(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	int m;

	(void)state;
	config(f, 40, 1);
	open_fx(f, "ebs-end");
	submit(f, 0);
	for (int i = 0; i < N - 1; i++) {
		push_range(f, i, 0, 4);
		assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	}
	push_range(f, N - 1, 0, 4);
	m = v05_poll(f->p, f->d, MAXD);
	assert_true(m >= N); /* every prompt: a FINAL or a SAMPLE */
	close_fx(f);
	free(f);
}

/* Run a batch's first waves in order `order` then settle; record the
 * decisions' kinds, sample masks and final baselines. */
static void replay(struct fx *f, const int *order, char *log, size_t cap)
{
	size_t at = 0;

	submit(f, 5);
	for (int n = 0; n < N; n++) {
		int i = order[n], m;

		push_range(f, i, 0, 4);
		m = v05_poll(f->p, f->d, MAXD);
		for (int j = 0; j < m; j++) {
			struct v05_group g;

			if (f->d[j].kind == V05_DECISION_FINAL) {
				assert_int_equal(v05_group(f->p, f->d[j].slot, &g), 0);
				at += (size_t)snprintf(log + at, cap - at, "F%d:%.17g ",
						       idx_of(f, f->d[j].key), g.baseline);
			} else {
				at += (size_t)snprintf(log + at, cap - at, "S%d:%llx ",
						       idx_of(f, f->d[j].key),
						       (unsigned long long)f->d[j].samples);
			}
		}
		settle(f, m);
	}
}

static void test_same_order_same_decisions(void **state)
{
	struct fx *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	static char la[16384], lb[16384], lc[16384];
	int order[N], rev[N];

	(void)state;
	for (int i = 0; i < N; i++) {
		order[i] = (i * 7) % N;
		rev[i] = N - 1 - i;
	}
	config(a, 4, 8);
	config(b, 4, 8);
	open_fx(a, "ebs-a");
	open_fx(b, "ebs-b");
	replay(a, order, la, sizeof(la));
	replay(b, order, lb, sizeof(lb));
	assert_string_equal(la, lb);
	close_fx(b);
	config(b, 4, 8);
	open_fx(b, "ebs-c");
	replay(b, rev, lc, sizeof(lc));
	/* Another order may decide otherwise (docs/STATISTICS.md): this
	 * batch's reversed order does, as the fit each decision sees is over
	 * the first waves folded before it. */
	assert_true(strcmp(la, lc) != 0);
	close_fx(a);
	close_fx(b);
	free(a);
	free(b);
}

/* Two engines, each with half of a batch: the one given the other's
 * state decides its prompts as one engine folding both would. */
static void test_merged_state(void **state)
{
	struct fx *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct v05_eb_state sa, sb, ref;
	struct v05_eb_fit fit;
	int m, want, i = 1;

	(void)state;
	config(a, 1, 1);
	config(b, 1, 1);
	a->c.eb_window = 0; /* nothing forgotten: a sum is a union */
	b->c.eb_window = 0;
	open_fx(a, "ebs-ma");
	open_fx(b, "ebs-mb");
	submit(a, 3);
	submit(b, 3);
	v05_eb_state_init(&ref);
	/* b takes the even prompts' first waves. */
	for (int j = 0; j < N; j += 2) {
		push_range(b, j, 0, 4);
		settle(b, v05_poll(b->p, b->d, MAXD));
		v05_eb_state_fold(&ref, 1.0, b->prior[j], 4, first_successes(b, j));
	}
	assert_int_equal(v05_eb_state_get(b->p, &sb), 0);
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), 0);
	/* a decides prompt 1 under b's 16 first waves plus its own. */
	push_range(a, i, 0, 4);
	m = v05_poll(a->p, a->d, MAXD);
	v05_eb_state_fold(&ref, 1.0, a->prior[i], 4, first_successes(a, i));
	assert_int_equal(v05_eb_state_fit(&ref, &fit), 0);
	want = v05_eb_choose(&a->c.params, &fit, a->prior[i], 4,
			     first_successes(a, i));
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
	sb.weight = -1;
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
	sb.weight = 1;
	sb.ll[3][4] = NAN;
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "[3][4]"));
	/* Finite, but no fold makes it: refused as well; each counted. */
	sb.ll[3][4] = 0.5;
	assert_int_equal(v05_eb_state_set_remote(a->p, &sb), -EDOM);
	assert_non_null(strstr(v05_errmsg(), "> 0"));
	{
		uint64_t c[V05_COUNTER_SLOTS];

		v05_counters(a->p, c, V05_COUNTER_SLOTS);
		assert_int_equal(c[V05_C_EB_PARTS_REFUSED], 3);
	}
	close_fx(a);
	close_fx(b);
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
	config(a, 1, 1);
	config(b, 1, 1);
	open_fx(a, "ebs-oa");
	open_fx(b, "ebs-ob");
	submit(a, 3);
	submit(b, 3);
	for (int j = 0; j < N; j += 2) {
		push_range(a, j, 0, 4);
		settle(a, v05_poll(a->p, a->d, MAXD));
	}
	assert_int_equal(v05_eb_state_get(a->p, &sa), 0);
	assert_true(sa.folded > 0);
	assert_int_equal(v05_eb_state_set_own(b->p, &sa), 0);
	assert_int_equal(v05_eb_state_get(b->p, &sb), 0);
	assert_memory_equal(&sa, &sb, sizeof(sa));
	push_range(a, i, 0, 4);
	push_range(b, i, 0, 4);
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
	close_fx(a);
	close_fx(b);
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
	config(f, 1, 1);
	open_fx(f, "ebs-take");
	submit(f, 0);
	for (int i = 0; i < 10; i++) {
		push_range(f, i, 0, 4);
		settle(f, v05_poll(f->p, f->d, MAXD));
	}
	assert_int_equal(v05_eb_state_get(f->p, &before), 0);
	assert_int_equal(v05_plugin_close(f->p, 0), 0);
	assert_int_equal(v05_plugin_attach(f->name, 0, &q), 0);
	f->p = q;
	assert_int_equal(v05_eb_state_get(f->p, &after), 0);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_true(after.folded == 10);
	close_fx(f);
	free(f);
}

/*
 * Early start (eb_early 1 per mille: nearly every prompt once warm): the
 * second batch's first dispatch carries k_init + k_step samples; on each
 * first wave the decision is v05_eb_choose's m, and then: m = 0 aborts
 * the early samples and finalizes at k_init; m = k_step waits for them
 * and finalizes at k_init + k_step; m > k_step issues the rest.
 */
static void test_early_start(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state ref;
	uint32_t seen[3] = { 0, 0, 0 }, early = 0;

	(void)state;
	config(f, 1, 1);
	f->c.eb_window = 0;
	f->c.eb_early = 1;
	open_fx(f, "ebs-early");
	v05_eb_state_init(&ref);
	/* Batch 0: cold at submit, so no early start. */
	submit(f, 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(f->d[i].k, 4);
		push_range(f, i, 0, 4);
		v05_eb_state_fold(&ref, 1.0, f->prior[i], 4, first_successes(f, i));
		settle(f, v05_poll(f->p, f->d, MAXD));
	}
	submit(f, 1);
	for (int i = 0; i < N; i++)
		early += f->d[i].k == 6 && f->d[i].samples == 0x3f;
	assert_true(early > N / 2);
	for (int i = 0; i < N; i++) {
		struct v05_eb_fit fit;
		struct v05_group g;
		int m, want;

		push_range(f, i, 0, 4);
		m = v05_poll(f->p, f->d, MAXD);
		v05_eb_state_fold(&ref, 1.0, f->prior[i], 4, first_successes(f, i));
		assert_int_equal(v05_eb_state_fit(&ref, &fit), 0);
		want = v05_eb_choose(&f->c.params, &fit, f->prior[i], 4,
				     first_successes(f, i));
		if (want == 0) {
			/* Early: ABORT of samples 4, 5, then the FINAL. */
			assert_true(m >= 1);
			if (m == 2) {
				assert_int_equal(f->d[0].kind, V05_DECISION_ABORT);
				assert_int_equal(f->d[0].samples, 0x30);
				assert_int_equal(f->d[0].k, 2);
				f->d[0] = f->d[1];
				seen[0]++;
			}
			assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
			assert_int_equal(v05_group(f->p, f->d[0].slot, &g), 0);
			assert_int_equal(g.k, 4);
			assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen,
						     f->d[0].key), 0);
			continue;
		}
		if (want == 2 && m == 0) {
			/* Its early samples are the plan: push them. */
			push_range(f, i, 4, 6);
			m = v05_poll(f->p, f->d, MAXD);
			assert_int_equal(m, 1);
			assert_int_equal(f->d[0].kind, V05_DECISION_FINAL);
			assert_int_equal(v05_group(f->p, f->d[0].slot, &g), 0);
			assert_int_equal(g.k, 6);
			assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen,
						     f->d[0].key), 0);
			seen[1]++;
			continue;
		}
		assert_int_equal(m, 1);
		assert_int_equal(f->d[0].kind, V05_DECISION_SAMPLE);
		if (f->d[0].samples & 0x30) {
			/* Not started early: the whole plan now. */
			assert_int_equal(f->d[0].k, (uint32_t)want);
			settle(f, m);
		} else {
			/* Started early: the rest of the plan, after 4, 5. */
			assert_int_equal(f->d[0].k, (uint32_t)want - 2);
			push_range(f, i, 4, 6);
			seen[2]++;
			settle(f, m);
		}
	}
	print_message("early start: %u aborted, %u covered, %u extended\n",
		      seen[0], seen[1], seen[2]);
	assert_true(seen[0] > 0 && seen[1] + seen[2] > 0);
	close_fx(f);
	free(f);
}

/* Other modes and the barrier have no running fit. */
static void test_wrong_mode(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_eb_state st;

	(void)state;
	config(f, 1, 1);
	f->c.schedule = V05_SCHEDULE_ROUNDS;
	open_fx(f, "ebs-mode");
	assert_int_equal(v05_eb_state_get(f->p, &st), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "rounds"));
	v05_eb_state_init(&st);
	assert_int_equal(v05_eb_state_set_own(f->p, &st), -EINVAL);
	close_fx(f);
	config(f, 0, 1);
	assert_int_equal(v05_config_check(&f->c), -EINVAL); /* cold 0 */
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_prompt_on_its_own),
		cmocka_unit_test(test_cold_start),
		cmocka_unit_test(test_cold_start_warmed_by_remote),
		cmocka_unit_test(test_deadline_unpadded),
		cmocka_unit_test(test_cold_batch_end),
		cmocka_unit_test(test_same_order_same_decisions),
		cmocka_unit_test(test_merged_state),
		cmocka_unit_test(test_set_own),
		cmocka_unit_test(test_takeover_keeps_fit),
		cmocka_unit_test(test_early_start),
		cmocka_unit_test(test_wrong_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
