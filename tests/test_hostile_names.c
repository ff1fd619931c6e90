/* SPDX-License-Identifier: MIT */
/*
 * A producer can never hurt the owner (issue 36; docs/RELIABILITY.md,
 * "Threat model"), attacks 2, 4 and 5 of the issue, played by real,
 * distinct users (tests/util/actor.h; as root, a stranger 4545 not listed;
 * as another user, reported skipped):
 *  2. After the owner died a stranger cannot take the broker's socket name
 *     (nor anything in the side directory): the takeover's broker comes up.
 *  4. Names a stranger plants in /dev/shm before create (the side
 *     directory, the old layout's :lane/:bound/:bell) either make create
 *     fail with a message naming the planter, or change nothing; after
 *     create it can plant nothing; reclaim never removes a stranger's.
 *  5. A peer with the overflow uid is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
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
#include "util/hostile_fx.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

struct plant_args {
	char path[PATH_MAX];
	int what; /* 0 directory open to others, 1 symlink, 2 file,
		   * 3 old-layout names, 4 a directory like a side directory
		   * (0700, a lane's and the doorbell's file in it) */
};

static int planter(void *arg, int in, int out)
{
	struct plant_args *pa = arg;
	char p[PATH_MAX + 32];
	int ret = 0, fd;

	(void)in;
	snprintf(p, sizeof(p), "%s:side", pa->path);
	switch (pa->what) {
	case 0:
		ret = mkdir(p, 0777) || chmod(p, 0777);
		break;
	case 1:
		ret = symlink("/tmp", p);
		break;
	case 2:
		fd = open(p, O_CREAT | O_WRONLY, 0666);
		ret = fd < 0;
		if (fd >= 0)
			close(fd);
		break;
	case 3:
		for (int i = 0; i < 3 && !ret; i++) {
			snprintf(p, sizeof(p), "%s:%s", pa->path,
				 i == 0 ? "lane.0" : i == 1 ? "bound.0" : "bell");
			ret = symlink("/nonexistent", p);
		}
		break;
	case 4:
		ret = mkdir(p, 0700);
		for (int i = 0; i < 2 && !ret; i++) {
			char f[PATH_MAX + 48];

			snprintf(f, sizeof(f), "%s/%s", p, i ? "bell" : "lane.0");
			fd = open(f, O_CREAT | O_WRONLY, 0600);
			ret = fd < 0;
			if (fd >= 0)
				close(fd);
		}
		break;
	}
	actor_send(out, &ret, sizeof(ret));
	return 0;
}

/* A stranger, after create: nothing in the side directory is its to
 * make, remove or bind. Bits of what went through. */
static int intruder(void *arg, int in, int out)
{
	struct plant_args *pa = arg;
	struct sockaddr_un sa;
	char p[PATH_MAX + 32];
	int bad = 0, fd, s;

	(void)in;
	snprintf(p, sizeof(p), "%s:side/lane.9", pa->path);
	fd = open(p, O_CREAT | O_RDWR, 0666);
	if (fd >= 0 || errno != EACCES)
		bad |= 1;
	snprintf(p, sizeof(p), "%s:side/broker", pa->path);
	if (unlink(p) == 0 || errno != EACCES)
		bad |= 2;
	s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%.90s:side/squat",
			     pa->path) >= sizeof(sa.sun_path))
		bad |= 16;
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno != EACCES)
		bad |= 4;
	close(s);
	snprintf(p, sizeof(p), "%s:side", pa->path);
	if (rename(p, "/dev/shm/stolen") == 0 || chmod(p, 0777) == 0)
		bad |= 8;
	actor_send(out, &bad, sizeof(bad));
	return 0;
}

static int run_as(uint32_t uid, actor_fn fn, void *arg)
{
	struct actor a;
	int r;

	actor_start(&a, uid, uid, 0, fn, arg);
	actor_recv(a.from, &r, sizeof(r));
	assert_int_equal(actor_wait(&a), 0);
	return r;
}

/*
 * Item 4: names a stranger plants. Before create, the side directory's
 * name (a directory others may write, a link, a file): create fails
 * -EEXIST, naming it and its owner uid, and leaves it alone; reclaim does
 * not remove it. The old layout's names: nothing changes. After create:
 * the stranger can make, remove or bind nothing in the side directory.
 * Item 2: after the owner died, a stranger cannot take the socket name:
 * the takeover's broker comes up.
 */
