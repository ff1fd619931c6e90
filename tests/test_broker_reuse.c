/* SPDX-License-Identifier: MIT */
/*
 * A brokered lane is free again when its producer closes it (issue 45,
 * defect 9), with real users: the owner as root and as an unprivileged
 * user, its producer a listed uid (both children of this test, driven
 * over pipes; as another user than root these are reported skipped, CI
 * runs them as root).
 *
 * - After every lane was granted and closed, with the owner not polling
 *   in between, the next producers get lanes at once: the broker grants a
 *   drained lane again itself (test_free_at_close).
 * - A lane whose producer left records the owner has not drained cannot
 *   be granted again (they would be lost); the refusal says what holds
 *   each lane, counted by reason, and the owner, woken, drains and frees
 *   it (test_busy_says_why).
 * - An owner waiting in v05_wait is woken when a grant ends, and its next
 *   poll gives the lane back to its file for producers by name
 *   (test_end_wakes_owner).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define SLOTS 4

/* A command to an actor: what to do, on which producer slot, with which
 * job (the samples to push). */
struct cmd {
	char op;
	uint32_t slot;
	struct v05_decision d;
};

/* An actor's answer. */
struct rep {
	int ret;
	int lane;
	uint32_t pushed;
	uint64_t applied;
	struct v05_decision d;
	char msg[512];
};

static bool need_users(void)
{
	if (actor_can_switch())
		return true;
	fprintf(stderr, "broker_reuse: this test becomes other users, which needs root %s; skipped (CI runs it as root)\n",
		actor_whoami());
	skip();
	return false;
}

static uint64_t applied(struct v05_plugin *p)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[V05_C_REWARDS_APPLIED];
}

struct owner_args {
	char name[64];
	uint32_t lanes;
};

/*
 * The owner: creates the segment (a broker admitting the listed uid) and
 * does only what it is told: submit a job ('j'), poll and take the
 * decisions ('p'), wait on its doorbell ('w', 10 s at most: 1 woken, 0
 * not), arm the wait ('a') and then wait for its fd ('W', 10 s at most: 1
 * woken, 0 not), open or close a producer of its own uid by name ('n',
 * 'N'), quit ('q'). It never polls unasked.
 */
static int owner_actor(void *arg, int in, int out)
{
	struct owner_args *oa = arg;
	struct v05_producer *byname = NULL;
	struct v05_plugin *p;
	struct v05_config c;
	struct cmd k;
	struct rep r;
	int jobs = 0;

	memset(&r, 0, sizeof(r));
	v05_config_default(&c);
	c.max_prompts = 64;
	c.max_producers = oa->lanes;
	c.lane_capacity = 64;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	c.broker_uids[0] = ACTOR_LISTED_UID;
	c.n_broker_uids = 1;
	r.ret = v05_plugin_create(oa->name, &c, &p);
	snprintf(r.msg, sizeof(r.msg), "%s", v05_errmsg());
	actor_send(out, &r, sizeof(r));
	if (r.ret)
		return 1;
	for (;;) {
		actor_recv(in, &k, sizeof(k));
		memset(&r, 0, sizeof(r));
		if (k.op == 'q')
			break;
		switch (k.op) {
		case 'j': {
			char uid[32];
			struct v05_prompt_in pin = { .uid = uid, .prior = 0.2 };

			pin.uid_len = (uint32_t)snprintf(uid, sizeof(uid),
							 "job-%d", jobs++);
			r.ret = v05_submit(p, &pin, 1, &r.d, NULL) == 1 ? 0 : -EIO;
			break;
		}
		case 'p': {
			/* Its decisions taken too: a decision left queued
			 * would end every wait at once. */
			struct v05_decision d[16];

			while ((r.ret = v05_poll(p, d, 16)) == 16)
				;
			break;
		}
		case 'w':
			r.ret = v05_wait(p, 10000);
			break;
		case 'a':
			/* Armed with no timeout of its own: its fd becomes
			 * readable only when something wakes it. */
			r.ret = v05_arm(p, -1);
			break;
		case 'W': {
			struct pollfd pf = { v05_fd(p), POLLIN, 0 };

			r.ret = poll(&pf, 1, 10000);
			break;
		}
		case 'n':
			r.ret = v05_producer_open(oa->name, 0, &byname);
			r.lane = r.ret ? -1 : v05_producer_lane(byname);
			break;
		case 'N':
			r.ret = v05_producer_close(byname);
			byname = NULL;
			break;
		default:
			r.ret = -EINVAL;
		}
		snprintf(r.msg, sizeof(r.msg), "%s", r.ret < 0 ? v05_errmsg() : "");
		r.applied = applied(p);
		actor_send(out, &r, sizeof(r));
	}
	v05_producer_close(byname);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}

