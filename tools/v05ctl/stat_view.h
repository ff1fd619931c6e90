/* SPDX-License-Identifier: MIT */
/* One snapshot of a segment, as v05ctl stat prints it and top refreshes it. */
#ifndef V05CTL_STAT_VIEW_H
#define V05CTL_STAT_VIEW_H

#include <stdint.h>
#include <stdio.h>

#include "v05.h"

#define STAT_MAX_LANES 256u

struct stat_view {
	const char *name;
	struct v05_observer_info info;
	uint64_t c[V05_COUNTER_SLOTS];
	struct v05_lane_stat lanes[STAT_MAX_LANES];
	uint32_t nlanes;
	uint64_t taken_ns; /* CLOCK_MONOTONIC of the snapshot */
};

/* Take a snapshot: 0 or a negative errno (v05_errmsg() says why). */
int stat_take(struct v05_observer *o, const char *name, struct stat_view *v);

/* The human view; prev (may be NULL) adds rates per second since it. */
void stat_print(FILE *f, const struct stat_view *v, const struct stat_view *prev);

/* The same as one JSON object and a newline. */
void stat_print_json(FILE *f, const struct stat_view *v);

/* Reward-to-decision latency quantile q from the histogram, in ns (the
 * upper edge of its bucket), or 0 with no samples. */
uint64_t stat_latency_quantile(const uint64_t *c, double q);

#endif
