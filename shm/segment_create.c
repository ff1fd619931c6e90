/* SPDX-License-Identifier: MIT */
/* Create a segment: the header, every page reserved, the side directory
 * and its files, the magic published last; all or nothing. */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "doorbell.h"
#include "error.h"
#include "proc.h"
#include "testpoint.h"

/* The ranges of the segment file that hold memory: all but the lanes and
 * the doorbell, whose files are mapped there. */
static int reserve_segment(int fd, const struct v05_shm_header *h,
			   const char *path)
{
	uint64_t from = 0;
	int ret;

	for (int i = 0; i <= V05_REGION_COUNT; i++) {
		const struct v05_region *r = i < V05_REGION_COUNT ? &h->regions[i] : NULL;
		uint64_t to;

		if (r && i != V05_REGION_LANES && i != V05_REGION_DOORBELL)
			continue;
		/* [from, the start of this hole): memory. */
		to = r ? r->offset : h->total_size;
		if (to > from) {
			ret = v05__file_reserve(fd, from, to - from, path);
			if (ret)
				return ret;
		}
		if (r)
			from = r->offset + r->size;
	}
	return 0;
}

/* Make the side directory; create, reserve and map over the view every
 * lane's file and the doorbell's; on failure remove the directory with
 * whatever was made in it (the caller the rest). */
static int create_files(struct v05_segment *seg)
{
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	const struct v05_region *b = &seg->hdr.regions[V05_REGION_DOORBELL];
	int fd, ret = 0;

	fd = v05__side_make(seg->path);
	if (fd < 0)
		return fd;
	seg->dir_fd = fd;
	v05__test_point("create.side");
	for (uint32_t i = 0; i < seg->hdr.geo.lane_count && !ret; i++) {
		fd = v05__file_create(seg, V05_FILE_LANE, i, stride);
		if (fd < 0) {
			ret = fd;
			break;
		}
		seg->lane_fd[seg->nlane_fd++] = fd;
		ret = v05__file_overlay(seg, v05__lane_offset(seg, i), stride, fd,
					 PROT_READ | PROT_WRITE, "lane file");
	}
	if (!ret) {
		fd = v05__file_create(seg, V05_FILE_BELL, 0, b->size);
		if (fd < 0) {
			ret = fd;
		} else {
			seg->bell_fd = fd;
			seg->bell_fd_open = true;
			ret = v05__file_overlay(seg, b->offset, b->size, fd,
						    PROT_READ | PROT_WRITE, "doorbell file");
		}
	}
	if (!ret) {
		seg->lanes_mapped = true;
		return 0;
	}
	v05__files_close(seg);
	v05__side_remove(seg->path);
	return ret;
}

int v05__segment_create(const char *name, struct v05_geometry *geo,
			const void *config, size_t config_len, unsigned mode,
			struct v05_segment *seg)
{
	char path[PATH_MAX];
	int ret = v05__segment_path(name, path, sizeof(path));

	if (ret) {
		v05__segment_blank(seg);
		return ret;
	}
	return v05__segment_create_at(path, name, geo, config, config_len, mode,
				      0, seg);
}

/* Every lane's owner word the creator's (V05__CREATE_RESERVED), or 0. */
static void reserve_lanes(struct v05_segment *seg, uint64_t word)
{
	for (uint32_t i = 0; i < seg->hdr.geo.lane_count; i++)
		/* R3's kind: the lane's head and tail (zero) before a
		 * claimer's A3. */
		v05_store_release(&v05__lane(seg, i)->owner, word);
}

void v05__segment_unreserve(struct v05_segment *seg, uint64_t me)
{
	for (uint32_t i = 0; i < seg->hdr.geo.lane_count; i++) {
		uint64_t w = me;

		/* Only where the reservation still stands. */
		v05_cas_acq_rel(&v05__lane(seg, i)->owner, &w, 0);
	}
}

int v05__segment_create_at(const char *path, const char *name,
			   struct v05_geometry *geo, const void *config,
			   size_t config_len, unsigned mode, unsigned cflags,
			   struct v05_segment *seg)
{
	struct v05_shm_header h;
	uint64_t total;
	void *base;
	int fd, ret;

