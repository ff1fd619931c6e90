/* SPDX-License-Identifier: MIT */
/*
 * The replace's temporary place (v05_plugin_replace, plugin/replace.c),
 * and what the next process does with one a killed replace left.
 *
 * A replace builds the new segment whole in a directory of its own,
 * v05-NAME:replace.<its owner word>.<64 random bits> (0700: nothing in it
 * is another user's, and no other user can guess the name to plant it
 * first; one that is planted is skipped, never removed), as the files
 * seg and seg:side in it. Then it exchanges the side directories (the
 * temporary's seg:side with v05-NAME:side), then the segment files
 * (seg with v05-NAME): that second exchange is the commit. The old
 * segment, now in the temporary directory, is removed with it.
 *
 * Killed at any point, it leaves one of three states, told apart by the
 * bindings (each segment file's control block names its own side
 * directory, segment_claim.c):
 *   before the first exchange: the name holds the old segment whole; the
 *     temporary holds a new one, maybe half made: removed;
 *   between the exchanges: the name holds the old file with the new
 *     directory, the temporary the new file with the old directory: the
 *     directories are exchanged back (the old segment whole again, its
 *     lanes' records included), then the temporary removed;
 *   after the commit: the name holds the new segment whole; the
 *     temporary the old one: removed.
 * The next takeover, replace, reclaim or create of the name does this
 * (v05__stage_settle), having claimed the name's segment first (so no
 * other does the same at once), for every temporary of a replacer that is
 * dead; it first renames the temporary to one of its own, so two of them
 * never settle the same one.
 */
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "proc.h"
#include "testpoint.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define STAGE_TAG ":replace."

static uint64_t random64(void)
{
	uint64_t r;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = v05__now_ns() ^ ((uint64_t)getpid() << 32);
	return r;
}

/* seg_path's directory and base name ("v05-NAME"). */
static void split(const char *seg_path, char *dir, size_t len, const char **base)
{
	const char *slash = strrchr(seg_path, '/');

	*base = slash ? slash + 1 : seg_path;
	if (!slash)
		snprintf(dir, len, ".");
	else if (slash == seg_path)
		snprintf(dir, len, "/");
	else
		snprintf(dir, len, "%.*s", (int)(slash - seg_path), seg_path);
}

int v05__stage_make(const char *seg_path, uint64_t me, char *stage, size_t len)
{
	for (int attempt = 0; attempt < 16; attempt++) {
		int n = snprintf(stage, len, "%s" STAGE_TAG "%016" PRIx64 ".%016" PRIx64,
				 seg_path, me, random64());

		if (n < 0 || (size_t)n >= len)
			return v05__fail(-ENAMETOOLONG, "segment path too long");
		if (mkdir(stage, 0700) == 0) {
			/* The umask may have narrowed it. */
			if (chmod(stage, 0700)) {
				int ret = -errno;

				rmdir(stage);
				return v05__fail(ret, "chmod %s: %s", stage,
						 v05__errstr(-ret));
			}
			return 0;
		}
		/* Taken: 64 random bits someone planted first, or our own
		 * earlier attempt; another name. */
		if (errno != EEXIST)
			return v05__fail(-errno, "create %s: %s", stage,
					 v05__errstr(errno));
	}
	return v05__fail(-EEXIST, "no free name for the replace's temporary next to %s after 16 random tries",
			 seg_path);
}

/* Every entry of the directory on dfd, subdirectories depth levels deep
 * with theirs (a temporary holds a segment file and its side directory);
 * dfd is closed. */
static int clear(int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	int ret = 0;

	if (!d) {
		ret = -errno;
		close(dfd);
		return ret;
	}
	while ((e = readdir(d))) {
		int fd, flags = 0;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (depth > 0) {
			fd = openat(dirfd(d), e->d_name,
				    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0) {
				int r = clear(fd, depth - 1);

				if (r && !ret)
					ret = r;
				flags = AT_REMOVEDIR;
			}
		}
		if (unlinkat(dirfd(d), e->d_name, flags) && errno != ENOENT && !ret)
			ret = -errno;
	}
	closedir(d);
	return ret;
}

