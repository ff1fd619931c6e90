/* SPDX-License-Identifier: MIT */
/* Abort records (v05_producer_abort, docs/SHM.md "Abort records"): a
 * producer ends the prompt instance it names; the plugin takes it out as
 * v05_cancel does and hands a CANCEL decision naming the samples to stop;
 * the batch goes on without it. Every refusal is counted under one
 * reason, and the lane's accounting sees an applied abort as applied. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05/observer.h"

#define N 4
#define MAXD 64

struct fx {
	char name[64];
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
	uint64_t keys[N];
	uint32_t gens[N];
	uint64_t batch;
};

static void config(struct v05_config *c, uint32_t mode, uint32_t k_init,
		   uint32_t k_max, uint32_t flags)
{
	v05_config_default(c);
	assert_int_equal(v05_config_mode(c, mode), 0);
	c->params.k_init = k_init;
	c->params.k_max = k_max;
	c->pad_multiple = 1;
	c->max_prompts = 16;
	c->max_producers = 2;
	c->lane_capacity = 64;
	c->max_batches = 4;
	c->flags |= flags;
}

static void fx_create(struct fx *f, const struct v05_config *c)
{
	test_name(f->name, sizeof(f->name), "abort");
	assert_int_equal(v05_plugin_create(f->name, c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
}

static void fx_open(struct fx *f, uint32_t mode, uint32_t k_init,
		    uint32_t k_max, uint32_t flags)
{
	struct v05_config c;

	config(&c, mode, k_init, k_max, flags);
	fx_create(f, &c);
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

/* n prompts "<tag><i>" with this prior, one batch. */
static void submit(struct fx *f, char tag, uint32_t n, double prior)
{
	struct v05_prompt_in in[N];
	char uids[N][8];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%c%u", tag, i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = prior;
		f->keys[i] = v05_key(uids[i], in[i].uid_len);
	}
	assert_int_equal(v05_submit(f->p, in, n, f->d, NULL), (int)n);
	for (uint32_t i = 0; i < n; i++)
		f->gens[i] = f->d[i].gen;
	f->batch = f->d[0].batch;
}

static void reward(struct fx *f, uint32_t i, uint32_t s)
{
	assert_int_equal(v05_producer_push(f->w, f->keys[i], f->gens[i], s,
					   s % 2 ? 1.0f : -1.0f), 0);
}

/* The decisions of one poll for key (kind of each), how many. */
static uint32_t poll_for(struct fx *f, uint64_t key, struct v05_decision *out)
{
	int n = v05_poll(f->p, f->d, MAXD);
	uint32_t m = 0;

	assert_true(n >= 0);
	for (int i = 0; i < n; i++)
		if (f->d[i].key == key)
			out[m++] = f->d[i];
	return m;
}

/* The prompt leaves at once: its unrewarded samples named, its slot
 * free, a reward for it afterwards unknown; the other prompt of the
 * batch runs to its final and the batch ends then. */
static void test_abort_cancels_one_prompt(void **state)
{
	struct fx f;
	struct v05_decision mine[MAXD];
	struct v05_lane_stat ls[2];
	struct v05_observer *o;

	(void)state;
	fx_open(&f, V05_MODE_GRPO, 4, 4, V05_CONFIG_ABORT_RECORDS);
	submit(&f, 'a', 2, 0.0);
	reward(&f, 0, 0);
	reward(&f, 0, 2);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_CANCEL);
	assert_int_equal(mine[0].samples, (1u << 1) | (1u << 3));
	assert_int_equal(mine[0].k, 2);
	assert_int_equal(mine[0].gen, f.gens[0]);
	assert_int_equal(mine[0].batch, f.batch);
	assert_int_equal(ctr(&f, V05_C_ABORTS_APPLIED), 1);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_CANCELLED), 1);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 1);
	/* Later rewards and a second abort: nothing of it is left. */
	reward(&f, 0, 1);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_UNKNOWN), 2);
	/* The other prompt: final, and the batch done with it. */
	for (uint32_t s = 0; s < 4; s++)
		reward(&f, 1, s);
	assert_int_equal(poll_for(&f, f.keys[1], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_FINAL);
	assert_int_equal(ctr(&f, V05_C_BATCHES_DONE), 1);
	assert_int_equal(v05_cancel(f.p, f.batch), -ENOENT);
	assert_int_equal(v05_release(f.p, mine[0].slot, mine[0].gen,
				     mine[0].key), 0);
	/* The lane counts the applied abort as applied: 2 + 1 + 4
	 * records applied, the late reward and the second abort not. */
	assert_int_equal(v05_observer_open(f.name, 0, &o), 0);
	assert_int_equal(v05_observer_lanes(o, ls, 2), 2);
	assert_int_equal(ls[v05_producer_lane(f.w)].applied, 7);
	assert_int_equal(ls[v05_producer_lane(f.w)].rejected, 2);
	assert_int_equal(v05_observer_close(o), 0);
	fx_close(&f);
}

/* A batch whose only prompt is aborted is done: its record is free. */
static void test_abort_last_prompt_ends_batch(void **state)
{
	struct fx f;
	struct v05_decision mine[MAXD];

	(void)state;
	fx_open(&f, V05_MODE_GRPO, 4, 4, V05_CONFIG_ABORT_RECORDS);
	submit(&f, 'b', 1, 0.0);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_CANCEL);
	assert_int_equal(mine[0].samples, 0xfu);
	assert_int_equal(ctr(&f, V05_C_BATCHES_DONE), 1);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 0);
	assert_int_equal(v05_cancel(f.p, f.batch), -ENOENT);
	/* The uid may come again: a new instance, a new gen. */
	submit(&f, 'b', 1, 0.0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 1);
	fx_close(&f);
}

