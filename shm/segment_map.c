/* SPDX-License-Identifier: MIT */
/*
 * A validated segment's view for a role: each region opened up as the role
 * needs it (the rest PROT_NONE and NULL), the side files mapped over their
 * holes, or, for a producer, the doorbell's file alone.
 */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "error.h"

void v05__segment_set_regions(struct v05_segment *seg)
{
	for (int i = 0; i < V05_REGION_COUNT; i++)
		seg->region[i] = seg->base + seg->hdr.regions[i].offset;
	seg->ctl = V05_AT(struct v05_shm_control, seg->region[V05_REGION_CONTROL], 0);
	seg->state = V05_AT(struct v05_shm_state, seg->region[V05_REGION_STATE], 0);
	seg->bell = V05_AT(struct v05_shm_doorbell, seg->region[V05_REGION_DOORBELL], 0);
	seg->lane_own = V05_AT(struct v05_lane_own,
			       seg->region[V05_REGION_LANE_STATS], 0);
}

static int protect(struct v05_segment *seg, int region, int prot)
{
	const struct v05_region *r = &seg->hdr.regions[region];

	if (mprotect(seg->base + r->offset, r->size, prot))
		return v05__fail(-errno, "mprotect of region %s: %s",
				 v05__region_name(region), v05__errstr(errno));
	return 0;
}

#define RO PROT_READ
#define RW (PROT_READ | PROT_WRITE)
/* Per-role protections of the segment file's pages; unmapped regions stay
 * PROT_NONE and their pointer NULL, so a stray use faults in the user's
 * process at once. The lanes and the doorbell are holes in the segment
 * file: map_files() maps their own files there instead. */
static const int role_prot[][V05_REGION_COUNT] = {
	[V05_ROLE_OWNER] = { RW, 0, RW, RW, RW, RW, RW, RW, RW, 0, RW },
	/* A producer maps no whole view (attach_producer below). */
	[V05_ROLE_PRODUCER] = { 0 },
	[V05_ROLE_READER] = { [V05_REGION_CONTROL] = RO, [V05_REGION_STATE] = RO,
			      [V05_REGION_ARENA] = RO,
			      [V05_REGION_COMPLETION] = RW,
			      [V05_REGION_RELEASE] = RW },
	[V05_ROLE_INSPECT] = { [V05_REGION_CONTROL] = RO,
			       [V05_REGION_TABLE] = RO,
			       [V05_REGION_COMPLETION] = RO,
			       [V05_REGION_RELEASE] = RO,
			       [V05_REGION_SUPPORT] = RO,
			       [V05_REGION_BATCHES] = RO,
			       [V05_REGION_STATE] = RO,
			       [V05_REGION_LANE_STATS] = RO },
};

int v05__segment_map_role(struct v05_segment *seg)
{
	const int *prot = role_prot[seg->role];
	int ret;

	v05__segment_set_regions(seg);
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		if (!prot[i]) {
			seg->region[i] = NULL;
			continue;
		}
		ret = protect(seg, i, prot[i]);
		if (ret)
			return ret;
	}
	if (!prot[V05_REGION_CONTROL])
		seg->ctl = NULL;
	if (!prot[V05_REGION_STATE])
		seg->state = NULL;
	seg->bell = NULL; /* map_files */
	if (!prot[V05_REGION_LANE_STATS])
		seg->lane_own = NULL;
	return 0;
}

/*
 * Open a side file for the owner: a takeover must not fail on what another
 * process did to a side file (only the segment's uid can reach them: its
 * own processes, or root), so a file missing, a link, of another type,
 * mode or size is made again (its lane empty, at the head the owner
 * trusts; counted in files_replaced). What was in it is lost: only a
 * process of the segment's uid can have broken it.
 */
static int owner_file(struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t i, uint64_t size)
{
	int fd = v05__lane_file_open(seg, kind, i, O_RDWR);

	if (fd >= 0)
		return fd;
	if (fd != -ENOENT && fd != -ELOOP && fd != -EBADMSG && fd != -EACCES &&
	    fd != -EMSGSIZE && fd != -ENXIO && fd != -EISDIR)
		return fd;
	fd = v05__file_replace(seg, kind, i, size);
	if (fd >= 0 && kind == V05_FILE_LANE) {
		/* An empty lane resuming where the owner's head says. The
		 * file is new: nothing else maps it yet. */
		struct v05_ring_hdr *r = mmap(NULL, size, PROT_READ | PROT_WRITE,
					      MAP_SHARED, fd, 0);
		uint32_t head = v05_load_relaxed(&seg->lane_own[i].head);

		if (r == MAP_FAILED) {
			close(fd);
			return v05__fail(-errno, "mmap a new lane file: %s",
					 v05__errstr(errno));
		}
		r = V05_AT(struct v05_ring_hdr, r, v05__lane_skew(i));
		r->tail = head;
		r->head = head;
		munmap((void *)((uintptr_t)r & ~(uintptr_t)(V05_PAGE - 1)), size);
	}
	return fd;
}

