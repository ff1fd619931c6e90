/* SPDX-License-Identifier: MIT */
/*
 * Prompt table: open addressing on the 64-bit key, linear probing, load
 * <= 0.5, backward-shift deletion (no tombstones, so probe lengths never
 * degrade). One 64-byte entry per prompt. Written by the consumer only;
 * nobody else reads it while it runs (v05ctl reads counters instead).
 */
#ifndef V05_SHM_TABLE_H
#define V05_SHM_TABLE_H

#include <stdint.h>

#include "layout.h"

struct v05_table {
	struct v05_prompt *e;
	uint32_t mask;
	uint32_t count;
};

/* mem: table_capacity entries (zero = empty). Counts what is there. */
void v05__table_init(struct v05_table *t, void *mem, uint32_t capacity);

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
 * After the owner died: make every entry reachable again, drop the
 * duplicates a move cut short may have left and wipe the keyless residue
 * a clear cut short may have left (table.c). Returns the number of entries
 * moved, dropped or wiped.
 */
uint32_t v05__table_repair(struct v05_table *t);

#endif
