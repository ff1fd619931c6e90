/* SPDX-License-Identifier: MIT */
/* The consumer's lanes (lanes.h): set up and torn down, the broker's
 * grants installed and reverted, the drain, and a lane cut off. A cut
 * lane's release and the reclaim of a dead producer's lane are
 * lanes_reclaim.c's. */
#include "lanes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "lanes_consumer.h"
#include "proc.h"

/* A cut lane's consumer reads the private parked header (lanes.h): its
 * tail, 0, equals the head given here, so the lane looks empty. The
 * lane's own head stays in the owner's statistics (own->head). */
static void park(struct v05_lanes *l, uint32_t i)
{
	struct v05_ring_cons *c = &l->cons[i];

	c->r = &l->parked;
	c->head = 0;
	c->tail_cache = 0;
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
		/* Granted by a previous owner's broker: its memfd died with
		 * that owner (the producer pushes again what was not drained,
		 * to our broker). The lane is its file again (the view maps
		 * the files: nothing to drop). */
		seg->view_grant[i] = 0;
		if (v05__lane_granted(&seg->lane_own[i]))
			v05__lanes_revert(l, i,
					  v05_load_acquire(&seg->lane_own[i].grant));
		/* Cut off by a previous owner: still not read (relaxed, as
		 * the head above). */
		else if (v05_load_relaxed(&seg->lane_own[i].cut))
			park(l, i);
	}
	return 0;
}

/*
 * Grant gp of lane i (its post taken): its memfd mapped over the lane's
 * pages of the view in place of what the view mapped there, one mmap
 * MAP_FIXED (the consumer's thread alone remaps the view, between drains:
 * nothing reads the lane meanwhile). That is the lane's file, empty at the
 * consumer's head (the broker takes only a drained file), or the memfd of
 * an earlier grant whose producer left and which the broker found drained:
 * what that one holds past our head came after its producer left, and is
 * dropped, counted. From now on the lane is read from the grant's head.
 */
static void map_grant(struct v05_lanes *l, uint32_t i,
		      const struct v05_grant_post *gp)
{
	struct v05_segment *seg = l->seg;
	struct v05_lane_own *own = &seg->lane_own[i];
	struct v05_ring_cons *c = &l->cons[i];
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	uint32_t left = seg->view_grant[i] && c->r != &l->parked ?
			lane_left(l, i) : 0;

	/* Relaxed: our own word. Given back already: nothing to map. */
	if (gp->grant == v05_load_relaxed(&own->reverted))
		return;
	if (mmap(seg->base + v05__lane_offset(seg, i), stride,
		 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, gp->fd, 0) ==
	    MAP_FAILED) {
		/* Cannot be mapped (out of memory): the grant ends, as if its
		 * producer had left, unless the broker is granting the lane
		 * again; the broker then ends the connection (it sees the
		 * lane given back) and the producer pushes what it holds
		 * again, to a later grant. */
		if (v05__grant_take(own, gp->grant))
			v05__lanes_revert(l, i, gp->grant);
		return;
	}
	count_discarded(own, left);
	c->r = v05__lane(seg, i);
	c->head = gp->head;
	c->tail_cache = gp->head;
	/* The grant's window and cut-off state start empty (relaxed:
	 * owner-only, this thread their writer); its head is the owner's
	 * copy a takeover resumes from. */
	v05_store_relaxed(&own->head, gp->head);
	v05_store_relaxed(&own->cut, 0u);
	v05_store_relaxed(&own->win_records, 0);
	v05_store_relaxed(&own->win_rejected, 0);
	v05_store_relaxed(&own->owner_seen, 0);
	seg->view_uid[i] = gp->uid;
	/* Release (V1): the head above before the broker's acquire of the
	 * grant the view maps (broker_grant.c), which compares it. */
	v05_store_release(&seg->view_grant[i], gp->grant);
}

void v05__lanes_install_lane(struct v05_lanes *l, uint32_t i)
{
	struct v05_segment *seg = l->seg;
	/* Acquire: pairs with the broker's release exchange (P1), after it
	 * wrote the post and the memfd's ring header. */
	struct v05_grant_post *gp = v05_exchange_acq_rel(&seg->grant_post[i], NULL);

	if (!gp)
		return;
	v05_fetch_add_relaxed(&seg->grants_pending, (uint32_t)-1);
	map_grant(l, i, gp);
	close(gp->fd);
	free(gp);
}

/* The grants the broker made since the last look, mapped (one relaxed load
 * when none is waiting: called before every drain, pending check and
 * look). */
__attribute__((noinline)) void v05__lanes_install_grants(struct v05_lanes *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		v05__lanes_install_lane(l, i);
}

