/* SPDX-License-Identifier: MIT */
/*
 * A segment's side files (each lane's, the doorbell's, the broker's
 * socket), all in its side directory v05-NAME:side: made, checked, opened,
 * mapped over the view, removed. Only the segment's uid can write that
 * directory, so no other user can create, replace or hold a name in it;
 * everything in it is reached relative to a descriptor of the directory
 * opened without following a link, never by a path another user could
 * redirect.
 */
#include "segment.h"
#include "segment_parts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

int v05__seg_file_check(int fd, const char *what, uint32_t uid, uint64_t size)
{
	struct stat st;

	if (fstat(fd, &st))
		return v05__fail(-errno, "fstat %s: %s", what, v05__errstr(errno));
	if (!S_ISREG(st.st_mode))
		return v05__fail(-EBADMSG, "%s is not a regular file", what);
	if (st.st_uid != uid)
		return v05__fail(-EACCES, "%s belongs to uid %u, the segment to uid %u",
				 what, (unsigned)st.st_uid, (unsigned)uid);
	if (st.st_mode & 0077)
		return v05__fail(-EACCES, "%s is open to other users (mode %o)",
				 what, (unsigned)(st.st_mode & 0777));
	if ((uint64_t)st.st_size != size)
		return v05__fail(-EMSGSIZE, "%s has %lld bytes, the segment says %llu",
				 what, (long long)st.st_size,
				 (unsigned long long)size);
	return 0;
}

int v05__side_path(const char *seg_path, char *path, size_t len)
{
	if ((size_t)snprintf(path, len, "%s" V05_SIDE_SUFFIX, seg_path) >= len)
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	return 0;
}

/* Is st a side directory uid may trust: a directory of uid that no other
 * user can write? 0, or a negative errno with a message naming path. */
static int side_dir_check(const struct stat *st, const char *path, uint32_t uid)
{
	if (!S_ISDIR(st->st_mode))
		return v05__fail(-ENOTDIR,
				 "%s is not a directory (uid %u's; not made by v05): remove it (as its owner or root) or pick another name",
				 path, (unsigned)st->st_uid);
	if (st->st_uid != uid)
		return v05__fail(-EACCES,
				 "%s belongs to uid %u, the segment to uid %u (not made by v05 for this segment): remove it (as its owner or root) or pick another name",
				 path, (unsigned)st->st_uid, (unsigned)uid);
	if (st->st_mode & 0022)
		return v05__fail(-EACCES,
				 "%s lets other users write it (mode %o): v05 makes it 0700 or 0711",
				 path, (unsigned)(st->st_mode & 0777));
	return 0;
}

int v05__side_dir_open(const char *seg_path, uint32_t uid, bool rw)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, ret = v05__side_path(seg_path, path, sizeof(path));

	if (ret)
		return ret;
	/* O_PATH needs no right on the directory itself (a producer of
	 * another uid may only search it); with O_NOFOLLOW it opens a link
	 * as a link, which the check below refuses. */
	fd = open(path, (rw ? O_RDONLY | O_DIRECTORY : O_PATH) | O_NOFOLLOW |
			O_CLOEXEC);
	if (fd < 0) {
		if (errno == ELOOP || errno == ENOTDIR) {
			if (lstat(path, &st) == 0)
				return side_dir_check(&st, path, uid);
		}
		return v05__fail(-errno, "open %s: %s", path, v05__errstr(errno));
	}
	if (fstat(fd, &st)) {
		ret = v05__fail(-errno, "fstat %s: %s", path, v05__errstr(errno));
		close(fd);
		return ret;
	}
	ret = side_dir_check(&st, path, uid);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

