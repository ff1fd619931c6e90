/* SPDX-License-Identifier: MIT */
/* Cancel a batch: the engine gave up on it (a failed scorer, a shutdown).
 * Its open prompts leave the table and their slots go back to the arena
 * without a final (nothing to journal, nothing for a reader), and no
 * decision of the batch is handed out afterwards. */
#include <errno.h>

#include "mechanics/mechanics.h"
#include "../shm/error.h"
#include "mechanics/one_thread.h"

static int find_batch(const struct v05_plugin *p, uint64_t id, uint32_t *b)
{
	for (uint32_t i = 0; i < p->seg.hdr.geo.batch_count; i++) {
		if (p->batch_recs[i].id == id && id != 0) {
			*b = i;
			return 0;
		}
	}
	return -ENOENT;
}

/* Drop the batch's undelivered decisions. A FINAL or DROP the caller has
 * not seen would hold its slot for good: release it here. */
static void purge_queue(struct v05_plugin *p, uint64_t id)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < p->qlen; i++) {
		struct v05_decision d = p->q[(p->qhead + i) % p->qcap];

		if (d.batch != id) {
			p->q[(p->qhead + kept++) % p->qcap] = d;
			continue;
		}
		if (d.kind == V05_DECISION_FINAL || d.kind == V05_DECISION_DROP)
			v05__slot_release(p, d.slot);
	}
	p->qlen = kept;
}

/* One open prompt out: the same bookkeeping as a final, then the entry
 * before the slot. The key is cleared first (table.c), so an owner killed
 * between the two leaves an ACTIVE slot with no entry, which rebuild frees. */
static void cancel_prompt(struct v05_plugin *p, struct v05_prompt *e)
{
	uint32_t slot = e->slot;

	v05__batch_leave(p, e);
	v05__gauge(p, V05_C_PROMPTS_OPEN, -1);
	v05__count(p, V05_C_PROMPTS_CANCELLED, 1);
	v05__table_delete(&p->table, e);
	v05__arena_free(&p->arena, slot);
}

V05_API int v05_cancel(struct v05_plugin *p, uint64_t batch)
{
	V05_ONE_THREAD(p, "cancel");
	uint32_t b, n = 0;

	v05__clear_error();
	if (!p)
		return v05__fail(-EINVAL, "cancel: NULL plugin");
	if (find_batch(p, batch, &b))
		return v05__fail(-ENOENT, "cancel: batch %llu is not live",
				 (unsigned long long)batch);
	purge_queue(p, batch);
	for (uint32_t i = 0; i <= p->table.mask;) {
		struct v05_prompt *e = &p->table.e[i];

		if (!e->key || e->batch != b || e->state == V05_P_FINAL) {
			i++;
			continue;
		}
		/* Deleting shifts a later entry into i: look at i again. */
		cancel_prompt(p, e);
		n++;
	}
	/* Nothing of it is open: its record is free for the next batch. */
	p->batch_recs[b].id = 0;
	p->batch_recs[b].state = V05_B_FREE;
	p->batches[b].n_held = p->batches[b].n_collecting = 0;
	p->batches[b].held_samples = 0;
	v05__count(p, V05_C_BATCHES_DONE, 1);
	return (int)n;
}