/*
 * Lane i's grant g is over and the consumer's (its producer left, it was
 * cut off, or the owner that granted it died): map the lane's file back
 * over its pages in place of the memfd (one mmap MAP_FIXED), empty at the
 * consumer's head, and free it. What the memfd still holds past the head
 * is dropped, counted; the producer that held it keeps a memfd no one
 * reads any more. The consumer's own thread, between drains: nothing
 * reads the lane meanwhile.
 */
bool v05__lanes_revert(struct v05_lanes *l, uint32_t i, uint32_t g)
{
	struct v05_segment *seg = l->seg;
	struct v05_lane_own *own = &seg->lane_own[i];
	struct v05_ring_cons *c = &l->cons[i];
	uint64_t stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	/* Relaxed: the consumer's own words. */
	uint32_t head = v05_load_relaxed(&own->head);
	uint32_t left = seg->view_grant[i] && c->r != &l->parked ?
			lane_left(l, i) : 0;
	struct v05_ring_hdr *r;

	if (i >= seg->nlane_fd ||
	    mmap(seg->base + v05__lane_offset(seg, i), stride,
		 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, seg->lane_fd[i],
		 0) == MAP_FAILED)
		return false; /* tried again at the next look */
	count_discarded(own, left);
	r = v05__lane(seg, i);
	/* The file's words, MOVED since the grant: no producer claims it
	 * before the release below. */
	v05_store_relaxed(&r->quit, 0);
	v05_store_relaxed(&r->tail, head);
	v05_store_release(&r->head, head); /* R1 */
	c->r = r;
	c->head = head;
	c->tail_cache = head;
	/* The grant's window and cut-off state end with it (relaxed:
	 * owner-only, this thread their writer). */
	v05_store_relaxed(&own->cut, 0u);
	v05_store_relaxed(&own->win_records, 0);
	v05_store_relaxed(&own->win_rejected, 0);
	v05_store_relaxed(&own->owner_seen, 0);
	/* Relaxed: the broker compares it only after the acquire of
	 * reverted below orders it. */
	v05_store_relaxed(&seg->view_grant[i], 0u);
	/* Release: pairs with the broker's acquire (granted(), expire): the
	 * file is mapped back before it may grant the lane again or drops
	 * the memfd. g, the grant taken: the broker makes no other while it
	 * is ours (lanes.h). */
	v05_store_release(&own->reverted, g);
	/* R3: the head and tail above before the next claimer's A3. */
	v05_store_release(&r->owner, 0);
	return true;
}

void v05__lanes_fini(struct v05_lanes *l)
{
	free(l->cons);
	l->cons = NULL;
}

/*
 * A private copy of a record: the producer may rewrite its lane at any
 * time, so the record is checked and applied from this copy, never from
 * the lane. Two 16-byte moves; under ThreadSanitizer, which does not see
 * the vector moves gcc makes of a 32-byte memcpy, field by field, so the
 * thread stress test checks the ring's publication order.
 */
static inline void record_copy(struct v05_record *dst,
			       const struct v05_record *src)
{
#ifndef V05_TSAN
	memcpy(dst, src, sizeof(*dst));
#else
	dst->key = src->key;
	dst->gen = src->gen;
	dst->sample = src->sample;
	dst->reward = src->reward;
	dst->flags = src->flags;
	dst->seq = src->seq;
	dst->zero = src->zero;
#endif
}

/* Nonzero if the copy r, read at lane index seq, holds bytes the producer
 * library did not write: its seq is the index the library wrote it at, its
 * flags one of the record kinds (layout.h) and its zero word 0. One test
 * for all three (they share the record's line). */
static inline uint32_t record_bad(const struct v05_record *r, uint32_t seq)
{
	return (r->seq ^ seq) | (r->flags & ~V05_RECORD_KINDS) | r->zero;
}

/*
 * Copy n consecutive records out of the lane (from index seq on) and OR
 * their tests into the result. Record by record, two 16-byte moves each:
 * a whole-run memcpy became `rep movsq`, whose start-up cost dominated a
 * batch of 8 (perf annotate); the test in the same loop keeps the loop
 * from being turned back into one.
 */
static inline uint32_t copy_run(struct v05_record *dst,
				const struct v05_record *src, uint32_t n,
				uint32_t seq)
{
	uint32_t bad = 0;

	for (uint32_t j = 0; j < n; j++) {
		record_copy(&dst[j], &src[j]);
		bad |= record_bad(&dst[j], seq + j);
	}
	return bad;
}

/* Lane i was cut off during its drain: a granted lane goes back to its
 * file now (what its memfd holds dropped); a file lane is parked until its
 * producer is gone and its backoff is over (v05__lanes_reclaim_at). */
