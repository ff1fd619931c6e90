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

/*
 * A grant the broker made, for the consumer to map over the lane (one
 * malloc of the broker thread's, freed by the consumer): the memfd, the
 * grant's number (lane_own.grant), the index its ring starts at (the
 * consumer's head from then on) and the peer's uid.
 */
struct v05_grant_post {
	int fd;
	uint32_t grant;
	uint32_t head;
	uint32_t uid;
};

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
	 * a post per lane (NULL: none), and how many are waiting; the grants
	 * whose producer left, signalled and not yet looked at. Posted by
	 * the broker thread (release), taken by the consumer (lanes.c,
	 * acquire). Process-local. */
	struct v05_grant_post *grant_post[V05_LANES_MAX];
	uint32_t grants_pending;
	uint32_t grants_ended;
	/* What the view maps over each lane: the grant whose memfd it is
	 * (0: the lane's file) and that grant's peer uid. The consumer's
	 * (lanes.c), which stores the grant (release) after the lane's
	 * head for it; the broker reads it (acquire) before it trusts that
	 * head (broker_grant.c). Process-local. */
	uint32_t view_grant[V05_LANES_MAX];
	uint32_t view_uid[V05_LANES_MAX];
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
/* The same at path (its side directory path:side), the segment calling
 * itself name; cflags V05__CREATE_RESERVED: every lane's owner word is
 * the creator's until v05__segment_unreserve (a replace's new segment:
 * no producer claims a lane of it before it has the name). */
int v05__segment_create_at(const char *path, const char *name,
			   struct v05_geometry *geo, const void *config,
			   size_t config_len, unsigned mode, unsigned cflags,
			   struct v05_segment *seg);
#define V05__CREATE_RESERVED 1u
/* Free the lanes V05__CREATE_RESERVED held (owner word me -> 0). */
void v05__segment_unreserve(struct v05_segment *seg, uint64_t me);

/* ---- claims: the owner word first (segment_claim.c) ------------------- */

/* A segment file opened for a claim: its control block alone mapped. */
struct v05_claim {
	int fd;
	struct v05_shm_control *ctl;
	void *map;
	size_t map_len;
	uint32_t uid;
	uint64_t st_dev, st_ino;
	uint64_t was; /* the owner word the claim replaced */
	bool held;
	char name[V05_NAME_MAX + 1];
	char path[PATH_MAX];
};

/* Open segment `name`'s file (flags: V05_ATTACH_ANY_UID), validate its
 * header and map its control block. -ENOENT when there is no file. */
int v05__claim_open(const char *name, unsigned flags, struct v05_claim *c);
/* Swap the owner word from a dead owner's (or 0) to me, saying why
 * (enum v05_claim_why): -EBUSY, naming the holder and what it does, when
 * it lives. */
int v05__claim_take(struct v05_claim *c, uint64_t me, uint32_t why);
/* Unmap and close; give_back: the owner word as it was before the claim. */
void v05__claim_close(struct v05_claim *c, bool give_back);
/* Does the name still hold the file c opened? */
bool v05__claim_same_file(const struct v05_claim *c);
/* -EBUSY for segment `name` whose owner word (word) a live process holds,
 * with a message saying who and what it does. */
int v05__claim_busy(const char *name, const struct v05_shm_control *ctl,
		    uint64_t word);
/* The side directory on dir_fd is the segment's own (its identity into
 * the control block); is the directory st the one bound (or none is
 * known)? */
struct stat;
void v05__side_bind(struct v05_shm_control *ctl, int dir_fd);
bool v05__side_bound(const struct v05_shm_control *ctl, const struct stat *dir);

/* ---- a replace's temporary (segment_stage.c) ------------------------- */

/* Make the temporary directory of a replace of seg_path by owner word me
 * (0700, a random name no other user can have planted): its path. */
int v05__stage_make(const char *seg_path, uint64_t me, char *stage,
		    size_t len);
/* Exchange the side directories of seg_path and stage_seg (the new
 * segment, <stage>/seg); where seg_path has none, move it there (had_side
 * false). back: undo it, had_side as the first call set it. */
int v05__stage_swap_sides(const char *seg_path, const char *stage_seg,
			  bool back, bool *had_side);
/* Exchange the segment files: the commit. */
int v05__stage_commit(const char *seg_path, const char *stage_seg);
/* Remove a temporary and everything in it (its segment file first, then
 * test point `point`, if any, then the rest). */
int v05__stage_remove(const char *stage, const char *point);
/* What v05__stage_settle did: swaps undone, temporaries removed. */
struct v05_settled {
	uint32_t undone, cleaned;
};
/* Settle every temporary of a dead replace of seg_path (directories of
 * uid; this process's owner word me): the old segment whole again if it
 * died between its exchanges, the temporary removed. The caller holds
 * the name's segment's owner word, or the name has no segment file. */
int v05__stage_settle(const char *seg_path, uint32_t uid, uint64_t me,
		      struct v05_settled *out);

/* List (own) or unlist the owner's view seg as owned by this process, so
 * that this process's producers on the same segment mark the lanes they
 * claim in seg->inproc (shm/producer.c). */
void v05__segment_own(struct v05_segment *seg, bool own);

/* Attach with full validation (flags: V05_ATTACH_*, and
 * V05__ATTACH_NO_FILES: the owner's view without its side files, which
 * v05__segment_map_files maps once the owner word is claimed). */
int v05__segment_attach(const char *name, enum v05_role role, unsigned flags,
			struct v05_segment *seg);
#define V05__ATTACH_NO_FILES (1u << 31)
/*
 * Map the side files over their holes of the view (owner, inspector).
 * The owner's: only the side directory bound to the segment file (its
 * control block names it) is used as is; one that is not (another
 * segment's, left by a replace killed between its exchanges with no
 * temporary left to exchange it back with) is emptied and its files
 * made again, counted in seg->files_replaced, as a missing or broken
 * one is; the directory made again if gone; the binding set. An
 * inspector maps nothing of a directory that is not bound.
 */
int v05__segment_map_files(struct v05_segment *seg);

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
 * the directory), if it is this uid's: never another user's name, root or
 * not. 1 if there was one and it is gone, 0 if there was none, or a
 * negative errno. */
int v05__side_remove(const char *seg_path);
/* The same for a directory of uid (root removing another user's: v05ctl
 * reclaim --any-uid). */
int v05__side_remove_as(const char *seg_path, uint32_t uid);
/* The owner removes its own segment (close with V05_CLOSE_UNLINK), still
 * holding its owner word: the file only if the name still holds it, the
 * side directory only if it is bound to it. */
int v05__segment_unlink_own(const struct v05_segment *seg);
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
