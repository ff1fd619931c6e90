/* SPDX-License-Identifier: MIT */
#include "shm/lanes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/error.h"
#include "shm/proc.h"

static inline void count(struct v05_lanes *l, int c, uint64_t n)
{
	/* Relaxed: the consumer is the only writer of these counters;
	 * readers take a snapshot. */
	uint64_t *p = &l->seg->state->counters[c];

	v05_store_relaxed(p, v05_load_relaxed(p) + n);
}

int v05__lanes_init(struct v05_lanes *l, struct v05_segment *seg)
{
	uint32_t n = seg->hdr.geo.lane_count;

	memset(l, 0, sizeof(*l));
	l->cons = calloc(n, sizeof(*l->cons));
	if (!l->cons)
		return v05__fail(-ENOMEM, "lanes: out of memory");
	l->seg = seg;
	l->n = n;
	for (uint32_t i = 0; i < n; i++) {
		struct v05_ring_hdr *r = v05__lane(seg, i);
		struct v05_ring_cons *c = &l->cons[i];

		v05__ring_cons_init(c, r, v05__lane_records(r),
				    seg->hdr.geo.lane_capacity,
				    sizeof(struct v05_record));
		/* The head in the lane is the producer's to write (it is its
		 * page): resume from the owner's own copy, and publish it
		 * again for the producer. Relaxed: the owner is the only
		 * writer of lane_own; R1 orders the published copy. */
		c->head = v05_load_relaxed(&seg->lane_own[i].head);
		c->tail_cache = c->head;
		v05_store_release(&r->head, c->head); /* R1 */
	}
	return 0;
}

void v05__lanes_fini(struct v05_lanes *l)
{
	free(l->cons);
	l->cons = NULL;
}

/* Lanes always hold struct v05_record (the geometry fixes the element
 * size), so a slot is an index, not a multiply by the ring's esz. */
static inline const struct v05_record *lane_rec(const struct v05_ring_cons *c,
						uint32_t j)
{
	return (const struct v05_record *)(const void *)c->slots +
	       ((c->head + j) & c->mask);
}

/*
 * A private copy of a record, field by field. (gcc expands a 32-byte memcpy
 * into vector moves that ThreadSanitizer does not see; these loads it does,
 * so the thread stress test checks the ring's publication order.)
 */
static inline void record_copy(struct v05_record *dst,
			       const struct v05_record *src)
{
	dst->key = src->key;
	dst->timestamp_ns = src->timestamp_ns;
	dst->sample = src->sample;
	dst->reward = src->reward;
	dst->flags = src->flags;
	dst->seq = src->seq;
}

/*
 * Claims are counted by the owner, as observed: a lane's owner word that
 * differs from the one seen last (a producer that comes and goes between
 * two looks is not seen). Looked at once per drained batch and at each
 * reclaim check. Relaxed: the owner is the only writer of lane_own, and
 * the word is only compared.
 */
static inline void observe_owner(struct v05_lane_own *own, uint64_t owner)
{
	if (owner == v05_load_relaxed(&own->owner_seen))
		return;
	if (owner)
		v05_store_relaxed(&own->claims, v05_load_relaxed(&own->claims) + 1);
	v05_store_relaxed(&own->owner_seen, owner);
}

/* Far enough ahead to hide a DRAM access behind the records between:
 * stage 0 (the table entry) at 8, stage 1 (the slot it names) at 4. */
#define PREFETCH_FAR 8u
#define PREFETCH_NEAR 4u

