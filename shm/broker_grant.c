/* SPDX-License-Identifier: MIT */
/*
 * The broker's grants (broker_owner.h): which lane a producer gets, the
 * memfd made for it and posted to the consumer, the grant's end, and a
 * refusal that says what holds each lane.
 *
 * A lane comes back to the broker two ways. The consumer gives it back
 * to its file once the grant's producer left (lanes_reclaim.c), at its
 * next poll: the broker rings its doorbell for that. Or, before the
 * consumer got to it, the broker grants the lane again itself, if the
 * consumer has drained everything the producer left (the memfd's tail at
 * the consumer's head for that grant): nothing is lost when the consumer
 * maps the new memfd over the old one. Which of the two happens is
 * decided by one CAS on the grant's end word (lanes.h).
 */
#include "broker_owner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "atomics.h"
#include "doorbell.h"
#include "error.h"
#include "lanes.h"
#include "memfd.h"
#include "proc.h"

/* Why no lane was free, lane by lane, for the refusal. */
struct busy {
	uint32_t connected, unclaimed, left, waiting, giving_back, cut, by_name;
};

/*
 * Lane i's grant g ended (its connection closed) and the consumer has not
 * given it back: may the broker grant it again ('a')? Only if the
 * consumer maps g's memfd and has drained it; else 'l' (records left, not
 * yet drained), 'b' (the consumer is giving it back) or 'w' (waiting for
 * the consumer's next look). Acquire (V1) on the grant the view maps:
 * pairs with the consumer's release after it set its head for that grant,
 * so the head read next is g's, not the one of what the view mapped
 * before. A2 on the memfd's tail: final, its producer left (a process it
 * passed the memfd to may publish more: those records came after the
 * grant's end and are dropped when the lane is granted again). The head:
 * relaxed, only compared; only the consumer moves it, and only forward
 * while it maps g.
 */
static int ended_state(struct v05_broker *b, uint32_t i, uint32_t g)
{
	struct v05_segment *seg = b->seg;
	struct v05_lane_own *own = &seg->lane_own[i];
	/* Acquire (E1's other side): our own store, or the consumer's take. */
	uint32_t e = v05_load_acquire(&own->grant_end), tail;

	if (e == (g | V05_GRANT_TAKEN))
		return 'b'; /* being given back by the consumer */
	if (e != g || !b->mem[i])
		return 'w';
	tail = v05_load_acquire(&b->mem[i]->tail);
	if (v05_load_acquire(&seg->view_grant[i]) != g)
		/* Not mapped yet: waiting for the owner, with records or
		 * without. */
		return tail != b->start[i] ? 'l' : 'w';
	if (tail != v05_load_relaxed(&own->head))
		return 'l'; /* records left, not yet drained */
	return 'a';
}

/* A free file lane: reserved with a CAS of its owner word from 0 to the
 * owner's word, which the plugin sees as alive and same-uid producers as
 * held; kept only if drained (the consumer's head at the file's tail:
 * nothing a producer of the lane left is lost when its memory is
 * swapped). */
static bool reserve_file(struct v05_broker *b, uint32_t i, struct busy *why)
{
	struct v05_lane_own *own = &b->seg->lane_own[i];
	struct v05_ring_hdr *r = b->file[i];
	uint64_t seen = 0, me = b->me;

	/* A3's kind: pairs with the last holder's release (R3), so its last
	 * tail is the one compared below. */
	if (!v05_cas_acq_rel(&r->owner, &seen, me)) {
		if (seen == V05_OWNER_CUT || v05_load_relaxed(&own->cut))
			why->cut++;
		else if (seen == V05_OWNER_MOVED)
			why->giving_back++; /* the consumer frees it now */
		else
			why->by_name++;
		return false;
	}
	/* Relaxed: the consumer's own count, only compared; a stale value
	 * makes the lane look undrained, never drained. */
	if (v05_load_acquire(&r->tail) != v05_load_relaxed(&own->head)) {
		v05_cas_acq_rel(&r->owner, &me, 0);
		why->left++;
		return false;
	}
	return true;
}

/* "no lane free: of N lanes, 1 ...; 2 ..." with the reasons that hold. */
static void busy_msg(const struct busy *w, uint32_t n, char *msg, size_t len)
{
	const struct {
		uint32_t k;
		const char *one, *many;
	} part[] = {
		{ w->connected, "granted to a connected producer", NULL },
		{ w->unclaimed, "granted and not yet claimed (for 5 s at most)", NULL },
		{ w->left, "holding records its producer left, drained at the owner's next poll",
		  "holding records their producers left, drained at the owner's next poll" },
		{ w->waiting, "ended, given back at the owner's next poll", NULL },
		{ w->giving_back, "being given back by the owner", NULL },
		{ w->cut, "cut off", NULL },
		{ w->by_name, "claimed by name by the owner's uid", NULL },
	};
	size_t at = (size_t)snprintf(msg, len, "no lane free: of %u lanes, ", n);
	const char *sep = "";

	for (size_t j = 0; j < sizeof(part) / sizeof(part[0]) && at < len; j++) {
		if (!part[j].k)
			continue;
		at += (size_t)snprintf(msg + at, len - at, "%s%u %s", sep, part[j].k,
				       part[j].k > 1 && part[j].many ?
				       part[j].many : part[j].one);
		sep = "; ";
	}
}

