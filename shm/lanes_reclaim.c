/* SPDX-License-Identifier: MIT */
/* The consumer's lanes (lanes.h), taken back: a cut lane released once
 * its producer is gone and its backoff over, a granted lane's end, and a
 * dead producer's lane drained and freed. */
#include "lanes.h"

#include "lanes_consumer.h"
#include "proc.h"

/*
 * A cut lane whose producer quit or died: drop what it published, unread,
 * and free the lane for the next claim, which starts with an empty lane.
 */
static void cut_release(struct v05_lanes *l, uint32_t i)
{
	struct v05_ring_hdr *r = v05__lane(l->seg, i);
	struct v05_lane_own *own = &l->seg->lane_own[i];
	struct v05_ring_cons *c = &l->cons[i];
	/* A2: the tail the producer published last (before its quit, which
	 * the caller read with A6); all of it is dropped. */
	uint32_t tail = v05_load_acquire(&r->tail);
	uint32_t left = tail - v05_load_relaxed(&own->head);

	/* A producer can publish any tail: count at most a lane's worth. */
	if (left > c->mask + 1)
		left = c->mask + 1;
	count_discarded(own, left);
	v05_store_relaxed(&own->head, tail);
	c->r = r;
	c->head = tail;
	c->tail_cache = tail;
	v05_store_release(&r->head, tail); /* R1 */
	v05_store_relaxed(&r->quit, 0);
	v05_store_relaxed(&own->cut_owner, 0);
	v05_store_relaxed(&own->cut, 0u);
	v05_store_relaxed(&own->win_records, 0);
	v05_store_relaxed(&own->win_rejected, 0);
	v05_store_relaxed(&own->owner_seen, 0);
	/* R3: the head and quit word above before the next claimer's A3. */
	v05_store_release(&r->owner, 0);
}

/*
 * Lane i, granted: if its grant g ended (its producer left) or the
 * consumer ended it itself and has not yet given it back, and the broker
 * is not granting the lane again, drain what the producer published up
 * to the tail it shows now and map the lane's file back. Acquire on the
 * grant: pairs with the broker's release, after the peer and before the
 * post. Acquire (E1) on its end: pairs with the broker's release, after
 * it saw the producer's connection close (the producer's last tail came
 * before) and after the grant's post, which is mapped first if the
 * consumer had not looked since.
 */
static void end_grant(struct v05_lanes *l, uint32_t i, v05_record_fn fn,
		      void *ctx)
{
	struct v05_lane_own *own = &l->seg->lane_own[i];
	uint32_t g = v05_load_acquire(&own->grant);
	uint32_t e = v05_load_acquire(&own->grant_end);

	if ((e != g && e != (g | V05_GRANT_TAKEN)) || !v05__grant_take(own, g))
		return;
	v05__lanes_install_lane(l, i);
	if (v05__lanes_view_grant(l, i) == g)
		v05__lanes_drain_upto(l, i, fn, ctx);
	/* Unless the drain cut it off (and so gave it back already). */
	if (v05__lane_granted(own))
		v05__lanes_revert(l, i, g);
}

void v05__lanes_end_grants(struct v05_lanes *l, v05_record_fn fn, void *ctx)
{
	/* Acquire (E2): pairs with the broker's release increments; one
	 * look at every lane for all the ends signalled so far (one
	 * signalled after the exchange is looked at next time). */
	if (!v05_exchange_acq_rel(&l->seg->grants_ended, 0u))
		return;
	for (uint32_t i = 0; i < l->n; i++)
		if (v05__lane_granted(&l->seg->lane_own[i]))
			end_grant(l, i, fn, ctx);
}

uint32_t v05__lanes_reclaim(struct v05_lanes *l, bool force, v05_record_fn fn,
			    void *ctx)
{
	uint64_t now = v05__now_ns();

	if (force)
		l->next_reclaim_ns = 0;
	return v05__lanes_reclaim_at(l, now, fn, ctx);
}

uint32_t v05__lanes_reclaim_at(struct v05_lanes *l, uint64_t now,
			       v05_record_fn fn, void *ctx)
{
	uint32_t reclaimed = 0;

	if (now < l->next_reclaim_ns)
		return 0;
	l->next_reclaim_ns = now + V05_RECLAIM_INTERVAL_NS;
	install(l);
	for (uint32_t i = 0; i < l->n; i++) {
		struct v05_ring_hdr *r = v05__lane(l->seg, i);
		struct v05_lane_own *own = &l->seg->lane_own[i];
		uint64_t owner;

		if (v05__lane_granted(own)) {
			/* A granted lane lives as long as its producer's
			 * connection, which the broker watches (its owner
			 * word is the producer's to write: not looked at).
			 * Its end is looked at as soon as the broker signals
			 * it; here again, for one given back too late (the
			 * file could not be mapped). */
			end_grant(l, i, fn, ctx);
			continue;
		}
		/* Relaxed: owner-only. */
		if (v05_load_relaxed(&own->cut)) {
			uint64_t cut = v05_load_relaxed(&own->cut_owner);

			/* Given back once its backoff is over and its producer
			 * is gone: quit (A6: pairs with the producer's R6, its
			 * word into quit at close, so its last tail is what
			 * cut_release drops), dead, or none that the consumer
			 * could name (it wrote 0 or the owner's own word).
			 * Any value a producer writes there can only free its
			 * own lane early, never before the backoff. */
			if (now >= v05_load_relaxed(&own->cut_until_ns) &&
			    (!cut || cut == v05_load_relaxed(&l->seg->ctl->owner) ||
			     v05_load_acquire(&r->quit) == cut ||
			     !v05__owner_alive(cut)))
				cut_release(l, i);
			continue;
		}
		/* Acquire: pairs with the claim CAS (A3's release half), so a
		 * dead owner's last tail store is visible to the drain below.
		 * The word is in the lane's own page: only the producer that
		 * holds the lane can write it (its peers do not map it), so
		 * no other producer can make a live one look dead. */
		owner = v05_load_acquire(&r->owner);

		observe_owner(l, i, own, owner);
		/* MOVED: being granted right now (the broker's). */
		if (owner == 0 || owner == V05_OWNER_MOVED ||
		    v05__owner_alive(owner))
			continue;
		/* Dead: its tail is final. Drain what it published, then free
		 * the lane (R3). A producer that died mid-write never stored
		 * the tail covering the half-written record: never read. */
		v05__lanes_drain_upto(l, i, fn, ctx);
		if (v05_cas_acq_rel(&r->owner, &owner, 0)) {
			report(l, V05_LANE_RECLAIM, i, 1);
			v05_store_relaxed(&own->reclaims,
					  v05_load_relaxed(&own->reclaims) + 1);
			v05_store_relaxed(&own->owner_seen, 0);
			reclaimed++;
		}
	}
	return reclaimed;
}
