/* SPDX-License-Identifier: MIT */
/*
 * A mapped v05 segment, process-local. The header is read once with pread,
 * validated, and kept here as a private copy: nothing read from the shared
 * header page is trusted or re-read after attach validated it.
 */
#ifndef V05_SHM_SEGMENT_H
#define V05_SHM_SEGMENT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "v05/shm.h"

/* Which regions a role maps, and how (everything else is PROT_NONE). */
enum v05_role {
	V05_ROLE_OWNER,    /* plugin: all regions read-write             */
	V05_ROLE_PRODUCER, /* the doorbell file only; its lane's file is
			    * mapped by producer.c once claimed          */
	V05_ROLE_READER,   /* control, state, arena read; rings r/w      */
	V05_ROLE_INSPECT,  /* everything but the arena, read-only; the
			    * lanes and doorbell where their files open  */
};

/*
 * The files of a segment besides its own (layout.h), all in its side
 * directory v05-NAME:side, which only the segment's uid can write: no
 * other user can create, replace or hold a name there.
 */
enum v05_seg_file {
	V05_FILE_LANE,   /* lane.<i>: a lane any same-uid producer may claim */
	V05_FILE_BELL,   /* bell: the doorbell page                         */
	V05_FILE_BROKER, /* broker: the broker's socket (broker.c)          */
};

/* The side directory's name: the segment file's path and this. */
#define V05_SIDE_SUFFIX ":side"

struct v05_segment {
	uint8_t *base;   /* the whole object, PROT_NONE where not mapped;
			  * NULL for a producer, which maps no whole view */
	size_t size;
	int fd;
	enum v05_role role;
	struct v05_shm_header hdr; /* validated private copy */
	struct v05_shm_control *ctl; /* NULL for producers */
	struct v05_shm_doorbell *bell;
	struct v05_lane_own *lane_own; /* owner and inspect only */
	uint8_t *bell_map; /* a producer's own mapping of the doorbell file */
	/* The owner's descriptors of each lane's file and the doorbell's
	 * (a lane the broker granted goes back to its file); -1 or unused
	 * elsewhere. */
	int lane_fd[V05_LANES_MAX];
	int bell_fd;
	uint32_t nlane_fd;  /* lane_fd[0 .. nlane_fd) are open           */
	bool bell_fd_open;
	bool lanes_mapped;  /* the lane files are mapped over the region */
	/* The side directory, opened without following links and checked
	 * (of st_uid, writable by no one else); -1 where not open. */
	int dir_fd;
	/* Side files a takeover found broken (missing, a link, resized,
	 * another mode) and made again, their lanes empty. */
	uint32_t files_replaced;
	/* The segment file's identity (producers: to find an owner of the
	 * same segment in this process, shm/producer.c). */
	uint64_t st_dev, st_ino;
	/* Lanes claimed by producers in this process (the owner's view
	 * only; written by those producers, read by the consumer): the
	 * cut-off spares them (lanes.c). Process-local, never shared. */
	uint8_t inproc[V05_LANES_MAX];
	/* Lanes the broker granted, waiting for the consumer to map them
	 * over the view (only the consumer's thread ever remaps the view):
	 * a memfd per lane (0: none; the descriptor + 1), and how many are
	 * waiting. Written by the broker thread (release), taken by the
	 * consumer (lanes.c, acquire). Process-local. */
	int grant_fd[V05_LANES_MAX];
	uint32_t grants_pending;
	struct v05_shm_state *state; /* NULL for producers */
	uint8_t *region[V05_REGION_COUNT]; /* NULL where not mapped */
	uint32_t st_uid;
	uint32_t mode; /* the object's permission bits */
	char name[V05_NAME_MAX + 1];
	char path[PATH_MAX];
};

/* The doorbell mode fixed at create (doorbell.h). */
static inline bool v05__segment_asym(const struct v05_segment *s)
{
	return (s->hdr.flags & V05_SHM_F_ASYM_DOORBELL) != 0;
}

/* The directory segments live in: $V05_SHM_DIR or /dev/shm. */
const char *v05__shm_dir(void);
/* Build "<dir>/v05-<name>" after checking the name. */
int v05__segment_path(const char *name, char *path, size_t len);
/* A view with nothing mapped or open (both descriptors -1): where create,
 * attach and the broker's request start. */
void v05__segment_blank(struct v05_segment *seg);