struct v05_broker_pick v05__broker_reserve(struct v05_broker *b, char *msg,
					   size_t len)
{
	struct v05_segment *seg = b->seg;
	uint32_t n = seg->hdr.geo.lane_count;
	/* Lanes whose ended grant may be granted again. */
	uint64_t again[V05_LANES_MAX / 64] = { 0 };
	struct busy why;

	memset(&why, 0, sizeof(why));
	for (uint32_t i = 0; i < n; i++) {
		struct v05_lane_own *own = &seg->lane_own[i];

		if (b->conn[i] >= 0) {
			/* Relaxed: only compared (the producer's claim). */
			if (b->mem[i] && v05_load_relaxed(&b->mem[i]->owner) == b->me)
				why.unclaimed++;
			else
				why.connected++;
			continue;
		}
		if (v05__lane_granted(own)) {
			switch (ended_state(b, i, b->conn_grant[i])) {
			case 'a':
				again[i / 64] |= 1ull << (i % 64);
				break;
			case 'l':
				why.left++;
				break;
			case 'b':
				why.giving_back++;
				break;
			default:
				why.waiting++;
			}
			continue;
		}
		if (reserve_file(b, i, &why))
			return (struct v05_broker_pick){ (int)i, false };
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = b->conn_grant[i], e = g;

		if (!(again[i / 64] >> (i % 64) & 1))
			continue;
		/* The decision (lanes.h): acq_rel, as the consumer's take;
		 * the lane is ours to grant again only if it has not taken
		 * it. */
		if (v05_cas_acq_rel(&seg->lane_own[i].grant_end, &e,
				    g | V05_GRANT_AGAIN))
			return (struct v05_broker_pick){ (int)i, true };
		why.giving_back++;
	}
	busy_msg(&why, n, msg, len);
	return (struct v05_broker_pick){ -1, false };
}

/* A new sealed memfd for lane i, its ring starting at head with the
 * token as its owner word, mapped at *ring. The descriptor, or a negative
 * errno. */
static int new_memfd(struct v05_broker *b, uint32_t i, uint32_t head,
		     struct v05_ring_hdr **ring)
{
	struct v05_ring_hdr *r;
	void *m;
	int fd = v05__memfd_sealed("v05-lane", b->stride);

	if (fd < 0)
		return fd;
	m = mmap(NULL, b->stride, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int err = -errno;

		close(fd);
		return v05__fail(err, "map a lane memfd: %s", v05__errstr(-err));
	}
	r = V05_AT(struct v05_ring_hdr, m, v05__lane_skew(i));
	/* Nobody else holds it yet: plain stores, published to the
	 * consumer by the post's release, to the producer by the send. */
	r->owner = b->me;
	r->tail = head;
	r->head = head;
	*ring = r;
	return fd;
}

static void unmap_ring(struct v05_broker *b, struct v05_ring_hdr *r)
{
	if (r)
		munmap((void *)((uintptr_t)r & ~(uintptr_t)(V05_PAGE - 1)),
		       b->stride);
}

/* Grant g of lane i is made: the peer recorded, the number published,
 * the memfd posted to the consumer (a dup of fd: the post's). */
static int post(struct v05_broker *b, uint32_t i, uint32_t g, uint32_t head,
		int fd, const struct v05_peer *peer)
{
	struct v05_segment *seg = b->seg;
	struct v05_lane_own *own = &seg->lane_own[i];
	struct v05_grant_post *gp = malloc(sizeof(*gp)), *old;

	if (!gp || (gp->fd = dup(fd)) < 0) {
		free(gp);
		return v05__fail(-ENOMEM, "post a grant: %s", v05__errstr(errno));
	}
	gp->grant = g;
	gp->head = head;
	gp->uid = peer->uid;
	/* Relaxed: ours alone, read by observers as a snapshot. */
	v05_store_relaxed(&own->grant_uid, peer->uid);
	v05_store_relaxed(&own->grant_gid, peer->gid);
	v05_store_relaxed(&own->grant_pid, (uint32_t)peer->pid);
	/* Release: the peer recorded before the consumer treats the lane as
	 * granted (its acquire, lanes.h). */
	v05_store_release(&own->grant, g);
	/* Release (P1): the post and the memfd's header before the consumer
	 * maps it (its acquire exchange, lanes.c). The slot is empty: the
	 * consumer took the last grant's post before it mapped or gave back
	 * that grant, and a lane is granted only after one of the two. */
	old = v05_exchange_acq_rel(&seg->grant_post[i], gp);
	if (old) {
		close(old->fd);
		free(old);
	} else {
		v05_fetch_add_release(&seg->grants_pending, 1u);
	}
	b->conn_grant[i] = g;
	b->granted_ns[i] = v05__now_ns();
	return 0;
}

