/* SPDX-License-Identifier: MIT */
/* Segments: names, create/attach/unlink, permissions, every attach check
 * refusing a corrupted header with its own errno, reclaim. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/shm.h"

static void test_names(void **state)
{
	char longname[V05_NAME_MAX + 2];

	(void)state;
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(v05_name_check(""), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "empty"));
	assert_int_equal(v05_name_check(NULL), -EINVAL);
	assert_int_equal(v05_name_check("a/b"), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "'/'"));
	assert_int_equal(v05_name_check(longname), -ENAMETOOLONG);
	longname[V05_NAME_MAX] = '\0';
	assert_int_equal(v05_name_check(longname), 0);
	assert_int_equal(v05_name_check(".hidden"), -EINVAL);
	assert_int_equal(v05_name_check("sp ace"), -EINVAL);
	assert_int_equal(v05_name_check("ok-Name_1.x"), 0);
}

static void create_small(const char *name, unsigned mode,
			 struct v05_segment *seg)
{
	struct v05_geometry g = test_geometry(2, 64, 4, 16);
	const char cfg[] = "config bytes";

	assert_int_equal(v05__segment_create(name, &g, cfg, sizeof(cfg), mode,
					     seg), 0);
}

static void test_create_attach(void **state)
{
	struct v05_segment owner, insp, prod;
	char name[64];
	struct stat st;

	(void)state;
	test_name(name, sizeof(name), "seg");
	create_small(name, 0600, &owner);
	assert_int_equal(stat(owner.path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(v05__segment_create(name, &owner.hdr.geo, NULL, 0, 0600,
					     &insp), -EEXIST);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &insp), 0);
	assert_memory_equal(&insp.hdr, &owner.hdr, sizeof(owner.hdr));
	assert_string_equal((const char *)insp.hdr.config, "config bytes");
	assert_null(insp.region[V05_REGION_ARENA]); /* not mapped for inspect */
	assert_non_null(insp.region[V05_REGION_LANES]);
	assert_non_null(insp.state);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_PRODUCER, 0, &prod), 0);
	/* A producer's attach maps the doorbell page and nothing else (its
	 * lane comes with its claim): not the owner word, not the lanes, not
	 * the counters and state the consumer relies on. */
	for (int i = 0; i < V05_REGION_COUNT; i++)
		assert_null(prod.region[i]);
	assert_null(prod.base);
	assert_null(prod.state);
	assert_null(prod.ctl);
	assert_null(prod.lane_own);
	assert_non_null(prod.bell);
	prod.bell->doorbell = 7; /* the owner's word, through its own page */
	assert_int_equal(owner.bell->doorbell, 7);
	v05__segment_detach(&prod);
	v05__segment_detach(&insp);
	v05__segment_detach(&owner);
	assert_int_equal(v05_segment_unlink(name), 0);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &insp),
			 -ENOENT);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0x80, &insp),
			 -EINVAL);
}