int v05__stage_remove(const char *stage, const char *point)
{
	char sub[PATH_MAX];
	int fd, ret;

	/* The segment file first: without it what is left is nothing anyone
	 * can attach to. */
	if ((size_t)snprintf(sub, sizeof(sub), "%s/seg", stage) >= sizeof(sub))
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	if (unlink(sub) && errno != ENOENT)
		return v05__fail(-errno, "remove %s: %s", sub, v05__errstr(errno));
	if (point)
		v05__test_point(point);
	fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 :
		       v05__fail(-errno, "open %s: %s", stage, v05__errstr(errno));
	ret = clear(fd, 1);
	if (!ret && rmdir(stage) && errno != ENOENT)
		ret = -errno;
	if (ret)
		return v05__fail(ret, "remove %s: %s", stage, v05__errstr(-ret));
	return 0;
}

int v05__stage_swap_sides(const char *seg_path, const char *stage_seg,
			  bool back, bool *had_side)
{
	char side[PATH_MAX], sside[PATH_MAX];
	struct stat st;
	int ret;

	if (v05__side_path(seg_path, side, sizeof(side)) ||
	    v05__side_path(stage_seg, sside, sizeof(sside)))
		return -ENAMETOOLONG;
	if (!back)
		*had_side = lstat(side, &st) == 0 || errno != ENOENT;
	/* The old segment had no side directory left: the new one's takes
	 * the name (and gives it back the same way). */
	if (!*had_side)
		ret = back ? renameat2(AT_FDCWD, side, AT_FDCWD, sside, RENAME_NOREPLACE) :
			     renameat2(AT_FDCWD, sside, AT_FDCWD, side, RENAME_NOREPLACE);
	else
		ret = renameat2(AT_FDCWD, sside, AT_FDCWD, side, RENAME_EXCHANGE);
	if (ret)
		return v05__fail(-errno, "exchange %s with %s: %s", side, sside,
				 v05__errstr(errno));
	return 0;
}

int v05__stage_commit(const char *seg_path, const char *stage_seg)
{
	if (renameat2(AT_FDCWD, stage_seg, AT_FDCWD, seg_path, RENAME_EXCHANGE))
		return v05__fail(-errno, "exchange %s with %s: %s", seg_path,
				 stage_seg, v05__errstr(errno));
	return 0;
}

/* ---- after a replace killed: settle -------------------------------------- */

/* The side directory segment file `name` (in dfd) says is its own: 0 and
 * its identity, or -1 (no segment file there, not yet whole, or one that
 * says nothing). */
static int binding(int dfd, const char *name, uint64_t *dev, uint64_t *ino)
{
	struct v05_shm_control ctl;
	struct v05_shm_header h;
	struct stat st;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int ret = -1;

	if (fd < 0)
		return -1;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) &&
	    pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    !v05__header_validate(&h, (uint64_t)st.st_size) &&
	    pread(fd, &ctl, sizeof(ctl), (off_t)h.regions[V05_REGION_CONTROL].offset) ==
		    (ssize_t)sizeof(ctl) && ctl.side_ino) {
		*dev = ctl.side_dev;
		*ino = ctl.side_ino;
		ret = 0;
	}
	close(fd);
	return ret;
}

/* Is the directory `name` in dfd the one (dev, ino)? */
static bool is_dir(int dfd, const char *name, uint64_t dev, uint64_t ino)
{
	struct stat st;

	return !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) &&
	       S_ISDIR(st.st_mode) && (uint64_t)st.st_dev == dev &&
	       (uint64_t)st.st_ino == ino;
}

static bool exists(int dfd, const char *name)
{
	struct stat st;

	return !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW);
}

/* The temporary `stage` (in dfd, the directory dir, claimed: ours) of a
 * dead replace of seg_path (base name `base`): its directories exchanged back if the
 * replace died between its exchanges, then removed. */
