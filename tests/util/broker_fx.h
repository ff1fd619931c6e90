/* SPDX-License-Identifier: MIT */
/*
 * The lane broker's tests' fixture (test_broker.c, test_broker_takeover.c):
 * a plugin with a broker admitting this uid, counters, pushes applied, a
 * wait for a condition the plugin's polls make true.
 */
#ifndef V05_TESTS_BROKER_FX_H
#define V05_TESTS_BROKER_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "util/actor.h"
#include "util/seg.h"
#include "v05.h"

void brk_config(struct v05_config *c, uint32_t lanes);
uint64_t brk_ctr(struct v05_plugin *p, int c);
uint64_t brk_push_and_apply(struct v05_plugin *p, struct v05_producer *w,
			    const char *uid);
uint64_t brk_now_ns(void);

struct lane_at {
	struct v05_plugin *p;
	uint32_t lane;
};

uint32_t brk_granted_lanes(struct v05_plugin *p);

#endif
