/* SPDX-License-Identifier: MIT */
#include "table.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "atomics.h"
#include "testpoint.h"

/*
 * The table lives in shared memory and its owner may be killed at any
 * instruction; the next owner must find every entry whole, at most twice.
 * So an entry is written key last and cleared key first (program order is
 * what a later process sees of a killed one's stores; the compiler
 * barriers keep the compiler to it). A kill then leaves, at worst, a
 * keyless hole in a probe run or a whole duplicate of a moved entry, both
 * of which v05__table_repair() undoes. The keyless hole may still hold the
 * payload of a live entry (a clear killed between its key and its memset):
 * lookups never match key 0, and repair wipes such residue.
 */
static_assert(offsetof(struct v05_prompt, key) == 0, "key first");

static void entry_clear(struct v05_prompt *e)
{
	e->key = 0;
	v05_compiler_barrier();
	memset((uint8_t *)e + sizeof(e->key), 0, sizeof(*e) - sizeof(e->key));
}

static void entry_move(struct v05_prompt *dst, const struct v05_prompt *src)
{
	uint64_t key = src->key;

	dst->key = 0;
	v05_compiler_barrier();
	/* Where a lookup from another process finds a hole on the moved
	 * entry's path: tests/test_observer_reads.c stops the owner here. */
	v05__test_point("table_move");
	memcpy((uint8_t *)dst + sizeof(dst->key),
	       (const uint8_t *)src + sizeof(src->key),
	       sizeof(*dst) - sizeof(dst->key));
	v05_compiler_barrier();
	dst->key = key;
}

/* The sequence word around a move (atomics.h, the seqlock). */
static uint32_t seq_begin(struct v05_table *t)
{
	return v05_seq_begin(t->seq);
}

static void seq_end(struct v05_table *t, uint32_t s)
{
	v05_seq_end(t->seq, s);
}

void v05__table_init(struct v05_table *t, void *mem, uint32_t capacity,
		     uint32_t *seq)
{
	t->e = mem;
	t->mask = capacity - 1;
	t->count = 0;
	t->seq = seq;
	for (uint32_t i = 0; i < capacity; i++)
		t->count += t->e[i].key != 0;
}

int v05__table_insert(struct v05_table *t, uint64_t key,
		      struct v05_prompt **out)
{
	uint32_t i;

	if (key == 0)
		return -EINVAL;
	for (i = v05__table_home(t, key); t->e[i].key; i = (i + 1) & t->mask) {
		if (t->e[i].key == key) {
			*out = &t->e[i];
			return -EEXIST;
		}
	}
	if ((uint64_t)(t->count + 1) * 2 > (uint64_t)t->mask + 1)
		return -ENOSPC;
	entry_clear(&t->e[i]);
	v05_compiler_barrier();
	t->e[i].key = key;
	t->count++;
	*out = &t->e[i];
	return 0;
}

void v05__table_delete(struct v05_table *t, struct v05_prompt *e)
{
	uint32_t hole = (uint32_t)(e - t->e);
	uint32_t j = hole;
	uint32_t s = seq_begin(t);

	for (;;) {
		uint32_t home;

		j = (j + 1) & t->mask;
		if (t->e[j].key == 0)
			break;
		home = v05__table_home(t, t->e[j].key);
		/* Entry j may fill the hole iff the hole lies on its probe
		 * path, i.e. no farther from j than its home is. */
		if (((j - home) & t->mask) >= ((j - hole) & t->mask)) {
			entry_move(&t->e[hole], &t->e[j]);
			hole = j;
		}
	}
	entry_clear(&t->e[hole]);
	t->count--;
	seq_end(t, s);
}

/* How many times a peek starts again before it says -EAGAIN: a move is
 * a few entries' copies, so this only gives up on an owner that moves
 * entries without a pause (or one killed inside a move, until the next
 * owner's repair). */
#define PEEK_ATTEMPTS 256

/* One probe for key, each word a relaxed load: 1 (out filled), 0. */
static int peek_once(const struct v05_prompt *e, uint32_t mask, uint64_t key,
		     struct v05_prompt *out)
{
	uint32_t i = (uint32_t)key & mask;

	for (uint32_t n = 0; n <= mask; n++, i = (i + 1) & mask) {
		uint64_t k = v05_load_relaxed(&e[i].key);

		if (k == 0)
			return 0;
		if (k != key)
			continue;
		memset(out, 0, sizeof(*out));
		out->key = k;
		out->issued = v05_load_relaxed(&e[i].issued);
		out->received = v05_load_relaxed(&e[i].received);
		out->gen = v05_load_relaxed(&e[i].gen);
		out->slot = v05_load_relaxed(&e[i].slot);
		out->batch = v05_load_relaxed(&e[i].batch);
		out->state = v05_load_relaxed(&e[i].state);
		return 1;
	}
	return 0; /* a full lap: the owner never lets one happen */
}

int v05__table_peek(const struct v05_prompt *e, uint32_t mask,
		    const uint32_t *seq, uint64_t key, struct v05_prompt *out)
{
	if (key == 0)
		return 0;
	for (int a = 0; a < PEEK_ATTEMPTS; a++) {
		uint32_t s = v05_seq_read(seq);
		int found;

		if (s & 1) {
			v05_cpu_relax();
			continue;
		}
		found = peek_once(e, mask, key, out);
		if (!v05_seq_retry(seq, s))
			return found;
	}
	return -EAGAIN;
}

static int entry_residue(const struct v05_prompt *e)
{
	static const struct v05_prompt zero;

	return e->key == 0 && memcmp(e, &zero, sizeof(*e)) != 0;
}

uint32_t v05__table_repair(struct v05_table *t)
{
	uint32_t fixed = 0, changed;
	uint32_t s = seq_begin(t);

	/* Keyless residue first: nothing may read it as a prompt later. */
	for (uint32_t i = 0; i <= t->mask; i++) {
		if (entry_residue(&t->e[i])) {
			entry_clear(&t->e[i]);
			fixed++;
		}
	}

	/* Until a whole pass finds every entry where a lookup does: each
	 * fix moves an entry into a hole on its own probe path or drops a
	 * duplicate, so this ends. */
	do {
		changed = 0;
		for (uint32_t i = 0; i <= t->mask; i++) {
			struct v05_prompt *e = &t->e[i], *first;
			uint32_t j;

			if (!e->key)
				continue;
			first = v05__table_find(t, e->key);
			if (first == e)
				continue;
			if (!first) {
				/* Behind a hole: into the first free entry
				 * on its path (a copy first, then the
				 * original cleared). */
				for (j = v05__table_home(t, e->key); t->e[j].key;
				     j = (j + 1) & t->mask)
					;
				entry_move(&t->e[j], e);
			}
			/* Found earlier on the path: e is the duplicate a
			 * move left (or was just copied); drop it. */
			entry_clear(e);
			changed++;
		}
		fixed += changed;
	} while (changed);
	t->count = 0;
	for (uint32_t i = 0; i <= t->mask; i++)
		t->count += t->e[i].key != 0;
	seq_end(t, s);
	return fixed;
}
