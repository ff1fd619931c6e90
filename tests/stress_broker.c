/* SPDX-License-Identifier: MIT */
/*
 * Brokered producers coming and going faster than the owner polls, as
 * threads of the owner's process (so that ThreadSanitizer sees the broker
 * thread, the poll thread and the producers at once): more producers than
 * lanes, each taking a job, opening a lane through the broker, pushing the
 * job's samples and closing, so that lanes end drained and undrained, are
 * granted again by the broker or given back by the owner, in every order
 * the machine makes. Every reward must be applied exactly once, none
 * dropped unread, and every lane given back at the end.
 *   stress_broker [PRODUCERS] [JOBS]
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/actor.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define LANES 2u

static char name[64];
static struct v05_decision *jobs;
static uint32_t njobs;
/* The next job to take, the samples pushed, the producers done. */
static uint32_t next_job;
static uint64_t pushed;
static uint32_t done;
/* Refusals while every lane was held: the broker was asked again. */
static uint64_t busy;

static int produce(uint32_t id)
{
	for (;;) {
		uint32_t j = __atomic_fetch_add(&next_job, 1, __ATOMIC_RELAXED);
		struct v05_producer *w;
		uint32_t n = 0;
		int ret;

		if (j >= njobs)
			return 0;
		while ((ret = v05__producer_open_brokered(name, 0, &w)) == -EBUSY) {
			__atomic_fetch_add(&busy, 1, __ATOMIC_RELAXED);
			sched_yield();
		}
		if (ret) {
			fprintf(stderr, "producer %u: open: %s\n", id, v05_errmsg());
			return 1;
		}
		for (uint32_t s = 0; s < 64; s++) {
			if (!(jobs[j].samples >> s & 1))
				continue;
			ret = v05_producer_push(w, jobs[j].key, jobs[j].gen, s, 0.25f);
			if (ret) {
				fprintf(stderr, "producer %u: push: %s\n", id,
					v05_errmsg());
				return 1;
			}
			n++;
		}
		/* Every third job leaves at once, before the owner can have
		 * drained it; the others flush and yield first. */
		if (j % 3)
			sched_yield();
		__atomic_fetch_add(&pushed, n, __ATOMIC_RELAXED);
		if (v05_producer_close(w)) {
			fprintf(stderr, "producer %u: close: %s\n", id, v05_errmsg());
			return 1;
		}
	}
}

static void *thread_main(void *arg)
{
	intptr_t ret = produce((uint32_t)(intptr_t)arg);

	__atomic_fetch_add(&done, 1, __ATOMIC_RELEASE);
	return (void *)ret;
}

static uint64_t ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t granted(struct v05_plugin *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < LANES; i++)
		n += v05__lane_granted(&p->seg.lane_own[i]);
	return n;
}

static uint64_t discarded(struct v05_plugin *p)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < LANES; i++)
		n += v05_load_relaxed(&p->seg.lane_own[i].discarded);
	return n;
}

int main(int argc, char **argv)
{
	uint32_t producers = argc > 1 ? (uint32_t)atoi(argv[1]) : 4;
	struct v05_decision d[64];
	struct v05_plugin *p;
	struct v05_config c;
	pthread_t th[16];
	uint64_t end, sum = 0;
	int failed = 0;

	njobs = argc > 2 ? (uint32_t)atoi(argv[2]) : 1000;
	if (producers < 1 || producers > 16 || njobs < 1 || njobs > 4096) {
		fprintf(stderr, "usage: stress_broker [PRODUCERS 1..16] [JOBS 1..4096]\n");
		return 2;
	}
	test_name(name, sizeof(name), "brkstress");
	v05_config_default(&c);
	c.max_prompts = 4096;
	c.max_producers = LANES;
	c.lane_capacity = 64;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	c.broker_uids[0] = ACTOR_LISTED_UID; /* ours is always in */
	c.n_broker_uids = 1;
	if (v05_plugin_create(name, &c, &p)) {
		fprintf(stderr, "create: %s\n", v05_errmsg());
		return 1;
	}
	jobs = calloc(njobs, sizeof(*jobs));
	/* In batches of 128 (the plugin keeps 64 batches in flight). */
	for (uint32_t j0 = 0; jobs && j0 < njobs; j0 += 128) {
		uint32_t n = njobs - j0 < 128 ? njobs - j0 : 128;
		struct v05_prompt_in in[128];
		char uid[128][32];

		for (uint32_t k = 0; k < n; k++) {
			in[k] = (struct v05_prompt_in){ .uid = uid[k], .prior = 0.3 };
			in[k].uid_len = (uint32_t)snprintf(uid[k], sizeof(uid[k]),
							   "job-%u", j0 + k);
		}
		if (v05_submit(p, in, n, &jobs[j0], NULL) != (int)n) {
			fprintf(stderr, "submit: %s\n", v05_errmsg());
			return 1;
		}
		for (uint32_t k = 0; k < n; k++)
			sum += (uint64_t)__builtin_popcountll(jobs[j0 + k].samples);
	}
	if (!jobs)
		return 1;
	for (uint32_t t = 0; t < producers; t++)
		pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t);
	/* The owner: waits and polls until the producers are done and every
	 * reward pushed is applied, and every lane is back. No timing: the
	 * 120 s bound only ends a hang. */
	end = now_ns() + 120000000000ull;
	while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) < producers ||
	       ctr(p, V05_C_REWARDS_APPLIED) <
		       __atomic_load_n(&pushed, __ATOMIC_RELAXED) ||
	       granted(p)) {
		if (now_ns() > end) {
			fprintf(stderr, "stress_broker: not done in 120 s: %llu of %llu applied, %u lanes granted\n",
				(unsigned long long)ctr(p, V05_C_REWARDS_APPLIED),
				(unsigned long long)pushed, granted(p));
			failed = 1;
			break;
		}
		if (v05_wait(p, 5) < 0 || v05_poll(p, d, 64) < 0) {
			fprintf(stderr, "owner: %s\n", v05_errmsg());
			failed = 1;
			break;
		}
	}
	for (uint32_t t = 0; t < producers; t++) {
		void *ret;

		pthread_join(th[t], &ret);
		failed |= ret != NULL;
	}
	printf("stress_broker: %u producers, %u lanes, %u jobs: %llu rewards pushed, %llu applied, %llu rejected as duplicates, %llu dropped unread, %llu refusals (every lane held)\n",
	       producers, LANES, njobs, (unsigned long long)pushed,
	       (unsigned long long)ctr(p, V05_C_REWARDS_APPLIED),
	       (unsigned long long)ctr(p, V05_C_REJ_DUPLICATE),
	       (unsigned long long)discarded(p), (unsigned long long)busy);
	if (pushed != sum || ctr(p, V05_C_REWARDS_APPLIED) != sum ||
	    ctr(p, V05_C_REJ_DUPLICATE) || ctr(p, V05_C_REJ_CORRUPT) ||
	    discarded(p) || granted(p)) {
		fprintf(stderr, "stress_broker: expected %llu rewards applied once, none dropped, no lane granted\n",
			(unsigned long long)sum);
		failed = 1;
	}
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	free(jobs);
	return failed;
}
