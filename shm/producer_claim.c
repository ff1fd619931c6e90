/* SPDX-License-Identifier: MIT */
/* Opening a producer (producer_handle.h): a lane claimed in the segment,
 * or granted by the owner's broker (and granted again by a new owner's
 * when the one that granted it is gone), and the open calls. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"
#include "doorbell.h"
#include "error.h"
#include "lanes.h"
#include "proc.h"
#include "producer_handle.h"
#include "v05/shm.h"

/*
 * Lane i for a claim attempt. With a whole view (the owner's mapping,
 * in-process producers) it is there; a producer process opens the lane's
 * own file in the side directory and maps it, and unmaps it again unless
 * the claim succeeds: it never holds a mapping of a lane that is not its
 * own. NULL with *err set to
 * a negative errno.
 */
static struct v05_ring_hdr *lane_try_map(struct v05_producer *p, uint32_t i,
					 int *err)
{
	struct v05_segment *seg = p->seg;
	size_t len = v05__lane_stride(seg->hdr.geo.lane_capacity);
	void *m;
	int fd;

	*err = 0;
	if (seg->base)
		return v05__lane(seg, i);
	fd = v05__lane_file_open(seg, V05_FILE_LANE, i, O_RDWR);
	if (fd < 0) {
		*err = fd;
		return NULL;
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		*err = v05__fail(-errno, "mmap lane %u of %s: %s", i, seg->name,
				 v05__errstr(errno));
		return NULL;
	}
	return V05_AT(struct v05_ring_hdr, m, v05__lane_skew(i));
}

static void lane_unmap(struct v05_producer *p, struct v05_ring_hdr *r)
{
	if (!p->seg->base && r)
		munmap((void *)((uintptr_t)r & ~(uintptr_t)(V05_PAGE - 1)),
		       v05__lane_stride(p->seg->hdr.geo.lane_capacity));
}

/* The claimed lane r, index i: the ring, the flags, the doorbell mode. */
static void lane_claimed(struct v05_producer *p, struct v05_ring_hdr *r,
			 uint32_t i, uint64_t me, unsigned flags)
{
	struct v05_segment *seg = p->seg;

	p->lane = r;
	if (!seg->base) {
		p->lane_map = (void *)((uintptr_t)r & ~(uintptr_t)(V05_PAGE - 1));
		p->lane_len = v05__lane_stride(seg->hdr.geo.lane_capacity);
	}
	p->lane_index = i;
	v05__ring_prod_init(&p->ring, p->lane, v05__lane_records(p->lane),
			    seg->hdr.geo.lane_capacity, sizeof(struct v05_record));
	p->owner = me;
	p->flags = flags;
	p->fork_gen = v05__producer_fork_gen;
	/* The header's flag: fixed at create, validated at attach (or sent
	 * by the segment's owner, broker.c). */
	p->light = v05__segment_asym(seg) &&
		   v05__membarrier_register() == 0;
}

/* Claim a lane of an attached segment; p->seg is set. */
static int claim_lane(struct v05_producer *p, unsigned flags)
{
	struct v05_segment *seg = p->seg;
	uint32_t dead = 0, moved = 0, cut = 0, bad = 0;
	uint64_t me = v05__owner_self();
	char first_bad[256] = "";
	int err, first_err = 0;

	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	for (uint32_t i = 0; i < seg->hdr.geo.lane_count; i++) {
		struct v05_ring_hdr *r = lane_try_map(p, i, &err);
		uint64_t cur;

		/* A lane file that cannot be used (missing, a link, resized:
		 * only a process of the segment's uid can have done it)
		 * costs that lane, not the claim: the next one is tried. */
		if (!r) {
			if (!bad++) {
				first_err = err ? err : -ENOENT;
				snprintf(first_bad, sizeof(first_bad), "%s",
					 v05_errmsg());
			}
			continue;
		}
		/* Relaxed peek; the CAS below decides. */
		cur = v05_load_relaxed(&r->owner);
		if (cur != 0) {
			if (cur == V05_OWNER_CUT)
				cut++;
			else if (cur == V05_OWNER_MOVED)
				moved++;
			else
				dead += !v05__owner_alive(cur);
			lane_unmap(p, r);
			continue;
		}
		/* A3: acquire pairs with the previous holder's release (R3),
		 * so its last tail is what ring_prod_init reads. */
		if (v05_cas_acq_rel(&r->owner, &cur, me)) {
			lane_claimed(p, r, i, me, flags);
			v05__producer_mark_inproc(p, true);
			return 0;
		}
		lane_unmap(p, r);
	}
	if (bad == seg->hdr.geo.lane_count)
		return v05__fail(first_err, "segment %s: no lane file can be used (%s)",
				 seg->name, first_bad);
	return v05__fail(-EBUSY,
			 "segment %s: all %u lanes are held (%u by dead producers, free again once the plugin drains them; %u cut off by the plugin, free again once their producers close or exit; %u granted by its broker; %u unusable: %s)",
			 seg->name, seg->hdr.geo.lane_count, dead, cut, moved, bad,
			 bad ? first_bad : "none");
}

