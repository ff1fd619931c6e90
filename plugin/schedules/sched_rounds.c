/* SPDX-License-Identifier: MIT */
/*
 * Schedule rounds, the paper's: "more" prompts are held until every open
 * prompt of the batch has decided; then, if fewer than halt_fraction of
 * the batch's prompts need more, the batch halts and they finalize;
 * otherwise they are released together, the dispatch padded to a
 * multiple of pad_multiple. With an external halt the barrier is reported
 * (a BARRIER decision) and v05_resolve() answers it.
 */
#include <errno.h>
#include <string.h>

#include "schedule.h"
#include "../../shm/error.h"
#include "../mechanics/one_thread.h"

static void rounds_check(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];

	if (!v05__batch_active(p, b) || bl->n_collecting || !bl->n_held)
		return;
	if (p->cfg.flags & V05_CONFIG_EXTERNAL_HALT) {
		struct v05_decision d;

		if (p->batch_recs[b].state == V05_B_BARRIER)
			return;
		/* Persisted: a takeover reports it again (v05_recover). */
		p->batch_recs[b].state = V05_B_BARRIER;
		if (!p->silent) {
			v05__barrier_decision(p, b, &d);
			v05__enqueue(p, &d);
		}
		return;
	}
	/* Round barrier: every open prompt has decided; the open ones are
	 * exactly the held ones. */
	if (v05__below_halt(p, b, bl->n_held))
		v05__halt(p, b, 1);
	else
		v05__release_steps(p, b);
}

const struct v05__schedule v05__sched_rounds = {
	.name = "rounds",
	.progress = rounds_check,
};

V05_API int v05_resolve(struct v05_plugin *p, uint64_t batch, int halt_it)
{
	V05_ONE_THREAD(p, "resolve");
	v05__clear_error();
	if (!p || !batch)
		return v05__fail(-EINVAL, "resolve: bad argument");
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		if (p->batch_recs[b].id != batch)
			continue;
		if (p->batch_recs[b].state != V05_B_BARRIER)
			return v05__fail(-EINVAL,
					 "batch %llu is not waiting at a round barrier",
					 (unsigned long long)batch);
		v05__clock_refresh(p);
		if (halt_it)
			v05__halt(p, b, 1);
		else
			v05__release_steps(p, b);
		return 0;
	}
	return v05__fail(-ENOENT, "no batch %llu in flight",
			 (unsigned long long)batch);
}