static void test_mode_configurable(void **state)
{
	struct v05_segment seg;
	mode_t old = umask(077);
	char name[64];
	struct stat st;

	(void)state;
	test_name(name, sizeof(name), "mode");
	create_small(name, 0640, &seg);
	umask(old);
	assert_int_equal(stat(seg.path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	v05__segment_detach(&seg);
	assert_int_equal(v05_segment_unlink(name), 0);
}

static int exists(const char *seg_path, const char *suffix)
{
	char path[PATH_MAX + 32];
	struct stat st;

	snprintf(path, sizeof(path), "%s%s", seg_path, suffix);
	return lstat(path, &st) == 0;
}

/* Each lane and the doorbell in a file of their own, 0600 whatever the
 * segment's mode and the umask; the owner's view is those files. */
static void test_files(void **state)
{
	struct v05_segment owner, insp;
	mode_t old = umask(0);
	char name[64], lane1[PATH_MAX + 32];
	struct stat st;

	(void)state;
	test_name(name, sizeof(name), "files");
	create_small(name, 0640, &owner);
	umask(old);
	assert_true(exists(owner.path, ":side/lane.0"));
	assert_true(exists(owner.path, ":side/lane.1"));
	assert_false(exists(owner.path, ":side/lane.2"));
	assert_true(exists(owner.path, ":side/bell"));
	snprintf(lane1, sizeof(lane1), "%s:side/lane.1", owner.path);
	assert_int_equal(stat(lane1, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal((uint64_t)st.st_size,
			 v05__lane_stride(owner.hdr.geo.lane_capacity));
	/* The owner's lane 1 is the file: a write through a mapping of the
	 * file shows in the owner's view, and an inspector's. */
	{
		int fd = v05__lane_file_open(&owner, V05_FILE_LANE, 1, O_RDWR);
		uint64_t v = 0x1234;

		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, &v, sizeof(v), v05__lane_skew(1)),
				 sizeof(v));
		close(fd);
		assert_int_equal(v05__lane(&owner, 1)->owner, 0x1234);
		assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0,
						     &insp), 0);
		assert_true(insp.lanes_mapped);
		assert_int_equal(v05__lane(&insp, 1)->owner, 0x1234);
		v05__segment_detach(&insp);
		v05__lane(&owner, 1)->owner = 0;
	}
	/* The segment file is no longer writable by others, whatever the
	 * caller asks. */
	assert_int_equal(v05__segment_create("x", &owner.hdr.geo, NULL, 0, 0666,
					     &insp), -EINVAL);
	assert_int_equal(v05__segment_create("x", &owner.hdr.geo, NULL, 0, 0620,
					     &insp), -EINVAL);
	v05__segment_detach(&owner);
	/* Unlink removes every file. */
	assert_int_equal(v05_segment_unlink(name), 0);
	assert_false(exists(owner.path, ""));
	assert_false(exists(owner.path, ":side/lane.0"));
	assert_false(exists(owner.path, ":side/lane.1"));
	assert_false(exists(owner.path, ":side/bell"));
}

/*
 * A takeover (the owner's attach) opens each lane's file and the
 * doorbell's from the side directory and checks them: no link followed,
 * the segment's uid, open to no one else, the lane's size. What fails a
 * check (only a process of the segment's uid can have done it: the
 * directory is writable by it alone) is made again, empty at the head the
 * owner trusts, and counted: the takeover never fails on it. The side
 * directory itself, removed, is made again too. An inspector goes without
 * lanes instead.
 */
static void test_files_checked(void **state)
{
	static const char *const cases[] = { "symlink", "mode", "size",
					     "missing", "directory" };
	struct v05_segment owner, seg;
	char name[64], lane[PATH_MAX + 32], moved[PATH_MAX + 40];
	char side[PATH_MAX + 16];

	(void)state;
	test_name(name, sizeof(name), "fcheck");
	create_small(name, 0600, &owner);
	snprintf(lane, sizeof(lane), "%s:side/lane.1", owner.path);
	snprintf(moved, sizeof(moved), "%s:side/moved", owner.path);
	snprintf(side, sizeof(side), "%s:side", owner.path);
	/* The lane's head, which a new file resumes from. */
	owner.lane_own[1].head = 77;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct v05_ring_hdr *r;

		assert_int_equal(rename(lane, moved), 0);
		if (i == 0)
			assert_int_equal(symlink(moved, lane), 0);
		else if (i == 1 || i == 2)
			assert_int_equal(link(moved, lane), 0);
		else if (i == 4)
			assert_int_equal(mkdir(lane, 0700), 0);
		if (i == 1)
			assert_int_equal(chmod(lane, 0644), 0);
		if (i == 2)
			assert_int_equal(truncate(lane, V05_PAGE), 0);
		/* An inspector goes without the lanes. */
		assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0,
						     &seg), 0);
		assert_false(seg.lanes_mapped);
		assert_null(seg.region[V05_REGION_LANES]);
		v05__segment_detach(&seg);
		if (i == 4) {
			/* A directory in its place: not ours to remove
			 * recursively; the takeover says which. */
			assert_int_equal(v05__segment_attach(name, V05_ROLE_OWNER, 0,
							     &seg), -EEXIST);
			assert_non_null(strstr(v05_errmsg(), "lane.1"));
			assert_int_equal(rmdir(lane), 0);
			assert_int_equal(rename(moved, lane), 0);
			continue;
		}
		if (v05__segment_attach(name, V05_ROLE_OWNER, 0, &seg))
			fail_msg("%s: %s", cases[i], v05_errmsg());
		assert_int_equal(seg.files_replaced, 1);
		assert_true(seg.lanes_mapped);
		/* A new file, empty at the owner's head. */
		r = v05__lane(&seg, 1);
		assert_int_equal(r->tail, 77);
		assert_int_equal(r->head, 77);
		assert_int_equal(r->owner, 0);
		v05__segment_detach(&seg);
		if (i == 1)
			assert_int_equal(chmod(moved, 0600), 0);
		if (i == 2)
			assert_int_equal(truncate(moved, (off_t)v05__lane_stride(
				owner.hdr.geo.lane_capacity)), 0);
		unlink(lane);
		assert_int_equal(rename(moved, lane), 0);
	}
	assert_int_equal(v05__segment_attach(name, V05_ROLE_OWNER, 0, &seg), 0);
	assert_int_equal(seg.files_replaced, 0);
	v05__segment_detach(&seg);
	/* The whole side directory gone (an `rm -r` of it): made again. */
	assert_int_equal(v05__side_remove(owner.path), 1);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_OWNER, 0, &seg), 0);
	assert_true(seg.files_replaced >= 3); /* the directory and each file */
	assert_true(exists(owner.path, ":side/lane.1"));
	v05__segment_detach(&seg);
	v05__segment_detach(&owner);
	assert_int_equal(v05_segment_unlink(name), 0);
	assert_false(exists(owner.path, ":side"));
}

