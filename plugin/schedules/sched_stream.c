/* SPDX-License-Identifier: MIT */
/*
 * Schedule stream, for the paper's rule: a "more" is held only to pad:
 * released once the held samples reach pad_multiple, when no prompt of the
 * batch is still collecting, or when the oldest has waited
 * stream_deadline_us (schedule.c calls the deadline hook). The halt rule
 * is checked on the batch's live count (prompts not final) after every
 * decision.
 */
#include "schedule.h"
#include "../../shm/proc.h"

static void stream_check(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	struct v05_batch_rec *rec = &p->batch_recs[b];

	if (!v05__batch_active(p, b) || rec->state == V05_B_HALTED)
		return;
	/* Only a rule whose "more" the halt cuts short (the paper's) halts:
	 * under the others (fixed k, GRPO, DAPO) a halt would stop nothing,
	 * and counting one would say otherwise (rules/rule.h). */
	if ((p->rule->flags & V05__RULE_HALTS) &&
	    v05__below_halt(p, b, bl->n_open)) {
		v05__halt(p, b, 1);
		return;
	}
	if (!bl->n_held)
		return;
	if (bl->held_samples >= p->cfg.pad_multiple || bl->n_collecting == 0) {
		v05__release_steps(p, b);
		return;
	}
	if (!rec->hold_since_ns)
		rec->hold_since_ns = v05__now_ns();
}

const struct v05__schedule v05__sched_stream = {
	.name = "stream",
	.progress = stream_check,
	.deadline = v05__release_steps,
};
