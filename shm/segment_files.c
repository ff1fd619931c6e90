/* SPDX-License-Identifier: MIT */
/*
 * A segment's side files (each lane's, the doorbell's): check, open, bind,
 * create with their memory reserved, map over the view, close.
 */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

int v05__lane_file_open(const struct v05_segment *seg, enum v05_seg_file kind,
			uint32_t i, int oflags)
{
	char path[PATH_MAX];
	int fd, ret = v05__segment_file(seg, kind, i, path, sizeof(path));

	if (ret)
		return ret;
	fd = open(path, oflags | O_CLOEXEC | O_NOFOLLOW);
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

int v05__lane_file_bind(const struct v05_segment *seg, uint32_t i)
{
	char from[PATH_MAX], to[PATH_MAX];
	int ret = v05__segment_file(seg, V05_FILE_LANE, i, from, sizeof(from));

	if (!ret)
		ret = v05__segment_file(seg, V05_FILE_BOUND, i, to, sizeof(to));
	if (ret)
		return ret;
	if (rename(from, to))
		return v05__fail(-errno, "rename %s: %s", from, v05__errstr(errno));
	return 0;
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

/* Create a lane's or the doorbell's file: mode 0600 exactly, size bytes
 * reserved. Returns the descriptor or a negative errno (nothing left). */
int v05__file_create(const char *path, uint64_t size)
{
	int ret, fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			   0600);

	if (fd < 0)
		return v05__fail(-errno, "create %s: %s", path, v05__errstr(errno));
	/* The umask may have narrowed 0600: owner read-write, no one else. */
	if (fchmod(fd, 0600) || ftruncate(fd, (off_t)size))
		ret = v05__fail(-errno, "size %s: %s", path, v05__errstr(errno));
	else
		ret = v05__file_reserve(fd, 0, size, path);
	if (ret) {
		unlink(path);
		close(fd);
		return ret;
	}
	return fd;
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
	for (uint32_t i = 0; i < seg->nlane_fd; i++)
		close(seg->lane_fd[i]);
	seg->nlane_fd = 0;
	if (seg->bell_fd_open)
		close(seg->bell_fd);
	seg->bell_fd_open = false;
	seg->bell_fd = -1;
}
