/* SPDX-License-Identifier: MIT */
/* Producer lanes: wrap-around at 2^32, full and empty, batches that do not
 * divide the capacity, deferred publish, records a producer did not write,
 * overruns, claims, and reclaim of a dead producer's lane. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "v05-internal/vocab.h"

#include "util/seg.h"
#include "v05-internal/shm.h"

struct sink {
	uint64_t keys[8192];
	uint32_t gens[8192];
	uint32_t lanes[8192];
	uint32_t n;
};

static void collect_one(void *ctx, const struct v05_record *rec, uint32_t lane)
{
	struct sink *s = ctx;

	assert_true(s->n < 8192);
	s->keys[s->n] = rec->key;
	s->gens[s->n] = rec->gen;
	s->lanes[s->n] = lane;
	s->n++;
}

/* The lanes hand records over in batches. */
static void collect(void *ctx, const struct v05_record *recs, uint32_t n,
                    uint32_t lane)
{
	for (uint32_t j = 0; j < n; j++)
		collect_one(ctx, &recs[j], lane);
}

struct fixture {
	char name[64];
	struct v05_segment owner;
	struct v05_lanes lanes;
	struct sink sink;
};

static struct fixture *setup(uint32_t nlanes, uint32_t cap, uint32_t start)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct v05_geometry g = test_geometry(nlanes, cap, 4, 16);

	assert_non_null(f);
	test_name(f->name, sizeof(f->name), "lanes");
	assert_int_equal(v05__segment_create(f->name, &g, NULL, 0, 0600,
					     &f->owner), 0);
	/* Seed every index near the wrap before anyone uses the lanes. */
	for (uint32_t i = 0; i < nlanes; i++) {
		v05__lane(&f->owner, i)->head = start;
		v05__lane(&f->owner, i)->tail = start;
		f->owner.lane_own[i].head = start;
	}
	assert_int_equal(v05__lanes_init(&f->lanes, &f->owner), 0);
	f->lanes.event = test_lane_count;
	f->lanes.event_ctx = &f->owner;
	return f;
}

static void teardown(struct fixture *f)
{
	v05__lanes_fini(&f->lanes);
	v05__segment_detach(&f->owner);
	assert_int_equal(v05_segment_unlink(f->name), 0);
	free(f);
}

static uint64_t ctr(struct fixture *f, int c)
{
	return f->owner.state->counters[c];
}

static void test_wraparound_odd_batches(void **state)
{
	struct fixture *f = setup(1, 64, UINT32_MAX - 40);
	struct v05_producer *p;
	struct v05_reward batch[7];
	uint64_t next = 0;

	(void)state;
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	/* 7 does not divide 64; 700 records cross 2^32 and wrap the lane
	 * many times. Drain in uneven steps too. */
	for (int round = 0; round < 100; round++) {
		for (int i = 0; i < 7; i++) {
			batch[i] = (struct v05_reward){
				.key = next + (uint64_t)i,
				.gen = (uint32_t)(next + (uint64_t)i) ^ 0x9e37u,
				.sample = (uint32_t)i, .reward = 0.5f };
		}
		assert_int_equal(v05_producer_push_batch(p, batch, 7), 7);
		next += 7;
		v05__lanes_drain(&f->lanes, 5, 3, collect, &f->sink);
		if (round % 9 == 8)
			v05__lanes_drain(&f->lanes, 1000, 64, collect, &f->sink);
	}
	v05__lanes_drain(&f->lanes, 1000, 64, collect, &f->sink);
	assert_int_equal(f->sink.n, 700);
	for (uint32_t i = 0; i < 700; i++) {
		assert_true(f->sink.keys[i] == i);
		assert_int_equal(f->sink.gens[i], i ^ 0x9e37u);
	}
	/* The indices did wrap. */
	assert_true(v05__lane(&f->owner, 0)->tail < 1000);
	assert_int_equal(ctr(f, V05_C_REJ_CORRUPT), 0);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

static void test_full_and_empty(void **state)
{
	struct fixture *f = setup(1, 16, UINT32_MAX - 3);
	struct v05_producer *p;
	struct v05_reward b[8] = { { 0 } };
	uint32_t tail;

	(void)state;
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 0);
	assert_false(v05__lanes_pending(&f->lanes));
	for (int i = 0; i < 16; i++)
		assert_int_equal(v05_producer_push(p, (uint64_t)i + 1, 0, 0, 0.f), 0);
	assert_true(v05__lanes_pending(&f->lanes));
	assert_int_equal(v05_producer_push(p, 99, 0, 0, 0.f), -EAGAIN);
	/* All or nothing: 8 do not fit after draining 5. */
	assert_int_equal(v05__lanes_drain(&f->lanes, 5, 16, collect, &f->sink), 5);
	tail = v05__lane(&f->owner, 0)->tail;
	assert_int_equal(v05_producer_push_batch(p, b, 8), -EAGAIN);
	assert_int_equal(v05__lane(&f->owner, 0)->tail, tail);
	assert_int_equal(v05_producer_push_batch(p, b, 5), 5);
	assert_int_equal(v05_producer_push_batch(p, b, 17), -EINVAL);
	assert_int_equal(v05_producer_push_wait(p, b, 1, 20), -ETIMEDOUT);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 4, collect, &f->sink), 16);
	assert_int_equal(f->sink.n, 21);
	assert_int_equal(f->owner.lane_own[0].high_water, 16);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