	v05__segment_blank(seg);
	ret = v05_name_check(name);
	if (ret)
		return ret;
	if ((size_t)snprintf(seg->path, sizeof(seg->path), "%s", path) >=
	    sizeof(seg->path))
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	ret = v05__geometry_check(geo);
	if (ret)
		return ret;
	if (config_len > V05_CONFIG_BYTES)
		return v05__fail(-EINVAL, "config of %zu bytes exceeds %u",
				 config_len, V05_CONFIG_BYTES);
	if (mode & ~0777u)
		return v05__fail(-EINVAL, "mode %o has bits outside 0777", mode);
	/* Whoever can write the segment file can map it whole: the owner
	 * word, every lane, the counters. Others may read it at most;
	 * producers of another uid get their lane's file from the broker. */
	if (mode & 0022u)
		return v05__fail(-EINVAL,
				 "mode %o lets other users write the segment; it may let them read it at most (producers of another uid: the broker, V05_CONFIG_PRODUCER_BROKER)",
				 mode);

	memset(&h, 0, sizeof(h));
	h.abi_version = V05_SHM_ABI;
	h.header_size = sizeof(h);
	h.page_size = V05_PAGE;
	h.creator_uid = (uint32_t)geteuid();
	h.created_ns = v05__wall_ns();
	{
		const char *db = getenv("V05_DOORBELL");

		/* The asymmetric doorbell (doorbell.h) unless asked not to. */
		if (!(db && !strcmp(db, "fence")) && v05__membarrier_usable())
			h.flags |= V05_SHM_F_ASYM_DOORBELL;
	}
	h.geo = *geo;
	v05__layout(geo, h.regions, &total);
	h.total_size = total;
	if (config_len)
		memcpy(h.config, config, config_len);

	fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		  (mode_t)mode);
	if (fd < 0 && errno == EEXIST) {
		struct stat st;

		if (lstat(seg->path, &st))
			memset(&st, 0, sizeof(st));
		return v05__fail(-EEXIST, "create %s: it exists (uid %u's%s)",
				 seg->path, (unsigned)st.st_uid,
				 st.st_uid == geteuid() ? "" :
				 ", not this process's: not a segment it can take over");
	}
	if (fd < 0)
		return v05__fail(-errno, "create %s: %s", seg->path,
				 v05__errstr(errno));
	v05__test_point("create.file");
	/* The umask may have narrowed the mode; the caller asked for this. */
	if (fchmod(fd, (mode_t)mode) || ftruncate(fd, (off_t)total)) {
		ret = v05__fail(-errno, "size %s: %s", seg->path,
				v05__errstr(errno));
		goto fail;
	}
	/* Reserve every page now: on tmpfs a later page fault past the
	 * filesystem's size is a SIGBUS in the engine; here it is ENOSPC. */
	ret = reserve_segment(fd, &h, seg->path);
	if (ret)
		goto fail;
	base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = v05__fail(-errno, "mmap %s: %s", seg->path, v05__errstr(errno));
		goto fail;
	}
	seg->base = base;
	seg->size = total;
	seg->fd = fd;
	{
		struct stat st;

		if (!fstat(fd, &st)) {
			seg->st_dev = (uint64_t)st.st_dev;
			seg->st_ino = (uint64_t)st.st_ino;
		}
	}
	seg->role = V05_ROLE_OWNER;
	seg->st_uid = h.creator_uid;
	seg->mode = mode;
	seg->hdr = h; /* the geometry and regions, for the files */
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	ret = create_files(seg);
	if (ret) {
		munmap(base, total);
		seg->base = NULL;
		goto fail;
	}
	/* The checksum covers the magic as stored: compute with the final
	 * magic, write everything but the magic, then publish the magic. */
	h.magic = V05_SHM_MAGIC;
	h.checksum = v05__header_checksum(&h);
	memcpy((uint8_t *)base + sizeof(h.magic), (uint8_t *)&h + sizeof(h.magic),
	       sizeof(h) - sizeof(h.magic));
	seg->hdr = h;
	v05__segment_set_regions(seg);
	/* The side directory is this file's (segment_claim.c). */
	v05__side_bind(seg->ctl, seg->dir_fd);
	seg->ctl->owner = v05__owner_self();
	if (cflags & V05__CREATE_RESERVED)
		reserve_lanes(seg, seg->ctl->owner);
	seg->ctl->owner_pid = (uint32_t)getpid();
	seg->ctl->heartbeat_ns = v05__now_ns();
	/* R0: everything above before the magic; attach reads the page with
	 * pread and checks the magic and checksum (A0, in the kernel copy). */
	v05_store_release((uint64_t *)base, (uint64_t)V05_SHM_MAGIC);
	if (mprotect(base, V05_PAGE, PROT_READ)) {
		ret = v05__fail(-errno, "mprotect header: %s", v05__errstr(errno));
		v05__segment_detach(seg);
		v05__segment_remove(seg);
		return ret;
	}
	return 0;
fail:
	unlink(seg->path);
	close(fd);
	seg->fd = -1;
	return ret;
}
