/* SPDX-License-Identifier: MIT */
/*
 * Prompt table: open addressing on the 64-bit key, linear probing, load
 * <= 0.5, backward-shift deletion (no tombstones, so probe lengths never
 * degrade). One 64-byte entry per prompt. Written by the consumer only;
 * another process may look a key up while it runs (v05__table_peek, an
 * observer's), under the table's sequence word: odd while entries move.
 */
#ifndef V05_SHM_TABLE_H
#define V05_SHM_TABLE_H

#include <stdint.h>

#include "layout.h"

struct v05_table {
	struct v05_prompt *e;
	uint32_t mask;
	uint32_t count;
	/* The segment's table_seq (layout.h), bumped around every move;
	 * NULL: no reader to tell (a table outside a segment). */
	uint32_t *seq;
};

/* mem: table_capacity entries (zero = empty). Counts what is there. seq:
 * the sequence word, or NULL. */
void v05__table_init(struct v05_table *t, void *mem, uint32_t capacity,
		     uint32_t *seq);

/* The key's home: its low bits (XXH3 output is uniform there). */
static inline uint32_t v05__table_home(const struct v05_table *t, uint64_t key)
{
	return (uint32_t)key & t->mask;
}

static inline struct v05_prompt *v05__table_find(const struct v05_table *t,
						 uint64_t key)
{
	/* Key 0 marks an empty entry, never a prompt: it must not match the
	 * keyless residue a kill inside a clear can leave (table.c). */
	if (key == 0)
		return NULL;
	/* At load <= 0.5 an empty entry always ends the probe. */
	for (uint32_t i = v05__table_home(t, key);; i = (i + 1) & t->mask) {
		struct v05_prompt *e = &t->e[i];

		if (e->key == key)
			return e;
		if (e->key == 0)
			return NULL;
	}
}

/* Insert key (zeroed entry with only the key set). -EEXIST (and *out the
 * existing entry) if present; -ENOSPC if the load would pass 0.5. */
int v05__table_insert(struct v05_table *t, uint64_t key,
		      struct v05_prompt **out);

/* Delete e (a pointer from find/insert); entries behind it shift back, so
 * pointers to other entries are stale afterwards. */
void v05__table_delete(struct v05_table *t, struct v05_prompt *e);

/*
 * A lookup of key from another process while the owner may be moving
 * entries (an observer's; e: the table's entries read-only, mask its
 * capacity - 1, seq its sequence word). A copy of the entry's words that
 * name the prompt's instance and progress (key, gen, state, issued,
 * received, slot, batch; the rest zero): 1 found, 0 not there, -EAGAIN
 * when every attempt overlapped a move. A found entry's words are each
 * one the owner wrote, at most one move old: fine for a hint, never for
 * a decision (the owner's own checks decide).
 */
int v05__table_peek(const struct v05_prompt *e, uint32_t mask,
		    const uint32_t *seq, uint64_t key, struct v05_prompt *out);

/*
 * After the owner died: make every entry reachable again, drop the
 * duplicates a move cut short may have left and wipe the keyless residue
 * a clear cut short may have left (table.c). Returns the number of entries
 * moved, dropped or wiped.
 */
uint32_t v05__table_repair(struct v05_table *t);

#endif