static void test_deferred_publish(void **state)
{
	struct fixture *f = setup(1, 64, 0);
	struct v05_producer *p;

	(void)state;
	assert_int_equal(v05_producer_open(f->name, V05_PRODUCER_DEFER, &p), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(v05_producer_push(p, 7, 0, (uint32_t)i, 1.f), 0);
	assert_false(v05__lanes_pending(&f->lanes));
	assert_int_equal(v05_producer_flush(p), 10);
	assert_int_equal(v05_producer_flush(p), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 64, collect, &f->sink), 10);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

/* Bytes the producer library did not write: wrong seq, unknown flags, a
 * tail beyond the capacity. Rejected, counted, the lane keeps working. */
static void test_foreign_bytes(void **state)
{
	struct fixture *f = setup(1, 16, 5);
	struct v05_ring_hdr *r = v05__lane(&f->owner, 0);
	struct v05_record *recs = v05__lane_records(r);
	struct v05_producer *p;

	(void)state;
	recs[5 & 15] = (struct v05_record){ .key = 1, .seq = 77 };
	recs[6 & 15] = (struct v05_record){ .key = 2, .seq = 6, .flags = 4 };
	recs[7 & 15] = (struct v05_record){ .key = 3, .seq = 7 };
	recs[8 & 15] = (struct v05_record){ .key = 5, .seq = 8, .zero = 1 };
	recs[9 & 15] = (struct v05_record){ .key = 4, .seq = 9 };
	r->tail = 10;
	/* One batch: the good ones come out in lane order, the bad ones
	 * between them are dropped and counted. */
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 5);
	assert_int_equal(f->sink.n, 2);
	assert_true(f->sink.keys[0] == 3 && f->sink.keys[1] == 4);
	assert_int_equal(ctr(f, V05_C_REJ_CORRUPT), 3);
	r->tail = 10 + 16 + 5; /* claims more than the lane holds */
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 0);
	assert_int_equal(ctr(f, V05_C_LANE_OVERRUNS), 1);
	assert_int_equal(r->head, 10 + 16 + 5);
	/* A real producer continues from there. */
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	assert_int_equal(v05_producer_push(p, 42, 0, 0, 0.f), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 1);
	assert_true(f->sink.keys[2] == 42);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

static void test_claims(void **state)
{
	struct fixture *f = setup(2, 16, 0);
	struct v05_producer *a, *b, *c;

	(void)state;
	/* Claims are counted by the consumer as it sees owner words come
	 * (at its periodic check; forced here), not by the producers. */
	assert_int_equal(v05_producer_open(f->name, 0, &a), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &b), 0);
	assert_int_not_equal(v05_producer_lane(a), v05_producer_lane(b));
	assert_int_equal(v05_producer_open(f->name, 0, &c), -EBUSY);
	assert_int_equal(v05_producer_push(b, 5, 0, 1, 1.f), 0);
	v05__lanes_reclaim(&f->lanes, true, collect, &f->sink);
	assert_int_equal(v05_producer_close(b), 0);
	v05__lanes_reclaim(&f->lanes, true, collect, &f->sink);
	assert_int_equal(v05_producer_open(f->name, 0, &c), 0);
	v05__lanes_reclaim(&f->lanes, true, collect, &f->sink);
	/* c continues b's lane where b left it; nothing lost. */
	assert_int_equal(v05_producer_push(c, 6, 0, 1, 1.f), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 2);
	assert_true(f->sink.keys[0] == 5 && f->sink.keys[1] == 6);
	assert_int_equal(f->owner.lane_own[v05_producer_lane(c)].consumed, 2);
	assert_int_equal(ctr(f, V05_C_LANE_CLAIMS), 3);
	assert_int_equal(v05_producer_open(NULL, 0, &c), -EINVAL);
	assert_int_equal(v05_producer_close(a), 0);
	assert_int_equal(v05_producer_close(c), 0);
	teardown(f);
}

