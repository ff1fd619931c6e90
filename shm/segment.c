/* SPDX-License-Identifier: MIT */
/* Segment create / attach / detach / unlink / reclaim. */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "atomics.h"
#include "doorbell.h"
#include "error.h"
#include "proc.h"

static const char *const region_names[V05_REGION_COUNT] = {
	"control", "lanes",   "table",   "arena",
	"completion", "release", "support", "batches",
	"state", "doorbell", "lane statistics",
};

V05_API int v05_name_check(const char *name)
{
	size_t n;

	if (!name || !name[0])
		return v05__fail(-EINVAL, "segment name is empty");
	n = strlen(name);
	if (n > V05_NAME_MAX)
		return v05__fail(-ENAMETOOLONG,
				 "segment name is %zu characters, at most %d",
				 n, V05_NAME_MAX);
	if (strchr(name, '/'))
		return v05__fail(-EINVAL, "segment name '%s' contains '/'", name);
	if (name[0] == '.')
		return v05__fail(-EINVAL, "segment name '%s' starts with '.'",
				 name);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return v05__fail(-EINVAL,
					 "segment name has character 0x%02x; use [A-Za-z0-9._-]",
					 (unsigned char)c);
	}
	return 0;
}

V05_API uint64_t v05_key(const void *uid, size_t len)
{
	uint64_t k = XXH3_64bits(uid, len);

	return k ? k : 1;
}

const char *v05__shm_dir(void)
{
	const char *d = getenv("V05_SHM_DIR");

	return d && d[0] == '/' ? d : "/dev/shm";
}

void v05__segment_blank(struct v05_segment *seg)
{
	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	seg->bell_fd = -1;
}

int v05__segment_path(const char *name, char *path, size_t len)
{
	int ret = v05_name_check(name);

	if (ret)
		return ret;
	if ((size_t)snprintf(path, len, "%s/v05-%s", v05__shm_dir(), name) >= len)
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	return 0;
}

static int file_path(const char *seg_path, enum v05_seg_file kind,
		     uint32_t lane, char *path, size_t len)
{
	int n;

	switch (kind) {
	case V05_FILE_LANE:
		n = snprintf(path, len, "%s:lane.%u", seg_path, lane);
		break;
	case V05_FILE_BOUND:
		n = snprintf(path, len, "%s:bound.%u", seg_path, lane);
		break;
	default:
		n = snprintf(path, len, "%s:bell", seg_path);
		break;
	}
	if (n < 0 || (size_t)n >= len)
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	return 0;
}

int v05__segment_file(const struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t lane, char *path, size_t len)
{
	return file_path(seg->path, kind, lane, path, len);
}

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
static int reserve(int fd, uint64_t off, uint64_t len, const char *path)
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
static int file_create(const char *path, uint64_t size)
{
	int ret, fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			   0600);

	if (fd < 0)
		return v05__fail(-errno, "create %s: %s", path, v05__errstr(errno));
	/* The umask may have narrowed 0600: owner read-write, no one else. */
	if (fchmod(fd, 0600) || ftruncate(fd, (off_t)size))
		ret = v05__fail(-errno, "size %s: %s", path, v05__errstr(errno));
	else
		ret = reserve(fd, 0, size, path);
	if (ret) {
		unlink(path);
		close(fd);
		return ret;
	}
	return fd;
}

/* Map fd's file over [off, off + len) of the segment's view, in place. */
static int overlay(struct v05_segment *seg, uint64_t off, uint64_t len, int fd,
		   int prot, const char *what)
{
	if (mmap(seg->base + off, len, prot, MAP_SHARED | MAP_FIXED, fd, 0) ==
	    MAP_FAILED)
		return v05__fail(-errno, "mmap %s: %s", what, v05__errstr(errno));
	return 0;
}

static void unlink_lanes(const char *seg_path, uint32_t lanes);

static void files_close(struct v05_segment *seg)
{
	for (uint32_t i = 0; i < seg->nlane_fd; i++)
		close(seg->lane_fd[i]);
	seg->nlane_fd = 0;
	if (seg->bell_fd_open)
		close(seg->bell_fd);
	seg->bell_fd_open = false;
	seg->bell_fd = -1;
}

uint64_t v05__header_checksum(const struct v05_shm_header *h)
{
	return XXH3_64bits(h, offsetof(struct v05_shm_header, checksum));
}