static void test_planted_names(void **state)
{
	struct cast cs[2];
	int nc = hst_casts(cs);

	(void)state;
	for (int c = 0; c < nc; c++) {
		uint32_t stranger = cs[c].stranger, owner = cs[c].owner;
		struct plant_args pa;
		struct owner_rep rep;
		struct actor o;
		char name[64];

		if (stranger == (uint32_t)-1) {
			/* One uid: a planted name is then its own leftover or
			 * mess, tested in test_segment (test_side_names). */
			fprintf(stderr, "hostile: planted names need a second user (root); skipped\n");
			skip();
			return;
		}
		for (int what = 0; what < 5; what++) {
			char side[PATH_MAX + 16];

			test_name(name, sizeof(name), "hostplant");
			snprintf(pa.path, sizeof(pa.path), "%s/v05-%s",
				 v05__shm_dir(), name);
			pa.what = what;
			assert_int_equal(run_as(stranger, planter, &pa), 0);
			actor_start(&o, owner ? owner : (uint32_t)-1,
				    owner ? owner : 0, 0, hst_owner_main, NULL);
			rep = hst_owner_do(&o, 'c', name, 0, cs[c].listed);
			snprintf(side, sizeof(side), "%s:side", pa.path);
			if (what != 3) {
				char want[64];

				assert_int_equal(rep.ret, -EEXIST);
				snprintf(want, sizeof(want), "uid %u", stranger);
				assert_non_null(strstr(rep.msg, ":side"));
				assert_non_null(strstr(rep.msg, want));
				assert_int_equal(access(pa.path, F_OK), -1);
				/* Not the owner's, root or not: its replace
				 * (Python's create, on_stale="remove" or on a
				 * leftover) and its reclaim fail naming it,
				 * and leave it, and what is in it, alone. */
				for (int k = 0; k < 2; k++) {
					struct stat sb;

					rep = hst_owner_do(&o, k ? 'r' : 'R', name, 0,
							   cs[c].listed);
					if (rep.ret >= 0)
						fail_msg("%s: %s over a stranger's %s went through",
							 cs[c].what, k ? "reclaim" : "replace",
							 side);
					assert_non_null(strstr(rep.msg, ":side"));
					assert_int_equal(lstat(side, &sb), 0);
					assert_int_equal(sb.st_uid, stranger);
					if (what == 4) {
						char f[PATH_MAX + 48];

						snprintf(f, sizeof(f), "%s/lane.0", side);
						assert_int_equal(access(f, F_OK), 0);
						snprintf(f, sizeof(f), "%s/bell", side);
						assert_int_equal(access(f, F_OK), 0);
					}
					assert_int_equal(access(pa.path, F_OK), -1);
				}
				hst_owner_do(&o, 'x', name, 0, 0);
				assert_int_equal(actor_wait(&o), 0);
				if (what == 4) {
					char f[PATH_MAX + 48];

					snprintf(f, sizeof(f), "%s/lane.0", side);
					unlink(f);
					snprintf(f, sizeof(f), "%s/bell", side);
					unlink(f);
				}
				if (what == 0 || what == 4)
					rmdir(side);
				else
					unlink(side);
				continue;
			}
			if (rep.ret)
				fail_msg("%s: create past old-layout names: %s",
					 cs[c].what, rep.msg);
			/* The stranger can do nothing in the side directory. */
			assert_int_equal(run_as(stranger, intruder, &pa), 0);
			/* Item 2: the owner dies; the stranger still cannot
			 * take the name; the takeover's broker is up. */
			hst_owner_do(&o, 'x', name, 0, 0);
			assert_int_equal(actor_wait(&o), 0);
			assert_int_equal(run_as(stranger, intruder, &pa), 0);
			actor_start(&o, owner ? owner : (uint32_t)-1,
				    owner ? owner : 0, 0, hst_owner_main, NULL);
			rep = hst_owner_do(&o, 'a', name, 0, 0);
			if (rep.ret)
				fail_msg("%s: takeover: %s", cs[c].what, rep.msg);
			{
				struct attack_args aa;
				struct actor a;
				int hits[2];
				char go = 'g';

				snprintf(aa.name, sizeof(aa.name), "%s", name);
				actor_start(&a, cs[c].listed, cs[c].listed, 0,
					    hst_attacker_main, &aa);
				actor_recv(a.from, hits, sizeof(hits));
				/* Granted (no A_NOGRANT), and nothing went
				 * through. */
				assert_int_equal(hits[0] | hits[1], 0);
				actor_send(a.to, &go, 1);
				actor_recv(a.from, hits, sizeof(hits));
				actor_send(a.to, &go, 1);
				assert_int_equal(actor_wait(&a), 0);
			}
			hst_owner_do(&o, 'q', name, 0, 0);
			assert_int_equal(actor_wait(&o), 0);
			for (int i = 0; i < 3; i++) {
				char old[PATH_MAX + 16];

				snprintf(old, sizeof(old), "%s:%s", pa.path,
					 i == 0 ? "lane.0" : i == 1 ? "bound.0" : "bell");
				unlink(old);
			}
		}
	}
}

/* Item 5: a peer with the overflow uid is refused, with the reason. */
static int overflow_peer(void *arg, int in, int out)
{
	struct attack_args *a = arg;
	struct v05_producer *w;
	int ret;

	(void)in;
	ret = v05_producer_open(a->name, V05_PRODUCER_ANY_UID, &w);
	if (ret == -EPERM && !strstr(v05_errmsg(), "overflow"))
		ret = -EIO;
	actor_send(out, &ret, sizeof(ret));
	return 0;
}

static void test_overflow_uid(void **state)
{
	struct cast cs[2];
	int nc = hst_casts(cs);

	(void)state;
	if (cs[0].listed == (uint32_t)-1) {
		fprintf(stderr, "hostile: the overflow uid needs root to become; skipped\n");
		skip();
		return;
	}
	for (int c = 0; c < nc; c++) {
		struct attack_args aa;
		struct owner_rep rep;
		struct actor o;

		test_name(aa.name, sizeof(aa.name), "hostovf");
		actor_start(&o, cs[c].owner ? cs[c].owner : (uint32_t)-1,
			    cs[c].owner ? cs[c].owner : 0, 0, hst_owner_main, NULL);
		rep = hst_owner_do(&o, 'c', aa.name, 0, cs[c].listed);
		assert_int_equal(rep.ret, 0);
		assert_int_equal(run_as(65534, overflow_peer, &aa), -EPERM);
		rep = hst_owner_do(&o, 'p', aa.name, 0, 0);
		assert_int_equal(rep.refused, 1);
		hst_owner_do(&o, 'q', aa.name, 0, 0);
		assert_int_equal(actor_wait(&o), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_planted_names),
		cmocka_unit_test(test_overflow_uid),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