/*
 * The names next to the segment file that create claims: its side
 * directory. Anything already there (a file, a link, a directory of
 * another mode) makes create fail with -EEXIST and a message naming it
 * and its owner, leaving it alone and nothing of its own behind; a
 * leftover of this uid's (its segment file removed alone) is named as
 * such, with the remedy, which works. Names of the old layout next to the
 * segment file (:lane.<i>, :bound.<i>, :bell) mean nothing any more.
 */
static void test_side_names(void **state)
{
	struct v05_segment owner, seg;
	char name[64], path[PATH_MAX], side[PATH_MAX + 16], old[PATH_MAX + 16];
	int fd;

	(void)state;
	test_name(name, sizeof(name), "sidenames");
	snprintf(path, sizeof(path), "%s/v05-%s", v05__shm_dir(), name);
	snprintf(side, sizeof(side), "%s:side", path);
	/* A file, a link, a directory others may write. */
	for (int k = 0; k < 3; k++) {
		if (k == 0)
			assert_true((fd = open(side, O_CREAT | O_WRONLY, 0600)) >= 0 &&
				    !close(fd));
		else if (k == 1)
			assert_int_equal(symlink("/tmp", side), 0);
		else
			assert_true(!mkdir(side, 0700) && !chmod(side, 0777));
		{
			struct v05_geometry g = test_geometry(2, 16, 4, 4);

			assert_int_equal(v05__segment_create(name, &g, NULL, 0,
							     0600, &seg), -EEXIST);
			assert_non_null(strstr(v05_errmsg(), ":side"));
			assert_non_null(strstr(v05_errmsg(), "uid "));
		}
		assert_false(exists(path, ""));
		assert_int_equal(k == 2 ? rmdir(side) : unlink(side), 0);
	}
	/* Old-layout names planted next to it change nothing. */
	for (int k = 0; k < 3; k++) {
		snprintf(old, sizeof(old), "%s:%s", path,
			 k == 0 ? "lane.0" : k == 1 ? "bound.1" : "bell");
		assert_int_equal(symlink("/nonexistent", old), 0);
	}
	create_small(name, 0600, &owner);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_OWNER, 0, &seg), 0);
	assert_int_equal(seg.files_replaced, 0);
	v05__segment_detach(&seg);
	v05__segment_detach(&owner);
	/* The segment file removed alone: create names the leftover and its
	 * remedy; the remedy works; unlink clears what is left, no error. */
	assert_int_equal(unlink(path), 0);
	{
		struct v05_geometry g = test_geometry(2, 16, 4, 4);

		assert_int_equal(v05__segment_create(name, &g, NULL, 0, 0600, &seg),
				 -EEXIST);
		assert_non_null(strstr(v05_errmsg(), "left over"));
		assert_non_null(strstr(v05_errmsg(), "v05ctl reclaim"));
		assert_false(exists(path, ""));
		assert_int_equal(v05_segment_reclaim(name, 0), 0);
		assert_false(exists(path, ":side"));
		create_small(name, 0600, &owner);
		v05__segment_detach(&owner);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(v05_segment_unlink(name), 0);
		assert_false(exists(path, ":side"));
		assert_int_equal(v05_segment_unlink(name), -ENOENT);
	}
	/* Our own old-layout leftovers went with the unlink. */
	snprintf(old, sizeof(old), "%s:lane.0", path);
	assert_int_not_equal(access(old, F_OK), 0);
}

