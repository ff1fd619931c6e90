/* SPDX-License-Identifier: MIT */
/* Remove a segment and its side files; reclaim a dead owner's. */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "error.h"
#include "proc.h"

/*
 * How many lanes the segment file at seg_path says it has: from a header
 * that validates, else V05_LANES_MAX (every name a segment can have).
 */
static uint32_t lanes_of(const char *seg_path)
{
	struct v05_shm_header h;
	struct stat st;
	uint32_t n = V05_LANES_MAX;
	int fd = open(seg_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return n;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) &&
	    pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    h.magic == V05_SHM_MAGIC && h.abi_version == V05_SHM_ABI &&
	    h.checksum == v05__header_checksum(&h) &&
	    h.geo.lane_count <= V05_LANES_MAX)
		n = h.geo.lane_count;
	close(fd);
	return n;
}

/* Remove every file a segment can have besides its own: each lane's under
 * either name, and the doorbell's, for the lanes its header names (all
 * there can be where it names none). Missing ones are no error. */
static void unlink_lanes(const char *seg_path, uint32_t lanes)
{
	char path[PATH_MAX];

	for (uint32_t i = 0; i < lanes; i++) {
		if (!v05__segment_file_path(seg_path, V05_FILE_LANE, i, path, sizeof(path)))
			unlink(path);
		if (!v05__segment_file_path(seg_path, V05_FILE_BOUND, i, path, sizeof(path)))
			unlink(path);
	}
	if (!v05__segment_file_path(seg_path, V05_FILE_BELL, 0, path, sizeof(path)))
		unlink(path);
}

void v05__segment_remove(const struct v05_segment *seg)
{
	unlink(seg->path);
	unlink_lanes(seg->path, seg->hdr.geo.lane_count ? seg->hdr.geo.lane_count :
							   V05_LANES_MAX);
}

V05_API int v05_segment_unlink(const char *name)
{
	char path[PATH_MAX];
	uint32_t lanes;
	int ret;

	v05__clear_error();
	ret = v05__segment_path(name, path, sizeof(path));
	if (ret)
		return ret;
	lanes = lanes_of(path);
	ret = unlink(path) ? v05__fail(-errno, "unlink %s: %s", path,
				       v05__errstr(errno)) : 0;
	/* Whatever became of the segment file, its lanes' and doorbell's
	 * files go too (a create killed half-way leaves some). */
	unlink_lanes(path, lanes);
	return ret;
}

V05_API int v05_segment_reclaim(const char *name, unsigned flags)
{
	struct v05_segment seg;
	uint64_t owner;
	int ret;

	v05__clear_error();
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
