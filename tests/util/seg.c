/* SPDX-License-Identifier: MIT */
#include "seg.h"
#include "v05-internal/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void test_name(char *buf, size_t len, const char *tag)
{
	static unsigned n;

	snprintf(buf, len, "t-%s-%d-%u", tag, (int)getpid(), n++);
}

static uint32_t pow2_at_least(uint32_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

struct v05_geometry test_geometry(uint32_t lanes, uint32_t cap, uint32_t slots,
				  uint32_t k_max)
{
	struct v05_geometry g;

	memset(&g, 0, sizeof(g));
	g.lane_count = lanes;
	g.lane_capacity = cap;
	g.slot_count = slots;
	g.table_capacity = pow2_at_least(2 * slots);
	g.k_max = k_max;
	g.ring_capacity = pow2_at_least(2 * slots);
	g.support_capacity = 512;
	g.batch_count = 8;
	return g;
}

unsigned long test_env_ul(const char *var, unsigned long dflt)
{
	const char *v = getenv(var);

	return v && *v ? strtoul(v, NULL, 10) : dflt;
}

void test_lane_count(void *seg, enum v05_lane_event ev, uint32_t lane,
		     uint32_t n)
{
	struct v05_segment *s = seg;

	(void)lane;
	s->state->counters[v05__lane_event_counter(ev)] += n;
}
