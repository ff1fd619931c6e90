/* SPDX-License-Identifier: MIT */
/*
 * The lane broker (shm/broker.c), with producers of this uid asking it as
 * one of another uid would (tests/test_security.c does it as "nobody"):
 * a brokered producer's rewards are applied; clients that send garbage,
 * hang or leave cost nothing but a reservation and block no one; a full
 * segment answers -EBUSY; no broker answers -ECONNREFUSED with a message;
 * the broker stops with its plugin and a takeover starts its own; a taken
 * socket name fails the create and leaves no file.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "util/seg.h"
#include "v05.h"

static struct v05_plugin *make(const char *name, unsigned flags,
			       uint32_t lanes)
{
	struct v05_plugin *p;
	struct v05_config c;

	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = lanes;
	c.lane_capacity = 64;
	c.flags = flags;
	if (flags & V05_CONFIG_PRODUCER_BROKER) {
		/* Someone else than us (the owner's uid is always in). */
		c.broker_uids[0] = 4242;
		c.n_broker_uids = 1;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

/* Submit one prompt, push its first samples through w, poll until they
 * are applied; returns the rewards applied. */
static uint64_t push_and_apply(struct v05_plugin *p, struct v05_producer *w,
			       const char *uid)
{
	struct v05_prompt_in in = { .uid = uid, .uid_len = (uint32_t)strlen(uid),
				    .prior = 0.2 };
	uint64_t c[V05_COUNTER_SLOTS], before;
	struct v05_decision d[8];
	uint32_t pushed = 0;

	v05_counters(p, c, V05_COUNTER_SLOTS);
	before = c[V05_C_REWARDS_APPLIED];
	assert_int_equal(v05_submit(p, &in, 1, d, NULL), 1);
	for (uint32_t s = 0; s < 64; s++) {
		if (d[0].samples >> s & 1) {
			assert_int_equal(v05_producer_push(w, d[0].key, d[0].gen, s, 1.f), 0);
			pushed++;
		}
	}
	/* Published before we look: one poll drains them. */
	assert_true(v05_poll(p, d, 8) >= 0);
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REWARDS_APPLIED] - before, pushed);
	return pushed;
}

static void test_brokered_producer(void **state)
{
	struct v05_producer *w;
	struct v05_plugin *p;
	char name[64];
	int lane;

	(void)state;
	test_name(name, sizeof(name), "brk");
	p = make(name, V05_CONFIG_PRODUCER_BROKER, 2);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	lane = v05_producer_lane(w);
	assert_true(lane >= 0 && lane < 2);
	/* Claimed: the lane's owner word is the producer's (here, ours),
	 * no longer the broker's reservation. */
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, (uint32_t)lane)->owner),
			 v05__owner_self());
	assert_true(push_and_apply(p, w, "brokered") > 0);
	/* Same uid as the owner: no binding (no boundary to keep). */
	assert_int_equal(v05_load_relaxed(&p->seg.lane_own[lane].bound), 0);
	v05_producer_close(w);
	v05_plugin_close(p, 0);
	/* The broker stopped with its plugin. */
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
	assert_int_equal(v05_segment_unlink(name), 0);
}

/*
 * A broker admits only whom its owner names: a broker config without an
 * allow-list is refused, naming the fields; a list without a broker, too
 * many entries, -1 as an id and a cut-off above 1000 per mille as well.
 */
static void test_config_allow_list(void **state)
{
	struct v05_plugin *p;
	struct v05_config c;
	char name[64];

	(void)state;
	v05_config_default(&c);
	assert_int_equal(c.n_broker_uids + c.n_broker_gids, 0);
	assert_int_equal(v05_config_check(&c), 0);
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "broker_uids"));
	assert_non_null(strstr(v05_errmsg(), "broker_gids"));
	test_name(name, sizeof(name), "brkcfg");
	assert_int_equal(v05_plugin_create(name, &c, &p), -EINVAL);
	c.broker_gids[0] = 100;
	c.n_broker_gids = 1;
	assert_int_equal(v05_config_check(&c), 0);
	c.n_broker_gids = V05_BROKER_ALLOW_MAX + 1;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "n_broker_gids"));
	c.n_broker_gids = 1;
	c.broker_uids[0] = UINT32_MAX;
	c.n_broker_uids = 1;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "broker_uids[0]"));
	c.broker_uids[0] = 1000;
	c.lane_cut_permille = 1001;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "lane_cut_permille"));
	c.lane_cut_permille = 0;
	c.flags = 0;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "without V05_CONFIG_PRODUCER_BROKER"));
}

