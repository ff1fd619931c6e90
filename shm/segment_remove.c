/* SPDX-License-Identifier: MIT */
/* Remove a segment and its side directory, or whatever is left of them;
 * reclaim a dead owner's. */
#include "segment.h"
#include "segment_parts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "error.h"
#include "proc.h"

void v05__segment_remove(const struct v05_segment *seg)
{
	char keep[512];

	/* The caller's message stays: the removal is its cleanup. */
	snprintf(keep, sizeof(keep), "%s", v05_errmsg());
	unlink(seg->path);
	v05__side_remove(seg->path);
	v05__fail(0, "%s", keep);
}

/*
 * Side files of segment ABI 7 and older lay next to the segment file
 * (v05-NAME:lane.<i>, v05-NAME:bound.<i>, v05-NAME:bell): removed too,
 * where they are this uid's, so a name that a run of an older library
 * left behind is clean again. Another user's are left alone.
 */
static bool legacy_name(const char *entry, const char *base)
{
	size_t n = strlen(base);
	const char *t = entry + n;

	if (strncmp(entry, base, n) || *t != ':')
		return false;
	t++;
	if (!strcmp(t, "bell"))
		return true;
	if (!strncmp(t, "lane.", 5))
		t += 5;
	else if (!strncmp(t, "bound.", 6))
		t += 6;
	else
		return false;
	if (!*t)
		return false;
	for (; *t; t++)
		if (*t < '0' || *t > '9')
			return false;
	return true;
}

static int unlink_legacy(const char *seg_path)
{
	const char *slash = strrchr(seg_path, '/');
	char dir[PATH_MAX];
	struct dirent *e;
	int n = 0, dfd;
	DIR *d;

	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - seg_path), seg_path);
	dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	while ((e = readdir(d))) {
		struct stat st;

		if (!legacy_name(e->d_name, slash + 1))
			continue;
		if (!fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    st.st_uid == geteuid() &&
		    !unlinkat(dirfd(d), e->d_name, 0))
			n++;
	}
	closedir(d);
	return n;
}

V05_API int v05_segment_unlink(const char *name)
{
	char path[PATH_MAX];
	int ret, side, main_ret = 0;

	v05__clear_error();
	ret = v05__segment_path(name, path, sizeof(path));
	if (ret)
		return ret;
	if (unlink(path))
		main_ret = -errno;
	if (main_ret && main_ret != -ENOENT)
		return v05__fail(main_ret, "unlink %s: %s", path,
				 v05__errstr(-main_ret));
	/* Whatever became of the segment file, its side directory goes too
	 * (a create killed half-way, or an `rm` of the file alone, leaves
	 * one). */
	side = v05__side_remove(path);
	if (side < 0)
		return side;
	if (unlink_legacy(path) == 0 && main_ret && !side)
		return v05__fail(-ENOENT, "no segment %s: neither %s nor its side files exist",
				 name, path);
	return 0;
}

/*
 * Is segment path's file gone while its side directory is left (a leftover,
 * nothing anyone can attach to any more)? 1, 0, or a negative errno.
 */
static int leftover(const char *path)
{
	char side[PATH_MAX];
	struct stat st;
	int ret;

	if (!lstat(path, &st))
		return 0;
	if (errno != ENOENT)
		return v05__fail(-errno, "stat %s: %s", path, v05__errstr(errno));
	ret = v05__side_path(path, side, sizeof(side));
	if (ret)
		return ret;
	return lstat(side, &st) == 0;
}

V05_API int v05_segment_reclaim(const char *name, unsigned flags)
{
	char path[PATH_MAX];
	struct v05_segment seg;
	uint64_t owner;
	int ret;

	v05__clear_error();
	ret = v05__segment_path(name, path, sizeof(path));
	if (ret)
		return ret;
	/* The segment file is gone, its side files are not: no process can
	 * attach to what is left, whoever still maps it. */
	ret = leftover(path);
	if (ret < 0)
		return ret;
	if (ret) {
		ret = v05__side_remove(path);
		return ret < 0 ? ret : 0;
	}
	ret = v05__segment_attach(name, V05_ROLE_INSPECT, flags, &seg);
	if (ret)
		return ret;
	/* Relaxed: a snapshot; a live owner keeps its word for its lifetime. */
	owner = v05_load_relaxed(&seg.ctl->owner);
	v05__segment_detach(&seg);
	if (v05__owner_alive(owner))
		return v05__fail(-EBUSY, "segment %s: owner pid %u is alive",
				 name, v05__owner_pid(owner));
	return v05_segment_unlink(name);
}
