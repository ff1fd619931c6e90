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
#include "testpoint.h"

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
	struct stat st;
	uint32_t uid = (uint32_t)geteuid();
	int ret, side, main_ret = 0;

	v05__clear_error();
	ret = v05__segment_path(name, path, sizeof(path));
	if (ret)
		return ret;
	/* The side directory goes if it is the caller's, or the same uid's
	 * as the segment file (root removing another user's segment):
	 * never a name another user planted next to the caller's. */
	if (!lstat(path, &st) && S_ISREG(st.st_mode)) {
		struct stat sd;
		char sp[PATH_MAX];

		if (!v05__side_path(path, sp, sizeof(sp)) && !lstat(sp, &sd) &&
		    sd.st_uid == st.st_uid)
			uid = (uint32_t)st.st_uid;
	}
	if (unlink(path))
		main_ret = -errno;
	if (main_ret && main_ret != -ENOENT)
		return v05__fail(main_ret, "unlink %s: %s", path,
				 v05__errstr(-main_ret));
	/* Whatever became of the segment file, its side directory goes too
	 * (a create killed half-way, or an `rm` of the file alone, leaves
	 * one). */
	side = v05__side_remove_as(path, uid);
	if (side < 0)
		return side;
	if (unlink_legacy(path) == 0 && main_ret && !side)
		return v05__fail(-ENOENT, "no segment %s: neither %s nor its side files exist",
				 name, path);
	return 0;
}

/*
 * The side directory at path:side, if it is the segment's (bound to it,
 * or none is known) and of uid: emptied through a descriptor, then its
 * name removed (a live segment's directory, never empty, cannot be the
 * one the name holds by then). 0 (also when there is none), or -errno.
 */
