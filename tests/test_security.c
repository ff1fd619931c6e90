/* SPDX-License-Identifier: MIT */
/*
 * Security: segments are 0600 whatever the umask; a process of another uid
 * (a forked child dropped to "nobody") can neither attach, read, nor push;
 * with a wider mode chosen by the creator it still cannot use the segment
 * unless it opts in to another uid's segment explicitly; names are checked
 * before any file is touched; a producer's mapping cannot reach the
 * plugin's state. The uid tests need root to drop privileges and are
 * skipped otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05.h"

static struct v05_plugin *make(const char *name, uint32_t mode)
{
	struct v05_plugin *p;
	struct v05_config c;

	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = 2;
	c.file_mode = mode;
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

static void test_mode_ignores_umask(void **state)
{
	struct v05_plugin *p;
	char name[64], path[512];
	struct stat st;
	mode_t old = umask(0);

	(void)state;
	test_name(name, sizeof(name), "umask");
	p = make(name, 0600);
	umask(old);
	snprintf(path, sizeof(path), "%s/v05-%s", getenv("V05_SHM_DIR") ?
		 getenv("V05_SHM_DIR") : "/dev/shm", name);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* In a child dropped to nobody: what may it do with segment name? Exit
 * status bit i set = step i did something it must not. */
static int as_nobody(const char *name, const char *path, int expect_open_ok)
{
	struct passwd *nobody = getpwnam("nobody");
	pid_t pid;
	int st;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_producer *w;
		struct v05_plugin *p;
		struct v05_reader *r;
		int bad = 0, fd;

		if (setgroups(0, NULL) || setgid(nobody->pw_gid) ||
		    setuid(nobody->pw_uid) || getuid() != nobody->pw_uid)
			_exit(100);
		fd = open(path, O_RDWR);
		if ((fd >= 0) != expect_open_ok)
			bad |= 1;
		if (fd >= 0)
			close(fd);
		/* Default flags: another uid's segment is refused. */
		if (v05_producer_open(name, 0, &w) != -EACCES)
			bad |= 2;
		if (v05_plugin_attach(name, 0, &p) != -EACCES)
			bad |= 4;
		if (v05_reader_open(name, 0, &r) != -EACCES)
			bad |= 8;
		if (v05_segment_reclaim(name, 0) == 0)
			bad |= 16;
		/* Opting in changes nothing where the mode says no. */
		if (!expect_open_ok &&
		    v05_producer_open(name, V05_PRODUCER_ANY_UID, &w) != -EACCES)
			bad |= 32;
		if (expect_open_ok) {
			/* The creator widened the mode: with the opt-in, a
			 * push goes through. */
			if (v05_producer_open(name, V05_PRODUCER_ANY_UID, &w) ||
			    v05_producer_push(w, 42, 0, 0, 1.f))
				bad |= 64;
			else
				v05_producer_close(w);
		}
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_other_uid(void **state)
{
	struct v05_plugin *p;
	char name[64], wide[64], path[512], wpath[512];
	const char *dir = getenv("V05_SHM_DIR") ? getenv("V05_SHM_DIR") : "/dev/shm";
	uint64_t c[V05_COUNTER_SLOTS];
	struct v05_plugin *q;
	int ret;

	(void)state;
	if (geteuid() != 0 || !getpwnam("nobody")) {
		skip();
		return;
	}
	test_name(name, sizeof(name), "uid");
	test_name(wide, sizeof(wide), "uidwide");
	snprintf(path, sizeof(path), "%s/v05-%s", dir, name);
	snprintf(wpath, sizeof(wpath), "%s/v05-%s", dir, wide);
	p = make(name, 0600);
	q = make(wide, 0666);

	ret = as_nobody(name, path, 0);
	if (ret)
		fail_msg("nobody with a 0600 segment: steps %#x went through", ret);
	ret = as_nobody(wide, wpath, 1);
	if (ret)
		fail_msg("nobody with a 0666 segment: steps %#x misbehaved", ret);

	/* The one push nobody made, with the opt-in, arrived (unknown key:
	 * counted, applied to nothing); nothing else did. */
	assert_int_equal(v05_poll(q, NULL, 0), 0);
	v05_counters(q, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REJ_UNKNOWN], 1);
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REJ_UNKNOWN], 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	v05_plugin_close(q, V05_CLOSE_UNLINK);
}