static int settle_one(int dfd, const char *dir, const char *base,
		      const char *stage, const char *seg_path,
		      struct v05_settled *out)
{
	char side[PATH_MAX], path[PATH_MAX];
	uint64_t dev, ino;
	bool back;
	int sfd;

	if ((size_t)snprintf(side, sizeof(side), "%s" V05_SIDE_SUFFIX, base) >=
		    sizeof(side) ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, stage) >= sizeof(path))
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	sfd = openat(dfd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		return v05__fail(-errno, "open %s: %s", path, v05__errstr(errno));
	/* Exchanged: the name's file is bound to the temporary's directory,
	 * or the temporary's file to the name's directory. */
	back = (!binding(dfd, base, &dev, &ino) &&
		is_dir(sfd, "seg" V05_SIDE_SUFFIX, dev, ino)) ||
	       (!binding(sfd, "seg", &dev, &ino) && is_dir(dfd, side, dev, ino));
	if (back) {
		bool at_name = exists(dfd, side), in_stage = exists(sfd, "seg" V05_SIDE_SUFFIX);
		int r;

		if (at_name && in_stage)
			r = renameat2(sfd, "seg" V05_SIDE_SUFFIX, dfd, side,
				      RENAME_EXCHANGE);
		else if (in_stage)
			r = renameat2(sfd, "seg" V05_SIDE_SUFFIX, dfd, side,
				      RENAME_NOREPLACE);
		else
			r = renameat2(dfd, side, sfd, "seg" V05_SIDE_SUFFIX,
				      RENAME_NOREPLACE);
		if (r) {
			r = v05__fail(-errno, "exchange back %s's side directory with %s's: %s",
				      seg_path, path, v05__errstr(errno));
			close(sfd);
			return r;
		}
		out->undone++;
	}
	close(sfd);
	v05__test_point("settle.undone");
	out->cleaned++;
	return v05__stage_remove(path, NULL);
}

/* "v05-NAME:replace.<16 hex>.<16 hex>": the replacer's owner word. */
static bool stage_word(const char *entry, size_t pre, uint64_t *word)
{
	char *end;

	if (strlen(entry) != pre + 33 || entry[pre + 16] != '.')
		return false;
	*word = strtoull(entry + pre, &end, 16);
	return end == entry + pre + 16;
}

int v05__stage_settle(const char *seg_path, uint32_t uid, uint64_t me,
		      struct v05_settled *out)
{
	char dir[PATH_MAX], pre[PATH_MAX], mine[PATH_MAX];
	const char *base;
	struct dirent *e;
	int ret = 0;
	size_t npre;
	DIR *d;

	split(seg_path, dir, sizeof(dir), &base);
	npre = (size_t)snprintf(pre, sizeof(pre), "%s" STAGE_TAG, base);
	d = opendir(dir);
	if (!d)
		return v05__fail(-errno, "read %s: %s", dir, v05__errstr(errno));
	while ((e = readdir(d))) {
		uint64_t word;
		struct stat st;

		if (strncmp(e->d_name, pre, npre) || !stage_word(e->d_name, npre, &word))
			continue;
		/* Only a directory the replace could have made: the
		 * segment's uid's, open to no one else. Anything else is
		 * someone else's name: never touched. */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 0077))
			continue;
		/* A replace in progress (or this process's own). */
		if (word == me || v05__owner_alive(word))
			continue;
		/* Ours from here: renamed to a name of this process's, so no
		 * other settles it at once, and one killed while settling
		 * leaves it to the next. */
		if ((size_t)snprintf(mine, sizeof(mine), "%s%016" PRIx64 ".%016" PRIx64,
				     pre, me, random64()) >= sizeof(mine))
			continue;
		if (renameat2(dirfd(d), e->d_name, dirfd(d), mine, RENAME_NOREPLACE))
			continue; /* another took it first */
		{
			int r = settle_one(dirfd(d), dir, base, mine, seg_path, out);

			if (r && !ret)
				ret = r;
		}
	}
	closedir(d);
	return ret;
}
