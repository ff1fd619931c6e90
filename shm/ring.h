/* SPDX-License-Identifier: MIT */
/*
 * Single-producer single-consumer ring over a struct v05_ring_hdr and an
 * array of fixed-size entries, as in the lanes (32-byte records), the
 * completion ring (16 bytes) and the release ring (8 bytes).
 *
 * Indices are free-running u32: fill = tail - head, exact across the wrap
 * at 2^32 because the capacity is a power of two <= 2^22. Each side keeps
 * its own index and a cached copy of the other's in process-local memory
 * and reads the shared one only when the cache says full (producer) or
 * empty (consumer).
 *
 * Orderings (pairs):
 *   R1 consumer store-release head   -> A1 producer load-acquire head:
 *      the consumer's reads of entries happen before the producer reuses
 *      their slots.
 *   R2 producer store-release tail   -> A2 consumer load-acquire tail:
 *      the entries' contents are visible before their index is.
 */
#ifndef V05_SHM_RING_H
#define V05_SHM_RING_H

#include <errno.h>
#include <stdint.h>

#include "atomics.h"
#include "layout.h"

struct v05_ring_prod {
	struct v05_ring_hdr *r;
	uint8_t *slots;
	uint32_t mask;
	uint32_t esz;
	uint32_t tail;       /* next index to write                   */
	uint32_t published;  /* the tail last stored to r->tail        */
	uint32_t head_cache; /* the head last read from r->head        */
};

struct v05_ring_cons {
	struct v05_ring_hdr *r;
	const uint8_t *slots;
	uint32_t mask;
	uint32_t esz;
	uint32_t head;       /* next index to read                    */
	uint32_t tail_cache; /* the tail last read from r->tail        */
};

/* Caller owns the producer side (claimed, or by construction). */
static inline void v05__ring_prod_init(struct v05_ring_prod *p,
				       struct v05_ring_hdr *r, void *slots,
				       uint32_t capacity, uint32_t esz)
{
	p->r = r;
	p->slots = slots;
	p->mask = capacity - 1;
	p->esz = esz;
	/* Relaxed: this process is the only writer of tail from now on, and
	 * the claim's acquire (A3, lanes.c) ordered the previous writer's
	 * last store before this load. */
	p->tail = p->published = v05_load_relaxed(&r->tail);
	p->head_cache = v05_load_acquire(&r->head); /* A1 */
}

/* Room for n more entries? 0, or -EAGAIN. */
static inline int v05__ring_prod_reserve(struct v05_ring_prod *p, uint32_t n)
{
	uint32_t cap = p->mask + 1;
	uint32_t fill = p->tail - p->head_cache;

	if (fill <= cap && cap - fill >= n)
		return 0;
	p->head_cache = v05_load_acquire(&p->r->head); /* A1 */
	fill = p->tail - p->head_cache;
	/* A head "ahead" of our tail is corrupt: treat the ring as full. */
	if (fill > cap || cap - fill < n)
		return -EAGAIN;
	return 0;
}

static inline void *v05__ring_prod_slot(struct v05_ring_prod *p, uint32_t i)
{
	return p->slots + (size_t)((p->tail + i) & p->mask) * p->esz;
}

static inline void v05__ring_prod_commit(struct v05_ring_prod *p, uint32_t n)
{
	p->tail += n;
}

/* Publish every committed entry with one store. Returns how many. */
static inline uint32_t v05__ring_prod_publish(struct v05_ring_prod *p)
{
	uint32_t n = p->tail - p->published;

	if (n) {
		v05_store_release(&p->r->tail, p->tail); /* R2 */
		p->published = p->tail;
	}
	return n;
}

/* Caller owns the consumer side. */
static inline void v05__ring_cons_init(struct v05_ring_cons *c,
				       struct v05_ring_hdr *r, const void *slots,
				       uint32_t capacity, uint32_t esz)
{
	c->r = r;
	c->slots = slots;
	c->mask = capacity - 1;
	c->esz = esz;
	/* Relaxed: written only by the consumer, i.e. by this process (or a
	 * dead predecessor whose stores are long complete). */
	c->head = v05_load_relaxed(&r->head);
	c->tail_cache = c->head;
}

/*
 * Entries ready to read: >= 0, or -EOVERFLOW when the producer claims more
 * than the ring holds (a misbehaving producer; the caller resyncs).
 */
static inline int64_t v05__ring_cons_avail(struct v05_ring_cons *c)
{
	uint32_t avail = c->tail_cache - c->head;

	if (avail == 0) {
		c->tail_cache = v05_load_acquire(&c->r->tail); /* A2 */
		avail = c->tail_cache - c->head;
	}
	if (avail > c->mask + 1)
		return -EOVERFLOW;
	return avail;
}

static inline const void *v05__ring_cons_slot(const struct v05_ring_cons *c,
					      uint32_t i)
{
	return c->slots + (size_t)((c->head + i) & c->mask) * c->esz;
}

/* Give n read entries back to the producer. */
static inline void v05__ring_cons_release(struct v05_ring_cons *c, uint32_t n)
{
	c->head += n;
	v05_store_release(&c->r->head, c->head); /* R1 */
}

/* Skip everything the producer claims to have published (after -EOVERFLOW). */
static inline uint32_t v05__ring_cons_resync(struct v05_ring_cons *c)
{
	uint32_t skipped = c->tail_cache - c->head;

	c->head = c->tail_cache;
	v05_store_release(&c->r->head, c->head); /* R1 */
	return skipped;
}

#endif