static void cut_done(struct v05_lanes *l, uint32_t i)
{
	struct v05_lane_own *own = &l->seg->lane_own[i];
	uint32_t g = v05__lanes_view_grant(l, i);

	/* The grant the view maps is the one cut (taken unless the broker
	 * grants the lane again: then the cut grant's producer had left, and
	 * the next grant's post unparks the lane). */
	if (g && v05__grant_take(own, g) && v05__lanes_revert(l, i, g))
		return;
	park(l, i);
}

/*
 * One lane, up to max records, known to hold avail (> 0) of them: copy,
 * check, hand to fn, then give the slots back with one release store.
 */
static inline __attribute__((always_inline)) uint32_t
drain_lane_slow(struct v05_lanes *l, uint32_t i, uint32_t max,
		uint32_t avail, v05_record_fn fn, void *ctx)
{
	struct v05_ring_cons *c = &l->cons[i];
	struct v05_lane_own *own = &l->seg->lane_own[i];
	const struct v05_record *slots = (const void *)c->slots;
	struct v05_record recs[V05_LANE_BATCH_MAX];
	uint32_t head = c->head, mask = c->mask, ok = 0;
	uint32_t n = avail < max ? avail : max;

	if (avail > mask + 1) {
		/* The producer claims more than the lane holds: its records
		 * are garbage. Skip them all; the lane keeps working. */
		report(l, V05_LANE_OVERRUN, i, 1);
		v05_store_relaxed(&own->head, c->tail_cache);
		v05__ring_cons_resync(c);
		return 0;
	}
	/* Relaxed: consumer-only statistics, in owner-only memory. */
	if (avail > v05_load_relaxed(&own->high_water))
		v05_store_relaxed(&own->high_water, avail);
	observe_owner(l, i, own, v05_load_relaxed(&c->r->owner));
	if (n > V05_LANE_BATCH_MAX)
		n = V05_LANE_BATCH_MAX;
	/* Copy, in at most two straight runs (up to the lane's end, then
	 * from its start), and check the copies: the producer may rewrite
	 * its lane at any time, the copies it cannot. The tests are ORed;
	 * only a batch with a bad record is compacted. */
	{
		uint32_t at = head & mask, first = mask + 1 - at, bad = 0;

		if (first > n)
			first = n;
		bad = copy_run(recs, &slots[at], first, head);
		if (first < n)
			bad |= copy_run(recs + first, slots, n - first,
					head + first);
		ok = n;
		if (bad) {
			ok = 0;
			for (uint32_t j = 0; j < n; j++)
				if (!record_bad(&recs[j], head + j))
					recs[ok++] = recs[j];
		}
	}
	if (ok)
		fn(ctx, recs, ok, i);
	if (ok != n)
		report(l, V05_LANE_CORRUPT, i, n - ok);
	/* After fn: exactly once. The owner's copy first: a takeover
	 * resumes from it, and the batch is applied; then the producer's. */
	v05_store_relaxed(&own->head, head + n);
	v05__ring_cons_release(c, n); /* R1 */
	v05_store_relaxed(&own->consumed, v05_load_relaxed(&own->consumed) + n);
	/* fn (or the corrupt report) cut the lane off: read no more of it,
	 * from now on (its batch is given back above, to the real lane). A
	 * granted lane goes back to its file at once: the producer keeps a
	 * memfd no one reads, and the lane is free for the next claim. */
	if (__builtin_expect(v05_load_relaxed(&own->cut) != 0, 0))
		cut_done(l, i);
	return n;
}

/*
 * Records ready in lane c: a compare of two process-local words, and one
 * acquire load of the producer's tail line only when the cached tail says
 * empty (A2, in ring.h). A poll with nothing to do costs this per lane.
 */
static inline uint32_t lane_avail(struct v05_ring_cons *c)
{
	uint32_t avail = c->tail_cache - c->head, tail;

	if (avail == 0) {
		tail = v05_load_acquire(&c->r->tail); /* A2 */
		/* Stored only when it moved: an empty lane costs two loads
		 * and a compare, no store. */
		if (tail != c->head) {
			c->tail_cache = tail;
			avail = tail - c->head;
		}
	}
	return avail;
}

static uint32_t drain_lane(struct v05_lanes *l, uint32_t i, uint32_t max,
			   v05_record_fn fn, void *ctx)
{
	uint32_t avail = lane_avail(&l->cons[i]);

	return avail ? drain_lane_slow(l, i, max, avail, fn, ctx) : 0;
}