static void test_no_broker(void **state)
{
	struct v05_producer *w;
	struct v05_plugin *p;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "nobrk");
	p = make(name, 0, 2);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
	assert_non_null(strstr(v05_errmsg(), "V05_CONFIG_PRODUCER_BROKER"));
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* A raw client of segment path's broker: connected, nothing read. */
static int raw_client(const char *path)
{
	struct sockaddr_un sa;
	unsigned long long h;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int n;

	assert_true(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	h = v05__broker_name_hash(path);
	n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "v05-%016llx", h);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa,
				 (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
					     1 + (size_t)n)), 0);
	return fd;
}

/*
 * Clients that send garbage, never read, or leave at once: each answered
 * at once and forgotten (the broker never reads), holding at most a
 * reservation that expires; the owner's poll and the next client go on.
 */
static void test_bad_clients(void **state)
{
	static const char junk[512] = "GET / HTTP/1.0\r\n";
	struct v05_producer *w, *w2;
	struct v05_plugin *p;
	uint64_t me = v05__owner_self();
	char name[64];
	int garbage, hung, gone, held = 0;

	(void)state;
	test_name(name, sizeof(name), "brkbad");
	p = make(name, V05_CONFIG_PRODUCER_BROKER, 4);
	garbage = raw_client(p->seg.path);
	for (int i = 0; i < 8; i++)
		(void)send(garbage, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
	hung = raw_client(p->seg.path);
	gone = raw_client(p->seg.path);
	close(gone);
	/* The owner polls on, and a real producer gets a lane. */
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	assert_true(push_and_apply(p, w, "after-bad-clients") > 0);
	/* The garbage and the hung client each hold a reservation (their
	 * grant sits unread); the one that left may too, until it expires. */
	for (uint32_t i = 0; i < 4; i++)
		held += v05_load_relaxed(&v05__lane(&p->seg, i)->owner) == me &&
			(int)i != v05_producer_lane(w);
	assert_true(held >= 2 && held <= 3);
	/* Lanes run out: the broker answers -EBUSY, with its reason. */
	if (held == 2) {
		assert_int_equal(v05__producer_open_brokered(name, 0, &w2), 0);
		assert_int_equal(v05__producer_open_brokered(name, 0, &w), -EBUSY);
		v05_producer_close(w2);
	} else {
		assert_int_equal(v05__producer_open_brokered(name, 0, &w2), -EBUSY);
	}
	assert_non_null(strstr(v05_errmsg(), "no lane free"));
	close(garbage);
	close(hung);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* The owner dies; its broker with it. The next owner starts its own. */
static void test_takeover_broker(void **state)
{
	struct v05_producer *w;
	struct v05_plugin *p;
	char name[64];
	pid_t pid;
	int st;

	(void)state;
	test_name(name, sizeof(name), "brktk");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_config c;

		v05_config_default(&c);
		c.max_prompts = 8;
		c.max_producers = 2;
		c.lane_capacity = 64;
		c.flags = V05_CONFIG_PRODUCER_BROKER;
		c.broker_gids[0] = 4343;
		c.n_broker_gids = 1;
		_exit(v05_plugin_create(name, &c, &p) ? 1 : 0); /* no close */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_non_null(p->broker);
	/* The allow-list came with the segment. */
	assert_int_equal(p->cfg.n_broker_gids, 1);
	assert_int_equal(p->cfg.broker_gids[0], 4343);
	assert_int_equal(p->cfg.n_broker_uids, 0);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	assert_true(push_and_apply(p, w, "after-takeover") > 0);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* Another process holds the broker's socket name: create fails, no file
 * is left (here the holder is a live plugin whose files were unlinked). */
static void test_name_taken(void **state)
{
	struct v05_plugin *p, *q;
	struct v05_config c;
	struct stat sb;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "brkname");
	p = make(name, V05_CONFIG_PRODUCER_BROKER, 2);
	assert_int_equal(v05_segment_unlink(name), 0);
	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = 2;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	c.broker_uids[0] = 4242;
	c.n_broker_uids = 1;
	assert_int_equal(v05_plugin_create(name, &c, &q), -EADDRINUSE);
	assert_non_null(strstr(v05_errmsg(), "broker"));
	assert_int_not_equal(stat(p->seg.path, &sb), 0);
	v05_plugin_close(p, 0);
	/* Free again: the same name works. */
	assert_int_equal(v05_plugin_create(name, &c, &q), 0);
	v05_plugin_close(q, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_allow_list),
		cmocka_unit_test(test_brokered_producer),
		cmocka_unit_test(test_no_broker),
		cmocka_unit_test(test_bad_clients),
		cmocka_unit_test(test_takeover_broker),
		cmocka_unit_test(test_name_taken),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
