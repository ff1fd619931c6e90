/* SPDX-License-Identifier: MIT */
/*
 * The lane broker across a takeover (shm/broker.c): the broker stops with
 * its plugin; a takeover starts its own whatever holds the socket's name (a
 * dead owner's socket, a child it forked, a process of its uid bound
 * there); a brokered producer whose owner died carries its records to the
 * next owner, none lost.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/broker_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

/* An owner in a child: creates the segment (and forks a grandchild that
 * keeps every descriptor it inherits) and dies without closing. */
struct dying {
	const char *name;
	bool fork_keeper;
};

static int dying_owner(void *arg, int in, int out)
{
	struct dying *d = arg;
	struct v05_plugin *p;
	struct v05_config c;
	char ok = 1;

	brk_config(&c, 2);
	c.broker_gids[0] = 4343;
	c.n_broker_gids = 1;
	if (v05_plugin_create(d->name, &c, &p))
		return 1;
	if (d->fork_keeper && fork() == 0) {
		/* The keeper: alive, holding whatever fork gave it, until
		 * the test closes the pipe. */
		char b;

		close(out);
		(void)!read(in, &b, 1);
		_exit(0);
	}
	actor_send(out, &ok, 1);
	return 0; /* no close: as if killed */
}

/*
 * The owner dies; its broker with it. A producer asking now is told at
 * once (not after a timeout) that there is no broker, even while a child
 * the owner forked still lives: the child closed the broker's socket at
 * fork. The next owner starts its own broker, with the same allow-list,
 * whatever holds the socket's name.
 */
static void test_takeover_broker(void **state)
{
	for (int keeper = 0; keeper < 2; keeper++) {
		struct dying d = { NULL, keeper != 0 };
		struct v05_producer *w;
		struct v05_plugin *p;
		struct actor a;
		char name[64], ok;
		uint64_t t0;
		int st;

		(void)state;
		test_name(name, sizeof(name), "brktk");
		d.name = name;
		actor_start(&a, (uint32_t)-1, 0, 0, dying_owner, &d);
		actor_recv(a.from, &ok, 1);
		assert_int_equal(waitpid(a.pid, &st, 0), a.pid);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		t0 = brk_now_ns();
		assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
		assert_true(brk_now_ns() - t0 < 2000000000ull);
		assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
		assert_non_null(p->broker);
		/* The allow-list came with the segment. */
		assert_int_equal(p->cfg.n_broker_gids, 1);
		assert_int_equal(p->cfg.broker_gids[0], 4343);
		assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
		assert_true(brk_push_and_apply(p, w, "after-takeover") > 0);
		v05_producer_close(w);
		v05_plugin_close(p, V05_CLOSE_UNLINK);
		close(a.to); /* the keeper, if any, leaves */
		close(a.from);
		while (waitpid(-1, &st, 0) > 0)
			;
	}
}

/*
 * A process of the owner's uid binds the broker's socket name after the
 * owner died (the only uid that can: the side directory is the owner's):
 * the takeover unlinks it and binds its own; the squatter gets no one.
 */
