/* SPDX-License-Identifier: MIT */
#include "stream.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void stream_check_init(struct stream_check *c)
{
	memset(c, 0, sizeof(*c));
}

static void check_one(void *ctx, const struct v05_record *rec,
		      uint32_t lane)
{
	struct stream_check *c = ctx;
	uint64_t producer = rec->key >> 40;
	uint64_t n = rec->key & ((1ull << 40) - 1);

	c->total++;
	if (producer >= STREAM_MAX_PRODUCERS || n != c->next[producer] ||
	    rec->sample != stream_sample(rec->key) ||
	    rec->gen != (uint32_t)(rec->key >> 32) ||
	    rec->reward != stream_reward(rec->key)) {
		if (!c->bad)
			snprintf(c->first_error, sizeof(c->first_error),
				 "lane %u: producer %llu record %llu (expected %llu), sample %u reward %g",
				 lane, (unsigned long long)producer,
				 (unsigned long long)n,
				 producer < STREAM_MAX_PRODUCERS ?
					 (unsigned long long)c->next[producer] : 0ull,
				 rec->sample, (double)rec->reward);
		c->bad++;
		return;
	}
	c->next[producer]++;
}

void stream_check_record(void *ctx, const struct v05_record *recs, uint32_t n,
			 uint32_t lane)
{
	for (uint32_t j = 0; j < n; j++)
		check_one(ctx, &recs[j], lane);
}

int stream_push_batch(struct v05_producer *p, uint32_t id, uint64_t *n,
		      uint64_t count, uint64_t *rng)
{
	struct v05_reward batch[32];
	uint32_t b;
	int ret;

	*rng ^= *rng << 13;
	*rng ^= *rng >> 7;
	*rng ^= *rng << 17;
	b = 1 + (uint32_t)(*rng % 32);
	if (b > count - *n)
		b = (uint32_t)(count - *n);
	for (uint32_t i = 0; i < b; i++)
		batch[i] = stream_record(id, *n + i);
	ret = v05_producer_push_wait(p, batch, b, 30000);
	if (ret != (int)b)
		return ret < 0 ? ret : -EIO;
	*n += b;
	return 0;
}