/*
 * What a producer can write in its own lane's page does not move what the
 * consumer trusts: a takeover resumes from the owner's copy of the head,
 * and the lane's counts are the owner's, whatever the producer stores.
 */
static void test_lane_page_not_trusted(void **state)
{
	struct fixture *f = setup(1, 16, 0);
	struct v05_ring_hdr *r = v05__lane(&f->owner, 0);
	struct v05_producer *p;

	(void)state;
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(v05_producer_push(p, 10 + (uint64_t)i, 0, 0, 0.f), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 3);
	/* A buggy producer scribbles over its whole header page. */
	memset(r, 0xa5, sizeof(*r));
	r->owner = 0;
	r->tail = 3;
	/* The consumer is taken over: it resumes at 3, not at 0xa5a5a5a5. */
	v05__lanes_fini(&f->lanes);
	assert_int_equal(v05__lanes_init(&f->lanes, &f->owner), 0);
	f->lanes.event = test_lane_count;
	f->lanes.event_ctx = &f->owner;
	assert_int_equal(r->head, 3);
	assert_int_equal(f->owner.lane_own[0].consumed, 3);
	assert_int_equal(f->owner.lane_own[0].high_water, 3);
	assert_int_equal(v05_producer_close(p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	assert_int_equal(v05_producer_push(p, 42, 0, 0, 0.f), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 1);
	assert_true(f->sink.keys[3] == 42);
	assert_int_equal(ctr(f, V05_C_LANE_OVERRUNS), 0);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

static void test_dead_producer_reclaim(void **state)
{
	struct fixture *f = setup(1, 64, 0);
	struct v05_producer *p;
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_producer *cp;

		if (v05_producer_open(f->name, 0, &cp))
			_exit(1);
		for (int i = 0; i < 10; i++)
			if (v05_producer_push(cp, 100 + (uint64_t)i, 0, 0, 0.f))
				_exit(2);
		_exit(0); /* dies holding the lane */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The only lane is held by a dead process until the consumer
	 * drains and frees it. */
	assert_int_equal(v05_producer_open(f->name, 0, &p), -EBUSY);
	assert_non_null(strstr(v05_errmsg(), "1 by dead"));
	assert_int_equal(v05__lanes_reclaim(&f->lanes, true, collect, &f->sink), 1);
	assert_int_equal(f->sink.n, 10);
	for (uint32_t i = 0; i < 10; i++)
		assert_true(f->sink.keys[i] == 100 + i);
	assert_int_equal(ctr(f, V05_C_LANE_RECLAIMS), 1);
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	assert_int_equal(v05_producer_push(p, 1, 0, 0, 0.f), 0);
	assert_int_equal(v05__lanes_drain(&f->lanes, 100, 16, collect, &f->sink), 1);
	/* A live owner is left alone. */
	assert_int_equal(v05__lanes_reclaim(&f->lanes, true, collect, &f->sink), 0);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

static void test_fork_child_refused(void **state)
{
	struct fixture *f = setup(1, 16, 0);
	struct v05_producer *p;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(v05_producer_open(f->name, 0, &p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(v05_producer_push(p, 1, 0, 0, 0.f) == -ECHILD ? 0 : 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(v05_producer_push(p, 1, 0, 0, 0.f), 0);
	assert_int_equal(v05_producer_close(p), 0);
	teardown(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wraparound_odd_batches),
		cmocka_unit_test(test_full_and_empty),
		cmocka_unit_test(test_deferred_publish),
		cmocka_unit_test(test_foreign_bytes),
		cmocka_unit_test(test_claims),
		cmocka_unit_test(test_lane_page_not_trusted),
		cmocka_unit_test(test_dead_producer_reclaim),
		cmocka_unit_test(test_fork_child_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
