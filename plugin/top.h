/* SPDX-License-Identifier: MIT */
/*
 * The top of the decision core: the entry points that run on an event
 * (a reward applied, a poll's deadlines, a takeover's resume, an exchange
 * of the running fit) and call the rules, the mechanics and the schedule
 * the configuration selects (schedule.c), in that order.
 */
#ifndef V05_PLUGIN_TOP_H
#define V05_PLUGIN_TOP_H

#include "schedules/schedule.h"

/* schedule.c: the configured schedule, and the calls into it. */
const struct v05__schedule *v05__schedule_of(const struct v05_plugin *p);
void v05__schedule_progress(struct v05_plugin *p, uint32_t b);
void v05__schedule_deadlines(struct v05_plugin *p);
int64_t v05__schedule_next_deadline_ns(struct v05_plugin *p, uint64_t now);
void v05__schedule_resume(struct v05_plugin *p, uint32_t b);

/* cancel.c: an abort record (V05_RECORD_ABORT) applied or rejected,
 * counted either way. */
void v05__apply_abort(struct v05_plugin *p, const struct v05_record *rec);

/* decide.c: once a group's issued samples are in, decide it. */
void v05__decide(struct v05_plugin *p, struct v05_prompt *e);
/* After a reward: decide if the prompt's issued samples are all in, or
 * (v05-eb's early start) its first wave is. */
void v05__collect_check(struct v05_plugin *p, struct v05_prompt *e);

#endif