enum fix { RAW, FIX_CHECKSUM };

/* Write a modified header into the object, attach, restore. */
static int attach_with(const char *path, const char *name,
		       void (*mutate)(struct v05_shm_header *), enum fix fix)
{
	struct v05_shm_header h, orig;
	struct v05_segment seg;
	int fd = open(path, O_RDWR);
	int ret;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &orig, sizeof(orig), 0), sizeof(orig));
	h = orig;
	mutate(&h);
	if (fix == FIX_CHECKSUM)
		h.checksum = v05__header_checksum(&h);
	assert_int_equal(pwrite(fd, &h, sizeof(h), 0), sizeof(h));
	ret = v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg);
	if (ret == 0)
		v05__segment_detach(&seg);
	assert_int_equal(pwrite(fd, &orig, sizeof(orig), 0), sizeof(orig));
	close(fd);
	return ret;
}

static void m_magic(struct v05_shm_header *h) { h->magic ^= 1; }
static void m_abi(struct v05_shm_header *h) { h->abi_version = 99; }
static void m_hsize(struct v05_shm_header *h) { h->header_size = 512; }
static void m_config(struct v05_shm_header *h) { h->config[5] ^= 0x40; }
static void m_geo(struct v05_shm_header *h) { h->geo.lane_count++; }
static void m_page(struct v05_shm_header *h) { h->page_size = 65536; }
static void m_total(struct v05_shm_header *h) { h->total_size += V05_PAGE; }
static void m_pow2(struct v05_shm_header *h) { h->geo.lane_capacity = 48; }
static void m_kmax(struct v05_shm_header *h) { h->geo.k_max = 65; }
static void m_out(struct v05_shm_header *h)
{
	h->regions[V05_REGION_ARENA].offset = h->total_size;
}
static void m_huge(struct v05_shm_header *h)
{
	h->regions[V05_REGION_TABLE].size = UINT64_MAX - V05_PAGE + 1;
}
static void m_unaligned(struct v05_shm_header *h)
{
	h->regions[V05_REGION_LANES].offset += 8;
}
static void m_overlap(struct v05_shm_header *h)
{
	h->regions[V05_REGION_TABLE].offset = h->regions[V05_REGION_LANES].offset;
}
static void m_mismatch(struct v05_shm_header *h)
{
	/* Move the control/lanes boundary by a page: inside, aligned and
	 * disjoint, but not what the capacities say. */
	h->regions[V05_REGION_CONTROL].size += V05_PAGE;
	h->regions[V05_REGION_LANES].offset += V05_PAGE;
	h->regions[V05_REGION_LANES].size -= V05_PAGE;
}

static void test_corrupt_header(void **state)
{
	static const struct {
		const char *what;
		void (*mutate)(struct v05_shm_header *);
		enum fix fix;
		int err;
	} cases[] = {
		{ "magic", m_magic, RAW, -EBADMSG },
		{ "abi", m_abi, RAW, -EPROTONOSUPPORT },
		{ "header size", m_hsize, RAW, -EPROTONOSUPPORT },
		{ "config byte", m_config, RAW, -EILSEQ },
		{ "geometry", m_geo, RAW, -EILSEQ },
		{ "page size", m_page, FIX_CHECKSUM, -EDOM },
		{ "total size", m_total, FIX_CHECKSUM, -EMSGSIZE },
		{ "capacity not pow2", m_pow2, FIX_CHECKSUM, -EDOM },
		{ "k_max", m_kmax, FIX_CHECKSUM, -EDOM },
		{ "region outside", m_out, FIX_CHECKSUM, -EOVERFLOW },
		{ "region size overflow", m_huge, FIX_CHECKSUM, -EOVERFLOW },
		{ "region unaligned", m_unaligned, FIX_CHECKSUM, -EOVERFLOW },
		{ "regions overlap", m_overlap, FIX_CHECKSUM, -ENOTUNIQ },
		{ "region mismatch", m_mismatch, FIX_CHECKSUM, -EMSGSIZE },
	};
	struct v05_segment owner, seg;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "corrupt");
	create_small(name, 0600, &owner);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret = attach_with(owner.path, name, cases[i].mutate,
				      cases[i].fix);

		if (ret != cases[i].err)
			fail_msg("%s: got %d (%s), want %d", cases[i].what, ret,
				 v05_errmsg(), cases[i].err);
		assert_true(strlen(v05_errmsg()) > 0);
	}
	/* Restored: attaches again. */
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg), 0);
	v05__segment_detach(&seg);
	/* Truncated: size no longer matches, then below one page. */
	assert_int_equal(truncate(owner.path, (off_t)owner.size - V05_PAGE), 0);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg),
			 -EMSGSIZE);
	assert_int_equal(truncate(owner.path, 100), 0);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg),
			 -EMSGSIZE);
	v05__segment_detach(&owner);
	assert_int_equal(v05_segment_unlink(name), 0);
}

