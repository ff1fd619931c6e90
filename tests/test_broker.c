/* SPDX-License-Identifier: MIT */
/*
 * The lane broker (shm/broker.c), with producers of this uid asking it as
 * one of another uid would (tests/test_security.c and test_hostile.c do it
 * as other users): a brokered producer gets a sealed memfd, never a file of
 * the segment, and its rewards are applied; the lane goes back to its file
 * when the producer leaves; clients that send garbage, hang or leave cost
 * nothing but a grant that ends and block no one; a full segment answers
 * -EBUSY; no broker answers -ECONNREFUSED with a message; the broker stops
 * with its plugin; a takeover starts its own whatever holds the socket's
 * name (a dead owner's socket, a child it forked, a process of its uid
 * bound there); a brokered producer whose owner died carries its records
 * to the next owner, none lost.
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

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "util/actor.h"
#include "util/seg.h"
#include "v05.h"

static void config(struct v05_config *c, uint32_t lanes)
{
	v05_config_default(c);
	c->max_prompts = 8;
	c->max_producers = lanes;
	c->lane_capacity = 64;
	c->flags = V05_CONFIG_PRODUCER_BROKER;
	/* Someone else than us (the owner's uid is always in). */
	c->broker_uids[0] = ACTOR_LISTED_UID;
	c->n_broker_uids = 1;
}

static struct v05_plugin *make(const char *name, unsigned flags,
			       uint32_t lanes)
{
	struct v05_plugin *p;
	struct v05_config c;

	config(&c, lanes);
	if (!(flags & V05_CONFIG_PRODUCER_BROKER)) {
		c.flags = 0;
		c.n_broker_uids = 0;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

static uint64_t ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

/* Submit one prompt, push its first samples through w, poll until they
 * are applied; returns the rewards applied. */
static uint64_t push_and_apply(struct v05_plugin *p, struct v05_producer *w,
			       const char *uid)
{
	struct v05_prompt_in in = { .uid = uid, .uid_len = (uint32_t)strlen(uid),
				    .prior = 0.2 };
	struct v05_decision d[8];
	uint64_t before = ctr(p, V05_C_REWARDS_APPLIED);
	uint32_t pushed = 0;

	assert_int_equal(v05_submit(p, &in, 1, d, NULL), 1);
	for (uint32_t s = 0; s < 64; s++) {
		if (d[0].samples >> s & 1) {
			assert_int_equal(v05_producer_push(w, d[0].key, d[0].gen, s, 1.f), 0);
			pushed++;
		}
	}
	/* Published before we look: one poll drains them. */
	assert_true(v05_poll(p, d, 8) >= 0);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED) - before, pushed);
	return pushed;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Poll p (its 50 ms look at the lanes included) until cond holds; fails
 * after 10 s. No sleep: each turn waits on the plugin's doorbell. */
static void poll_until(struct v05_plugin *p, bool (*cond)(void *), void *arg)
{
	uint64_t end = now_ns() + 10000000000ull;

	while (!cond(arg)) {
		if (now_ns() > end)
			fail_msg("condition not reached in 10 s");
		assert_true(v05_wait(p, 10) >= 0);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
}

struct lane_at {
	struct v05_plugin *p;
	uint32_t lane;
};

static bool lane_reverted(void *arg)
{
	struct lane_at *l = arg;

	return !v05__lane_granted(&l->p->seg.lane_own[l->lane]);
}

static uint32_t granted_lanes(struct v05_plugin *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->seg.hdr.geo.lane_count; i++)
		n += v05__lane_granted(&p->seg.lane_own[i]);
	return n;
}

/* Does this process map a memfd named v05-lane (the broker's), and no
 * file of segment path? */
static bool maps_memfd_only(const char *path)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	bool memfd = false, file = false;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "/memfd:v05-lane"))
			memfd = true;
		if (strstr(line, path))
			file = true;
	}
	fclose(f);
	return memfd && !file;
}

static void test_brokered_producer(void **state)
{
	struct v05_producer *w;
	struct v05_plugin *p;
	struct lane_at at;
	char name[64];
	int lane;

	(void)state;
	test_name(name, sizeof(name), "brk");
	p = make(name, V05_CONFIG_PRODUCER_BROKER, 2);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
	lane = v05_producer_lane(w);
	assert_true(lane >= 0 && lane < 2);
	/* Granted: a memfd over the lane's pages (mapped there at the
	 * owner's next poll), claimed by the producer (here, us); the lane's
	 * file says MOVED to same-uid producers. */
	at = (struct lane_at){ p, (uint32_t)lane };
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_true(v05__lane_granted(&p->seg.lane_own[lane]));
	assert_int_equal(p->seg.lane_own[lane].grant_uid, geteuid());
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, (uint32_t)lane)->owner),
			 v05__owner_self());
	assert_true(push_and_apply(p, w, "brokered") > 0);
	{
		/* The file under it is held for the grant. */
		int fd = v05__lane_file_open(&p->seg, V05_FILE_LANE, (uint32_t)lane,
					     O_RDONLY);
		struct v05_ring_hdr h;

		assert_true(fd >= 0);
		assert_int_equal(pread(fd, &h, sizeof(h), v05__lane_skew((uint32_t)lane)),
				 sizeof(h));
		assert_int_equal(h.owner, V05_OWNER_MOVED);
		close(fd);
	}
	/* Leaving ends the grant: the lane is its file again, free. */
	v05_producer_close(w);
	poll_until(p, lane_reverted, &at);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, (uint32_t)lane)->owner), 0);
	v05_plugin_close(p, 0);
	/* The broker stopped with its plugin. */
	assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
	assert_non_null(strstr(v05_errmsg(), "no producer broker"));
	assert_int_equal(v05_segment_unlink(name), 0);
}

