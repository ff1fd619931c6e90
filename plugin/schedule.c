/* SPDX-License-Identifier: MIT */
/*
 * Which schedule a plugin runs, and the calls into it: (the rule's waves,
 * the configured schedule) picks one of the schedules/sched_*.c files;
 * the top calls it through here after every event, on the stream
 * deadline, and on a takeover's resume.
 */
#include "top.h"
#include "../shm/proc.h"

/* The schedule table: the rule's waves (rules/rule.h) by the configured
 * schedule. A WAVES_FIT rule's rounds are its batch barrier (the fit of
 * the whole first wave); its stream decides each prompt on its own. */
static const struct v05__schedule *const table[][2] = {
	[V05__WAVES_STEPS] = {
		[V05_SCHEDULE_ROUNDS] = &v05__sched_rounds,
		[V05_SCHEDULE_STREAM] = &v05__sched_stream,
	},
	[V05__WAVES_FIT] = {
		[V05_SCHEDULE_ROUNDS] = &v05__sched_eb_barrier,
		[V05_SCHEDULE_STREAM] = &v05__sched_eb_stream,
	},
};

const struct v05__schedule *v05__schedule_of(const struct v05_plugin *p)
{
	/* Both checked at create and attach (config.c). */
	return table[p->rule->waves][p->cfg.schedule];
}

void v05__schedule_progress(struct v05_plugin *p, uint32_t b)
{
	v05__schedule_of(p)->progress(p, b);
}

void v05__schedule_deadlines(struct v05_plugin *p)
{
	const struct v05__schedule *s = v05__schedule_of(p);
	uint64_t dl = (uint64_t)p->cfg.stream_deadline_us * 1000u, now = 0;

	/* Nothing held, no deadline: the common poll does not look at
	 * every batch record. The gauge is this thread's own sum of the
	 * batches' n_held (dispatch.c, finalize.c, takeover.c). */
	if (!s->deadline || !v05_load_relaxed(v05__ctr(p, V05_C_PROMPTS_HELD)))
		return;
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		struct v05_batch_rec *rec = &p->batch_recs[b];

		if (!rec->id || !p->batches[b].n_held || !rec->hold_since_ns)
			continue;
		/* The clock only when a batch holds prompts; its decisions'
		 * latencies and final_ns use it too. */
		if (!now) {
			v05__clock_refresh(p);
			now = p->now_ns;
		}
		/* hold_since may be later than a `now` taken before it. */
		if (now >= rec->hold_since_ns && now - rec->hold_since_ns >= dl)
			s->deadline(p, b);
	}
}

int64_t v05__schedule_next_deadline_ns(struct v05_plugin *p, uint64_t now)
{
	uint64_t dl = (uint64_t)p->cfg.stream_deadline_us * 1000u;
	int64_t best = -1;

	if (!v05__schedule_of(p)->deadline ||
	    !v05_load_relaxed(v05__ctr(p, V05_C_PROMPTS_HELD)))
		return -1;
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		struct v05_batch_rec *rec = &p->batch_recs[b];
		int64_t left;

		if (!rec->id || !p->batches[b].n_held || !rec->hold_since_ns)
			continue;
		left = now >= rec->hold_since_ns && now - rec->hold_since_ns >= dl ?
			       0 : (int64_t)(rec->hold_since_ns + dl - now);
		if (best < 0 || left < best)
			best = left;
	}
	return best;
}

void v05__schedule_resume(struct v05_plugin *p, uint32_t b)
{
	struct v05_batch_rec *rec = &p->batch_recs[b];

	if (!v05__batch_active(p, b))
		return;
	if (rec->state == V05_B_RELEASING) {
		v05__issue_plan(p, b); /* the plan is in the entries */
	} else if (rec->state == V05_B_HALTED) {
		v05__halt(p, b, 0); /* finalize the held ones the halt left */
		if (v05__batch_active(p, b))
			rec->state = V05_B_HALTED;
	} else {
		v05__schedule_progress(p, b);
	}
}
