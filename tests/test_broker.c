/* SPDX-License-Identifier: MIT */
/*
 * The lane broker (shm/broker.c), with producers of this uid asking it as
 * one of another uid would (tests/test_security.c and test_hostile.c do it
 * as other users): a brokered producer gets a sealed memfd, never a file of
 * the segment, and its rewards are applied; the lane goes back to its file
 * when the producer leaves; clients that send garbage, hang or leave cost
 * nothing but a grant that ends and block no one; a full segment answers
 * -EBUSY; no broker answers -ECONNREFUSED with a message. Across a
 * takeover: test_broker_takeover.c.
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

static struct v05_plugin *make(const char *name, unsigned flags,
			       uint32_t lanes)
{
	struct v05_plugin *p;
	struct v05_config c;

	brk_config(&c, lanes);
	if (!(flags & V05_CONFIG_PRODUCER_BROKER)) {
		c.flags = 0;
		c.n_broker_uids = 0;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

/* Poll p (its 50 ms look at the lanes included) until cond holds; fails
 * after 10 s. No sleep: each turn waits on the plugin's doorbell. */
static void poll_until(struct v05_plugin *p, bool (*cond)(void *), void *arg)
{
	uint64_t end = brk_now_ns() + 10000000000ull;

	while (!cond(arg)) {
		if (brk_now_ns() > end)
			fail_msg("condition not reached in 10 s");
		assert_true(v05_wait(p, 10) >= 0);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
}

static bool lane_reverted(void *arg)
{
	struct lane_at *l = arg;

	return !v05__lane_granted(&l->p->seg.lane_own[l->lane]);
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
	assert_true(brk_push_and_apply(p, w, "brokered") > 0);
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
 * A broker admits only whom its owner names: a broker brk_config without an
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

	return brk_granted_lanes(g->p) == g->n;
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
	assert_true(brk_push_and_apply(p, w, "after-bad-clients") > 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_allow_list),
		cmocka_unit_test(test_brokered_producer),
		cmocka_unit_test(test_brokered_maps_no_file),
		cmocka_unit_test(test_no_broker),
		cmocka_unit_test(test_bad_clients),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