/*
 * A lane from the segment owner's broker: a memfd granted with a token;
 * the claim is the CAS token -> our word, in our own mapping. Lost (the
 * grant expired meanwhile): ask again.
 */
static int broker_claim(struct v05_producer *p, const char *name,
			struct v05_segment *seg, uint64_t me)
{
	for (int attempt = 0; attempt < 4; attempt++) {
		struct v05_broker_lane bl;
		uint64_t token;
		int ret = v05__broker_request(name, seg, &bl);

		if (ret)
			return ret;
		token = bl.token;
		/* A3, as in claim_lane. */
		if (v05_cas_acq_rel(&bl.lane->owner, &token, me)) {
			p->lane = bl.lane;
			p->lane_map = bl.lane_map;
			p->lane_len = bl.lane_len;
			p->lane_index = bl.index;
			p->conn = bl.conn;
			return 0;
		}
		munmap(bl.lane_map, bl.lane_len);
		close(bl.conn);
		v05__segment_detach(seg);
	}
	return v05__fail(-EBUSY, "segment %s: the broker's lanes were taken each time",
			 name);
}

static int claim_brokered(struct v05_producer *p, const char *name,
			  unsigned flags)
{
	uint64_t me = v05__owner_self();
	int ret;

	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	ret = broker_claim(p, name, &p->own, me);
	if (ret)
		return ret;
	p->seg = &p->own;
	p->brokered = true;
	p->next_check_ns = v05__coarse_ns() + CHECK_NS;
	lane_claimed(p, p->lane, p->lane_index, me, flags);
	v05__producer_list(p, true);
	return 0;
}

/*
 * The owner that granted our lane is gone (the connection ended): ask the
 * next owner's broker for a lane, and push into it again every record the
 * old lane holds past the head its consumer published (what the dead
 * owner had not drained, or drained and not yet said so: those few come
 * twice and are rejected as duplicates, counted). Until a broker answers,
 * records go on into the old lane, which is kept, and the next look asks
 * again. Nothing is lost unless this producer dies first, and then the
 * owner's recover() gives those samples out again.
 */
static __attribute__((noinline, cold)) void rebroker(struct v05_producer *p)
{
	struct v05_segment seg;
	struct v05_ring_hdr *old = p->lane;
	struct v05_record *from = v05__lane_records(old), *rec;
	void *old_map = p->lane_map;
	size_t old_len = p->lane_len;
	struct v05_ring_prod ring;
	uint32_t head, n;

	/* Cut off: there is nothing to carry (check_handle says so). */
	if (v05_load_relaxed(&old->owner) != p->owner)
		return;
	/* On success p's lane, its mapping and the connection are the new
	 * grant's; on failure p is as it was. */
	if (broker_claim(p, p->own.name, &seg, p->owner))
		return;
	v05__ring_prod_publish(&p->ring); /* into the old lane, counted below */
	/* Acquire (A1): the head the dead consumer published last. */
	head = v05_load_acquire(&old->head);
	n = p->ring.tail - head;
	if (n > p->ring.mask + 1)
		n = p->ring.mask + 1; /* a head we cannot trust: a lane's worth */
	/* The next owner's lanes (another segment of the name, maybe). */
	if (n > seg.hdr.geo.lane_capacity)
		n = seg.hdr.geo.lane_capacity;
	v05__ring_prod_init(&ring, p->lane, v05__lane_records(p->lane),
			    seg.hdr.geo.lane_capacity, sizeof(struct v05_record));
	for (uint32_t k = 0; k < n; k++) {
		const struct v05_record *src = &from[(p->ring.tail - n + k) &
						     p->ring.mask];

		rec = (struct v05_record *)(void *)v05__ring_prod_slot(&ring, k);
		rec->key = src->key;
		rec->gen = src->gen;
		rec->sample = src->sample;
		rec->reward = src->reward;
		/* An abort goes on as an abort; bits the library never
		 * writes are not carried over (they were refused anyway). */
		rec->flags = src->flags & V05_RECORD_KINDS;
		rec->seq = ring.tail + k;
		rec->zero = 0;
	}
	v05__ring_prod_commit(&ring, n);
	/* The old lane and doorbell go; the new ones are ours. */
	munmap(old_map, old_len);
	v05__segment_detach(&p->own);
	p->own = seg;
	p->seg = &p->own;
	p->ring = ring;
	p->light = v05__segment_asym(p->seg) && v05__membarrier_register() == 0;
	v05__ring_prod_publish(&p->ring); /* R2 */
	v05__doorbell_after_publish(p->seg->bell, p->light);
}

