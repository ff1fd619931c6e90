/* SPDX-License-Identifier: MIT */
/*
 * Producer lanes, consumer side (the plugin): round-robin batched draining,
 * record checks, and the reclaim of lanes whose producer died.
 *
 * Lane ownership (R3/A3): a producer claims a lane with an acquire CAS of
 * its owner word from 0 to its own word, and gives it back with a release
 * store of 0 (close) — or the consumer does, after draining what a dead
 * producer published, with a release CAS from the dead word to 0. Either
 * release orders the last tail the lane saw before the next claim's acquire.
 *
 * Cutting a lane off (at the plugin's request, v05__lanes_cut): the
 * consumer takes the lane from its producer with a CAS of the owner word
 * from the producer's word to V05_OWNER_CUT, which no claim takes, and
 * stops reading the lane (it looks empty to every drain, check and wait).
 * The producer's next push sees its word gone and fails. When that
 * producer has quit (its close stores its word in the lane's quit word) or
 * died, the consumer drops what the lane holds unread and frees it (R3):
 * the next claim starts on an empty lane and a window of its own.
 */
#ifndef V05_SHM_LANES_H
#define V05_SHM_LANES_H

#include <stdbool.h>
#include <stdint.h>

#include "atomics.h"
#include "ring.h"
#include "segment.h"

/* How often the consumer checks lane owners for death. */
#define V05_RECLAIM_INTERVAL_NS 50000000ull

/* Most records handed to a v05_record_fn at once (a drain's batch is
 * capped to it): the private copies live on the consumer's stack. */
#define V05_LANE_BATCH_MAX 64u

/*
 * Called with n (1..V05_LANE_BATCH_MAX) consecutive records of one lane
 * that passed the lane checks, in lane order: private copies, so the
 * producer cannot change them between check and use. One call per batch,
 * so the callee can look ahead (prefetch) and the call is paid once.
 */
typedef void (*v05_record_fn)(void *ctx, const struct v05_record *recs,
			      uint32_t n, uint32_t lane);

/*
 * What the lanes report instead of counting it themselves (the counters
 * and their names are the caller's): n records of a lane that failed the
 * checks (bytes the producer library did not write), a lane whose producer
 * claimed more than it holds (its records skipped), a dead producer's lane
 * freed, a new owner word seen on a lane (a claim).
 */
enum v05_lane_event {
	V05_LANE_CORRUPT,
	V05_LANE_OVERRUN,
	V05_LANE_RECLAIM,
	V05_LANE_CLAIM,
	V05_LANE_CUT,     /* a claim was cut off (v05__lanes_cut)       */
};
typedef void (*v05_lane_event_fn)(void *ctx, enum v05_lane_event ev,
				  uint32_t lane, uint32_t n);

struct v05_lanes {
	struct v05_segment *seg;
	struct v05_ring_cons *cons; /* one per lane */
	v05_lane_event_fn event;    /* optional; called with event_ctx */
	void *event_ctx;
	uint32_t n;
	uint32_t rr;                /* next lane to drain first */
	uint64_t next_reclaim_ns;
	/* What a cut lane's consumer points at instead of the lane: a
	 * private ring header whose tail never moves, so the lane looks
	 * empty to the drain, v05__lanes_pending and the wait at no cost
	 * on their paths. Never written. */
	struct v05_ring_hdr parked;
};

int v05__lanes_init(struct v05_lanes *l, struct v05_segment *seg);
void v05__lanes_fini(struct v05_lanes *l);

/*
 * Drain up to budget records, at most batch (capped to V05_LANE_BATCH_MAX)
 * per lane per turn, starting one lane further each call. A lane's head
 * advances only after fn returned for its records (exactly once across a
 * crash of the consumer: at most the batch in hand is replayed). Returns
 * the records handed to fn or rejected.
 */
uint32_t v05__lanes_drain(struct v05_lanes *l, uint32_t budget, uint32_t batch,
			  v05_record_fn fn, void *ctx);

/*
 * Cut lane off: from a v05_record_fn or an event callback of that lane's
 * drain only. The decision is the caller's, on owner-only state; the lane
 * is taken whatever its owner word says (-> V05_OWNER_CUT, which tells an
 * honest producer why its next push fails), reported (V05_LANE_CUT) and,
 * once its batch is given back, no longer read: a granted lane goes back
 * to its file at once, a file lane stays parked until its producer is gone
 * and its cut_until_ns (the caller's, CLOCK_MONOTONIC) has passed. false,
 * and nothing done, for
 * a lane already cut or claimed by a producer of this process (the
 * segment's inproc flags, set by that producer).
 */