/*
 * The listed producer: opens a producer in a slot and pushes its job's
 * samples ('o'), closes a slot's ('c'), quits ('q', closing the rest).
 */
static int producer_actor(void *arg, int in, int out)
{
	const char *name = arg;
	struct v05_producer *w[SLOTS] = { NULL };
	struct cmd k;
	struct rep r;

	for (;;) {
		actor_recv(in, &k, sizeof(k));
		memset(&r, 0, sizeof(r));
		if (k.op == 'q' || k.slot >= SLOTS)
			break;
		if (k.op == 'o') {
			r.ret = v05_producer_open(name, V05_PRODUCER_ANY_UID, &w[k.slot]);
			snprintf(r.msg, sizeof(r.msg), "%s", r.ret ? v05_errmsg() : "");
			r.lane = r.ret ? -1 : v05_producer_lane(w[k.slot]);
			for (uint32_t s = 0; !r.ret && s < 64; s++)
				if (k.d.samples >> s & 1) {
					r.ret = v05_producer_push(w[k.slot], k.d.key,
								  k.d.gen, s, 0.5f);
					r.pushed += !r.ret;
				}
		} else if (k.op == 'c') {
			r.ret = v05_producer_close(w[k.slot]);
			w[k.slot] = NULL;
		} else {
			r.ret = -EINVAL;
		}
		actor_send(out, &r, sizeof(r));
	}
	for (int i = 0; i < SLOTS; i++)
		v05_producer_close(w[i]);
	return 0;
}

struct pair {
	struct actor owner, prod;
	struct owner_args oa;
};

static struct rep ask(struct actor *a, char op, uint32_t slot,
		      const struct v05_decision *d)
{
	struct cmd k;
	struct rep r;

	memset(&k, 0, sizeof(k));
	k.op = op;
	k.slot = slot;
	if (d)
		k.d = *d;
	actor_send(a->to, &k, sizeof(k));
	actor_recv(a->from, &r, sizeof(r));
	return r;
}

/* The owner (as owner_uid, or as we are with -1) with lanes lanes, and
 * the listed producer. */
static void start(struct pair *pr, const char *tag, uint32_t owner_uid,
		  uint32_t lanes)
{
	struct rep r;

	memset(pr, 0, sizeof(*pr));
	test_name(pr->oa.name, sizeof(pr->oa.name), tag);
	pr->oa.lanes = lanes;
	actor_start(&pr->owner, owner_uid, owner_uid, 0, owner_actor, &pr->oa);
	actor_recv(pr->owner.from, &r, sizeof(r));
	if (r.ret)
		fail_msg("create %s: %s", pr->oa.name, r.msg);
	actor_start(&pr->prod, ACTOR_LISTED_UID, ACTOR_LISTED_UID, 0,
		    producer_actor, pr->oa.name);
}

static void stop(struct pair *pr)
{
	struct cmd k = { .op = 'q' };

	actor_send(pr->prod.to, &k, sizeof(k));
	assert_int_equal(actor_wait(&pr->prod), 0);
	actor_send(pr->owner.to, &k, sizeof(k));
	assert_int_equal(actor_wait(&pr->owner), 0);
}

/* Open slot with job d: must be granted a lane and push every sample. */
static uint32_t open_ok(struct pair *pr, uint32_t slot,
			const struct v05_decision *d, const char *when)
{
	struct rep r = ask(&pr->prod, 'o', slot, d);

	if (r.ret)
		fail_msg("%s: the listed producer got %d: %s", when, r.ret, r.msg);
	assert_true(r.pushed > 0);
	return r.pushed;
}

/*
 * Every lane granted, its rewards applied, its producer closed; then, the
 * owner not polling, as many producers again, four times over: each gets
 * a lane, and every reward pushed is applied once.
 */
static void free_at_close(uint32_t owner_uid)
{
	const uint32_t lanes = 2;
	uint64_t pushed = 0;
	struct pair pr;
	char when[64];

	start(&pr, "reuse", owner_uid, lanes);
	for (int round = 0; round < 4; round++) {
		for (uint32_t k = 0; k < lanes; k++) {
			struct rep j = ask(&pr.owner, 'j', 0, NULL);

			assert_int_equal(j.ret, 0);
			snprintf(when, sizeof(when), "round %d, producer %u", round, k);
			pushed += open_ok(&pr, k, &j.d, when);
		}
		/* Applied while the producers are connected... */
		assert_int_equal(ask(&pr.owner, 'p', 0, NULL).applied, pushed);
		/* ...and then they leave; the next round asks at once. */
		for (uint32_t k = 0; k < lanes; k++)
			assert_int_equal(ask(&pr.prod, 'c', k, NULL).ret, 0);
	}
	assert_int_equal(ask(&pr.owner, 'p', 0, NULL).applied, pushed);
	stop(&pr);
}