static void test_names(void **state)
{
	static const char *const bad[] = { "", "a/b", "../x", "/abs", NULL };
	char longname[V05_NAME_MAX + 2];
	struct v05_producer *w;
	struct v05_plugin *p;

	(void)state;
	for (int i = 0; bad[i]; i++) {
		assert_int_equal(v05_name_check(bad[i]), -EINVAL);
		assert_int_equal(v05_producer_open(bad[i], 0, &w), -EINVAL);
		assert_int_equal(v05_plugin_attach(bad[i], 0, &p), -EINVAL);
	}
	assert_int_equal(v05_producer_open(NULL, 0, &w), -EINVAL);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(v05_name_check(longname), -ENAMETOOLONG);
	longname[V05_NAME_MAX] = '\0';
	assert_int_equal(v05_name_check(longname), 0);
}

/* A producer process maps the control lines and the lanes only: the
 * plugin's counters and state are not in its address space at all. */
static void test_producer_mapping(void **state)
{
	struct v05_segment prod;
	struct v05_plugin *p;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "pmap");
	p = make(name, 0600);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_PRODUCER, 0, &prod), 0);
	assert_null(prod.state);
	assert_null(prod.region[V05_REGION_STATE]);
	assert_null(prod.region[V05_REGION_TABLE]);
	assert_null(prod.region[V05_REGION_ARENA]);
	/* And the same bytes are there for the owner. */
	assert_non_null(p->seg.state);
	v05__segment_detach(&prod);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/*
 * Which bytes of segment file path does this process map, and how? For each
 * mapping of the file: its file range and whether it is readable or
 * writable. Returns the number of mappings (at most max).
 */
struct fmap {
	uint64_t off, len;
	int r, w;
};

static int file_maps(const char *path, struct fmap *out, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		char perms[8], file[600] = "";

		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %599s", &start, &end,
			   perms, &off, file) < 4)
			continue;
		if (strcmp(file, path) || n == max)
			continue;
		out[n].off = off;
		out[n].len = end - start;
		out[n].r = perms[0] == 'r';
		out[n].w = perms[1] == 'w';
		n++;
	}
	fclose(f);
	return n;
}

static int inside(const struct fmap *m, uint64_t off, uint64_t len)
{
	return m->off >= off && m->off + m->len <= off + len;
}

/*
 * A producer maps its own lane and the doorbell page and nothing else of
 * the segment: not the owner word, not another lane, not the counters. A
 * memory bug in one reward worker cannot stop the engine or its peers.
 * Runs in a child so that only the producer's mappings are in the way.
 */
static void test_producer_reach(void **state)
{
	struct v05_plugin *p;
	char name[64];
	pid_t pid;
	int st;

	(void)state;
	test_name(name, sizeof(name), "reach");
	p = make(name, 0600);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_producer *w[2];
		struct v05_segment seg;
		struct fmap m[16];
		uint64_t lanes_off, stride, bell_off, bell_len;
		int n, lane;

		/* Forget the parent's mapping: only what the producer maps. */
		v05__segment_detach(&p->seg);
		if (v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg))
			_exit(10);
		lanes_off = seg.hdr.regions[V05_REGION_LANES].offset;
		stride = seg.hdr.regions[V05_REGION_LANES].size /
			 seg.hdr.geo.lane_count;
		bell_off = seg.hdr.regions[V05_REGION_DOORBELL].offset;
		bell_len = seg.hdr.regions[V05_REGION_DOORBELL].size;
		v05__segment_detach(&seg);
		if (v05_producer_open(name, 0, &w[0]) ||
		    v05_producer_open(name, 0, &w[1]))
			_exit(11);
		n = file_maps(seg.path, m, 16);
		if (n < 1)
			_exit(12);
		for (int i = 0; i < n; i++) {
			int ok = 0;

			if (!m[i].r && !m[i].w)
				_exit(13); /* a PROT_NONE view of it all */
			for (int k = 0; k < 2; k++) {
				lane = v05_producer_lane(w[k]);
				ok |= inside(&m[i], lanes_off + (uint64_t)lane * stride,
					     stride);
			}
			ok |= inside(&m[i], bell_off, bell_len);
			if (!ok)
				_exit(14);
		}
		v05_producer_close(w[1]);
		v05_producer_close(w[0]);
		/* Closed: nothing of the segment stays mapped. */
		_exit(file_maps(seg.path, m, 16) == 0 ? 0 : 15);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode_ignores_umask),
		cmocka_unit_test(test_other_uid),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_producer_mapping),
		cmocka_unit_test(test_producer_reach),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