static int region_inside(const struct v05_region *r, uint64_t total)
{
	return r->offset % V05_PAGE == 0 && r->size % V05_PAGE == 0 &&
	       r->size > 0 && r->offset >= V05_PAGE && r->offset <= total &&
	       r->size <= total - r->offset;
}

int v05__header_validate(const struct v05_shm_header *h, uint64_t st_size)
{
	struct v05_region want[V05_REGION_COUNT];
	struct v05_geometry geo = h->geo;
	uint64_t total;
	int ret;

	if (h->magic != V05_SHM_MAGIC)
		return v05__fail(-EBADMSG, "not a v05 segment (magic %016llx)",
				 (unsigned long long)h->magic);
	if (h->abi_version != V05_SHM_ABI || h->header_size != sizeof(*h))
		return v05__fail(-EPROTONOSUPPORT,
				 "segment ABI %u (header %u bytes); this library speaks ABI %u (%zu bytes)",
				 h->abi_version, h->header_size, V05_SHM_ABI,
				 sizeof(*h));
	if (h->checksum != v05__header_checksum(h))
		return v05__fail(-EILSEQ, "segment header checksum mismatch");
	if (h->page_size != V05_PAGE)
		return v05__fail(-EDOM, "segment page size %u, expected %u",
				 h->page_size, V05_PAGE);
	if ((h->flags & ~V05_SHM_F_ALL) || h->reserved)
		return v05__fail(-EDOM, "segment flags %#x / reserved %u unknown",
				 h->flags, h->reserved);
	if (h->total_size != st_size)
		return v05__fail(-EMSGSIZE,
				 "segment header says %llu bytes, the object has %llu",
				 (unsigned long long)h->total_size,
				 (unsigned long long)st_size);
	ret = v05__geometry_check(&geo);
	if (ret)
		return ret;
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		if (!region_inside(&h->regions[i], st_size))
			return v05__fail(-EOVERFLOW,
					 "region %s [%llu, +%llu) is not a page-aligned part of the %llu-byte segment",
					 region_names[i],
					 (unsigned long long)h->regions[i].offset,
					 (unsigned long long)h->regions[i].size,
					 (unsigned long long)st_size);
	}
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		for (int j = i + 1; j < V05_REGION_COUNT; j++) {
			const struct v05_region *a = &h->regions[i];
			const struct v05_region *b = &h->regions[j];

			if (a->offset < b->offset + b->size &&
			    b->offset < a->offset + a->size)
				return v05__fail(-ENOTUNIQ,
						 "regions %s and %s overlap",
						 region_names[i], region_names[j]);
		}
	}
	v05__layout(&geo, want, &total);
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		if (want[i].offset != h->regions[i].offset ||
		    want[i].size != h->regions[i].size)
			return v05__fail(-EMSGSIZE,
					 "region %s does not match the segment's capacities",
					 region_names[i]);
	}
	if (total != st_size)
		return v05__fail(-EMSGSIZE,
				 "capacities need %llu bytes, the segment has %llu",
				 (unsigned long long)total,
				 (unsigned long long)st_size);
	return 0;
}

static void set_regions(struct v05_segment *seg)
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
				 region_names[region], v05__errstr(errno));
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

