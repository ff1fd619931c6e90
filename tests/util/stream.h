/* SPDX-License-Identifier: MIT */
/*
 * Self-checking record streams for the transport stress tests: producer p's
 * record n has key (p << 40 | n), and its sample and reward are functions
 * of the key, so the consumer can check every record's content and each
 * producer's order without shared bookkeeping.
 */
#ifndef V05_TEST_STREAM_H
#define V05_TEST_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "v05-internal/shm.h"
#include "v05/shm.h"

#define STREAM_MAX_PRODUCERS 1024u

static inline uint64_t stream_key(uint32_t producer, uint64_t n)
{
	return ((uint64_t)producer << 40) | n;
}

static inline uint32_t stream_sample(uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ull;

	return (uint32_t)(h >> 32);
}

static inline float stream_reward(uint64_t key)
{
	return (float)((int)(key % 2001u) - 1000) / 1000.0f;
}

static inline struct v05_reward stream_record(uint32_t producer, uint64_t n)
{
	uint64_t key = stream_key(producer, n);
	struct v05_reward r = { .key = key, .gen = (uint32_t)(key >> 32),
				.sample = stream_sample(key),
				.reward = stream_reward(key) };

	return r;
}

/*
 * Push producer id's records [*n, min(*n + b, count)) as one batch, b in
 * 1..32 drawn from *rng (xorshift), waiting up to 30 s for room. Advances
 * *n; 0 or the failing push's negative errno.
 */
int stream_push_batch(struct v05_producer *p, uint32_t id, uint64_t *n,
		      uint64_t count, uint64_t *rng);

struct stream_check {
	uint64_t next[STREAM_MAX_PRODUCERS]; /* next expected n per producer */
	uint64_t total;
	uint64_t bad;                        /* content or order errors */
	char first_error[160];
};

void stream_check_init(struct stream_check *c);
/* A v05_record_fn: ctx is a struct stream_check. */
void stream_check_record(void *ctx, const struct v05_record *recs, uint32_t n,
			 uint32_t lane);

#endif
