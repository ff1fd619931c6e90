/* SPDX-License-Identifier: MIT */
/*
 * Transport throughput: 32-byte records through one SPSC ring, producer and
 * consumer pinned to different cores, batches of B, for
 *   v05   a v05 lane (v05_producer_push_batch; the plugin's drain path,
 *         which copies and checks every record and publishes one release
 *         store per batch, doorbell check included)
 *   dpdk  DPDK rte_ring, SP/SC, _elem API with 32-byte elements, on our own
 *         memory (no EAL)
 *   ck    Concurrency Kit ck_ring, SPSC, typed 32-byte entries (ck has no
 *         batch enqueue: a batch is B single enqueues)
 * Each consumer copies records out and sums a field, so every record is
 * really read. After one untimed pass of each, the implementations run
 * interleaved, REPS times each, the order rotated every repetition; the
 * median rate is reported with every run's rate, in run order.
 *   bench_ring BATCH RECORDS REPS   -> one JSON object on stdout
 *
 * Instruction counts (stable where time is not): one thread pushes a batch
 * and drains it, RECORDS times over, for each ring, each step in its own
 * never-inlined function (instr_<ring>_push, instr_<ring>_drain), and then
 * polls the empty ring RECORDS times (instr_<ring>_empty). Run under
 * callgrind; bench/instr divides each function's inclusive count by the
 * records (or polls).
 *   bench_ring --instr BATCH RECORDS
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "v05-internal/shm.h"

#ifdef HAVE_DPDK
#include <rte_ring.h>
#include <rte_ring_elem.h>
#endif
#ifdef HAVE_CK
#include <ck_ring.h>
#endif

#define CAP 4096u

struct rec {
	uint64_t key, ts;
	uint32_t sample;
	float reward;
	uint32_t flags, seq;
};
_Static_assert(sizeof(struct rec) == 32, "32-byte records");

#ifdef HAVE_CK
CK_RING_PROTOTYPE(rec, rec)
#endif

static uint32_t batch;
static uint64_t records;
static volatile uint64_t sink;
static char segname[64];

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* ---- v05 ----------------------------------------------------------------- */

static struct v05_segment v05seg;

static void *v05_producer(void *arg)
{
	struct v05_reward r[64];
	struct v05_producer *p;

	(void)arg;
	pin(0);
	if (v05_producer_open(segname, 0, &p))
		abort();
	/* As the peers' producers: the rest set once, key and sample per
	 * record. */
	memset(r, 0, sizeof(r));
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++) {
			r[j].key = i + j;
			r[j].sample = j;
		}
		while (v05_producer_push_batch(p, r, batch) == -EAGAIN)
			;
	}
	v05_producer_close(p);
	return NULL;
}

static void v05_sum(void *ctx, const struct v05_record *recs, uint32_t n,
		    uint32_t lane)
{
	uint64_t sum = 0;

	(void)lane;
	for (uint32_t j = 0; j < n; j++)
		sum += recs[j].key;
	*(uint64_t *)ctx += sum;
}

static double run_v05(void)
{
	struct v05_lanes lanes;
	uint64_t got = 0, sum = 0, t0, t1;
	pthread_t t;

	v05__lanes_init(&lanes, &v05seg);
	pin(1);
	t0 = v05__now_ns();
	pthread_create(&t, NULL, v05_producer, NULL);
	while (got < records)
		got += v05__lanes_drain(&lanes, batch, batch, v05_sum, &sum);
	t1 = v05__now_ns();
	pthread_join(t, NULL);
	v05__lanes_fini(&lanes);
	sink += sum;
	return (double)records / ((double)(t1 - t0) / 1e9);
}

/* ---- DPDK ---------------------------------------------------------------- */

#ifdef HAVE_DPDK
static struct rte_ring *dring;

static void *dpdk_producer(void *arg)
{
	struct rec r[64];

	(void)arg;
	pin(0);
	memset(r, 0, sizeof(r));
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++) {
			r[j].key = i + j;
			r[j].sample = j;
		}
		while (!rte_ring_sp_enqueue_bulk_elem(dring, r, sizeof(struct rec),
						      batch, NULL))
			;
	}
	return NULL;
}

static double run_dpdk(void)
{
	struct rec r[64];
	uint64_t got = 0, sum = 0, t0, t1;
	pthread_t t;

	rte_ring_reset(dring);
	pin(1);
	t0 = v05__now_ns();
	pthread_create(&t, NULL, dpdk_producer, NULL);
	while (got < records) {
		unsigned n = rte_ring_sc_dequeue_burst_elem(dring, r, sizeof(struct rec),
							     batch, NULL);

		for (unsigned j = 0; j < n; j++)
			sum += r[j].key;
		got += n;
	}
	t1 = v05__now_ns();
	pthread_join(t, NULL);
	sink += sum;
	return (double)records / ((double)(t1 - t0) / 1e9);
}
#endif