/* Each refusal counted under its one reason, and nothing changes: a
 * segment without the flag (kind), an unknown key, another instance's
 * gen and a final group (late), bytes the library does not write
 * (corrupt: an abort record with a sample or a reward). */
static void test_abort_refusals(void **state)
{
	struct fx f;
	struct v05_decision mine[MAXD];
	struct v05_ring_hdr *r;
	struct v05_record *recs;

	(void)state;
	fx_open(&f, V05_MODE_GRPO, 4, 4, 0);
	submit(&f, 'c', 2, 0.0);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_KIND), 1);
	assert_int_equal(ctr(&f, V05_C_ABORTS_APPLIED), 0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 2);
	fx_close(&f);

	fx_open(&f, V05_MODE_GRPO, 4, 4, V05_CONFIG_ABORT_RECORDS);
	submit(&f, 'c', 2, 0.0);
	assert_int_equal(v05_producer_abort(f.w, v05_key("zz", 2), 1), 0);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0] + 1), 0);
	for (uint32_t s = 0; s < 4; s++)
		reward(&f, 1, s);
	assert_int_equal(poll_for(&f, f.keys[1], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_FINAL);
	assert_int_equal(v05_producer_abort(f.w, f.keys[1], f.gens[1]), 0);
	assert_int_equal(poll_for(&f, f.keys[1], mine), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_UNKNOWN), 1);
	assert_int_equal(ctr(&f, V05_C_REJ_LATE), 2);
	/* An abort record with a sample, then one with a reward, written
	 * by hand into the lane nobody holds. */
	r = v05__lane(&f.p->seg, 1);
	recs = v05__lane_records(r);
	recs[0] = (struct v05_record){ .key = f.keys[0], .gen = f.gens[0],
				       .sample = 1, .flags = V05_RECORD_ABORT,
				       .seq = 0 };
	recs[1] = (struct v05_record){ .key = f.keys[0], .gen = f.gens[0],
				       .reward = 0.5f,
				       .flags = V05_RECORD_ABORT, .seq = 1 };
	v05_store_release(&r->tail, 2u);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 0);
	assert_int_equal(ctr(&f, V05_C_REJ_CORRUPT), 2);
	assert_int_equal(ctr(&f, V05_C_ABORTS_APPLIED), 0);
	/* The final one stays the caller's, the open one open. */
	assert_int_equal(ctr(&f, V05_C_PROMPTS_FINAL), 1);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 1);
	assert_int_equal(v05_release(f.p, mine[0].slot, mine[0].gen,
				     mine[0].key), 0);
	fx_close(&f);
}

/* Applied in the same drain as the rewards that made its next samples:
 * the SAMPLE decision never goes out, the CANCEL names those samples
 * too (issued, not rewarded). */
static void test_abort_purges_queued_samples(void **state)
{
	struct fx f;
	struct v05_decision mine[MAXD];

	(void)state;
	fx_open(&f, V05_MODE_V05, 4, 16, V05_CONFIG_ABORT_RECORDS);
	/* One prompt, a prior of 1 against rewards of mean 0: OSLA asks
	 * for more, and the stream schedule issues them at once. */
	submit(&f, 'd', 1, 1.0);
	for (uint32_t s = 0; s < 4; s++)
		reward(&f, 0, s);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_CANCEL);
	/* The first wave's and the second's, which was purged. */
	assert_int_equal(ctr(&f, V05_C_DEC_SAMPLE), 2);
	assert_true(mine[0].k >= 1);
	assert_int_equal(mine[0].samples & 0xfu, 0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_OPEN), 0);
	assert_int_equal(ctr(&f, V05_C_PROMPTS_HELD), 0);
	fx_close(&f);
}

/* A prompt held at a round barrier is aborted: the round goes on
 * without it, and the other prompt gets its samples. */
static void test_abort_held_prompt(void **state)
{
	struct fx f;
	struct v05_decision mine[MAXD];
	struct v05_config c;

	(void)state;
	/* The rounds schedule: the round waits for every first wave. */
	config(&c, V05_MODE_V05, 4, 16, V05_CONFIG_ABORT_RECORDS);
	c.halt_fraction = 0.0;
	c.schedule = V05_SCHEDULE_ROUNDS;
	fx_create(&f, &c);
	submit(&f, 'e', 2, 1.0);
	for (uint32_t s = 0; s < 4; s++)
		reward(&f, 0, s);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 0); /* held */
	assert_int_equal(ctr(&f, V05_C_PROMPTS_HELD), 1);
	assert_int_equal(v05_producer_abort(f.w, f.keys[0], f.gens[0]), 0);
	assert_int_equal(poll_for(&f, f.keys[0], mine), 1);
	assert_int_equal(mine[0].kind, V05_DECISION_CANCEL);
	assert_int_equal(mine[0].samples, 0); /* nothing out */
	assert_int_equal(ctr(&f, V05_C_PROMPTS_HELD), 0);
	/* The other prompt's first wave ends the round: its samples only. */
	for (uint32_t s = 0; s < 4; s++)
		reward(&f, 1, s);
	{
		int n = v05_poll(f.p, f.d, MAXD);

		assert_int_equal(n, 1);
		assert_int_equal(f.d[0].kind, V05_DECISION_SAMPLE);
		assert_int_equal(f.d[0].key, f.keys[1]);
	}
	assert_int_equal(v05_cancel(f.p, f.batch), 1);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_abort_cancels_one_prompt),
		cmocka_unit_test(test_abort_last_prompt_ends_batch),
		cmocka_unit_test(test_abort_refusals),
		cmocka_unit_test(test_abort_purges_queued_samples),
		cmocka_unit_test(test_abort_held_prompt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