/*
 * The lane reserved becomes a new sealed memfd, its ring at the
 * consumer's head, its owner word the token the producer claims with. A
 * file lane's owner word says MOVED from now on, so same-uid producers
 * leave it alone until the lane comes back; an ended grant's lane says so
 * already. The memfd goes to the consumer, which maps it over the lane's
 * pages of the view at its next poll, wait or look at the lanes (only its
 * thread ever remaps the view; until then it reads what it mapped there,
 * empty at the same head, and the producer's records wait in the memfd).
 */
int v05__broker_grant(struct v05_broker *b, struct v05_broker_pick pick,
		      const struct v05_peer *peer)
{
	uint32_t i = (uint32_t)pick.lane;
	struct v05_lane_own *own = &b->seg->lane_own[i];
	uint32_t g = v05__grant_next(v05_load_relaxed(&own->grant));
	/* Relaxed: the consumer's, drained at the reservation; it moves only
	 * with records, and the lane has no producer until the grant. */
	uint32_t head = v05_load_relaxed(&own->head);
	struct v05_ring_hdr *r = NULL;
	uint64_t me = b->me;
	int fd = new_memfd(b, i, head, &r), ret;

	/* Acquire-release: the file stays ours (reserved) until it says
	 * MOVED; no same-uid producer could claim in between. */
	if (fd >= 0 && !pick.again &&
	    !v05_cas_acq_rel(&b->file[i]->owner, &me, V05_OWNER_MOVED)) {
		unmap_ring(b, r);
		close(fd);
		return v05__fail(-EBUSY, "lane %u was taken while granted", i);
	}
	ret = fd < 0 ? fd : post(b, i, g, head, fd, peer);
	if (!ret) {
		/* Kept: the grant's owner word (its expiry) and tail (whether
		 * it is drained once it ends). */
		unmap_ring(b, b->mem[i]);
		b->mem[i] = r;
		b->start[i] = head;
		return fd;
	}
	if (fd >= 0) {
		unmap_ring(b, r);
		close(fd);
	}
	if (!pick.again) {
		/* Release: R3, the reservation back (MOVED if the CAS above
		 * was made: the file is not granted). */
		v05_store_release(&b->file[i]->owner, 0);
	} else {
		/* Release (E1): the ended grant back to the state the consumer
		 * takes it from, and the consumer told. */
		v05_store_release(&own->grant_end, b->conn_grant[i]);
		v05__broker_end(b, i);
	}
	return ret;
}

void v05__broker_end(struct v05_broker *b, uint32_t i)
{
	struct v05_segment *seg = b->seg;
	struct v05_lane_own *own = &seg->lane_own[i];
	uint32_t g = b->conn_grant[i];
	uint32_t e = v05_load_relaxed(&own->grant_end);

	if (b->conn[i] >= 0)
		close(b->conn[i]);
	b->conn[i] = -1;
	/* Release (E1): pairs with the consumer's acquire of grant_end; the
	 * producer's last tail came before its close, which we saw. A CAS,
	 * not a store: a grant the consumer ended itself (taken) stays its. */
	while ((e & V05_GRANT_NUM) != g &&
	       !v05_cas_acq_rel(&own->grant_end, &e, g))
		;
	/* Release (E2): pairs with the consumer's exchange in
	 * v05__lanes_end_grants. Then F1 and, if the consumer sleeps, a ring
	 * (doorbell.h: this end is the "publish" its re-check looks for in
	 * v05__lanes_pending): a waiting owner gives the lane back at once. */
	v05_fetch_add_release(&seg->grants_ended, 1u);
	v05__doorbell_after_publish(seg->bell, false);
}

void v05__broker_expire(struct v05_broker *b, bool all)
{
	uint64_t now = v05__now_ns();

	for (uint32_t i = 0; i < b->seg->hdr.geo.lane_count; i++) {
		struct v05_lane_own *own = &b->seg->lane_own[i];
		/* Acquire: pairs with the consumer's release of reverted,
		 * after it mapped the lane's file back. */
		bool back = v05_load_acquire(&own->reverted) == b->conn_grant[i];

		if (b->conn[i] < 0) {
			/* Given back: its memfd is no longer compared. */
			if (back) {
				unmap_ring(b, b->mem[i]);
				b->mem[i] = NULL;
			}
			continue;
		}
		if (all || back ||
		    (now - b->granted_ns[i] > V05_BROKER_HOLD_NS &&
		     /* Relaxed: only compared (the producer's claim). */
		     v05_load_relaxed(&b->mem[i]->owner) == b->me))
			v05__broker_end(b, i);
	}
}