static int remove_side(const char *path, const struct v05_shm_control *ctl,
		       uint32_t uid)
{
	char side[PATH_MAX];
	struct stat st;
	int fd, ret = v05__side_path(path, side, sizeof(side));

	if (ret)
		return ret;
	fd = open(side, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 :
		       v05__fail(-errno, "open %s: %s", side, v05__errstr(errno));
	if (fstat(fd, &st) || st.st_uid != uid) {
		close(fd);
		return v05__fail(-EACCES,
				 "%s belongs to uid %u, the segment to uid %u: left alone (another user's name: pick another segment name, or have its owner remove it; root: v05ctl reclaim --any-uid)",
				 side, (unsigned)st.st_uid, (unsigned)uid);
	}
	if (ctl && !v05__side_bound(ctl, &st)) {
		/* Not this segment's: the takeover of a later one empties
		 * it; left for it (or for a reclaim of the leftover). */
		close(fd);
		return 0;
	}
	ret = v05__side_empty(fd, side);
	close(fd);
	if (!ret && rmdir(side) && errno != ENOENT)
		ret = v05__fail(-errno, "remove %s: %s", side, v05__errstr(errno));
	return ret;
}

int v05__segment_unlink_own(const struct v05_segment *seg)
{
	struct stat st;
	int ret;

	/* The owner word is still ours: no takeover, replace or reclaim
	 * changes the names meanwhile. The name only if it still holds
	 * this file (a v05_segment_unlink of someone else may have gone
	 * first, and another create then). */
	if (lstat(seg->path, &st) || (uint64_t)st.st_ino != seg->st_ino ||
	    (uint64_t)st.st_dev != seg->st_dev)
		return v05__fail(-ENOENT, "segment %s is no longer at %s: nothing removed",
				 seg->name, seg->path);
	ret = remove_side(seg->path, seg->ctl, seg->st_uid);
	if (unlink(seg->path) && !ret)
		ret = v05__fail(-errno, "unlink %s: %s", seg->path, v05__errstr(errno));
	unlink_legacy(seg->path);
	return ret;
}

/* The segment file is gone, its side directory is not: no process can
 * attach to what is left, whoever still maps it. Removed if it is the
 * caller's (or, root with V05_ATTACH_ANY_UID, anyone's), with the
 * temporaries of a dead replace of the name. 0, or -ENOENT when there
 * was nothing. */
static int reclaim_leftover(const char *name, const char *path, unsigned flags)
{
	char side[PATH_MAX];
	struct v05_settled settled = { 0, 0 };
	struct stat st;
	uint32_t uid = (uint32_t)geteuid();
	int ret = v05__side_path(path, side, sizeof(side));

	if (ret)
		return ret;
	if (!lstat(side, &st) && (flags & V05_ATTACH_ANY_UID) && uid == 0)
		uid = (uint32_t)st.st_uid;
	ret = v05__stage_settle(path, uid, v05__owner_self(), &settled);
	if (ret)
		return ret;
	if (lstat(side, &st)) {
		if (errno != ENOENT)
			return v05__fail(-errno, "stat %s: %s", side, v05__errstr(errno));
		if (settled.cleaned || unlink_legacy(path))
			return 0;
		return v05__fail(-ENOENT, "no segment %s: neither %s nor its side files exist",
				 name, path);
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
		return v05__fail(st.st_uid != uid ? -EACCES : -ENOTDIR,
				 "%s belongs to uid %u, not to uid %u, or is not a directory: left alone (another user's name: pick another segment name, or have its owner remove it; root: v05ctl reclaim --any-uid %s)",
				 side, (unsigned)st.st_uid, (unsigned)uid, name);
	ret = remove_side(path, NULL, uid);
	unlink_legacy(path);
	return ret;
}

V05_API int v05_segment_reclaim(const char *name, unsigned flags)
{
	struct v05_settled settled = { 0, 0 };
	struct v05_claim c;
	uint64_t owner, me;
	int ret;

	v05__clear_error();
	if (flags & ~V05_ATTACH_ANY_UID)
		return v05__fail(-EINVAL, "unknown reclaim flags 0x%x", flags);
	ret = v05__claim_open(name, flags, &c);
	if (ret == -ENOENT)
		return reclaim_leftover(name, c.path, flags);
	if (ret)
		return ret;
	/* Relaxed: a look, for the message; the claim decides. */
	owner = v05_load_relaxed(&c.ctl->owner);
	if (v05__owner_alive(owner)) {
		v05__claim_close(&c, false);
		return v05__fail(-EBUSY, "segment %s: owner pid %u is alive",
				 name, v05__owner_pid(owner));
	}
	v05__test_point("reclaim.checked");
	/* Acting on this file only, and only while no one else can: its
	 * owner word ours. An owner restarted since the look above took it
	 * over or replaced it (the old file's word is then the replacer's):
	 * left alone. */
	me = v05__owner_self();
	ret = me ? v05__claim_take(&c, me, V05_CLAIM_RECLAIM) : -EIO;
	if (ret) {
		char why[512];

		snprintf(why, sizeof(why), "%s",
			 me ? v05_errmsg() : "cannot read /proc/self/stat");
		v05__claim_close(&c, false);
		return v05__fail(-EBUSY, "reclaim %s: taken over or replaced since its owner was found dead (%s): left alone",
				 name, why);
	}
	v05__test_point("reclaim.claimed");
	if (!v05__claim_same_file(&c)) {
		/* Removed and made again under the name by a
		 * v05_segment_unlink and a create since the open: not ours. */
		v05__claim_close(&c, true);
		return v05__fail(-EBUSY, "segment %s changed (another file has the name now) while it was reclaimed: left alone",
				 name);
	}
	/* A dead replace's temporaries: whatever they hold goes too. */
	ret = v05__stage_settle(c.path, c.uid, me, &settled);
	/* The side directory, then the file: a reclaim killed in between
	 * leaves a segment no one owns without side files (its next owner
	 * makes them again, counted; its next reclaim removes it). */
	if (!ret)
		ret = remove_side(c.path, c.ctl, c.uid);
	v05__test_point("reclaim.side");
	if (!ret && unlink(c.path))
		ret = v05__fail(-errno, "unlink %s: %s", c.path, v05__errstr(errno));
	if (!ret)
		unlink_legacy(c.path);
	/* On a failure the segment stays claimed by this (live, then dead)
	 * process: a later reclaim or takeover goes on from there. */
	v05__claim_close(&c, false);
	return ret;
}
