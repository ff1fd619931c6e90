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

		v05__ring_cons_init(&l->cons[i], r, v05__lane_records(r),
				    seg->hdr.geo.lane_capacity,
				    sizeof(struct v05_record));
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

	if (avail < 0) {
		/* The producer claims more than the lane holds: its records
		 * are garbage. Skip them all; the lane keeps working. */
		count(l, V05_C_LANE_OVERRUNS, 1);
		v05__ring_cons_resync(c);
		return 0;
	}
	if (avail == 0)
		return 0;
	fill = (uint32_t)avail;
	/* Relaxed: consumer-only statistics. */
	if (fill > v05_load_relaxed(&c->r->high_water))
		v05_store_relaxed(&c->r->high_water, fill);
	n = fill < max ? fill : max;
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
	v05__ring_cons_release(c, n); /* after fn: exactly once */
	v05_store_relaxed(&c->r->consumed, v05_load_relaxed(&c->r->consumed) + n);
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
		/* Acquire: pairs with the claim CAS (A3's release half), so a
		 * dead owner's last tail store is visible to the drain below. */
		uint64_t owner = v05_load_acquire(&r->owner);

		if (owner == 0 || v05__owner_alive(owner))
			continue;
		/* Dead: its tail is final. Drain what it published, then free
		 * the lane (R3). A producer that died mid-write never stored
		 * the tail covering the half-written record: never read. */
		while (drain_lane(l, i, UINT32_MAX, fn, ctx))
			;
		if (v05_cas_acq_rel(&r->owner, &owner, 0)) {
			count(l, V05_C_LANE_RECLAIMS, 1);
			reclaimed++;
		}
	}
	v05__lanes_sum_claims(l);
	return reclaimed;
}

void v05__lanes_sum_claims(struct v05_lanes *l)
{
	uint64_t sum = 0;

	/* Relaxed: statistics; each lane's claimer bumps its own count. */
	for (uint32_t i = 0; i < l->n; i++)
		sum += v05_load_relaxed(&l->cons[i].r->claims);
	v05_store_relaxed(&l->seg->state->counters[V05_C_LANE_CLAIMS], sum);
}
