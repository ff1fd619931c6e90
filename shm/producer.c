/* SPDX-License-Identifier: MIT */
/* Producer API: a reward worker's end of its lane, the push path (its
 * handle checked, records written, published, the doorbell rung) and
 * close. Opening one is producer_claim.c's. */
#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "doorbell.h"
#include "error.h"
#include "lanes.h"
#include "proc.h"
#include "producer_handle.h"
#include "v05/shm.h"

/* The lane is no longer ours: the plugin cut it off (lanes.h). */
static __attribute__((noinline, cold)) int lane_lost(const struct v05_producer *p,
						      uint64_t owner)
{
	if (owner == V05_OWNER_CUT)
		return v05__fail(-ECONNABORTED,
				 "segment %s: the plugin cut lane %u off, most of the records pushed into it were rejected (late gen, unknown key, sample not issued, duplicate; `v05ctl stat %s` shows the counts); it reads none of them any more. Close this producer; a new one gets a lane of its own",
				 p->seg->name, p->lane_index, p->seg->name);
	return v05__fail(-ECONNABORTED,
			 "segment %s: lane %u is no longer this producer's (its owner word was changed); close this producer and open a new one",
			 p->seg->name, p->lane_index);
}

/* Why check_handle refused: out of the push path. */
static __attribute__((noinline, cold)) int handle_refused(const struct v05_producer *p)
{
	uint64_t owner;

	if (!p)
		return v05__fail(-EINVAL, "producer: NULL handle");
	if (p->fork_gen != v05__producer_fork_gen)
		return v05__fail(-ECHILD,
				 "producer handle used in a forked child; open a new one");
	owner = v05_load_relaxed(&p->lane->owner);
	return owner == p->owner ? 0 : lane_lost(p, owner);
}

/*
 * A usable handle: this process's, on a lane still ours. The owner word
 * sits on a line written only at claim, close and cut, so the load hits
 * the cache; relaxed: only compared (a cut seen late costs a few records
 * pushed into a lane nobody reads). Inline: one test on the push path.
 */
static inline __attribute__((always_inline)) int
check_handle(const struct v05_producer *p)
{
	if (__builtin_expect(!p || p->fork_gen != v05__producer_fork_gen ||
			     v05_load_relaxed(&p->lane->owner) != p->owner, 0))
		return handle_refused(p);
	return 0;
}

#if defined(V05_TSAN) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define V05_STORE_BY_FIELD 1
#endif

#ifndef V05_STORE_BY_FIELD
typedef uint64_t v05_u64x2 __attribute__((vector_size(16)));
static_assert(offsetof(struct v05_record, gen) == 8 &&
	      offsetof(struct v05_record, sample) == 12 &&
	      offsetof(struct v05_record, reward) == 16 &&
	      offsetof(struct v05_record, flags) == 20 &&
	      offsetof(struct v05_record, seq) == 24 &&
	      offsetof(struct v05_record, zero) == 28, "record words");
#endif

/*
 * Lanes always hold struct v05_record (the geometry fixes the element
 * size), so a slot is an index, not a multiply by the ring's esz. The
 * record is made in registers and stored as two 16-byte words (records sit
 * at multiples of 32 bytes from a page): seven field stores per record
 * were the producer's bound at batch 32 (perf), the lines being owned by
 * the consumer's core half the time. Under ThreadSanitizer, which does not
 * see vector stores, field by field, like the consumer's copy, so that it
 * sees both sides of the ring.
 */
static void write_record(struct v05_producer *p, uint32_t i, uint64_t key,
			 uint32_t gen, uint32_t sample, float reward,
			 uint32_t flags)
{
	struct v05_record *lane = (struct v05_record *)(void *)p->ring.slots;
	uint32_t seq = p->ring.tail + i;
	struct v05_record *rec = &lane[seq & p->ring.mask];
#ifndef V05_STORE_BY_FIELD
	uint32_t rbits;
	v05_u64x2 *w = (v05_u64x2 *)(void *)rec;

	memcpy(&rbits, &reward, sizeof(rbits));
	/* Little-endian: gen then sample, reward then flags (the record's
	 * kind: 0 for a reward), seq then the zero word. */
	w[0] = (v05_u64x2){ key, (uint64_t)gen | (uint64_t)sample << 32 };
	w[1] = (v05_u64x2){ rbits | (uint64_t)flags << 32, seq };
#else
	rec->key = key;
	rec->gen = gen;
	rec->sample = sample;
	rec->reward = reward;
	rec->flags = flags;
	rec->seq = seq;
	rec->zero = 0;
#endif
}

static uint32_t publish(struct v05_producer *p)
{
	uint32_t n = v05__ring_prod_publish(&p->ring); /* R2 */

	if (n)
		v05__doorbell_after_publish(p->seg->bell, p->light);
	/* Not taken by producers of the segment's uid (by name): one load
	 * and a predicted branch. */
	if (__builtin_expect(p->brokered, 0) &&
	    v05__coarse_ns() >= p->next_check_ns)
		v05__producer_owner_check(p);
	return n;
}