/* ---- ck -------------------------------------------------------------------- */

#ifdef HAVE_CK
static struct ck_ring cring;
static struct rec *cbuf;

static void *ck_producer(void *arg)
{
	struct rec r[64];

	(void)arg;
	pin(0);
	memset(r, 0, sizeof(r));
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++) {
			r[j].key = i + j;
			r[j].sample = j;
		}
		for (uint32_t j = 0; j < batch; j++)
			while (!ck_ring_enqueue_spsc_rec(&cring, cbuf, &r[j]))
				;
	}
	return NULL;
}

static double run_ck(void)
{
	struct rec r;
	uint64_t got = 0, sum = 0, t0, t1;
	pthread_t t;

	ck_ring_init(&cring, CAP);
	pin(1);
	t0 = v05__now_ns();
	pthread_create(&t, NULL, ck_producer, NULL);
	while (got < records) {
		/* ck dequeues one at a time too; up to `batch` per turn. */
		for (uint32_t j = 0; j < batch && ck_ring_dequeue_spsc_rec(&cring, cbuf, &r); j++) {
			sum += r.key;
			got++;
		}
	}
	t1 = v05__now_ns();
	pthread_join(t, NULL);
	sink += sum;
	return (double)records / ((double)(t1 - t0) / 1e9);
}
#endif

/* ---- instruction counts (single thread, under callgrind) ------------------ */

#define NOINLINE __attribute__((noinline, used))

static NOINLINE void instr_v05_push(struct v05_producer *p,
				    const struct v05_reward *r)
{
	if (v05_producer_push_batch(p, r, batch) != (int)batch)
		abort();
}

static NOINLINE void instr_v05_drain(struct v05_lanes *l, uint64_t *sum)
{
	if (v05__lanes_drain(l, batch, batch, v05_sum, sum) != batch)
		abort();
}

static NOINLINE uint32_t instr_v05_empty(struct v05_lanes *l, uint64_t *sum)
{
	return v05__lanes_drain(l, batch, batch, v05_sum, sum);
}

static void instr_v05(void)
{
	struct v05_reward r[64];
	struct v05_producer *p;
	struct v05_lanes lanes;
	uint64_t sum = 0;

	if (v05_producer_open(segname, 0, &p))
		abort();
	v05__lanes_init(&lanes, &v05seg);
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++)
			r[j] = (struct v05_reward){ .key = i + j, .sample = j,
						     .reward = 1.0f };
		instr_v05_push(p, r);
		instr_v05_drain(&lanes, &sum);
	}
	for (uint64_t i = 0; i < records; i++)
		if (instr_v05_empty(&lanes, &sum))
			abort();
	v05__lanes_fini(&lanes);
	v05_producer_close(p);
	sink += sum;
}

#ifdef HAVE_DPDK
static NOINLINE void instr_dpdk_push(const struct rec *r)
{
	if (!rte_ring_sp_enqueue_bulk_elem(dring, r, sizeof(struct rec), batch,
					   NULL))
		abort();
}

static NOINLINE void instr_dpdk_drain(uint64_t *sum)
{
	struct rec r[64];
	unsigned n = rte_ring_sc_dequeue_burst_elem(dring, r, sizeof(struct rec),
						     batch, NULL);

	if (n != batch)
		abort();
	for (unsigned j = 0; j < n; j++)
		*sum += r[j].key;
}

static NOINLINE unsigned instr_dpdk_empty(void)
{
	struct rec r[64];

	return rte_ring_sc_dequeue_burst_elem(dring, r, sizeof(struct rec),
					      batch, NULL);
}

static void instr_dpdk(void)
{
	struct rec r[64];
	uint64_t sum = 0;

	rte_ring_reset(dring);
	memset(r, 0, sizeof(r));
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++) {
			r[j].key = i + j;
			r[j].sample = j;
		}
		instr_dpdk_push(r);
		instr_dpdk_drain(&sum);
	}
	for (uint64_t i = 0; i < records; i++)
		if (instr_dpdk_empty())
			abort();
	sink += sum;
}
#endif

#ifdef HAVE_CK
static NOINLINE void instr_ck_push(struct rec *r)
{
	for (uint32_t j = 0; j < batch; j++)
		if (!ck_ring_enqueue_spsc_rec(&cring, cbuf, &r[j]))
			abort();
}

static NOINLINE void instr_ck_drain(uint64_t *sum)
{
	struct rec r;

	for (uint32_t j = 0; j < batch; j++) {
		if (!ck_ring_dequeue_spsc_rec(&cring, cbuf, &r))
			abort();
		*sum += r.key;
	}
}

