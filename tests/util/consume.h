/* SPDX-License-Identifier: MIT */
/* Test consumer loop: drain lanes, sleep on the doorbell when empty. */
#ifndef V05_TEST_CONSUME_H
#define V05_TEST_CONSUME_H

#include <stdint.h>

#include "v05-internal/shm.h"

struct consume_stats {
	uint64_t sleeps; /* waits that actually blocked */
	uint64_t wakes_without_data;
};

/*
 * Drain into fn until *total reaches want (or *bad becomes non-zero).
 * Fails (returns -ETIMEDOUT) after stall_s seconds without progress: a hang
 * becomes a failure with a message instead of a stuck test.
 */
int consume_until(struct v05_lanes *l, struct v05_waiter *w,
		  v05_record_fn fn, void *ctx, const uint64_t *total,
		  const uint64_t *bad, uint64_t want, unsigned stall_s,
		  struct consume_stats *st);

#endif