static int map_role(struct v05_segment *seg)
{
	const int *prot = role_prot[seg->role];
	int ret;

	set_regions(seg);
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
 * Open lane i's file for the owner or an inspector: under the name the
 * lane statistics say (bound to a uid or not), or the other one where the
 * owner died between binding a lane and renaming its file; the owner then
 * finishes the rename.
 */
static int lane_file_find(struct v05_segment *seg, uint32_t i, int oflags)
{
	/* Relaxed: the broker stores the binding before the rename; a stale
	 * value only costs opening the other name below. */
	bool bound = v05_load_relaxed(&seg->lane_own[i].bound) != 0;
	int fd = v05__lane_file_open(seg, bound ? V05_FILE_BOUND : V05_FILE_LANE,
				     i, oflags);
	int ret;

	if (fd != -ENOENT)
		return fd;
	fd = v05__lane_file_open(seg, bound ? V05_FILE_LANE : V05_FILE_BOUND, i,
				 oflags);
	if (fd >= 0 && bound && seg->role == V05_ROLE_OWNER) {
		ret = v05__lane_file_bind(seg, i);
		if (ret) {
			close(fd);
			return ret;
		}
	}
	return fd;
}

/*
 * Map each lane's file and the doorbell's over their regions of the view
 * (MAP_FIXED: the addresses are the ones the layout gives). The owner needs
 * all of them and keeps their descriptors (the broker hands them out); an
 * inspector maps them read-only where it may open them, and goes without
 * (lanes_mapped false, the doorbell NULL) where it may not: the files are
 * 0600, an inspector of another uid sees the owner's lane statistics only.
 */
static int map_files(struct v05_segment *seg)
{
	bool own = seg->role == V05_ROLE_OWNER;
	int oflags = own ? O_RDWR : O_RDONLY, prot = own ? RW : RO;
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	const struct v05_region *b = &seg->hdr.regions[V05_REGION_DOORBELL];
	int fd, ret = 0;

	for (uint32_t i = 0; i < seg->hdr.geo.lane_count; i++) {
		fd = lane_file_find(seg, i, oflags);
		if (fd < 0) {
			ret = fd;
			break;
		}
		ret = overlay(seg, v05__lane_offset(seg, i), stride, fd, prot,
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
	fd = v05__lane_file_open(seg, V05_FILE_BELL, 0, oflags);
	ret = fd < 0 ? fd : overlay(seg, b->offset, b->size, fd, prot,
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
 * claimed. The segment file is only read, for the header, and closed.
 */
static int attach_producer(struct v05_segment *seg)
{
	const struct v05_region *r = &seg->hdr.regions[V05_REGION_DOORBELL];
	void *bell;
	int fd, ret;

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
			ret = reserve(fd, from, to - from, path);
			if (ret)
				return ret;
		}
		if (r)
			from = r->offset + r->size;
	}
	return 0;
}

/* Create, reserve and map over the view every lane's file and the
 * doorbell's; on failure remove those made (the caller the rest). */
static int create_files(struct v05_segment *seg)
{
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	const struct v05_region *b = &seg->hdr.regions[V05_REGION_DOORBELL];
	char path[PATH_MAX];
	int fd, ret = 0;

	for (uint32_t i = 0; i < seg->hdr.geo.lane_count && !ret; i++) {
		ret = file_path(seg->path, V05_FILE_LANE, i, path, sizeof(path));
		if (ret)
			break;
		fd = file_create(path, stride);
		if (fd < 0) {
			ret = fd;
			break;
		}
		seg->lane_fd[seg->nlane_fd++] = fd;
		ret = overlay(seg, v05__lane_offset(seg, i), stride, fd, RW, path);
	}
	if (!ret)
		ret = file_path(seg->path, V05_FILE_BELL, 0, path, sizeof(path));
	if (!ret) {
		fd = file_create(path, b->size);
		if (fd < 0) {
			ret = fd;
		} else {
			seg->bell_fd = fd;
			seg->bell_fd_open = true;
			ret = overlay(seg, b->offset, b->size, fd, RW, path);
		}
	}
	if (!ret) {
		seg->lanes_mapped = true;
		return 0;
	}
	for (uint32_t i = 0; i < seg->nlane_fd; i++)
		if (!file_path(seg->path, V05_FILE_LANE, i, path, sizeof(path)))
			unlink(path);
	if (seg->bell_fd_open &&
	    !file_path(seg->path, V05_FILE_BELL, 0, path, sizeof(path)))
		unlink(path);
	files_close(seg);
	return ret;
}
#undef RO
#undef RW

int v05__segment_create(const char *name, struct v05_geometry *geo,
			const void *config, size_t config_len, unsigned mode,
			struct v05_segment *seg)
{
	struct v05_shm_header h;
	uint64_t total;
	void *base;
	int fd, ret;

	v05__segment_blank(seg);
	ret = v05__segment_path(name, seg->path, sizeof(seg->path));
	if (ret)
		return ret;
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
	if (fd < 0)
		return v05__fail(-errno, "create %s: %s", seg->path,
				 v05__errstr(errno));
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
	set_regions(seg);
	seg->ctl->owner = v05__owner_self();
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

int v05__segment_attach(const char *name, enum v05_role role, unsigned flags,
			struct v05_segment *seg)
{
	/* A producer reads the segment file (the header) and nothing more. */
	bool rw = role == V05_ROLE_OWNER || role == V05_ROLE_READER;
	struct stat st;
	ssize_t n;
	void *base;
	int fd, ret;

	v05__segment_blank(seg);
	if (flags & ~V05_ATTACH_ANY_UID)
		return v05__fail(-EINVAL, "unknown attach flags 0x%x", flags);
	ret = v05__segment_path(name, seg->path, sizeof(seg->path));
	if (ret)
		return ret;
	fd = open(seg->path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == EACCES && rw)
		return v05__fail(-EACCES,
				 "open %s for writing: %s (only its owner's uid may write a segment; a producer of another uid needs the plugin's broker)",
				 seg->path, v05__errstr(errno));
	if (fd < 0)
		return v05__fail(-errno, "open %s: %s", seg->path, v05__errstr(errno));
	if (fstat(fd, &st)) {
		ret = v05__fail(-errno, "fstat %s: %s", seg->path, v05__errstr(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = v05__fail(-EBADMSG, "%s is not a regular file", seg->path);
		goto fail;
	}
	if (st.st_uid != geteuid() && !(flags & V05_ATTACH_ANY_UID)) {
		ret = v05__fail(-EACCES,
				"%s belongs to uid %u, not to this process's uid %u",
				seg->path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if ((uint64_t)st.st_size < V05_PAGE) {
		ret = v05__fail(-EMSGSIZE, "%s is truncated (%lld bytes)",
				seg->path, (long long)st.st_size);
		goto fail;
	}
	/* Validate a private copy: a writer of the shared page cannot change
	 * what was checked after the check. */
	n = pread(fd, &seg->hdr, sizeof(seg->hdr), 0);
	if (n != (ssize_t)sizeof(seg->hdr)) {
		ret = v05__fail(n < 0 ? -errno : -EMSGSIZE, "read header of %s",
				seg->path);
		goto fail;
	}
	ret = v05__header_validate(&seg->hdr, (uint64_t)st.st_size);
	if (ret)
		goto fail;
	if (role == V05_ROLE_PRODUCER) {
		seg->role = role;
		seg->st_uid = (uint32_t)st.st_uid;
		seg->mode = (uint32_t)st.st_mode & 0777u;
		snprintf(seg->name, sizeof(seg->name), "%s", name);
		close(fd);
		return attach_producer(seg);
	}
	/* Map everything PROT_NONE, then open up what the role needs. */
	base = mmap(NULL, (size_t)st.st_size, PROT_NONE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = v05__fail(-errno, "mmap %s: %s", seg->path, v05__errstr(errno));
		goto fail;
	}
	seg->base = base;
	seg->size = (size_t)st.st_size;
	seg->fd = fd;
	seg->role = role;
	seg->st_uid = (uint32_t)st.st_uid;
	seg->mode = (uint32_t)st.st_mode & 0777u;
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	ret = map_role(seg);
	if (!ret && (role == V05_ROLE_OWNER || role == V05_ROLE_INSPECT))
		ret = map_files(seg);
	if (ret) {
		v05__segment_detach(seg);
		return ret;
	}
	return 0;
fail:
	close(fd);
	return ret;
}

void v05__segment_detach(struct v05_segment *seg)
{
	if (seg->bell_map)
		munmap(seg->bell_map, seg->hdr.regions[V05_REGION_DOORBELL].size);
	seg->bell_map = NULL;
	seg->bell = NULL;
	seg->lane_own = NULL;
	seg->lanes_mapped = false;
	files_close(seg);
	/* The files mapped over the view go with it. */
	if (seg->base)
		munmap(seg->base, seg->size);
	if (seg->fd >= 0)
		close(seg->fd);
	seg->base = NULL;
	seg->ctl = NULL;
	seg->fd = -1;
	for (int i = 0; i < V05_REGION_COUNT; i++)
		seg->region[i] = NULL;
}

void v05__segment_detach_readable(struct v05_segment *seg)
{
	/* MAP_FIXED replaces the old mapping in one step: no moment in which
	 * the range is unmapped and another mapping could land there. */
	if (seg->base &&
	    mmap(seg->base, seg->size, PROT_READ,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
		seg->base = NULL; /* not ours to unmap any more */
	v05__segment_detach(seg);
}

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
		if (!file_path(seg_path, V05_FILE_LANE, i, path, sizeof(path)))
			unlink(path);
		if (!file_path(seg_path, V05_FILE_BOUND, i, path, sizeof(path)))
			unlink(path);
	}
	if (!file_path(seg_path, V05_FILE_BELL, 0, path, sizeof(path)))
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
