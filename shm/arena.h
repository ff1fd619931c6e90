/* SPDX-License-Identifier: MIT */
/*
 * Sample arena: one slot per active prompt, addressable by index from any
 * process mapping the segment. A slot holds the prompt's uid, k_max rewards
 * and k_max advantages (float32, side by side), and the final statistics.
 * The free list is process-local to the plugin and rebuilt from the slots'
 * states on takeover.
 *
 * Slot state (R4/A4): the plugin writes a group's results, then stores
 * state = FINAL with release (R4); a reader in another process acquires the
 * state (A4) — or the completion record, whose tail store (R2) follows R4 —
 * before reading the results.
 */
#ifndef V05_SHM_ARENA_H
#define V05_SHM_ARENA_H

#include <stdint.h>

#include "layout.h"
#include "segment.h"

static inline struct v05_slot_hdr *v05__slot(const struct v05_segment *s,
					     uint32_t i)
{
	return V05_AT(struct v05_slot_hdr, s->region[V05_REGION_ARENA],
		      (size_t)i * s->hdr.geo.slot_stride);
}

static inline float *v05__slot_rewards(struct v05_slot_hdr *h)
{
	return (float *)(h + 1);
}

static inline float *v05__slot_advantages(const struct v05_segment *s,
					  struct v05_slot_hdr *h)
{
	return V05_AT(float, h, v05__slot_adv_offset(s->hdr.geo.k_max));
}

struct v05_arena {
	struct v05_segment *seg;
	uint32_t *free; /* stack of free slot indices */
	uint32_t nfree;
	/* The last generation handed out, in the owner's persistent state
	 * (it survives a takeover): each allocation takes the next, so a
	 * generation names one use of one slot among the last 2^32 uses of
	 * any slot, and a reward or decision carrying it names one prompt
	 * instance. Its start is drawn at random by the plugin (plugin.c). */
	uint32_t *last_gen;
};

/* Free list from the slots' states (all FREE in a new segment). */
int v05__arena_init(struct v05_arena *a, struct v05_segment *seg);
void v05__arena_fini(struct v05_arena *a);

/* Take a free slot: generation bumped, state ACTIVE. -ENOSPC if none. */
int v05__arena_alloc(struct v05_arena *a, uint32_t *slot);

/* Give a slot back (state FREE). */
void v05__arena_free(struct v05_arena *a, uint32_t slot);

#endif
