/* SPDX-License-Identifier: MIT */
/* Cancel a batch: the engine gave up on it (a failed scorer, a shutdown).
 * Its open prompts leave the table and their slots go back to the arena
 * without a final (nothing to journal, nothing for a reader), and no
 * decision of the batch is handed out afterwards. And one prompt the same
 * way, by an abort record from a lane (docs/SHM.md, "Abort records"). */
#include <errno.h>
#include <string.h>

#include "top.h"
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

/* Drop the undelivered decisions of one prompt (at most one: its next
 * samples, or an early start's abort; a final is not open). */
static void purge_key(struct v05_plugin *p, uint64_t key)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < p->qlen; i++) {
		struct v05_decision d = p->q[(p->qhead + i) % p->qcap];

		if (d.key != key)
			p->q[(p->qhead + kept++) % p->qcap] = d;
	}
	p->qlen = kept;
}

/* Why an abort record is refused (a counter), or 0 for one to apply. */
static int abort_refusal(const struct v05_plugin *p,
			 const struct v05_record *rec,
			 const struct v05_prompt *e)
{
	uint32_t rbits;

	memcpy(&rbits, &rec->reward, sizeof(rbits));
	if (!(p->cfg.flags & V05_CONFIG_ABORT_RECORDS))
		return V05_C_REJ_KIND;
	if (rec->flags != V05_RECORD_ABORT || rec->sample != 0 || rbits != 0)
		return V05_C_REJ_CORRUPT;
	if (!e)
		return V05_C_REJ_UNKNOWN;
	if (e->state == V05_P_FINAL || rec->gen != e->gen)
		return V05_C_REJ_LATE;
	return 0;
}

/*
 * An abort record: the prompt instance it names (key, gen) leaves as a
 * cancelled batch's prompts do, and the caller gets a CANCEL decision
 * with the samples it issued that have no reward (to stop generating;
 * a reward pushed for them later is rejected as unknown). Checked like a
 * reward, each refusal counted under one reason: the segment does not
 * take aborts (kind), sample and reward not 0 (corrupt: bytes the
 * library does not write), no such key (unknown), another instance or a
 * final group (late: the group was decided before the abort came; its
 * final stays the caller's). The batch goes on without the prompt: done
 * if it was its last open one, else its schedule looks again (a barrier
 * or a hold may have waited for it).
 */
void v05__apply_abort(struct v05_plugin *p, const struct v05_record *rec)
{
	struct v05_prompt *e = v05__table_find(&p->table, rec->key);
	int why = abort_refusal(p, rec, e);
	struct v05_decision d;
	uint32_t b;

	if (why) {
		v05__count(p, why, 1);
		return;
	}
	b = e->batch;
	memset(&d, 0, sizeof(d));
	d.kind = V05_DECISION_CANCEL;
	d.key = e->key;
	d.slot = e->slot;
	d.gen = e->gen;
	d.samples = e->issued & ~e->received;
	d.k = (uint32_t)__builtin_popcountll(d.samples);
	d.batch = p->batch_recs[b].id;
	purge_key(p, e->key);
	cancel_prompt(p, e);
	v05__count(p, V05_C_ABORTS_APPLIED, 1);
	if (!p->silent)
		v05__enqueue(p, &d);
	if (p->batches[b].n_open == 0) {
		/* Its last open prompt: the record is free for the next. */
		p->batch_recs[b].id = 0;
		p->batch_recs[b].state = V05_B_FREE;
		p->batches[b].n_held = p->batches[b].n_collecting = 0;
		p->batches[b].held_samples = 0;
		v05__count(p, V05_C_BATCHES_DONE, 1);
	} else {
		v05__schedule_progress(p, b);
	}
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