/*
 * The sweeps of v05__lanes_drain from lane i, the k-th of the current
 * sweep, which has records: each sweep starts one lane further than the
 * last (rr), until the budget is spent or a sweep finds nothing. No
 * division on the way: rr and i stay below n by compare.
 */
static __attribute__((noinline)) uint32_t
drain_sweeps(struct v05_lanes *l, uint32_t i, uint32_t k,
			     uint32_t budget, uint32_t batch, v05_record_fn fn,
			     void *ctx)
{
	uint32_t total = 0, n = l->n;

	for (;;) {
		uint32_t swept = 0;

		for (; k < n; k++) {
			uint32_t avail = lane_avail(&l->cons[i]);

			if (avail) {
				uint32_t want = budget - total < batch ?
						budget - total : batch;
				uint32_t got = drain_lane_slow(l, i, want, avail,
							       fn, ctx);

				total += got;
				swept += got;
				if (total >= budget)
					return total;
			}
			if (++i == n)
				i = 0;
		}
		if (!swept)
			return total;
		i = l->rr;
		if (++l->rr >= n)
			l->rr = 0;
		k = 0;
	}
}

/* The first sweep's search for a lane with records is a leaf loop, in two
 * straight runs (from rr to the end, then from 0), so that a poll with
 * nothing to do saves no registers, makes no call and wraps no index. */
uint32_t v05__lanes_drain(struct v05_lanes *l, uint32_t budget, uint32_t batch,
			  v05_record_fn fn, void *ctx)
{
	struct v05_ring_cons *c = l->cons;
	uint32_t n = l->n, start = l->rr;

	if (budget == 0)
		return 0;
	install(l);
	l->rr = start + 1 < n ? start + 1 : 0;
	for (uint32_t i = start; i < n; i++)
		if (lane_avail(&c[i]))
			return drain_sweeps(l, i, i - start, budget, batch, fn,
					    ctx);
	for (uint32_t i = 0; i < start; i++)
		if (lane_avail(&c[i]))
			return drain_sweeps(l, i, n - start + i, budget, batch,
					    fn, ctx);
	return 0;
}

bool v05__lanes_pending(struct v05_lanes *l)
{
	install(l);
	/* A grant's end is work for the poll, which gives the lane back.
	 * Relaxed: after the doorbell's F2, which pairs with the broker's F1
	 * after its increment (broker_grant.c), as a tail's A2 below. */
	if (v05__lanes_ends_pending(l))
		return true;
	for (uint32_t i = 0; i < l->n; i++) {
		struct v05_ring_cons *c = &l->cons[i];

		/* A2 on every tail: after the doorbell's F2 this is the
		 * re-check that makes sleeping safe. */
		if (v05_load_acquire(&c->r->tail) != c->head)
			return true;
	}
	return false;
}

bool v05__lanes_cut(struct v05_lanes *l, uint32_t i)
{
	struct v05_ring_hdr *r = v05__lane(l->seg, i);
	struct v05_lane_own *own = &l->seg->lane_own[i];
	uint64_t seen;

	/* Relaxed: owner-only words, and this process's own producers'
	 * flags (the only state the decision reads: the lane's owner word
	 * is its producer's to write, so it decides nothing here). */
	if (v05_load_relaxed(&own->cut) ||
	    v05_load_relaxed(&l->seg->inproc[i]))
		return false;
	/* Take the lane whatever its owner word says (a producer may have
	 * written 0 or any word there): the consumer stops reading it on
	 * its own. The word tells an honest producer why its next push
	 * fails; acq_rel, as a reclaim's CAS, pairs with its claim (A3). */
	seen = v05_exchange_acq_rel(&r->owner, V05_OWNER_CUT);
	if (v05__lane_granted(own)) {
		v05_store_relaxed(&own->cut_pid, v05_load_relaxed(&own->grant_pid));
	} else {
		v05_store_relaxed(&own->cut_owner, seen == V05_OWNER_CUT ? 0 : seen);
		v05_store_relaxed(&own->cut_pid, seen == V05_OWNER_CUT ? 0 :
				  v05__owner_pid(seen));
	}
	v05_store_relaxed(&own->cut, 1u);
	report(l, V05_LANE_CUT, i, 1);
	return true;
}

/* Drain lane i up to the tail it shows now, at most a lane's worth: a
 * producer that goes on publishing (another process it gave the memfd to)
 * cannot keep the consumer here. */
void v05__lanes_drain_upto(struct v05_lanes *l, uint32_t i, v05_record_fn fn,
			    void *ctx)
{
	uint32_t left = lane_left(l, i);

	while (left) {
		uint32_t got = drain_lane(l, i, left, fn, ctx);

		if (!got || l->cons[i].r == &l->parked)
			break;
		left = got < left ? left - got : 0;
	}
}
