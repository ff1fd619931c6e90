/* SPDX-License-Identifier: MIT */
/*
 * What the segment's own files (segment_*.c) share among themselves:
 * create, attach, map, validate, remove and the side files. Nothing else
 * includes this; the rest of the library uses segment.h.
 */
#ifndef V05_SHM_SEGMENT_PARTS_H
#define V05_SHM_SEGMENT_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

/* A region's name for messages ("control", "lanes", ...). */
const char *v05__region_name(int region);

/* The path of one of a segment's side files, from the segment's path. */
int v05__segment_file_path(const char *seg_path, enum v05_seg_file kind,
			   uint32_t lane, char *path, size_t len);

/* Reserve [off, off + len) of fd's file (its size already set): ENOSPC
 * now rather than SIGBUS at a later page fault on tmpfs. */
int v05__file_reserve(int fd, uint64_t off, uint64_t len, const char *path);
/* Make segment seg_path's side directory (0700) and open it; -EEXIST with a
 * message saying whose it is when the name is taken (a leftover of this
 * uid's, or a name another user planted). */
int v05__side_make(const char *seg_path);
/* Create side file kind (lane i) in seg->dir_fd: mode 0600 exactly, size
 * bytes reserved. Returns the descriptor or a negative errno (nothing left
 * behind). */
int v05__file_create(const struct v05_segment *seg, enum v05_seg_file kind,
		     uint32_t i, uint64_t size);
/* The same after removing whatever has that name (a takeover's repair of
 * a broken side file); counted in seg->files_replaced. */
int v05__file_replace(struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t i, uint64_t size);
/* Map fd's file over [off, off + len) of the segment's view, in place. */
int v05__file_overlay(struct v05_segment *seg, uint64_t off, uint64_t len,
		      int fd, int prot, const char *what);
/* Remove every entry of the side directory on dir_fd (path, for
 * messages), keeping the directory: a directory that is not the
 * segment's own, emptied for the takeover to make its files in. */
int v05__side_empty(int dir_fd, const char *path);
/* Close the side files' and the side directory's descriptors the view
 * keeps. */
void v05__files_close(struct v05_segment *seg);

/* The regions' pointers from the header's offsets. */
void v05__segment_set_regions(struct v05_segment *seg);
/* Open up the regions the view's role needs; the others NULL. */
int v05__segment_map_role(struct v05_segment *seg);
/* A producer's attach: the doorbell's file alone. */
int v05__segment_attach_producer(struct v05_segment *seg);

#endif