/* A brokered producer's look at its owner (rate-limited to CHECK_NS). */
__attribute__((noinline, cold)) void v05__producer_owner_check(struct v05_producer *p)
{
	uint64_t now = v05__coarse_ns();

	if (now < p->next_check_ns)
		return;
	p->next_check_ns = now + CHECK_NS;
	if (p->conn >= 0) {
		struct pollfd pf = { p->conn, POLLIN | POLLRDHUP, 0 };

		/* The broker never writes after the grant: anything but
		 * nothing means it closed the connection. */
		if (poll(&pf, 1, 0) <= 0)
			return;
		close(p->conn);
		p->conn = -1;
	}
	rebroker(p);
}

/* Does segment name belong to another uid? (Its path's owner; an error
 * is left for the attach to report.) */
static bool other_uid(const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return !v05__segment_path(name, path, sizeof(path)) &&
	       !lstat(path, &st) && st.st_uid != geteuid();
}

/* brokered: through the broker whatever the segment's uid (tests). */
static int open_common(const char *name, struct v05_segment *mapped,
		       unsigned flags, bool brokered, struct v05_producer **out)
{
	struct v05_producer *p;
	int ret;

	v05__clear_error();
	v05__producer_atfork();
	if (!out)
		return v05__fail(-EINVAL, "producer_open: NULL out");
	if (flags & ~(V05_PRODUCER_DEFER | V05_PRODUCER_ANY_UID))
		return v05__fail(-EINVAL, "unknown producer flags 0x%x", flags);
	p = calloc(1, sizeof(*p));
	if (!p)
		return v05__fail(-ENOMEM, "producer: out of memory");
	p->conn = -1;
	if (mapped) {
		p->seg = mapped;
		p->mapped = true;
	} else if (brokered ||
		   ((flags & V05_PRODUCER_ANY_UID) && other_uid(name))) {
		ret = claim_brokered(p, name, flags);
		if (ret) {
			free(p);
			return ret;
		}
		*out = p;
		return 0;
	} else {
		ret = v05__segment_attach(name, V05_ROLE_PRODUCER,
					  flags & V05_PRODUCER_ANY_UID ?
					  V05_ATTACH_ANY_UID : 0, &p->own);
		if (ret) {
			free(p);
			return ret;
		}
		p->seg = &p->own;
	}
	ret = claim_lane(p, flags);
	if (ret) {
		if (!mapped)
			v05__segment_detach(&p->own);
		free(p);
		return ret;
	}
	*out = p;
	return 0;
}

int v05__producer_open_brokered(const char *name, unsigned flags,
				struct v05_producer **out)
{
	return open_common(name, NULL, flags, true, out);
}

V05_API int v05_producer_open(const char *name, unsigned flags,
			      struct v05_producer **out)
{
	return open_common(name, NULL, flags, false, out);
}

int v05__producer_open_mapped(struct v05_segment *seg, unsigned flags,
			      struct v05_producer **out)
{
	return open_common(NULL, seg, flags, false, out);
}