static void test_squatted_name(void **state)
{
	struct dying d = { NULL, false };
	struct v05_producer *w;
	struct v05_plugin *p;
	struct sockaddr_un sa;
	struct actor a;
	char name[64], ok;
	int sq, st;

	(void)state;
	test_name(name, sizeof(name), "brksq");
	d.name = name;
	actor_start(&a, (uint32_t)-1, 0, 0, dying_owner, &d);
	actor_recv(a.from, &ok, 1);
	assert_int_equal(waitpid(a.pid, &st, 0), a.pid);
	close(a.to);
	close(a.from);
	sq = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/v05-%s:side/broker",
		 v05__shm_dir(), name);
	assert_int_equal(unlink(sa.sun_path), 0); /* the dead owner's */
	assert_int_equal(bind(sq, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(sq, 8), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	assert_true(brk_push_and_apply(p, w, "past the squatter") > 0);
	assert_int_equal(accept(sq, NULL, NULL), -1);
	assert_int_equal(errno, EAGAIN);
	close(sq);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

struct handoff {
	const char *name;
	uint32_t n;               /* prompts */
	struct v05_decision d[8]; /* their first decisions, sent up */
};

/* An owner that submits n prompts, sends their decisions up, polls only
 * when told ('p'), and dies when told ('x'). */
static int handoff_owner(void *arg, int in, int out)
{
	struct handoff *h = arg;
	struct v05_prompt_in in_[8];
	char uids[8][16], cmd;
	struct v05_plugin *p;
	struct v05_config c;

	brk_config(&c, 2);
	c.pad_multiple = 1;
	if (v05_plugin_create(h->name, &c, &p))
		return 1;
	for (uint32_t i = 0; i < h->n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "u%u", i);
		in_[i] = (struct v05_prompt_in){ .uid = uids[i],
						 .uid_len = (uint32_t)strlen(uids[i]),
						 .prior = 0.1 };
	}
	if (v05_submit(p, in_, h->n, h->d, NULL) != (int)h->n)
		return 2;
	actor_send(out, h->d, sizeof(h->d));
	for (;;) {
		actor_recv(in, &cmd, 1);
		if (cmd == 'x')
			return 0; /* dies with its grants */
		(void)v05_poll(p, NULL, 0);
		actor_send(out, &cmd, 1);
	}
}

/* Push the rewards of every sample of decisions d[lo, hi); how many. */
static uint32_t push_prompts(struct v05_producer *w, const struct v05_decision *d,
			     uint32_t lo, uint32_t hi)
{
	uint32_t n = 0;

	for (uint32_t i = lo; i < hi; i++)
		for (uint32_t s = 0; s < 64; s++)
			if (d[i].samples >> s & 1) {
				assert_int_equal(v05_producer_push(w, d[i].key,
								   d[i].gen, s,
								   0.5f), 0);
				n++;
			}
	return n;
}

static bool applied_at_least(void *arg)
{
	struct lane_at *l = arg; /* lane: the count wanted */

	return brk_ctr(l->p, V05_C_REWARDS_APPLIED) >= l->lane;
}

/*
 * A brokered producer pushes its rewards; the owner drains half of them
 * and dies. The producer sees its connection end, gets a lane from the
 * next owner's broker and pushes again what the dead owner had not
 * drained: every reward is applied exactly once, none lost (those the
 * dead owner drained and had not yet said so come twice and are rejected
 * as duplicates).
 */
static void test_producer_follows_takeover(void **state)
{
	struct handoff h = { NULL, 4, { { 0 } } };
	struct v05_producer *w;
	struct v05_plugin *p;
	struct lane_at want;
	struct actor a;
	char name[64], cmd = 'p';
	uint32_t pushed = 0;
	int st;

	(void)state;
	test_name(name, sizeof(name), "brkfollow");
	h.name = name;
	actor_start(&a, (uint32_t)-1, 0, 0, handoff_owner, &h);
	actor_recv(a.from, h.d, sizeof(h.d));
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	/* Two prompts' rewards, drained by the first owner. */
	pushed += push_prompts(w, h.d, 0, 2);
	actor_send(a.to, &cmd, 1);
	actor_recv(a.from, &cmd, 1);
	/* Two more, never drained: in flight when the owner dies. */
	pushed += push_prompts(w, h.d, 2, 4);
	cmd = 'x';
	actor_send(a.to, &cmd, 1);
	assert_int_equal(waitpid(a.pid, &st, 0), a.pid);
	close(a.to);
	close(a.from);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	want = (struct lane_at){ p, pushed };
	/* The producer carries them over at its next look (a flush here;
	 * any push or flush looks at most every 20 ms). */
	for (uint64_t end = brk_now_ns() + 10000000000ull; !applied_at_least(&want);) {
		if (brk_now_ns() > end)
			fail_msg("%llu of %u rewards applied after the takeover",
				 (unsigned long long)brk_ctr(p, V05_C_REWARDS_APPLIED),
				 pushed);
		assert_true(v05_producer_flush(w) >= 0);
		assert_true(v05_wait(p, 5) >= 0);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	/* Each sample's reward once: the first half before the death, the
	 * rest after; nothing was lost, nothing applied twice. */
	assert_int_equal(brk_ctr(p, V05_C_REWARDS_APPLIED), pushed);
	assert_int_equal(brk_granted_lanes(p), 1);
	assert_true(brk_push_and_apply(p, w, "after the carry") > 0);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_takeover_broker),
		cmocka_unit_test(test_squatted_name),
		cmocka_unit_test(test_producer_follows_takeover),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
