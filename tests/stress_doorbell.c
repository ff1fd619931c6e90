/* SPDX-License-Identifier: MIT */
/*
 * Doorbell: the consumer goes to sleep between records, CYCLES times; the
 * producer (a separate process) pushes each record at one of two cues, in
 * turn: once the consumer has set `sleeping` (the push races the consumer's
 * re-check of the lanes), or once it has re-checked and is entering its
 * wait (a test-owned counter says so; the push races the arm and block,
 * and the consumer really sleeps). The memory-ordering race itself is the
 * spin model's to check (tests/doorbell.pml): its window is nanoseconds. A lost wake-up leaves the consumer asleep with a record
 * waiting: its wait has a 10 s timeout, and a wait that runs into it fails
 * the test (so a hang is a failure, not a stuck run). Waking with nothing to
 * read is allowed (a ring from the previous cycle can land after the word
 * was read) and only counted.
 *   stress_doorbell io_uring|thread [CYCLES]   (default 100000)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/seg.h"
#include "v05-internal/shm.h"

struct count {
	uint64_t n, bad;
};

static void on_record_one(void *ctx, const struct v05_record *rec, uint32_t lane)
{
	struct count *c = ctx;

	(void)lane;
	c->bad += rec->key != c->n + 1;
	c->n++;
}

/* The lanes hand records over in batches. */
static void on_record(void *ctx, const struct v05_record *recs, uint32_t n,
                      uint32_t lane)
{
	for (uint32_t j = 0; j < n; j++)
		on_record_one(ctx, &recs[j], lane);
}

/* Bumped by the consumer after its re-check found nothing, right before
 * it arms the wait: the producer's cue (shared anonymous memory). */
static uint64_t *committed;

static int producer(const char *name, struct v05_shm_doorbell *ctl,
		    uint64_t cycles)
{
	struct v05_producer *p;

	if (v05_producer_open(name, 0, &p))
		return 1;
	for (uint64_t i = 1; i <= cycles; i++) {
		if (i & 1) {
			/* Cue 1: sleep announced. The ring clears the flag,
			 * so each such record waits for a new announcement. */
			while (!v05_load_acquire(&ctl->sleeping))
				v05_cpu_relax();
		} else {
			/* Cue 2: the consumer is on its way into the wait. */
			while (__atomic_load_n(committed, __ATOMIC_ACQUIRE) < i)
				v05_cpu_relax();
		}
		if (v05_producer_push(p, i, 0, 0, 1.f))
			return 1;
	}
	return v05_producer_close(p) ? 1 : 0;
}

int main(int argc, char **argv)
{
	int path = argc > 1 && !strcmp(argv[1], "thread") ? V05_WAIT_THREAD :
							    V05_WAIT_IO_URING;
	uint64_t cycles = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
	struct v05_geometry g = test_geometry(1, 64, 4, 16);
	struct count c = { 0, 0 };
	uint64_t sleeps = 0, empty_wakes = 0, lost = 0;
	struct v05_segment seg;
	struct v05_lanes lanes;
	struct v05_waiter w;
	char name[64];
	pid_t pid;
	int st, ret;

	test_name(name, sizeof(name), "bell");
	if (v05__segment_create(name, &g, NULL, 0, 0600, &seg) ||
	    v05__lanes_init(&lanes, &seg))
		return 1;
	ret = v05__waiter_init(&w, &seg.bell->doorbell, path);
	if (ret) {
		printf("%s path unavailable here: %s\n", argv[1], v05_errmsg());
		v05_segment_unlink(name);
		return 77;
	}
	committed = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (committed == MAP_FAILED)
		return 1;
	pid = fork();
	if (pid == 0)
		_exit(producer(name, seg.bell, cycles));
	while (c.n < cycles && !c.bad) {
		uint64_t t0;
		uint32_t word;

		if (v05__lanes_drain(&lanes, 64, 64, on_record, &c))
			continue;
		word = v05__doorbell_prepare(seg.bell, v05__segment_asym(&seg));
		if (v05__lanes_pending(&lanes)) {
			v05__doorbell_done(seg.bell);
			continue;
		}
		t0 = v05__now_ns();
		__atomic_store_n(committed, c.n + 1, __ATOMIC_RELEASE);
		if (v05__waiter_arm(&w, word, 0, 10000))
			break;
		v05__waiter_block(&w);
		v05__waiter_disarm(&w);
		v05__doorbell_done(seg.bell);
		sleeps++;
		if (v05__now_ns() - t0 >= 9500000000ull) {
			lost++;
			fprintf(stderr, "lost wake-up after record %llu\n",
				(unsigned long long)c.n);
			break;
		}
		empty_wakes += !v05__lanes_pending(&lanes);
	}
	if (lost || c.n < cycles)
		kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	printf("doorbell %s (%s): %llu records, %llu sleeps, %llu spurious wakes, "
	       "%llu lost, %llu bad\n",
	       v05__wait_path_name(w.path),
	       v05__segment_asym(&seg) ? "membarrier" : "fence", (unsigned long long)c.n,
	       (unsigned long long)sleeps, (unsigned long long)empty_wakes,
	       (unsigned long long)lost, (unsigned long long)c.bad);
	v05__waiter_fini(&w);
	v05__lanes_fini(&lanes);
	v05__segment_detach(&seg);
	v05_segment_unlink(name);
	/* Most cycles must really have slept, or the test proved nothing. */
	return c.n == cycles && !c.bad && !lost &&
			       WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
			       sleeps >= cycles / 2 ?
		       0 : 1;
}