V05_API int v05_producer_push(struct v05_producer *p, uint64_t key,
			      uint32_t gen, uint32_t sample, float reward)
{
	int ret = check_handle(p);

	if (ret)
		return ret;
	if (v05__ring_prod_reserve(&p->ring, 1))
		return v05__fail_str(-EAGAIN, "push: the lane is full");
	write_record(p, 0, key, gen, sample, reward, 0);
	v05__ring_prod_commit(&p->ring, 1);
	if (!(p->flags & V05_PRODUCER_DEFER))
		publish(p);
	return 0;
}

V05_API int v05_producer_abort(struct v05_producer *p, uint64_t key,
			       uint32_t gen)
{
	int ret = check_handle(p);

	if (ret)
		return ret;
	if (v05__ring_prod_reserve(&p->ring, 1))
		return v05__fail_str(-EAGAIN, "abort: the lane is full");
	write_record(p, 0, key, gen, 0, 0.0f, V05_RECORD_ABORT);
	v05__ring_prod_commit(&p->ring, 1);
	/* Published at once whatever V05_PRODUCER_DEFER says: an abort
	 * held back keeps the engine generating for nothing. */
	publish(p);
	return 0;
}

V05_API int v05_producer_push_batch(struct v05_producer *p,
				    const struct v05_reward *r, uint32_t n)
{
	int ret = check_handle(p);

	if (ret)
		return ret;
	if (!r && n)
		return v05__fail(-EINVAL, "push_batch: NULL records");
	if (n > p->ring.mask + 1)
		return v05__fail(-EINVAL, "batch of %u exceeds the lane's %u",
				 n, p->ring.mask + 1);
	if (v05__ring_prod_reserve(&p->ring, n))
		return v05__fail_str(-EAGAIN, "push_batch: the lane is full");
	for (uint32_t i = 0; i < n; i++)
		write_record(p, i, r[i].key, r[i].gen, r[i].sample,
			     r[i].reward, 0);
	v05__ring_prod_commit(&p->ring, n);
	publish(p);
	return (int)n;
}

V05_API int v05_producer_push_wait(struct v05_producer *p,
				   const struct v05_reward *r, uint32_t n,
				   int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX :
			    v05__now_ns() + (uint64_t)timeout_ms * 1000000u;
	unsigned spins = 0;

	for (;;) {
		struct timespec nap = { 0, 50000 };
		int ret = v05_producer_push_batch(p, r, n);

		if (ret != -EAGAIN)
			return ret;
		/* Room comes back when the consumer drains: spin briefly,
		 * then yield, then nap 50 us at a time. */
		if (v05__now_ns() >= deadline)
			return v05__fail(-ETIMEDOUT,
					 p->brokered && p->conn < 0 ?
					 "lane %u stayed full for %d ms; the owner that granted it is gone and no new owner's broker answered" :
					 "lane %u stayed full for %d ms",
					 p->lane_index, timeout_ms);
		/* Full because the owner that granted it is gone? */
		if (p->brokered)
			v05__producer_owner_check(p);
		if (spins < 64) {
			spins++;
			v05_cpu_relax();
		} else if (spins < 128) {
			spins++;
			sched_yield();
		} else if (nanosleep(&nap, NULL) && errno == EINTR) {
			return v05__fail(-EINTR, "push interrupted by a signal");
		}
	}
}

V05_API int v05_producer_flush(struct v05_producer *p)
{
	int ret = check_handle(p);

	if (ret)
		return ret;
	return (int)publish(p);
}

V05_API int v05_producer_close(struct v05_producer *p)
{
	int ret = 0;

	if (!p)
		return 0;
	if (p->fork_gen == v05__producer_fork_gen) {
		uint64_t me = p->owner;

		publish(p);
		if (!p->brokered)
			v05__producer_mark_inproc(p, false);
		/* R3: our last tail store before the lane is free again;
		 * pairs with the next claimer's A3. A CAS, not a store: a
		 * lane the plugin cut off is not ours to free. We say we quit
		 * it instead (R6: our last tail before it; pairs with the
		 * plugin's A6 on quit, lanes.c), and the plugin frees it. */
		if (!v05_cas_acq_rel(&p->lane->owner, &me, 0) &&
		    me == V05_OWNER_CUT)
			v05_store_release(&p->lane->quit, p->owner);
	} else {
		/* A forked child must not touch the parent's lane. */
		ret = -ECHILD;
	}
	if (p->brokered) {
		v05__producer_list(p, false);
		/* The grant ends: the owner drains what we published (our
		 * last tail came before this close) and takes the lane back. */
		if (p->conn >= 0)
			close(p->conn);
	}
	if (p->lane_map)
		munmap(p->lane_map, p->lane_len);
	if (p->seg == &p->own)
		v05__segment_detach(&p->own);
	free(p);
	return ret;
}

V05_API int v05_producer_lane(const struct v05_producer *p)
{
	return p ? (int)p->lane_index : -EINVAL;
}
