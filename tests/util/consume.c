/* SPDX-License-Identifier: MIT */
#include "consume.h"

#include <errno.h>
#include <string.h>

#include "v05-internal/shm.h"

int consume_until(struct v05_lanes *l, struct v05_waiter *w,
		  v05_record_fn fn, void *ctx, const uint64_t *total,
		  const uint64_t *bad, uint64_t want, unsigned stall_s,
		  struct consume_stats *st)
{
	struct v05_shm_doorbell *ctl = l->seg->bell;
	uint64_t last = v05__now_ns(), seen = *total;

	while (*total < want && !*bad) {
		uint32_t word;

		if (v05__lanes_drain(l, 4096, 64, fn, ctx) ||
		    v05__lanes_reclaim(l, false, fn, ctx)) {
			if (*total != seen) {
				seen = *total;
				last = v05__now_ns();
			}
			continue;
		}
		if (v05__now_ns() - last > (uint64_t)stall_s * 1000000000ull)
			return -ETIMEDOUT;
		word = v05__doorbell_prepare(ctl, v05__segment_asym(l->seg));
		if (v05__lanes_pending(l)) {
			v05__doorbell_done(ctl);
			continue;
		}
		/* The wait ends by itself after 200 ms so dead producers'
		 * lanes get reclaimed even when nobody rings. */
		if (v05__waiter_arm(w, word, 0, 200) == 0) {
			st->sleeps++;
			v05__waiter_block(w);
			v05__waiter_disarm(w);
		}
		v05__doorbell_done(ctl);
		if (!v05__lanes_pending(l))
			st->wakes_without_data++;
	}
	return 0;
}
