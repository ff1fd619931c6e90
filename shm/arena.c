/* SPDX-License-Identifier: MIT */
#include "arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomics.h"
#include "error.h"

int v05__arena_init(struct v05_arena *a, struct v05_segment *seg)
{
	uint32_t n = seg->hdr.geo.slot_count;

	a->seg = seg;
	a->nfree = 0;
	a->free = malloc((size_t)n * sizeof(*a->free));
	if (!a->free)
		return v05__fail(-ENOMEM, "arena: out of memory");
	/* Highest index first on the stack so slot 0 is handed out first. */
	for (uint32_t i = n; i-- > 0;) {
		/* Relaxed: the consumer (this process) is the only writer. */
		if (v05_load_relaxed(&v05__slot(seg, i)->state) == V05_S_FREE)
			a->free[a->nfree++] = i;
	}
	return 0;
}

void v05__arena_fini(struct v05_arena *a)
{
	free(a->free);
	a->free = NULL;
	a->nfree = 0;
}

int v05__arena_alloc(struct v05_arena *a, uint32_t *slot)
{
	struct v05_slot_hdr *h;
	uint32_t i, gen;

	if (a->nfree == 0)
		return -ENOSPC;
	i = a->free[--a->nfree];
	h = v05__slot(a->seg, i);
	/* The counter first, then the slot: an owner killed between the two
	 * leaves a generation unused, never one used twice. 0 is skipped
	 * (a slot never allocated has it). */
	gen = *a->last_gen + 1;
	if (gen == 0)
		gen = 1;
	*a->last_gen = gen;
	h->gen = gen;
	h->k = 0;
	h->flags = 0;
	/* Relaxed: readers only trust FINAL, which is stored with release. */
	v05_store_relaxed(&h->state, (uint32_t)V05_S_ACTIVE);
	*slot = i;
	return 0;
}

void v05__arena_free(struct v05_arena *a, uint32_t slot)
{
	struct v05_slot_hdr *h = v05__slot(a->seg, slot);

	/* Relaxed: a reader that still holds a completion for this slot
	 * checks the generation it recorded (A4) and sees the slot moved. */
	v05_store_relaxed(&h->state, (uint32_t)V05_S_FREE);
	h->key = 0;
	a->free[a->nfree++] = slot;
}
