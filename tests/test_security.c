/* SPDX-License-Identifier: MIT */
/*
 * Security: segments are 0600 whatever the umask; a process of another uid
 * (a forked child dropped to "nobody") can open none of a segment's files
 * for writing, reads the segment file only where the creator's mode lets
 * it, and produces only through the owner's broker, which hands it its
 * lane's file and the doorbell's and nothing else; names are checked
 * before any file is touched; a producer's mapping cannot reach the
 * plugin's state or another lane. The uid tests need root to drop
 * privileges and are skipped otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05.h"

static struct v05_plugin *make_flags(const char *name, uint32_t mode,
				     unsigned flags)
{
	struct v05_plugin *p;
	struct v05_config c;

	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = 2;
	c.file_mode = mode;
	c.flags = flags;
	if (flags & V05_CONFIG_PRODUCER_BROKER) {
		/* The user the uid tests become. */
		c.broker_uids[0] = ACTOR_LISTED_UID;
		c.n_broker_uids = 1;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

static struct v05_plugin *make(const char *name, uint32_t mode)
{
	return make_flags(name, mode, 0);
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
 * What of a segment's files does this process map, and how? For each
 * mapping of a file whose path starts with prefix (the segment file's:
 * its lanes' and doorbell's files share it): the file, its range, whether
 * it is readable or writable. Returns the number of mappings (at most max).
 */
struct fmap {
	char file[600];
	uint64_t off, len;
	int r, w;
};

static int file_maps(const char *prefix, struct fmap *out, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		char perms[8], file[600] = "";

		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %599s", &start, &end,
			   perms, &off, file) < 4)
			continue;
		if (strncmp(file, prefix, strlen(prefix)) || n == max)
			continue;
		snprintf(out[n].file, sizeof(out[n].file), "%s", file);
		out[n].off = off;
		out[n].len = end - start;
		out[n].r = perms[0] == 'r';
		out[n].w = perms[1] == 'w';
		n++;
	}
	fclose(f);
	return n;
}

/*
 * Do this process's mappings of segment path's files cover exactly the
 * lanes' files in lanes[0 .. nlanes) (whole, each once) and the doorbell's
 * file (each once), nothing of the segment file and no other lane? 0 if
 * so, else a code naming what is wrong.
 */
static int maps_only(const char *path, const char *const *lanes, int nlanes,
		     uint64_t stride)
{
	struct fmap m[16];
	char bell[PATH_MAX + 16];
	int n = file_maps(path, m, 16), seen_bell = 0, seen_lane[4] = { 0 };

	snprintf(bell, sizeof(bell), "%s:side/bell", path);
	if (n < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		int ok = 0;

		if (!m[i].r || !m[i].w)
			return 2; /* a PROT_NONE or read-only view */
		if (!strcmp(m[i].file, bell) && m[i].off == 0 &&
		    m[i].len == V05_PAGE) {
			seen_bell++;
			ok = 1;
		}
		for (int k = 0; k < nlanes; k++) {
			if (!strcmp(m[i].file, lanes[k]) && m[i].off == 0 &&
			    m[i].len == stride) {
				seen_lane[k]++;
				ok = 1;
			}
		}
		if (!ok)
			return 3; /* the segment file, or another lane */
	}
	if (seen_bell != nlanes) /* each handle maps its own */
		return 4;
	for (int k = 0; k < nlanes; k++)
		if (seen_lane[k] != 1)
			return 5;
	return 0;
}

