/* SPDX-License-Identifier: MIT */
/*
 * The journal's writer: every finalized group appended to a checksummed
 * binary log (format: journal_format.h).
 *
 * Writes go through io_uring (a write, linked to an fdatasync when the sync
 * policy asks), batched, with at most one write in flight: the file is then
 * always a valid prefix plus at most one torn record at its end, which the
 * reader reports and the next writer truncates. Any failed or short write
 * or fsync stops the journal for good (no retry could prove what reached the
 * disk, PostgreSQL's rule after a failed fsync).
 */
#ifndef V05_PLUGIN_JOURNAL_H
#define V05_PLUGIN_JOURNAL_H

#include <stdint.h>

#include "journal_format.h"

/* ---- writing (the plugin) ----------------------------------------------- */

struct v05_journal;

/*
 * Open or create the journal at path. An existing file must be a v05
 * journal; a torn tail is truncated (*truncated bytes), a corrupt middle is
 * refused (-EILSEQ). *last_seq: the last record's sequence number.
 * Only a file that is, or is becoming, a v05 journal of this user is ever
 * written: the last component is not followed if a link (-ELOOP); a file
 * of another uid, or with permission bits beyond mode (the segment's), is
 * refused (-EACCES); a non-journal is refused (-EBADMSG) untouched; an
 * empty file or a torn first header gets a fresh header.
 */
int v05__journal_open(const char *path, uint32_t sync, const char *segment,
		      unsigned mode, struct v05_journal **out,
		      uint64_t *last_seq, uint64_t *truncated);

/* Queue one record. 0, or the journal's error once it has failed. */
int v05__journal_append(struct v05_journal *j, const struct v05_jrec *fixed,
			const uint8_t *uid, const float *rewards,
			const float *adv);

/* Reap finished writes, start the next; wait: until nothing is queued. */
int v05__journal_pump(struct v05_journal *j, int wait);

/* 1 while records wait in the buffer or a write is in flight: a pump
 * has something to do. */
int v05__journal_busy(const struct v05_journal *j);

/* Groups with seq <= this are on disk (fdatasync'ed with SYNC_BATCH). */
uint64_t v05__journal_durable(const struct v05_journal *j);
uint64_t v05__journal_offset(const struct v05_journal *j);
/* Batched writes completed by this process. */
uint64_t v05__journal_writes(const struct v05_journal *j);
int v05__journal_error(const struct v05_journal *j, const char **msg);
void v05__journal_close(struct v05_journal *j);

#endif
