/* SPDX-License-Identifier: MIT */
/* Producer API: a reward worker's end of its lane. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "broker.h"
#include "doorbell.h"
#include "error.h"
#include "lanes.h"
#include "proc.h"
#include "ring.h"
#include "segment.h"
#include "v05/shm.h"

struct v05_producer {
	struct v05_ring_prod ring;
	struct v05_segment *seg; /* &own, or a mapping the caller keeps */
	struct v05_segment own;
	struct v05_ring_hdr *lane;
	void *lane_map;  /* this producer's own mapping of its lane, or NULL */
	size_t lane_len;
	uint64_t owner;
	uint32_t lane_index;
	unsigned flags;
	unsigned fork_gen;
	bool light; /* asymmetric doorbell: no fence on publish */
	bool mapped; /* on the owner's own mapping (v05__producer_open_mapped) */
	/* Through the broker: the grant's connection (-1 once the owner is
	 * gone and no other granted a lane yet), and when to look at it
	 * next (CLOCK_MONOTONIC_COARSE ns). */
	bool brokered;
	int conn;
	uint64_t next_check_ns;
	struct v05_producer *next; /* brokered producers, for fork */
};

/* How often a brokered producer looks whether its owner is still there
 * (one poll() of its connection; in the publish path a coarse clock read
 * decides, and only a brokered producer pays it). */
#define CHECK_NS 20000000ull

/* A handle belongs to the process that opened it: after fork the child
 * would be a second producer on an SPSC lane. The child's handles refuse. */
static unsigned fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Brokered producers: a forked child closes their connections, or a
 * grant would outlive the producer for as long as the child lives. */
static pthread_mutex_t brokered_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v05_producer *brokered_all;

static void on_fork_prepare(void)
{
	pthread_mutex_lock(&brokered_mu);
}

static void on_fork_parent(void)
{
	pthread_mutex_unlock(&brokered_mu);
}

static void on_fork_child(void)
{
	fork_gen++;
	for (struct v05_producer *p = brokered_all; p; p = p->next) {
		if (p->conn >= 0)
			close(p->conn);
		p->conn = -1;
	}
	pthread_mutex_unlock(&brokered_mu);
}

static void register_atfork(void)
{
	pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}

static void brokered_list(struct v05_producer *p, bool add)
{
	pthread_mutex_lock(&brokered_mu);
	if (add) {
		p->next = brokered_all;
		brokered_all = p;
	} else {
		for (struct v05_producer **q = &brokered_all; *q; q = &(*q)->next) {
			if (*q == p) {
				*q = p->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&brokered_mu);
}

/*
 * The cut-off spares producers in the owner's own process (the engine's
 * own reward writer): the owner learns which lanes they hold from them,
 * in process memory, never from the lane's owner word (which the
 * producer writes). Segments a plugin owns are listed here by identity.
 */
static pthread_mutex_t owned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v05_segment *owned[64];

void v05__segment_own(struct v05_segment *seg, bool own)
{
	pthread_mutex_lock(&owned_mu);
	for (uint32_t i = 0; i < 64; i++) {
		if (own && !owned[i]) {
			owned[i] = seg;
			break;
		}
		if (!own && owned[i] == seg)
			owned[i] = NULL;
	}
	pthread_mutex_unlock(&owned_mu);
}

/* A producer of this process claims (on) or leaves lane i of seg. */
static void mark_inproc(const struct v05_producer *p, bool on)
{
	const struct v05_segment *seg = p->seg;

	if (p->mapped) {
		/* Relaxed: a flag the consumer reads at a cut decision. */
		v05_store_relaxed(&p->seg->inproc[p->lane_index], (uint8_t)on);
		return;
	}
	pthread_mutex_lock(&owned_mu);
	for (uint32_t i = 0; i < 64; i++)
		if (owned[i] && owned[i]->st_dev == seg->st_dev &&
		    owned[i]->st_ino == seg->st_ino)
			v05_store_relaxed(&owned[i]->inproc[p->lane_index],
					  (uint8_t)on);
	pthread_mutex_unlock(&owned_mu);
}

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
	if (p->fork_gen != fork_gen)
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
	if (__builtin_expect(!p || p->fork_gen != fork_gen ||
			     v05_load_relaxed(&p->lane->owner) != p->owner, 0))
		return handle_refused(p);
	return 0;
}

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
	p->fork_gen = fork_gen;
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
			mark_inproc(p, true);
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
	brokered_list(p, true);
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
		rec->flags = 0;
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
static __attribute__((noinline, cold)) void owner_check(struct v05_producer *p)
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
	pthread_once(&atfork_once, register_atfork);
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
			 uint32_t gen, uint32_t sample, float reward)
{
	struct v05_record *lane = (struct v05_record *)(void *)p->ring.slots;
	uint32_t seq = p->ring.tail + i;
	struct v05_record *rec = &lane[seq & p->ring.mask];
#ifndef V05_STORE_BY_FIELD
	uint32_t rbits;
	v05_u64x2 *w = (v05_u64x2 *)(void *)rec;

	memcpy(&rbits, &reward, sizeof(rbits));
	/* Little-endian: gen then sample, reward then flags (0), seq then
	 * the zero word. */
	w[0] = (v05_u64x2){ key, (uint64_t)gen | (uint64_t)sample << 32 };
	w[1] = (v05_u64x2){ rbits, seq };
#else
	rec->key = key;
	rec->gen = gen;
	rec->sample = sample;
	rec->reward = reward;
	rec->flags = 0;
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
		owner_check(p);
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
	write_record(p, 0, key, gen, sample, reward);
	v05__ring_prod_commit(&p->ring, 1);
	if (!(p->flags & V05_PRODUCER_DEFER))
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
			     r[i].reward);
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
			owner_check(p);
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
	if (p->fork_gen == fork_gen) {
		uint64_t me = p->owner;

		publish(p);
		if (!p->brokered)
			mark_inproc(p, false);
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
		brokered_list(p, false);
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