/* A brokered producer process maps its lane's memfd and the doorbell's,
 * no file of the segment. */
static void test_brokered_maps_no_file(void **state)
{
	struct v05_plugin *p;
	char name[64];
	pid_t pid;
	int st;

	(void)state;
	test_name(name, sizeof(name), "brkmap");
	p = make(name, V05_CONFIG_PRODUCER_BROKER, 2);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_producer *w;
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s", p->seg.path);
		v05__segment_detach(&p->seg);
		munmap(p->bell2, V05_PAGE);
		if (v05__producer_open_brokered(name, 0, &w))
			_exit(1);
		_exit(maps_memfd_only(path) ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
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
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path),
				     "%s:side/broker", path) < sizeof(sa.sun_path));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

struct granted_n {
	struct v05_plugin *p;
	uint32_t n;
};

static bool granted_is(void *arg)
{
	struct granted_n *g = arg;

	return granted_lanes(g->p) == g->n;
}

/*
 * Clients that send garbage, never read, or leave at once: each answered
 * at once and forgotten (the broker never reads), holding at most a grant
 * that ends when they leave; the owner's poll and the next client go on.
 */
static void test_bad_clients(void **state)
{
	static const char junk[512] = "GET / HTTP/1.0\r\n";
	struct v05_producer *w, *w2, *w3;
	struct v05_plugin *p;
	struct granted_n g;
	char name[64];
	int garbage, hung, gone;

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
	/* The one that left gave its grant back; the garbage and the hung
	 * client each hold one (their grant sits unread) until they leave
	 * or 5 s pass unclaimed. */
	g = (struct granted_n){ p, 3 };
	poll_until(p, granted_is, &g);
	/* The last lane, then none: the broker answers -EBUSY, with its
	 * reason. */
	assert_int_equal(v05__producer_open_brokered(name, 0, &w2), 0);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w3), -EBUSY);
	assert_non_null(strstr(v05_errmsg(), "no lane free"));
	close(garbage);
	close(hung);
	g.n = 2;
	poll_until(p, granted_is, &g);
	assert_int_equal(v05__producer_open_brokered(name, 0, &w3), 0);
	v05_producer_close(w3);
	v05_producer_close(w2);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

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

	config(&c, 2);
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
		t0 = now_ns();
		assert_int_equal(v05__producer_open_brokered(name, 0, &w), -ECONNREFUSED);
		assert_true(now_ns() - t0 < 2000000000ull);
		assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
		assert_non_null(p->broker);
		/* The allow-list came with the segment. */
		assert_int_equal(p->cfg.n_broker_gids, 1);
		assert_int_equal(p->cfg.broker_gids[0], 4343);
		assert_int_equal(v05__producer_open_brokered(name, 0, &w), 0);
		assert_true(push_and_apply(p, w, "after-takeover") > 0);
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
	assert_true(push_and_apply(p, w, "past the squatter") > 0);
	assert_int_equal(accept(sq, NULL, NULL), -1);
	assert_int_equal(errno, EAGAIN);
	close(sq);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* ---- a brokered producer across its owner's death ---------------------- */

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

	config(&c, 2);
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

	return ctr(l->p, V05_C_REWARDS_APPLIED) >= l->lane;
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
	for (uint64_t end = now_ns() + 10000000000ull; !applied_at_least(&want);) {
		if (now_ns() > end)
			fail_msg("%llu of %u rewards applied after the takeover",
				 (unsigned long long)ctr(p, V05_C_REWARDS_APPLIED),
				 pushed);
		assert_true(v05_producer_flush(w) >= 0);
		assert_true(v05_wait(p, 5) >= 0);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	/* Each sample's reward once: the first half before the death, the
	 * rest after; nothing was lost, nothing applied twice. */
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), pushed);
	assert_int_equal(granted_lanes(p), 1);
	assert_true(push_and_apply(p, w, "after the carry") > 0);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_allow_list),
		cmocka_unit_test(test_brokered_producer),
		cmocka_unit_test(test_brokered_maps_no_file),
		cmocka_unit_test(test_no_broker),
		cmocka_unit_test(test_bad_clients),
		cmocka_unit_test(test_takeover_broker),
		cmocka_unit_test(test_squatted_name),
		cmocka_unit_test(test_producer_follows_takeover),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
