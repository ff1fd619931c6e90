/* SPDX-License-Identifier: MIT */
/*
 * A reward refused for its value (not finite, outside [-1, 1]) that names a
 * live prompt's issued sample without a reward: that sample can then never
 * be rewarded unless its producer pushes a valid value, and the group can
 * never finish. The engine is told at once (a REJECT decision) instead of
 * waiting for it. Off the per-reward path: only refused records get here.
 */
#include <string.h>

#include "internal.h"

void v05__reject_notice(struct v05_plugin *p, const struct v05_record *rec,
			uint32_t why)
{
	struct v05_prompt *e;
	struct v05_decision d;
	uint64_t bit = rec->sample < 64 ? 1ull << rec->sample : 0;

	if (p->silent)
		return;
	e = v05__table_find(&p->table, rec->key);
	/* Another instance's, a sample never issued, or one already rewarded:
	 * nobody waits for this record. */
	if (!e || e->state != V05_P_COLLECTING || rec->gen != e->gen ||
	    !(e->issued & bit) || (e->received & bit))
		return;
	memset(&d, 0, sizeof(d));
	d.kind = V05_DECISION_REJECT;
	d.key = e->key;
	d.slot = e->slot;
	d.gen = e->gen;
	d.samples = bit;
	d.batch = p->batch_recs[e->batch].id;
	d.flags = why;
	d.baseline = (double)rec->reward;
	v05__enqueue(p, &d);
}
