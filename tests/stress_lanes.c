/* SPDX-License-Identifier: MIT */
/*
 * N producers x M records into one consumer, as processes (default) or as
 * threads (for TSan). Every record must arrive exactly once, in each
 * producer's order, with the content it was written with.
 *   stress_lanes [process|thread] [PRODUCERS]
 * M = $V05_STRESS_RECORDS (default 1,000,000).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/consume.h"
#include "util/seg.h"
#include "util/stream.h"
#include "v05-internal/shm.h"
#include "v05-internal/vocab.h"

static char name[64];
static uint64_t per_producer;
/* Threads share the consumer's mapping: ThreadSanitizer tracks addresses,
 * and a second mapping of the same bytes would hide every race from it. */
static struct v05_segment *shared_mapping;

/* Batches of 1..32, a different rhythm per producer. */
static int produce(uint32_t id)
{
	struct v05_producer *p;
	uint64_t n = 0, rng = 0x2545f4914f6cdd1dull * (id + 1);
	int ret = shared_mapping ?
		v05__producer_open_mapped(shared_mapping, 0, &p) :
		v05_producer_open(name, 0, &p);

	if (ret) {
		fprintf(stderr, "producer %u: open: %s\n", id, v05_errmsg());
		return 1;
	}
	while (n < per_producer) {
		ret = stream_push_batch(p, id, &n, per_producer, &rng);
		if (ret) {
			fprintf(stderr, "producer %u: push: %d %s\n", id, ret,
				v05_errmsg());
			return 1;
		}
	}
	return v05_producer_close(p) ? 1 : 0;
}

static void *thread_main(void *arg)
{
	return (void *)(intptr_t)produce((uint32_t)(intptr_t)arg);
}

int main(int argc, char **argv)
{
	bool threads = argc > 1 && !strcmp(argv[1], "thread");
	uint32_t nprod = argc > 2 ? (uint32_t)atoi(argv[2]) : 8;
	struct v05_geometry g = test_geometry(nprod, 4096, 4, 16);
	struct stream_check *check = calloc(1, sizeof(*check));
	struct consume_stats cst = { 0 };
	pthread_t tids[64];
	pid_t pids[64];
	struct v05_segment seg;
	struct v05_lanes lanes;
	struct v05_waiter w;
	int failed = 0, ret;

	per_producer = test_env_ul("V05_STRESS_RECORDS", 1000000);
	if (!check || nprod < 1 || nprod > 64)
		return 2;
	stream_check_init(check);
	test_name(name, sizeof(name), threads ? "stress-t" : "stress-p");
	if (v05__segment_create(name, &g, NULL, 0, 0600, &seg) ||
	    v05__lanes_init(&lanes, &seg) ||
	    v05__waiter_init(&w, &seg.bell->doorbell, 0)) {
		fprintf(stderr, "setup: %s\n", v05_errmsg());
		return 1;
	}
	lanes.event = test_lane_count;
	lanes.event_ctx = &seg;
	if (threads)
		shared_mapping = &seg;
	for (uint32_t i = 0; i < nprod; i++) {
		if (threads) {
			pthread_create(&tids[i], NULL, thread_main,
				       (void *)(intptr_t)i);
		} else {
			pids[i] = fork();
			if (pids[i] == 0)
				_exit(produce(i));
		}
	}
	ret = consume_until(&lanes, &w, stream_check_record, check,
			    &check->total, &check->bad, per_producer * nprod,
			    60, &cst);
	if (threads)
		shared_mapping = &seg;
	for (uint32_t i = 0; i < nprod; i++) {
		if (threads) {
			void *r;

			pthread_join(tids[i], &r);
			failed |= r != NULL;
		} else {
			int st;

			waitpid(pids[i], &st, 0);
			failed |= !WIFEXITED(st) || WEXITSTATUS(st);
		}
	}
	/* Anything left (nothing should be): drain it to count it. */
	while (v05__lanes_drain(&lanes, 4096, 64, stream_check_record, check))
		;
	for (uint32_t i = 0; i < nprod; i++)
		if (check->next[i] != per_producer) {
			fprintf(stderr, "producer %u: %llu of %llu records arrived\n",
				i, (unsigned long long)check->next[i],
				(unsigned long long)per_producer);
			failed = 1;
		}
	if (ret) {
		fprintf(stderr, "consumer stalled for 60 s\n");
		failed = 1;
	}
	if (check->bad) {
		fprintf(stderr, "%llu bad records; first: %s\n",
			(unsigned long long)check->bad, check->first_error);
		failed = 1;
	}
	if (check->total != per_producer * nprod) {
		fprintf(stderr, "%llu records consumed, expected %llu\n",
			(unsigned long long)check->total,
			(unsigned long long)(per_producer * nprod));
		failed = 1;
	}
	printf("%s: %u producers x %llu records, wait path %s, %llu sleeps, "
	       "corrupt %llu: %s\n",
	       threads ? "threads" : "processes", nprod,
	       (unsigned long long)per_producer, v05__wait_path_name(w.path),
	       (unsigned long long)cst.sleeps,
	       (unsigned long long)seg.state->counters[V05_C_REJ_CORRUPT],
	       failed ? "FAIL" : "ok");
	failed |= seg.state->counters[V05_C_REJ_CORRUPT] != 0;
	v05__waiter_fini(&w);
	v05__lanes_fini(&lanes);
	v05__segment_detach(&seg);
	v05_segment_unlink(name);
	free(check);
	return failed;
}