/*
 * A producer maps its own lane's file and the doorbell's file and nothing
 * else of the segment: not the segment file (owner word, counters), not
 * another lane's file. A memory bug in one reward worker cannot stop the
 * engine or its peers. Runs in a child so that only the producer's
 * mappings are in the way.
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
		char path[PATH_MAX], lane[2][PATH_MAX + 16];
		const char *lanes[2] = { lane[0], lane[1] };
		uint64_t stride;
		int ret;

		/* Forget the parent's mapping: only what the producer maps. */
		snprintf(path, sizeof(path), "%s", p->seg.path);
		stride = v05__lane_stride(p->seg.hdr.geo.lane_capacity);
		v05__segment_detach(&p->seg);
		if (v05_producer_open(name, 0, &w[0]) ||
		    v05_producer_open(name, 0, &w[1]))
			_exit(11);
		for (int k = 0; k < 2; k++)
			snprintf(lane[k], sizeof(lane[k]), "%s:side/lane.%d", path,
				 v05_producer_lane(w[k]));
		ret = maps_only(path, lanes, 2, stride);
		if (ret)
			_exit(20 + ret);
		v05_producer_close(w[1]);
		v05_producer_close(w[0]);
		/* Closed: nothing of the segment stays mapped. */
		_exit(maps_only(path, lanes, 0, stride) ? 15 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* What a child dropped to nobody is to do with one segment. */
struct nobody_case {
	const char *name;
	char path[PATH_MAX];
	int readable;    /* the creator's mode lets others read the file */
	int broker;      /* the plugin runs a broker                     */
	uint64_t key;    /* with a broker: push these samples' rewards   */
	uint64_t samples;
	uint32_t gen;    /* their decision's gen                          */
	uint32_t lanes;
	uint64_t stride;
};

/* Exit status bit i set = step i did something it must not. */
static int nobody_steps(const struct nobody_case *k)
{
	char lane[PATH_MAX + 32], bell[PATH_MAX + 32];
	struct v05_producer *w;
	struct v05_plugin *p;
	struct v05_reader *r;
	int bad = 0, fd, ret;

	/* The segment file: never writable by another uid, readable where
	 * the mode says so. */
	fd = open(k->path, O_RDWR);
	if (fd >= 0 || errno != EACCES)
		bad |= 1;
	if (fd >= 0)
		close(fd);
	fd = open(k->path, O_RDONLY);
	if ((fd >= 0) != k->readable)
		bad |= 1;
	if (fd >= 0)
		close(fd);
	/* The lanes' and the doorbell's files: 0600 always, in a
	 * directory it cannot write (nor list). */
	snprintf(bell, sizeof(bell), "%s:side/bell", k->path);
	if (open(bell, O_RDWR) >= 0 || errno != EACCES)
		bad |= 2;
	for (uint32_t i = 0; i < k->lanes; i++) {
		snprintf(lane, sizeof(lane), "%s:side/lane.%u", k->path, i);
		if (open(lane, O_RDWR) >= 0 || errno != EACCES)
			bad |= 2;
	}
	snprintf(lane, sizeof(lane), "%s:side/planted", k->path);
	if (open(lane, O_RDWR | O_CREAT, 0600) >= 0 || errno != EACCES)
		bad |= 2;
	/* Default flags: another uid's segment is refused. */
	if (v05_producer_open(k->name, 0, &w) != -EACCES)
		bad |= 4;
	if (v05_plugin_attach(k->name, 0, &p) != -EACCES)
		bad |= 4;
	if (v05_reader_open(k->name, 0, &r) != -EACCES)
		bad |= 4;
	if (v05_segment_reclaim(k->name, 0) == 0)
		bad |= 4;
	/* Nor can it write the segment with the opt-in: it never gets the
	 * segment file, only a lane's, and only from a broker. */
	if (v05_plugin_attach(k->name, V05_ATTACH_ANY_UID, &p) == 0 ||
	    v05_reader_open(k->name, V05_ATTACH_ANY_UID, &r) == 0)
		bad |= 8;
	ret = v05_producer_open(k->name, V05_PRODUCER_ANY_UID, &w);
	if (!k->broker)
		return bad | (ret == -ECONNREFUSED &&
			      strstr(v05_errmsg(), "no producer broker") ? 0 : 16);
	if (ret)
		return bad | 32;
	{
		int l = v05_producer_lane(w);
		struct fmap m[4];

		/* What it maps: its lane's memfd and the doorbell's, no file
		 * of the segment; it cannot open its lane's file by name. */
		snprintf(lane, sizeof(lane), "%s:side/lane.%d", k->path, l);
		if (maps_only(k->path, NULL, 0, k->stride) ||
		    file_maps("/memfd:v05-lane", m, 4) != 1 ||
		    file_maps("/memfd:v05-bell", m, 4) != 1)
			bad |= 64;
		if (open(lane, O_RDWR) >= 0 || errno != EACCES)
			bad |= 64;
		for (uint32_t s = 0; s < 64; s++)
			if (k->samples >> s & 1 &&
			    v05_producer_push(w, k->key, k->gen, s, 0.5f))
				bad |= 128;
		v05_producer_close(w);
	}
	return bad;
}

static int as_nobody(struct v05_plugin **drop, int ndrop,
		     const struct nobody_case *k)
{
	pid_t pid;
	int st;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Only what the library maps for it: not the parent's views. */
		for (int i = 0; i < ndrop; i++) {
			v05__segment_detach(&drop[i]->seg);
			if (drop[i]->bell2)
				munmap(drop[i]->bell2, V05_PAGE);
		}
		if (setgroups(0, NULL) || setgid(ACTOR_LISTED_UID) ||
		    setuid(ACTOR_LISTED_UID) || getuid() != ACTOR_LISTED_UID)
			_exit(255);
		_exit(nobody_steps(k));
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void nobody_case(struct nobody_case *k, const char *name,
			const struct v05_plugin *p, int readable, int broker)
{
	memset(k, 0, sizeof(*k));
	k->name = name;
	snprintf(k->path, sizeof(k->path), "%s", p->seg.path);
	k->readable = readable;
	k->broker = broker;
	k->lanes = p->seg.hdr.geo.lane_count;
	k->stride = v05__lane_stride(p->seg.hdr.geo.lane_capacity);
}

/*
 * Another uid (a child dropped to nobody): can open no file of a segment
 * for writing, whatever the creator's mode; can read the segment file only
 * where the mode lets it; attaches nothing without opting in, and with the
 * opt-in only as a producer, through the owner's broker, which hands it
 * its lane's file and the doorbell's and nothing else. Its rewards are
 * applied; its lane is bound to its uid and no longer offered to others.
 */
static void test_other_uid(void **state)
{
	char name[64], wide[64];
	uint64_t c[V05_COUNTER_SLOTS];
	struct v05_prompt_in in = { .uid = "nobody's", .uid_len = 8, .prior = 0 };
	struct v05_decision d[8];
	struct nobody_case k;
	struct v05_plugin *p, *q, *both[2];
	struct v05_producer *w, *w2;
	uint32_t pushed, bound = UINT32_MAX;
	int ret;

	(void)state;
	if (!actor_can_switch()) {
		fprintf(stderr, "security: becoming another user needs root %s; skipped (CI runs it as root)\n",
			actor_whoami());
		skip();
		return;
	}
	test_name(name, sizeof(name), "uid");
	test_name(wide, sizeof(wide), "uidwide");
	p = make(name, 0600);
	q = make_flags(wide, 0644, V05_CONFIG_PRODUCER_BROKER);
	both[0] = p;
	both[1] = q;

	nobody_case(&k, name, p, 0, 0);
	ret = as_nobody(both, 2, &k);
	if (ret)
		fail_msg("nobody, 0600 segment, no broker: steps %#x went through", ret);

	assert_int_equal(v05_submit(q, &in, 1, d, NULL), 1);
	nobody_case(&k, wide, q, 1, 1);
	k.key = d[0].key;
	k.samples = d[0].samples;
	k.gen = d[0].gen;
	pushed = (uint32_t)__builtin_popcountll(d[0].samples);
	ret = as_nobody(both, 2, &k);
	if (ret)
		fail_msg("nobody, 0644 segment with a broker: steps %#x misbehaved", ret);

	/* Its rewards arrived and were applied; nothing reached p. */
	assert_true(v05_poll(q, d, 8) >= 0);
	v05_counters(q, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REWARDS_APPLIED], pushed);
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REWARDS_APPLIED], 0);
	/* Its lane was granted to its uid as a memfd; it left, so the lane
	 * is its file again and our producers get both lanes. */
	for (uint32_t i = 0; i < 2; i++) {
		/* Relaxed: the broker thread wrote them (atomically). */
		if (v05_load_relaxed(&q->seg.lane_own[i].grant)) {
			assert_int_equal(v05_load_relaxed(&q->seg.lane_own[i].grant_uid),
					 ACTOR_LISTED_UID);
			bound = i;
		}
	}
	assert_true(bound < 2);
	while (v05__lane_granted(&q->seg.lane_own[bound]))
		assert_true(v05_wait(q, 10) >= 0 && v05_poll(q, NULL, 0) >= 0);
	assert_int_equal(v05_producer_open(wide, 0, &w), 0);
	assert_int_equal(v05_producer_open(wide, 0, &w2), 0);
	v05_producer_close(w2);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	v05_plugin_close(q, V05_CLOSE_UNLINK);
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