bool v05__lanes_cut(struct v05_lanes *l, uint32_t lane);

/* Is lane own granted by the broker (a memfd in place of its file)?
 * Acquire: pairs with the broker's release of grant (and our own release
 * of reverted). */
static inline bool v05__lane_granted(const struct v05_lane_own *own)
{
	return v05_load_acquire(&own->grant) != v05_load_acquire(&own->reverted);
}

/*
 * The end of a grant, decided by one word: lane_own.grant_end. The broker
 * stores the grant's number there when its producer's connection ends
 * (E1, a release CAS: pairs with the consumer's acquire, so what the
 * producer published before it left, and the grant's post, are seen).
 * From then on whoever moves the word off that number first has the lane:
 * the consumer, to map its file back and free it (| V05_GRANT_TAKEN), or
 * the broker, to grant it again as a new memfd, the consumer having
 * drained it (| V05_GRANT_AGAIN). The other leaves the lane alone. The
 * consumer also takes a grant still live that it ends itself (a cut-off, a
 * memfd it cannot map); the broker's end then leaves the word as it is.
 * Grant numbers are the low 30 bits, never 0 (a lane never granted).
 */
#define V05_GRANT_NUM 0x3fffffffu
#define V05_GRANT_AGAIN 0x40000000u
#define V05_GRANT_TAKEN 0x80000000u

static inline uint32_t v05__grant_next(uint32_t g)
{
	g = (g + 1) & V05_GRANT_NUM;
	return g ? g : 1;
}

/* The consumer takes grant g's lane: true if it is the consumer's (now or
 * already), false if the broker is granting it again. acq_rel, as the
 * broker's CAS: one of the two wins. */
static inline bool v05__grant_take(struct v05_lane_own *own, uint32_t g)
{
	uint32_t e = v05_load_acquire(&own->grant_end);

	for (;;) {
		if (e == (g | V05_GRANT_TAKEN))
			return true;
		if (e == (g | V05_GRANT_AGAIN))
			return false;
		if (v05_cas_acq_rel(&own->grant_end, &e, g | V05_GRANT_TAKEN))
			return true;
	}
}

/* Lane i's grant g is over and taken (v05__grant_take): its file mapped
 * back in place of the memfd, empty at the consumer's head, and free; what
 * the memfd held past the head is dropped, counted. The consumer's thread
 * only. false if the file could not be mapped (tried again later). */
bool v05__lanes_revert(struct v05_lanes *l, uint32_t lane, uint32_t g);

/* The grant the view maps over lane i (0: its file), and its peer's uid:
 * the cut-off's window and whom it backs off (plugin/guard.c). Relaxed:
 * the consumer's own words. */
static inline uint32_t v05__lanes_view_grant(const struct v05_lanes *l,
					     uint32_t i)
{
	return v05_load_relaxed(&l->seg->view_grant[i]);
}

static inline uint32_t v05__lanes_view_uid(const struct v05_lanes *l,
					   uint32_t i)
{
	return l->seg->view_uid[i];
}

/* Has the broker signalled a grant's end not yet looked at? One relaxed
 * load (a hint; v05__lanes_end_grants' exchange decides). */
static inline bool v05__lanes_ends_pending(const struct v05_lanes *l)
{
	return v05_load_relaxed(&l->seg->grants_ended) != 0;
}

/* The grants whose end the broker signalled: each drained up to the tail
 * its producer left and its file mapped back, unless the broker grants it
 * again (v05__grant_take). The consumer's thread: from v05_poll, at once
 * after an end (the broker rings the doorbell for it). */
void v05__lanes_end_grants(struct v05_lanes *l, v05_record_fn fn, void *ctx);

/* Any published record not yet drained, or a grant's end not yet looked
 * at? (acquire loads of every tail) */
bool v05__lanes_pending(struct v05_lanes *l);

/* Drain and free the lanes of dead producers; returns lanes reclaimed.
 * Rate-limited to V05_RECLAIM_INTERVAL_NS unless force. */
uint32_t v05__lanes_reclaim(struct v05_lanes *l, bool force, v05_record_fn fn,
			    void *ctx);

/* The same, not forced, at a time the caller already read (the poll's
 * clock): a poll with no reclaim due reads no clock for it. */
uint32_t v05__lanes_reclaim_at(struct v05_lanes *l, uint64_t now,
			       v05_record_fn fn, void *ctx);

/*
 * A producer on a mapping this process already has (the plugin's own, for
 * reward threads inside the engine process): no second mapping, the caller
 * keeps seg mapped until the producer is closed.
 */
int v05__producer_open_mapped(struct v05_segment *seg, unsigned flags,
			      struct v05_producer **out);

#endif
