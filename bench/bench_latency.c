/* SPDX-License-Identifier: MIT */
/*
 * One-way latency, producer on core 0, consumer on core 1, one record in
 * flight at a time (the producer waits for the consumer's ack), measured
 * as consumer's CLOCK_MONOTONIC minus the producer's:
 *   floor        the physical floor: the producer stores a timestamp in a
 *                cache line the consumer spins on (a raw line transfer)
 *   spin         a v05 lane, consumer spinning on v05__lanes_drain; the
 *                producer's timestamp travels in the record's key (records
 *                carry no time of their own), read just before the push
 *   bell-uring   the consumer sleeps on the doorbell (io_uring FUTEX_WAIT)
 *                before each record; the producer pushes once it is in
 *   bell-thread  the same with the fallback waiter thread
 *   bench_latency SAMPLES_SPIN SAMPLES_BELL   -> JSON on stdout
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "v05-internal/shm.h"

struct line {
	_Alignas(128) uint64_t ts;
	uint64_t seq;
	_Alignas(128) uint64_t ack;       /* consumer: samples done        */
	_Alignas(128) uint64_t committed; /* consumer: entering its wait   */
};

static struct line L;
static uint64_t nsamples;
static uint64_t *lat;
static struct v05_segment seg;
static int mode; /* 0 floor, 1 spin, 2 bell */

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *producer(void *arg)
{
	struct v05_producer *p = NULL;

	(void)arg;
	pin(0);
	if (mode && v05__producer_open_mapped(&seg, 0, &p))
		abort();
	for (uint64_t i = 1; i <= nsamples; i++) {
		while (__atomic_load_n(&L.ack, __ATOMIC_ACQUIRE) < i - 1)
			v05_cpu_relax();
		if (mode == 2)
			while (__atomic_load_n(&L.committed, __ATOMIC_ACQUIRE) < i)
				v05_cpu_relax();
		if (mode == 0) {
			L.ts = v05__now_ns();
			__atomic_store_n(&L.seq, i, __ATOMIC_RELEASE);
		} else {
			v05_producer_push(p, v05__now_ns(), 0, 0, 1.0f);
		}
	}
	if (p)
		v05_producer_close(p);
	return NULL;
}

static uint64_t got;

static void on_record_one(void *ctx, const struct v05_record *rec, uint32_t lane)
{
	uint64_t now = v05__now_ns();

	(void)ctx;
	(void)lane;
	lat[got++] = now - rec->key;
	__atomic_store_n(&L.ack, got, __ATOMIC_RELEASE);
}

/* The lanes hand records over in batches. */
static void on_record(void *ctx, const struct v05_record *recs, uint32_t n,
                      uint32_t lane)
{
	for (uint32_t j = 0; j < n; j++)
		on_record_one(ctx, &recs[j], lane);
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void run(const char *name, int m, int wait_path, uint64_t n, int last)
{
	struct v05_lanes lanes;
	struct v05_waiter w;
	pthread_t t;

	memset(&L, 0, sizeof(L));
	mode = m;
	nsamples = n;
	got = 0;
	lat = calloc(n, sizeof(*lat));
	if (m)
		v05__lanes_init(&lanes, &seg);
	if (m == 2 && v05__waiter_init(&w, &seg.bell->doorbell, wait_path)) {
		printf("  \"%s\": null%s\n", name, last ? "" : ",");
		free(lat);
		return;
	}
	pin(1);
	pthread_create(&t, NULL, producer, NULL);
	while (got < n) {
		if (m == 0) {
			uint64_t s = __atomic_load_n(&L.seq, __ATOMIC_ACQUIRE);

			if (s == got + 1) {
				lat[got] = v05__now_ns() - L.ts;
				got++;
				__atomic_store_n(&L.ack, got, __ATOMIC_RELEASE);
			}
		} else if (!v05__lanes_drain(&lanes, 16, 16, on_record, NULL) &&
			   m == 2) {
			uint32_t word = v05__doorbell_prepare(seg.bell, v05__segment_asym(&seg));

			if (!v05__lanes_pending(&lanes)) {
				__atomic_store_n(&L.committed, got + 1, __ATOMIC_RELEASE);
				v05__waiter_arm(&w, word, 0, 1000);
				v05__waiter_block(&w);
				v05__waiter_disarm(&w);
			}
			v05__doorbell_done(seg.bell);
		}
	}
	pthread_join(t, NULL);
	qsort(lat, n, sizeof(*lat), cmp);
	printf("  \"%s\": {\"samples\": %llu, \"p50_ns\": %llu, \"p99_ns\": %llu, "
	       "\"p999_ns\": %llu, \"min_ns\": %llu}%s\n",
	       name, (unsigned long long)n, (unsigned long long)lat[n / 2],
	       (unsigned long long)lat[n * 99 / 100],
	       (unsigned long long)lat[n * 999 / 1000],
	       (unsigned long long)lat[0], last ? "" : ",");
	if (m == 2)
		v05__waiter_fini(&w);
	if (m)
		v05__lanes_fini(&lanes);
	free(lat);
}

int main(int argc, char **argv)
{
	struct v05_geometry g = { .lane_count = 1, .lane_capacity = 64,
				  .table_capacity = 2, .slot_count = 1,
				  .k_max = 1, .ring_capacity = 1,
				  .support_capacity = 1, .batch_count = 1 };
	uint64_t spin = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
	uint64_t bell = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000;
	char name[64];

	snprintf(name, sizeof(name), "bench-lat-%d", (int)getpid());
	if (v05__segment_create(name, &g, NULL, 0, 0600, &seg))
		return 1;
	printf("{\"doorbell\": \"%s\",\n", v05__segment_asym(&seg) ? "membarrier" : "fence");
	run("floor", 0, 0, spin, 0);
	run("spin", 1, 0, spin, 0);
	run("bell_io_uring", 2, V05_WAIT_IO_URING, bell, 0);
	run("bell_thread", 2, V05_WAIT_THREAD, bell, 1);
	printf("}\n");
	v05__segment_detach(&seg);
	v05_segment_unlink(name);
	return 0;
}
