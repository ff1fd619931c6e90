/* SPDX-License-Identifier: MIT */
/* The fixture util/broker_fx.h declares. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/broker_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

void brk_config(struct v05_config *c, uint32_t lanes)
{
	v05_config_default(c);
	c->max_prompts = 8;
	c->max_producers = lanes;
	c->lane_capacity = 64;
	c->flags = V05_CONFIG_PRODUCER_BROKER;
	/* Someone else than us (the owner's uid is always in). */
	c->broker_uids[0] = ACTOR_LISTED_UID;
	c->n_broker_uids = 1;
}

uint64_t brk_ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

/* Submit one prompt, push its first samples through w, poll until they
 * are applied; returns the rewards applied. */
uint64_t brk_push_and_apply(struct v05_plugin *p, struct v05_producer *w,
			    const char *uid)
{
	struct v05_prompt_in in = { .uid = uid, .uid_len = (uint32_t)strlen(uid),
				    .prior = 0.2 };
	struct v05_decision d[8];
	uint64_t before = brk_ctr(p, V05_C_REWARDS_APPLIED);
	uint32_t pushed = 0;

	assert_int_equal(v05_submit(p, &in, 1, d, NULL), 1);
	for (uint32_t s = 0; s < 64; s++) {
		if (d[0].samples >> s & 1) {
			assert_int_equal(v05_producer_push(w, d[0].key, d[0].gen, s, 1.f), 0);
			pushed++;
		}
	}
	/* Published before we look: one poll drains them. */
	assert_true(v05_poll(p, d, 8) >= 0);
	assert_int_equal(brk_ctr(p, V05_C_REWARDS_APPLIED) - before, pushed);
	return pushed;
}

uint64_t brk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t brk_granted_lanes(struct v05_plugin *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->seg.hdr.geo.lane_count; i++)
		n += v05__lane_granted(&p->seg.lane_own[i]);
	return n;
}