int v05__side_make(const char *seg_path)
{
	char path[PATH_MAX];
	struct stat st;
	int ret = v05__side_path(seg_path, path, sizeof(path));

	if (ret)
		return ret;
	if (mkdir(path, 0700) == 0)
		return v05__side_dir_open(seg_path, (uint32_t)geteuid(), true);
	ret = -errno;
	if (ret != -EEXIST)
		return v05__fail(ret, "create %s: %s", path, v05__errstr(-ret));
	/* A name nobody but its maker controls: whoever planted it, or a
	 * segment of this name whose file alone was removed. */
	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid() && !(st.st_mode & 0022)) {
		const char *base = strrchr(seg_path, '/');

		base = base ? base + 1 : seg_path;
		if (!strncmp(base, "v05-", 4))
			base += 4;
		return v05__fail(-EEXIST,
				 "%s is left over from a removed segment of this name (its file is gone, its side files are not): v05ctl reclaim %s, or v05_segment_reclaim / v05.reclaim, removes them",
				 path, base);
	}
	return v05__fail(-EEXIST,
			 "%s exists and is not this segment's side directory (uid %u's %s, not made by v05 for uid %u): remove it (as its owner or root) or pick another name",
			 path, (unsigned)st.st_uid,
			 S_ISDIR(st.st_mode) ? "directory" :
			 S_ISLNK(st.st_mode) ? "symbolic link" : "file",
			 (unsigned)geteuid());
}

/* A side file's name in the directory, and its path for messages. */
static int side_names(const struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t i, char name[32], char path[PATH_MAX])
{
	v05__side_name(kind, i, name, 32);
	return v05__segment_file(seg, kind, i, path, PATH_MAX);
}

int v05__lane_file_open(const struct v05_segment *seg, enum v05_seg_file kind,
			uint32_t i, int oflags)
{
	char name[32], path[PATH_MAX];
	int fd, ret = side_names(seg, kind, i, name, path);

	if (ret)
		return ret;
	fd = openat(seg->dir_fd, name, oflags | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return v05__fail(-errno, "open %s: %s", path, v05__errstr(errno));
	ret = v05__seg_file_check(fd, path, seg->st_uid,
				  kind == V05_FILE_BELL ?
				  seg->hdr.regions[V05_REGION_DOORBELL].size :
				  v05__lane_stride(seg->hdr.geo.lane_capacity));
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Reserve [off, off + len) of fd's file (its size already set): on tmpfs a
 * later page fault past the filesystem's size is a SIGBUS in the engine;
 * here it is ENOSPC. Where the filesystem cannot reserve, the size set
 * with ftruncate is all there is, as before.
 */
int v05__file_reserve(int fd, uint64_t off, uint64_t len, const char *path)
{
	int ret = posix_fallocate(fd, (off_t)off, (off_t)len);

	if (ret == EOPNOTSUPP || ret == EINVAL)
		ret = 0;
	if (ret)
		return v05__fail(-ret, "reserve %llu bytes for %s: %s",
				 (unsigned long long)len, path, v05__errstr(ret));
	return 0;
}

int v05__file_create(const struct v05_segment *seg, enum v05_seg_file kind,
		     uint32_t i, uint64_t size)
{
	char name[32], path[PATH_MAX];
	int fd, ret = side_names(seg, kind, i, name, path);

	if (ret)
		return ret;
	fd = openat(seg->dir_fd, name,
		    O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return v05__fail(-errno, "create %s: %s", path, v05__errstr(errno));
	/* The umask may have narrowed 0600: owner read-write, no one else. */
	if (fchmod(fd, 0600) || ftruncate(fd, (off_t)size))
		ret = v05__fail(-errno, "size %s: %s", path, v05__errstr(errno));
	else
		ret = v05__file_reserve(fd, 0, size, path);
	if (ret) {
		unlinkat(seg->dir_fd, name, 0);
		close(fd);
		return ret;
	}
	return fd;
}

int v05__file_replace(struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t i, uint64_t size)
{
	char name[32];

	v05__side_name(kind, i, name, sizeof(name));
	/* Only this uid can have put anything there: a file, a link, a
	 * socket, a directory (left alone: then create fails). */
	if (unlinkat(seg->dir_fd, name, 0) && errno != ENOENT && errno != EISDIR)
		return v05__fail(-errno, "remove %s" V05_SIDE_SUFFIX "/%s: %s",
				 seg->path, name, v05__errstr(errno));
	seg->files_replaced++;
	return v05__file_create(seg, kind, i, size);
}

/* Map fd's file over [off, off + len) of the segment's view, in place. */
int v05__file_overlay(struct v05_segment *seg, uint64_t off, uint64_t len, int fd,
		   int prot, const char *what)
{
	if (mmap(seg->base + off, len, prot, MAP_SHARED | MAP_FIXED, fd, 0) ==
	    MAP_FAILED)
		return v05__fail(-errno, "mmap %s: %s", what, v05__errstr(errno));
	return 0;
}

void v05__files_close(struct v05_segment *seg)
{
	/* Grants the consumer never mapped. */
	for (uint32_t i = 0; i < V05_LANES_MAX; i++) {
		if (seg->grant_post[i]) {
			close(seg->grant_post[i]->fd);
			free(seg->grant_post[i]);
		}
		seg->grant_post[i] = NULL;
	}
	seg->grants_pending = 0;
	seg->grants_ended = 0;
	for (uint32_t i = 0; i < seg->nlane_fd; i++)
		close(seg->lane_fd[i]);
	seg->nlane_fd = 0;
	if (seg->bell_fd_open)
		close(seg->bell_fd);
	seg->bell_fd_open = false;
	seg->bell_fd = -1;
	if (seg->dir_fd >= 0)
		close(seg->dir_fd);
	seg->dir_fd = -1;
}

/*
 * Every entry of the side directory on dfd (this uid's: only it could make
 * them), then the directory. Entries are removed by name relative to dfd,
 * never followed; a subdirectory (none of ours) is left, and then so is
 * the directory, with an error.
 */
static int side_clear(int dfd, const char *path)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	int ret = 0;

	if (!d) {
		ret = v05__fail(-errno, "read %s: %s", path, v05__errstr(errno));
		close(dfd);
		return ret;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) && errno != ENOENT && !ret)
			ret = v05__fail(-errno, "remove %s/%s: %s", path,
					e->d_name, v05__errstr(errno));
	}
	closedir(d);
	if (!ret && rmdir(path) && errno != ENOENT)
		ret = v05__fail(-errno, "remove %s: %s", path, v05__errstr(errno));
	return ret;
}

