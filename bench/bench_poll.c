/* SPDX-License-Identifier: MIT */
/*
 * Per-reward cost of v05_poll: PROMPTS active prompts (one batch, v05 mode,
 * k_init 4), 8 producer threads that fill their lanes with every prompt's
 * first 4 rewards, then the consumer's time to apply all of them (table
 * lookup, checks, slot write, and for each completed group the statistics,
 * the decision, finalization or the round's release). Producers are done
 * before the clock starts: this is the consumer's cost alone.
 *   bench_poll PROMPTS REPS   -> JSON on stdout
 * Then the cost of a poll with nothing to do (every lane empty, no release,
 * no deadline due): EMPTY_POLLS calls, timed, and beside it, alternating
 * in blocks, the same number of bare scans of the empty lanes
 * (v05__lanes_drain alone: what any consumer of 8 lanes pays), so that
 * what v05_poll adds to the scan shows as a difference taken in one run.
 * Under callgrind, poll_apply, poll_empty and scan_empty (never inlined)
 * give the instructions per reward, per empty poll and per bare scan
 * (bench/instr).
 * The stream (prompt i: prior ((i % 21) - 10) / 10, reward of sample s:
 * +1 iff (7i + 3s) % 5 < 3) is the one bench/poll_python.py replays.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define PRODUCERS 8u
#define K 4u

static uint32_t nprompts;
static char name[64];
static uint64_t *keys;
static uint32_t *gens;

static double prior_of(uint32_t i)
{
	return (double)((int)(i % 21) - 10) / 10.0;
}

static float reward_of(uint32_t i, uint32_t s)
{
	return (7u * i + 3u * s) % 5u < 3u ? 1.0f : -1.0f;
}

/* Kept open until the consumer is done: a closed lane is free for the next
 * producer to claim, records and all, and a full one would stop it. */
static struct v05_producer *handles[PRODUCERS];

static void *producer(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	struct v05_reward r[K];
	struct v05_producer *p;

	if (v05_producer_open(name, 0, &p)) {
		fprintf(stderr, "bench_poll: producer: %s\n", v05_errmsg());
		exit(1);
	}
	for (uint32_t i = id; i < nprompts; i += PRODUCERS) {
		for (uint32_t s = 0; s < K; s++)
			r[s] = (struct v05_reward){ .key = keys[i], .gen = gens[i],
						    .sample = s,
						    .reward = reward_of(i, s) };
		if (v05_producer_push_batch(p, r, K) != (int)K) {
			fprintf(stderr, "bench_poll: push: %s\n", v05_errmsg());
			exit(1);
		}
	}
	handles[id] = p;
	return NULL;
}

#define EMPTY_POLLS 100000u

/* Apply every pushed reward: want of them. */
static __attribute__((noinline, used)) void
poll_apply(struct v05_plugin *p, struct v05_decision *d, uint64_t want)
{
	uint64_t applied = 0;

	while (applied < want) {
		v05_poll(p, d, 2 * nprompts);
		applied = v05_load_relaxed(&p->seg.state->counters[V05_C_REWARDS_APPLIED]);
	}
}

/* Polls with nothing to do. */
static __attribute__((noinline, used)) void
poll_empty(struct v05_plugin *p, struct v05_decision *d, uint32_t polls)
{
	for (uint32_t i = 0; i < polls; i++)
		if (v05_poll(p, d, 2 * nprompts) != 0)
			abort();
}

/* Bare scans of the empty lanes, as v05_poll does first. */
static __attribute__((noinline, used)) void
scan_empty(struct v05_plugin *p, uint32_t scans)
{
	for (uint32_t i = 0; i < scans; i++)
		if (v05__lanes_drain(&p->lanes, 4096, 64, v05__apply_records, p))
			abort();
}