static void test_free_at_close_root(void **state)
{
	(void)state;
	if (need_users())
		free_at_close((uint32_t)-1);
}

static void test_free_at_close_unprivileged(void **state)
{
	(void)state;
	if (need_users())
		free_at_close(ACTOR_OWNER_UID);
}

/*
 * Three lanes: one held by name by a producer of the owner's uid, one
 * granted to a connected producer, one whose producer pushed and left
 * before the owner drained it. A fourth producer is refused -EBUSY with
 * each reason counted; woken, the owner drains the left records (none
 * lost) and the lane is granted again.
 */
static void busy_says_why(uint32_t owner_uid)
{
	struct pair pr;
	struct rep r, j1, j2;
	uint64_t pushed;

	start(&pr, "reusewhy", owner_uid, 3);
	r = ask(&pr.owner, 'n', 0, NULL);
	if (r.ret)
		fail_msg("a producer by name: %s", r.msg);
	j1 = ask(&pr.owner, 'j', 0, NULL);
	j2 = ask(&pr.owner, 'j', 0, NULL);
	pushed = open_ok(&pr, 0, &j1.d, "the connected producer");
	assert_int_equal(ask(&pr.owner, 'p', 0, NULL).applied, pushed);
	pushed += open_ok(&pr, 1, &j2.d, "the producer that leaves");
	assert_int_equal(ask(&pr.prod, 'c', 1, NULL).ret, 0);
	r = ask(&pr.prod, 'o', 2, NULL);
	assert_int_equal(r.ret, -EBUSY);
	if (!strstr(r.msg, "1 granted to a connected producer") ||
	    !strstr(r.msg, "1 claimed by name") ||
	    !strstr(r.msg, "1 holding records its producer left"))
		fail_msg("the refusal does not say what holds the lanes: %s", r.msg);
	/* The owner, waiting, is woken (the records wait for it) and its
	 * poll applies them and frees the lane. */
	assert_int_equal(ask(&pr.owner, 'w', 0, NULL).ret, 1);
	assert_int_equal(ask(&pr.owner, 'p', 0, NULL).applied, pushed);
	r = ask(&pr.prod, 'o', 2, NULL);
	if (r.ret)
		fail_msg("the drained lane was not granted again: %s", r.msg);
	stop(&pr);
}

static void test_busy_says_why_root(void **state)
{
	(void)state;
	if (need_users())
		busy_says_why((uint32_t)-1);
}

static void test_busy_says_why_unprivileged(void **state)
{
	(void)state;
	if (need_users())
		busy_says_why(ACTOR_OWNER_UID);
}

/*
 * One lane, granted, its rewards applied; the owner waiting on its
 * doorbell (armed before the producer leaves, so that only a ring wakes
 * it); the producer gone: the owner is woken for it (not after its 10 s),
 * and the poll that follows gives the lane back to its file: a producer
 * of the owner's uid claims it by name.
 */
static void end_wakes_owner(uint32_t owner_uid)
{
	struct pair pr;
	struct rep r, j;
	uint64_t pushed;

	start(&pr, "reusewake", owner_uid, 1);
	j = ask(&pr.owner, 'j', 0, NULL);
	pushed = open_ok(&pr, 0, &j.d, "the producer");
	assert_int_equal(ask(&pr.owner, 'p', 0, NULL).applied, pushed);
	assert_int_equal(ask(&pr.owner, 'a', 0, NULL).ret, 0);
	assert_int_equal(ask(&pr.prod, 'c', 0, NULL).ret, 0);
	r = ask(&pr.owner, 'W', 0, NULL);
	if (r.ret != 1)
		fail_msg("the owner's wait was not woken by the grant's end (%d)",
			 r.ret);
	assert_true(ask(&pr.owner, 'p', 0, NULL).ret >= 0);
	r = ask(&pr.owner, 'n', 0, NULL);
	if (r.ret)
		fail_msg("the lane did not go back to its file: %s", r.msg);
	assert_int_equal(r.lane, 0);
	assert_int_equal(ask(&pr.owner, 'N', 0, NULL).ret, 0);
	stop(&pr);
}

static void test_end_wakes_owner_root(void **state)
{
	(void)state;
	if (need_users())
		end_wakes_owner((uint32_t)-1);
}

static void test_end_wakes_owner_unprivileged(void **state)
{
	(void)state;
	if (need_users())
		end_wakes_owner(ACTOR_OWNER_UID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_at_close_root),
		cmocka_unit_test(test_free_at_close_unprivileged),
		cmocka_unit_test(test_busy_says_why_root),
		cmocka_unit_test(test_busy_says_why_unprivileged),
		cmocka_unit_test(test_end_wakes_owner_root),
		cmocka_unit_test(test_end_wakes_owner_unprivileged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