/* Build the path of one of a segment's files (seg->path is set), for
 * messages; the files are opened relative to seg->dir_fd. */
int v05__segment_file(const struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t lane, char *path, size_t len);
/* Segment seg_path's side directory's path. */
int v05__side_path(const char *seg_path, char *path, size_t len);
/* The name of a side file within the side directory. */
void v05__side_name(enum v05_seg_file kind, uint32_t lane, char *name,
		    size_t len);

/*
 * Open segment seg_path's side directory without following a link (O_PATH
 * unless rw: the owner's, to read and change it) and check it: a
 * directory of uid that no other user can write. Returns the descriptor
 * or a negative errno with a message naming it and its owner.
 */
int v05__side_dir_open(const char *seg_path, uint32_t uid, bool rw);

/*
 * Open lane i's file (O_NOFOLLOW, in seg->dir_fd) and check it: a regular
 * file of the segment's uid, open to no one else, of the lane's size.
 * kind V05_FILE_BELL (i unused) opens the doorbell's file, of the doorbell
 * region's size. Returns the descriptor or a negative errno.
 */
int v05__lane_file_open(const struct v05_segment *seg, enum v05_seg_file kind,
			uint32_t i, int oflags);

/* Check a lane's or the doorbell's file on descriptor fd: regular, of uid,
 * open to no one else, size bytes. 0 or a negative errno. */
int v05__seg_file_check(int fd, const char *what, uint32_t uid, uint64_t size);

/*
 * Create a segment (O_CREAT|O_EXCL, the given mode), reserving its memory
 * with posix_fallocate so a full /dev/shm fails here with -ENOSPC rather
 * than with SIGBUS later, and each lane's and the doorbell's file (mode
 * 0600) the same way; all or nothing: no file is left on failure. mode may
 * let others read the segment file, never write it. config (config_len <=
 * V05_CONFIG_BYTES) is stored in the checksummed header. The caller becomes
 * the owner.
 */
int v05__segment_create(const char *name, struct v05_geometry *geo,
			const void *config, size_t config_len, unsigned mode,
			struct v05_segment *seg);

/* List (own) or unlist the owner's view seg as owned by this process, so
 * that this process's producers on the same segment mark the lanes they
 * claim in seg->inproc (shm/producer.c). */
void v05__segment_own(struct v05_segment *seg, bool own);

/* Attach with full validation (flags: V05_ATTACH_*). */
int v05__segment_attach(const char *name, enum v05_role role, unsigned flags,
			struct v05_segment *seg);

/* Validate a header copy against an object of st_size bytes. Exposed for
 * the attach fuzzer; attach calls it. */
int v05__header_validate(const struct v05_shm_header *h, uint64_t st_size);

/* XXH3 checksum of a header's immutable bytes. */
uint64_t v05__header_checksum(const struct v05_shm_header *h);

void v05__segment_detach(struct v05_segment *seg);
/* Remove the segment's file and its side directory, keeping the calling
 * thread's error message (v05_segment_unlink clears it). */
void v05__segment_remove(const struct v05_segment *seg);
/* Remove what is left of segment path's side directory (every entry, then
 * the directory), if it is this uid's (or the caller is root). 1 if there
 * was one and it is gone, 0 if there was none, or a negative errno. */
int v05__side_remove(const char *seg_path);
/* Detach, but put private anonymous read-only memory in place of the
 * mapping (one atomic mmap MAP_FIXED) so stale views read zeros. */
void v05__segment_detach_readable(struct v05_segment *seg);

/* Lane i in a whole view (owner, inspect where lanes_mapped); producers
 * map theirs alone. */
static inline struct v05_ring_hdr *v05__lane(const struct v05_segment *s,
					     uint32_t i)
{
	return V05_AT(struct v05_ring_hdr, s->region[V05_REGION_LANES],
		      i * v05__lane_stride(s->hdr.geo.lane_capacity) +
			      v05__lane_skew(i));
}

/* Offset of lane i's first page in the segment (its ring starts
 * v05__lane_skew(i) bytes into it, and into its file). */
static inline uint64_t v05__lane_offset(const struct v05_segment *s, uint32_t i)
{
	return s->hdr.regions[V05_REGION_LANES].offset +
	       i * v05__lane_stride(s->hdr.geo.lane_capacity);
}

static inline struct v05_record *v05__lane_records(struct v05_ring_hdr *lane)
{
	return (struct v05_record *)(lane + 1);
}

#endif