static double once(uint64_t *seg_bytes, uint64_t *prompt_bytes,
		   double *empty_ns, double *scan_ns)
{
	struct v05_prompt_in *in = calloc(nprompts, sizeof(*in));
	struct v05_decision *d = calloc(2 * (size_t)nprompts, sizeof(*d));
	char (*uids)[16] = calloc(nprompts, 16);
	uint64_t want = (uint64_t)nprompts * K, t0, t1, t2;
	pthread_t t[PRODUCERS];
	struct v05_config c;
	struct v05_plugin *p;

	snprintf(name, sizeof(name), "bench-poll-%d", (int)getpid());
	v05_config_default(&c);
	c.params.mode = V05_MODE_V05; /* the paper's per-prompt decision; see header */
	c.max_prompts = nprompts;
	c.max_producers = PRODUCERS;
	c.lane_capacity = 1u << 15; /* holds a producer's whole share */
	while (c.lane_capacity * PRODUCERS < want)
		c.lane_capacity <<= 1;
	if (v05_plugin_create(name, &c, &p)) {
		fprintf(stderr, "bench_poll: %s\n", v05_errmsg());
		exit(1);
	}
	for (uint32_t i = 0; i < nprompts; i++) {
		snprintf(uids[i], 16, "p%u", i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = prior_of(i);
		keys[i] = v05_key(uids[i], in[i].uid_len);
	}
	if (v05_submit(p, in, nprompts, d, NULL) != (int)nprompts) {
		fprintf(stderr, "bench_poll: submit: %s\n", v05_errmsg());
		exit(1);
	}
	for (uint32_t i = 0; i < nprompts; i++)
		gens[i] = d[i].gen;
	for (uint32_t i = 0; i < PRODUCERS; i++)
		pthread_create(&t[i], NULL, producer, (void *)(uintptr_t)i);
	for (uint32_t i = 0; i < PRODUCERS; i++)
		pthread_join(t[i], NULL);
	t0 = v05__now_ns();
	poll_apply(p, d, want);
	t1 = v05__now_ns();
	/* Collect the decisions the last rewards made, and those of plans
	 * held to pad (the stream schedule releases them at their
	 * deadline), then time the empty polls: nothing may be left for
	 * them to do. */
	for (int64_t ns = 0; ns >= 0;) {
		while (v05_poll(p, d, 2 * nprompts) > 0)
			;
		if (v05_next_deadline(p, &ns))
			abort();
	}
	/* Ten blocks of each, alternating, so that the host's load falls on
	 * both alike. */
	*empty_ns = *scan_ns = 0;
	for (int blk = 0; blk < 10; blk++) {
		t2 = v05__now_ns();
		poll_empty(p, d, EMPTY_POLLS / 10);
		*empty_ns += (double)(v05__now_ns() - t2) / EMPTY_POLLS;
		t2 = v05__now_ns();
		scan_empty(p, EMPTY_POLLS / 10);
		*scan_ns += (double)(v05__now_ns() - t2) / EMPTY_POLLS;
	}
	for (uint32_t i = 0; i < PRODUCERS; i++)
		v05_producer_close(handles[i]);
	*seg_bytes = p->seg.size;
	{
		const struct v05_shm_header *h = &p->seg.hdr;

		/* What grows with the number of prompts: table entries (2 per
		 * prompt at load 0.5), the slot, completion and release
		 * entries, the batch record share. */
		*prompt_bytes = (h->regions[V05_REGION_TABLE].size +
				 h->regions[V05_REGION_ARENA].size +
				 h->regions[V05_REGION_COMPLETION].size +
				 h->regions[V05_REGION_RELEASE].size) / nprompts;
	}
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	free(in);
	free(d);
	free(uids);
	return (double)(t1 - t0) / (double)want;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double ns[32], sorted[32], empty[32], scan[32], extra[32];
	uint64_t seg_bytes = 0, prompt_bytes = 0;
	int reps;

	nprompts = argc > 1 ? (uint32_t)atoi(argv[1]) : 65536;
	reps = argc > 2 ? atoi(argv[2]) : 5;
	if (nprompts < 64 || reps < 1 || reps > 32)
		return 2;
	keys = calloc(nprompts, sizeof(*keys));
	gens = calloc(nprompts, sizeof(*gens));
	for (int i = 0; i < reps; i++)
		ns[i] = once(&seg_bytes, &prompt_bytes, &empty[i], &scan[i]);
	memcpy(sorted, ns, sizeof(double) * (size_t)reps);
	qsort(sorted, (size_t)reps, sizeof(double), cmp);
	printf("{\"empty_poll_runs_ns\": [");
	for (int i = 0; i < reps; i++)
		printf(i ? ", %.1f" : "%.1f", empty[i]);
	printf("], \"lane_scan_runs_ns\": [");
	for (int i = 0; i < reps; i++) {
		printf(i ? ", %.1f" : "%.1f", scan[i]);
		extra[i] = empty[i] - scan[i];
	}
	qsort(empty, (size_t)reps, sizeof(double), cmp);
	qsort(scan, (size_t)reps, sizeof(double), cmp);
	qsort(extra, (size_t)reps, sizeof(double), cmp);
	printf("], \"median_empty_poll_ns\": %.1f, \"median_lane_scan_ns\": %.1f, "
	       "\"median_poll_over_scan_ns\": %.1f, \"poll_over_scan_range_ns\": [%.1f, %.1f], ",
	       empty[reps / 2], scan[reps / 2], extra[reps / 2], extra[0],
	       extra[reps - 1]);
	printf("\"prompts\": %u, \"producers\": %u, \"rewards\": %llu, "
	       "\"median_ns_per_reward\": %.1f, \"runs_ns\": [",
	       nprompts, PRODUCERS, (unsigned long long)nprompts * K,
	       sorted[reps / 2]);
	for (int i = 0; i < reps; i++)
		printf(i ? ", %.1f" : "%.1f", ns[i]);
	printf("], \"segment_bytes\": %llu, \"bytes_per_prompt\": %llu, "
	       "\"segment_bytes_per_prompt\": %.0f}\n",
	       (unsigned long long)seg_bytes, (unsigned long long)prompt_bytes,
	       (double)seg_bytes / nprompts);
	return 0;
}