int v05__side_empty(int dir_fd, const char *path)
{
	int fd = dup(dir_fd), ret = 0;
	struct dirent *e;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		ret = v05__fail(-errno, "read %s: %s", path, v05__errstr(errno));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	rewinddir(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		/* A directory is none of ours: left, and then the file of
		 * that name cannot be made (the takeover says which). */
		if (unlinkat(dirfd(d), e->d_name, 0) && errno != ENOENT &&
		    errno != EISDIR && !ret)
			ret = v05__fail(-errno, "remove %s/%s: %s", path,
					e->d_name, v05__errstr(errno));
	}
	closedir(d);
	return ret;
}

int v05__side_remove_as(const char *seg_path, uint32_t uid)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, ret = v05__side_path(seg_path, path, sizeof(path));

	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return v05__fail(-errno, "open %s: %s", path, v05__errstr(errno));
	}
	/* Never another user's name (one it planted), root or not: only
	 * root's v05ctl reclaim --any-uid names that user. */
	if (fstat(fd, &st) || st.st_uid != uid) {
		close(fd);
		return v05__fail(-EACCES,
				 "%s belongs to uid %u, not to uid %u: left alone (another user's name: pick another segment name, or have its owner remove it; root: v05ctl reclaim --any-uid)",
				 path, (unsigned)st.st_uid, (unsigned)uid);
	}
	ret = side_clear(fd, path);
	return ret ? ret : 1;
}

int v05__side_remove(const char *seg_path)
{
	return v05__side_remove_as(seg_path, (uint32_t)geteuid());
}