/*
 * Is the side directory on fd the segment's own (bound to its file,
 * segment_claim.c)? The owner's: made so (one that is not, another
 * segment's, is emptied: its files are made again below, counted) and
 * bound. An inspector's: -ENOENT when it is not (it goes without).
 */
static int side_bound(struct v05_segment *seg, int fd)
{
	char path[PATH_MAX];
	struct stat st;
	int ret;

	if (fstat(fd, &st))
		return v05__fail(-errno, "fstat a side directory: %s",
				 v05__errstr(errno));
	if (!v05__side_bound(seg->ctl, &st)) {
		if (seg->role != V05_ROLE_OWNER)
			return -ENOENT;
		v05__side_path(seg->path, path, sizeof(path));
		ret = v05__side_empty(fd, path);
		if (ret)
			return ret;
	}
	if (seg->role == V05_ROLE_OWNER)
		v05__side_bind(seg->ctl, fd);
	return 0;
}

/*
 * Map each lane's file and the doorbell's over their regions of the view
 * (MAP_FIXED: the addresses are the ones the layout gives), from the side
 * directory. The owner needs all of them and keeps their descriptors (a
 * lane the broker granted goes back to its file); it makes the directory
 * again if it is gone, and any broken file in it (owner_file). An inspector
 * maps them read-only where it may open them, and goes without
 * (lanes_mapped false, the doorbell NULL) where it may not: the files are
 * 0600, an inspector of another uid sees the owner's lane statistics only.
 */
int v05__segment_map_files(struct v05_segment *seg)
{
	bool own = seg->role == V05_ROLE_OWNER;
	int oflags = own ? O_RDWR : O_RDONLY, prot = own ? RW : RO;
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	const struct v05_region *b = &seg->hdr.regions[V05_REGION_DOORBELL];
	int fd, ret = 0;

	fd = v05__side_dir_open(seg->path, seg->st_uid, own);
	if (fd == -ENOENT && own) {
		fd = v05__side_make(seg->path);
		seg->files_replaced++;
	}
	if (fd < 0)
		return own ? fd : 0;
	ret = side_bound(seg, fd);
	if (ret) {
		close(fd);
		return own ? ret : 0;
	}
	seg->dir_fd = fd;
	for (uint32_t i = 0; i < seg->hdr.geo.lane_count; i++) {
		fd = own ? owner_file(seg, V05_FILE_LANE, i, stride) :
			   v05__lane_file_open(seg, V05_FILE_LANE, i, oflags);
		if (fd < 0) {
			ret = fd;
			break;
		}
		ret = v05__file_overlay(seg, v05__lane_offset(seg, i), stride, fd, prot,
			      "lane file");
		if (own && !ret)
			seg->lane_fd[seg->nlane_fd++] = fd;
		else
			close(fd);
		if (ret)
			break;
	}
	if (!ret) {
		seg->region[V05_REGION_LANES] =
			seg->base + seg->hdr.regions[V05_REGION_LANES].offset;
		seg->lanes_mapped = true;
	} else if (own) {
		return ret;
	}
	fd = own ? owner_file(seg, V05_FILE_BELL, 0, b->size) :
		   v05__lane_file_open(seg, V05_FILE_BELL, 0, oflags);
	ret = fd < 0 ? fd : v05__file_overlay(seg, b->offset, b->size, fd, prot,
				    "doorbell file");
	if (!ret) {
		seg->region[V05_REGION_DOORBELL] = seg->base + b->offset;
		seg->bell = V05_AT(struct v05_shm_doorbell,
				   seg->region[V05_REGION_DOORBELL], 0);
	}
	if (fd >= 0 && own && !ret) {
		seg->bell_fd = fd;
		seg->bell_fd_open = true;
	} else if (fd >= 0) {
		close(fd);
	}
	return own ? ret : 0;
}

/*
 * A producer (of the segment's uid) maps the doorbell's file and nothing
 * else here: no view of the segment (not even PROT_NONE), so no stray
 * pointer of its process can reach the owner word, another lane or the
 * counters. Its lane's file is opened and mapped by producer.c once
 * claimed, from the side directory kept open here. The segment file is
 * only read, for the header, and closed.
 */
int v05__segment_attach_producer(struct v05_segment *seg)
{
	const struct v05_region *r = &seg->hdr.regions[V05_REGION_DOORBELL];
	void *bell;
	int fd, ret;

	fd = v05__side_dir_open(seg->path, seg->st_uid, false);
	if (fd < 0)
		return fd;
	seg->dir_fd = fd;
	fd = v05__lane_file_open(seg, V05_FILE_BELL, 0, O_RDWR);
	if (fd < 0)
		return fd;
	bell = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ret = -errno;
	close(fd);
	if (bell == MAP_FAILED)
		return v05__fail(ret, "mmap the doorbell file of %s: %s", seg->name,
				 v05__errstr(-ret));
	seg->bell_map = bell;
	seg->bell = bell;
	return 0;
}
