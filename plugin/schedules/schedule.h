/* SPDX-License-Identifier: MIT */
/*
 * A schedule decides when held prompts go: one file per schedule
 * (sched_*.c), above the mechanics (mechanics.h) and the rules
 * (stats_core.h), below the top (top.h) that calls it. A schedule never
 * calls another schedule or the top (tests/check_layering.sh). A new
 * schedule is a file defining one struct v05__schedule and its line in
 * schedule.c's table.
 */
#ifndef V05_PLUGIN_SCHEDULE_H
#define V05_PLUGIN_SCHEDULE_H

#include "../mechanics/mechanics.h"

struct v05__schedule {
	const char *name;
	/* After anything changed in batch b: a prompt held, finalized,
	 * released, cancelled; a takeover's resume. */
	void (*progress)(struct v05_plugin *p, uint32_t b);
	/* Batch b's oldest held prompt waited stream_deadline_us (NULL: the
	 * schedule holds nothing against the clock). */
	void (*deadline)(struct v05_plugin *p, uint32_t b);
	/* A prompt's first k_init rewards are in and it has no plan yet
	 * (NULL: decide.c decides it as any other group). */
	void (*first_wave)(struct v05_plugin *p, struct v05_prompt *e);
};

extern const struct v05__schedule v05__sched_rounds;    /* sched_rounds.c */
extern const struct v05__schedule v05__sched_stream;    /* sched_stream.c */
extern const struct v05__schedule v05__sched_eb_barrier; /* sched_eb_barrier.c */
extern const struct v05__schedule v05__sched_eb_stream; /* sched_eb_stream.c */

#endif
