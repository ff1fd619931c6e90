/* SPDX-License-Identifier: MIT */
/*
 * Completion ring (plugin -> reader) and release ring (reader -> plugin).
 *
 * The plugin publishes (slot, gen, key) for each finalized group; a reader
 * in another process (the trainer) claims the completion ring's owner word,
 * reads completions, reads the slots, and hands each slot back through the
 * release ring. The plugin recycles a slot only after its release arrives
 * (or after its own in-process release), so a reader never sees a slot
 * reused under it. Both rings use ring.h's R1/A1 and R2/A2 pairs; the slot
 * contents are ordered before the completion by R4 (arena.h) and R2.
 */
#ifndef V05_SHM_COMPLETION_H
#define V05_SHM_COMPLETION_H

#include <stdbool.h>
#include <stdint.h>

#include "ring.h"
#include "segment.h"

/* Plugin side. */
struct v05_completions {
	struct v05_ring_hdr *ch, *rh;
	struct v05_ring_prod out;  /* completions we publish */
	struct v05_ring_cons back; /* releases we consume   */
};

void v05__completions_init(struct v05_completions *c, struct v05_segment *seg);
/* The reader's owner word, 0 if none. */
uint64_t v05__completions_reader(const struct v05_completions *c);
/* 0, or -EAGAIN when the ring is full. Published at once. */
int v05__completion_push(struct v05_completions *c, uint64_t key,
			 uint32_t slot, uint32_t gen);
typedef void (*v05_release_fn)(void *ctx, uint32_t slot, uint32_t gen);
/* Has the reader published releases not yet applied? Two loads, no store:
 * what a poll with nothing to do pays. Relaxed: only a hint, the drain
 * reads the tail again with acquire (A2). Every drain applies all it
 * finds, so head == tail when nothing is pending. */
static inline bool v05__releases_pending(const struct v05_completions *c)
{
	return v05_load_relaxed(&c->back.r->tail) != c->back.head;
}
/* Apply every release the reader published; returns how many. */
uint32_t v05__releases_drain(struct v05_completions *c, v05_release_fn fn,
			     void *ctx);
/*
 * The reader died: apply its last releases, drop the completions it never
 * read (the caller republishes every unreleased slot), free its claim.
 */
uint32_t v05__completions_reset(struct v05_completions *c, v05_release_fn fn,
				void *ctx);

/* Reader side (another process). */
struct v05_reader_rings {
	struct v05_ring_hdr *ch, *rh;
	struct v05_ring_cons in;
	struct v05_ring_prod rel;
	uint64_t owner;
};

/* Claim the rings for this process: -EBUSY if another live reader has. */
int v05__reader_claim(struct v05_segment *seg, struct v05_reader_rings *r);
void v05__reader_unclaim(struct v05_reader_rings *r);
/* 1 and *out, 0 when nothing is pending, -EIO when the ring's indices
 * stay impossible after a fresh read (v05_errmsg says which). */
int v05__reader_next(struct v05_reader_rings *r, struct v05_completion *out);
/* 0, or -EAGAIN when the release ring is full. */
int v05__reader_release(struct v05_reader_rings *r, uint32_t slot, uint32_t gen);

#endif