static NOINLINE bool instr_ck_empty(void)
{
	struct rec r;

	return ck_ring_dequeue_spsc_rec(&cring, cbuf, &r);
}

static void instr_ck(void)
{
	struct rec r[64];
	uint64_t sum = 0;

	ck_ring_init(&cring, CAP);
	memset(r, 0, sizeof(r));
	for (uint64_t i = 0; i < records; i += batch) {
		for (uint32_t j = 0; j < batch; j++) {
			r[j].key = i + j;
			r[j].sample = j;
		}
		instr_ck_push(r);
		instr_ck_drain(&sum);
	}
	for (uint64_t i = 0; i < records; i++)
		if (instr_ck_empty())
			abort();
	sink += sum;
}
#endif

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *name, double *v, int reps, int last)
{
	double s[64];

	memcpy(s, v, sizeof(double) * (size_t)reps);
	qsort(s, (size_t)reps, sizeof(double), cmp);
	printf("  \"%s\": {\"median\": %.0f, \"runs\": [", name, s[reps / 2]);
	for (int i = 0; i < reps; i++)
		printf(i ? ", %.0f" : "%.0f", v[i]);
	printf("]}%s\n", last ? "" : ",");
}

int main(int argc, char **argv)
{
	struct v05_geometry g = { .lane_count = 1, .lane_capacity = CAP,
				  .table_capacity = 2, .slot_count = 1,
				  .k_max = 1, .ring_capacity = 1,
				  .support_capacity = 1, .batch_count = 1 };
	double v[64], d[64], c[64];
	bool instr = argc > 1 && !strcmp(argv[1], "--instr");
	int reps;

	argv += instr;
	argc -= instr;
	if (argc < (instr ? 3 : 4))
		return 2;
	batch = (uint32_t)atoi(argv[1]);
	records = strtoull(argv[2], NULL, 10);
	reps = instr ? 1 : atoi(argv[3]);
	if (batch < 1 || batch > 64 || reps < 1 || reps > 64)
		return 2;
	records -= records % batch;
	snprintf(segname, sizeof(segname), "bench-ring-%d", (int)getpid());
	if (v05__segment_create(segname, &g, NULL, 0, 0600, &v05seg))
		return 1;
#ifdef HAVE_DPDK
	{
		ssize_t sz = rte_ring_get_memsize_elem(sizeof(struct rec), CAP);

		dring = aligned_alloc(128, ((size_t)sz + 127) & ~(size_t)127);
		if (!dring || rte_ring_init(dring, "bench", CAP,
					    RING_F_SP_ENQ | RING_F_SC_DEQ))
			return 1;
	}
#endif
#ifdef HAVE_CK
	if (posix_memalign((void **)&cbuf, 128, CAP * sizeof(struct rec)))
		return 1;
#endif
	if (instr) {
		instr_v05();
#ifdef HAVE_DPDK
		instr_dpdk();
#endif
#ifdef HAVE_CK
		instr_ck();
#endif
		printf("{\"batch\": %u, \"records\": %llu}\n", batch,
		       (unsigned long long)records);
		v05__segment_detach(&v05seg);
		v05_segment_unlink(segname);
		return 0;
	}
	/* One untimed pass each first (page faults, thread start-up, the
	 * core's clock ramp), then the timed passes with the order rotated
	 * every repetition so that no ring always runs first. */
	for (int i = -1; i < reps; i++) {
		for (int j = 0; j < 3; j++) {
			int which = (i < 0 ? j : i + j) % 3;
			double *out = i < 0 ? NULL : which == 0 ? &v[i] :
				      which == 1 ? &d[i] : &c[i];
			double rate = 0;

			if (which == 0)
				rate = run_v05();
#ifdef HAVE_DPDK
			if (which == 1)
				rate = run_dpdk();
#endif
#ifdef HAVE_CK
			if (which == 2)
				rate = run_ck();
#endif
			if (out)
				*out = rate;
		}
	}
	printf("{\"batch\": %u, \"records\": %llu, \"reps\": %d, \"record_bytes\": 32,\n",
	       batch, (unsigned long long)records, reps);
#if defined(HAVE_DPDK) || defined(HAVE_CK)
	report("v05", v, reps, 0);
#else
	report("v05", v, reps, 1);
#endif
#ifdef HAVE_DPDK
#ifdef HAVE_CK
	report("dpdk", d, reps, 0);
#else
	report("dpdk", d, reps, 1);
#endif
#endif
#ifdef HAVE_CK
	report("ck", c, reps, 1);
#endif
	printf("}\n");
	(void)d;
	(void)c;
	v05__segment_detach(&v05seg);
	v05_segment_unlink(segname);
	return 0;
}