/* One lane, up to max records. */
static uint32_t drain_lane(struct v05_lanes *l, uint32_t i, uint32_t max,
			   v05_record_fn fn, void *ctx)
{
	struct v05_ring_cons *c = &l->cons[i];
	int64_t avail = v05__ring_cons_avail(c);
	uint32_t n, fill;

	struct v05_lane_own *own = &l->seg->lane_own[i];

	if (avail < 0) {
		/* The producer claims more than the lane holds: its records
		 * are garbage. Skip them all; the lane keeps working. */
		count(l, V05_C_LANE_OVERRUNS, 1);
		v05_store_relaxed(&own->head, c->tail_cache);
		v05__ring_cons_resync(c);
		return 0;
	}
	if (avail == 0)
		return 0;
	fill = (uint32_t)avail;
	/* Relaxed: consumer-only statistics, in owner-only memory. */
	if (fill > v05_load_relaxed(&own->high_water))
		v05_store_relaxed(&own->high_water, fill);
	n = fill < max ? fill : max;
	observe_owner(own, v05_load_relaxed(&c->r->owner));
	for (uint32_t j = 0; j < n; j++) {
		struct v05_record rec;

		if (l->prefetch) {
			/* Relaxed: hints only; each record is copied and
			 * checked when its turn comes. */
			if (j + PREFETCH_FAR < n)
				l->prefetch(ctx, v05_load_relaxed(
					&lane_rec(c, j + PREFETCH_FAR)->key), 0);
			if (j + PREFETCH_NEAR < n)
				l->prefetch(ctx, v05_load_relaxed(
					&lane_rec(c, j + PREFETCH_NEAR)->key), 1);
		}
		record_copy(&rec, lane_rec(c, j));
		/* seq is the index the producer library wrote the record at;
		 * a mismatch or unknown flags mean bytes it did not write. */
		if (rec.seq != c->head + j || rec.flags != 0) {
			count(l, V05_C_REJ_CORRUPT, 1);
			continue;
		}
		fn(ctx, &rec, i);
	}
	/* After fn: exactly once. The owner's copy first: a takeover
	 * resumes from it, and the batch is applied; then the producer's. */
	v05_store_relaxed(&own->head, c->head + n);
	v05__ring_cons_release(c, n); /* R1 */
	v05_store_relaxed(&own->consumed, v05_load_relaxed(&own->consumed) + n);
	return n;
}

uint32_t v05__lanes_drain(struct v05_lanes *l, uint32_t budget, uint32_t batch,
			  v05_record_fn fn, void *ctx)
{
	uint32_t total = 0;
	bool progress = true;

	while (total < budget && progress) {
		progress = false;
		for (uint32_t k = 0; k < l->n && total < budget; k++) {
			uint32_t i = (l->rr + k) % l->n;
			uint32_t want = budget - total < batch ? budget - total : batch;
			uint32_t got = drain_lane(l, i, want, fn, ctx);

			total += got;
			progress |= got > 0;
		}
		l->rr = (l->rr + 1) % l->n;
	}
	return total;
}

bool v05__lanes_pending(struct v05_lanes *l)
{
	for (uint32_t i = 0; i < l->n; i++) {
		struct v05_ring_cons *c = &l->cons[i];

		/* A2 on every tail: after the doorbell's F2 this is the
		 * re-check that makes sleeping safe. */
		if (v05_load_acquire(&c->r->tail) != c->head)
			return true;
	}
	return false;
}

uint32_t v05__lanes_reclaim(struct v05_lanes *l, bool force, v05_record_fn fn,
			    void *ctx)
{
	uint64_t now = v05__now_ns();
	uint32_t reclaimed = 0;

	if (!force && now < l->next_reclaim_ns)
		return 0;
	l->next_reclaim_ns = now + V05_RECLAIM_INTERVAL_NS;
	for (uint32_t i = 0; i < l->n; i++) {
		struct v05_ring_hdr *r = l->cons[i].r;
		struct v05_lane_own *own = &l->seg->lane_own[i];
		/* Acquire: pairs with the claim CAS (A3's release half), so a
		 * dead owner's last tail store is visible to the drain below.
		 * The word is in the lane's own page: only the producer that
		 * holds the lane can write it (its peers do not map it), so
		 * no other producer can make a live one look dead. */
		uint64_t owner = v05_load_acquire(&r->owner);

		observe_owner(own, owner);
		if (owner == 0 || v05__owner_alive(owner))
			continue;
		/* Dead: its tail is final. Drain what it published, then free
		 * the lane (R3). A producer that died mid-write never stored
		 * the tail covering the half-written record: never read. */
		while (drain_lane(l, i, UINT32_MAX, fn, ctx))
			;
		if (v05_cas_acq_rel(&r->owner, &owner, 0)) {
			count(l, V05_C_LANE_RECLAIMS, 1);
			v05_store_relaxed(&own->reclaims,
					  v05_load_relaxed(&own->reclaims) + 1);
			v05_store_relaxed(&own->owner_seen, 0);
			reclaimed++;
		}
	}
	v05__lanes_sum_claims(l);
	return reclaimed;
}

void v05__lanes_sum_claims(struct v05_lanes *l)
{
	uint64_t sum = 0;

	/* Relaxed: statistics the owner keeps in its own memory. */
	for (uint32_t i = 0; i < l->n; i++)
		sum += v05_load_relaxed(&l->seg->lane_own[i].claims);
	v05_store_relaxed(&l->seg->state->counters[V05_C_LANE_CLAIMS], sum);
}