static void test_foreign_uid(void **state)
{
	struct v05_segment owner, seg;
	struct passwd *nobody = getpwnam("nobody");
	char name[64];

	(void)state;
	if (geteuid() != 0 || !nobody) {
		skip();
		return;
	}
	test_name(name, sizeof(name), "uid");
	create_small(name, 0600, &owner);
	assert_int_equal(chown(owner.path, nobody->pw_uid, nobody->pw_gid), 0);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT, 0, &seg),
			 -EACCES);
	assert_non_null(strstr(v05_errmsg(), "uid"));
	assert_int_equal(v05__segment_attach(name, V05_ROLE_INSPECT,
					     V05_ATTACH_ANY_UID, &seg), 0);
	v05__segment_detach(&seg);
	v05__segment_detach(&owner);
	assert_int_equal(v05_segment_unlink(name), 0);
}

static void test_reclaim(void **state)
{
	struct v05_segment owner;
	char live[64], dead[64];
	pid_t pid;
	int st;

	(void)state;
	test_name(live, sizeof(live), "live");
	test_name(dead, sizeof(dead), "dead");
	create_small(live, 0600, &owner);
	assert_int_equal(v05_segment_reclaim(live, 0), -EBUSY);
	assert_non_null(strstr(v05_errmsg(), "alive"));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_segment s;
		struct v05_geometry g = test_geometry(1, 16, 1, 4);

		_exit(v05__segment_create(dead, &g, NULL, 0, 0600, &s) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(v05_segment_reclaim(dead, 0), 0);
	assert_int_equal(v05_segment_reclaim(dead, 0), -ENOENT);
	{
		char path[PATH_MAX];

		/* Reclaim removed the lanes' and the doorbell's files. */
		snprintf(path, sizeof(path), "%s/v05-%s", v05__shm_dir(), dead);
		assert_false(exists(path, ":side/lane.0"));
		assert_false(exists(path, ":side/bell"));
	}
	v05__segment_detach(&owner);
	assert_int_equal(v05_segment_unlink(live), 0);
}

static void test_geometry_rejected(void **state)
{
	struct v05_segment seg;
	struct v05_geometry g;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "geo");
	g = test_geometry(0, 64, 4, 16);
	assert_int_equal(v05__segment_create(name, &g, NULL, 0, 0600, &seg), -EDOM);
	g = test_geometry(2, 100, 4, 16);
	assert_int_equal(v05__segment_create(name, &g, NULL, 0, 0600, &seg), -EDOM);
	g = test_geometry(2, 64, 4, 16);
	g.table_capacity = 4; /* load would exceed 0.5 */
	assert_int_equal(v05__segment_create(name, &g, NULL, 0, 0600, &seg), -EDOM);
	g = test_geometry(2, 64, 4, 16);
	assert_int_equal(v05__segment_create(name, &g, NULL, 0, 01777, &seg),
			 -EINVAL);
	assert_int_equal(v05__segment_create("bad/name", &g, NULL, 0, 0600, &seg),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_create_attach),
		cmocka_unit_test(test_mode_configurable),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_files_checked),
		cmocka_unit_test(test_side_names),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_foreign_uid),
		cmocka_unit_test(test_reclaim),
		cmocka_unit_test(test_geometry_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
