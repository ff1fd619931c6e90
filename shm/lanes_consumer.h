/* SPDX-License-Identifier: MIT */
/*
 * What the consumer's two files of lanes share (lanes.c: set-up, grants,
 * the drain; lanes_reclaim.c: cuts, releases, reclaims): an event
 * reported, the broker's grants installed when pending, a claim observed,
 * the records a lane holds, the records dropped. Not installed.
 */
#ifndef V05_SHM_LANES_CONSUMER_H
#define V05_SHM_LANES_CONSUMER_H

#include "atomics.h"
#include "lanes.h"

static inline void report(struct v05_lanes *l, enum v05_lane_event ev,
			  uint32_t lane, uint32_t n)
{
	if (l->event)
		l->event(l->event_ctx, ev, lane, n);
}

/* lanes.c: map the grants the broker made since the last look; lane i's
 * only. */
void v05__lanes_install_grants(struct v05_lanes *l);
void v05__lanes_install_lane(struct v05_lanes *l, uint32_t i);

static inline void install(struct v05_lanes *l)
{
	/* Relaxed: a hint; the exchange in v05__lanes_install_grants
	 * decides. */
	if (__builtin_expect(v05_load_relaxed(&l->seg->grants_pending) != 0, 0))
		v05__lanes_install_grants(l);
}

/*
 * Claims are counted by the owner, as observed: a lane's owner word that
 * differs from the one seen last (a producer that comes and goes between
 * two looks is not seen). Looked at once per drained batch and at each
 * reclaim check. Relaxed: the owner is the only writer of lane_own, and
 * the word is only compared.
 */
static inline void observe_owner(struct v05_lanes *l, uint32_t lane,
				 struct v05_lane_own *own, uint64_t owner)
{
	if (owner == v05_load_relaxed(&own->owner_seen))
		return;
	if (owner) {
		v05_store_relaxed(&own->claims, v05_load_relaxed(&own->claims) + 1);
		report(l, V05_LANE_CLAIM, lane, 1);
	}
	v05_store_relaxed(&own->owner_seen, owner);
}

/* Records lane i holds beyond the consumer's head: at most a lane's worth,
 * whatever its producer published. */
static inline uint32_t lane_left(struct v05_lanes *l, uint32_t i)
{
	struct v05_ring_cons *c = &l->cons[i];
	/* A2: the tail the producer published last. */
	uint32_t left = v05_load_acquire(&c->r->tail) - c->head;

	return left > c->mask + 1 ? c->mask + 1 : left;
}

static inline void count_discarded(struct v05_lane_own *own, uint32_t n)
{
	/* Relaxed: owner-only statistics. */
	v05_store_relaxed(&own->discarded, v05_load_relaxed(&own->discarded) + n);
}

/* lanes.c: drain lane i up to the tail it shows now, at most a lane's
 * worth. */
void v05__lanes_drain_upto(struct v05_lanes *l, uint32_t i, v05_record_fn fn,
			   void *ctx);

#endif
