/* SPDX-License-Identifier: MIT */
/*
 * Takeover after the owner died: attach to its segment, rebuild the
 * process-local state from what the segment holds (the table, slots,
 * batch records, the state region), finish any transition the owner was
 * killed in, write again what the journal lacks, and hand the whole state
 * out once more (v05_recover).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "top.h"
#include "journal/journal.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "mechanics/one_thread.h"

/* Put final groups the journal lacks back into it, in group order. */
static void rejournal(struct v05_plugin *p, uint32_t *list, uint32_t n)
{
	v05__sort_by_seq(&p->seg, list, n);
	for (uint32_t i = 0; i < n; i++)
		v05__journal_slot(p, list[i]);
}

/* Derive every local structure from the segment, then finish whatever the
 * previous owner was in the middle of. */
static int rebuild(struct v05_plugin *p)
{
	const struct v05_geometry *g = &p->seg.hdr.geo;
	uint8_t *used = calloc(g->slot_count, 1);
	uint32_t *rej = malloc((size_t)g->slot_count * sizeof(*rej));
	uint64_t open = 0, held = 0, final = 0;
	uint64_t durable = p->st->journal_durable_seq;
	uint32_t nrej = 0;

	if (!used || !rej) {
		free(used);
		free(rej);
		return v05__fail(-ENOMEM, "rebuild: out of memory");
	}
	/* A delete the owner died in may have left an entry behind a hole or
	 * twice (table.c): every entry reachable once before anything else. */
	v05__table_repair(&p->table);
	for (uint32_t i = 0; i <= p->table.mask;) {
		struct v05_prompt *e = &p->table.e[i];
		const struct v05_slot_hdr *h;
		struct batch_local *bl;

		if (!e->key) {
			i++;
			continue;
		}
		h = e->slot < g->slot_count ? v05__slot(&p->seg, e->slot) : NULL;
		if (!h || e->batch >= g->batch_count || h->key != e->key ||
		    (e->state == V05_P_FINAL && h->state != V05_S_FINAL) ||
		    (e->state != V05_P_FINAL && h->state != V05_S_FINAL &&
		     p->batch_recs[e->batch].id == 0)) {
			/* A submit the owner died in (its batch never went
			 * live), or an entry that does not add up: the caller
			 * never got its dispatch; forget it. Deleting shifts
			 * a later entry into i: look at i again. */
			v05__table_delete(&p->table, e);
			continue;
		}
		if (h->state == V05_S_FINAL && (h->flags & V05_SF_ENGINE_DONE)) {
			/* The owner died inside v05_release, after the flag:
			 * finish it (the slot stays for its reader, if any). */
			v05__table_delete(&p->table, e);
			continue;
		}
		if (e->state != V05_P_FINAL && h->state == V05_S_FINAL) {
			/* The owner died inside finalize, between the slot's
			 * FINAL and the entry's: the group is final (it has
			 * its seq, maybe its journal record); finish the
			 * transition rather than decide it again. */
			e->state = V05_P_FINAL;
		}
		used[e->slot] = 1;
		if (e->state == V05_P_FINAL) {
			final++;
			i++;
			continue;
		}
		bl = &p->batches[e->batch];
		open++;
		bl->n_open++;
		if (e->state == V05_P_HELD) {
			held++;
			bl->n_held++;
			bl->held_samples += v05__held_share(p, e);
			v05__batch_hold(p, e->batch, e->key);
		} else {
			bl->n_collecting++;
		}
		i++;
	}
	/* Slots: orphans (no entry) are freed; groups the journal lacks are
	 * written again; released ones wait for the journal as before. */
	for (uint32_t s = 0; s < g->slot_count; s++) {
		struct v05_slot_hdr *h = v05__slot(&p->seg, s);

		bool reader_holds = h->state == V05_S_FINAL &&
				    (h->flags & V05_SF_ENGINE_DONE) &&
				    (h->flags & V05_SF_COMPLETION);

		if (reader_holds) {
			/* Released by the engine, still the reader's: its
			 * release (or its death) frees it. */
			if (p->journal && h->seq > durable)
				rej[nrej++] = s;
			continue;
		}
		h->flags &= ~V05_SF_COMPLETION; /* republished to the reader */
		if (h->state == V05_S_FREE)
			continue;
		if ((h->state == V05_S_FINAL || h->state == V05_S_RELEASED) &&
		    p->journal && h->seq > durable)
			rej[nrej++] = s;
		if (h->state == V05_S_RELEASED ||
		    (h->state == V05_S_FINAL && !used[s])) {
			v05_store_relaxed(&h->state, (uint32_t)V05_S_RELEASED);
			p->pending_free[p->npending_free++] = s;
		} else if (h->state == V05_S_ACTIVE && !used[s]) {
			v05__arena_free(&p->arena, s);
		}
	}
	if (p->journal)
		rejournal(p, rej, nrej);
	free(used);
	free(rej);
	/* A live batch with nothing open: the owner died in finalize after
	 * its last prompt's entry went final and before the record was
	 * freed. Free it now, or it would hold its record for good. */
	for (uint32_t b = 0; b < g->batch_count; b++) {
		if (p->batch_recs[b].id && p->batches[b].n_open == 0) {
			p->batch_recs[b].id = 0;
			p->batch_recs[b].state = V05_B_FREE;
			v05__count(p, V05_C_BATCHES_DONE, 1);
		}
	}
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_OPEN), open);
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_HELD), held);
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_FINAL), final);

	/* Finish transitions, without decisions: v05_recover() reports the
	 * state as a whole afterwards. */
	v05__clock_refresh(p);
	p->silent = true;
	for (uint32_t i = 0; i <= p->table.mask; i++) {
		struct v05_prompt *e = &p->table.e[i];

		if (!e->key || e->state != V05_P_COLLECTING)
			continue;
		/* Nothing issued: a skip the owner died before finishing
		 * (submit.c finishes them after the batch is live). */
		if (!e->issued)
			v05__finalize_skip(p, e);
		else
			v05__collect_check(p, e);
	}
	for (uint32_t b = 0; b < g->batch_count; b++)
		v05__schedule_resume(p, b);
	p->silent = false;
	p->qlen = 0;
	p->qhead = 0;
	v05__free_journaled(p);
	return 0;
}

V05_API int v05_plugin_attach(const char *name, unsigned flags,
			      struct v05_plugin **out)
{
	struct v05_settled settled = { 0, 0 };
	struct v05_plugin *p;
	uint64_t me, old;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_attach: NULL out");
	if (flags & ~V05_ATTACH_ANY_UID)
		return v05__fail(-EINVAL, "unknown attach flags 0x%x", flags);
	me = v05__owner_self();
	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	p = calloc(1, sizeof(*p));
	if (!p)
		return v05__fail(-ENOMEM, "plugin: out of memory");
	/* Its side files only once it is ours: nothing of a segment whose
	 * owner lives (or that another process is replacing or removing)
	 * is repaired or settled. */
	ret = v05__segment_attach(name, V05_ROLE_OWNER,
				  flags | V05__ATTACH_NO_FILES, &p->seg);
	if (ret) {
		free(p);
		return ret;
	}
	memcpy(&p->cfg, p->seg.hdr.config, sizeof(p->cfg));
	ret = v05__shm_config_check(p);
	if (ret)
		goto fail_detach;
	/* A5: acquire pairs with the previous owner's release at close (R5),
	 * or with nothing if it died: its stores are complete either way. */
	old = v05_load_acquire(&p->seg.ctl->owner);
	if (old == me || (old && v05__owner_alive(old)) ||
	    !v05_cas_acq_rel(&p->seg.ctl->owner, &old, me)) {
		ret = v05__claim_busy(name, p->seg.ctl, old);
		goto fail_detach;
	}
	v05_store_relaxed(&p->seg.ctl->claim, (uint32_t)V05_CLAIM_OWNER);
	p->seg.ctl->owner_pid = (uint32_t)getpid();
	p->seg.ctl->owner_epoch++;
	/* A replace killed before this: its old segment whole again (the
	 * side directories exchanged back) or its temporary removed. */
	ret = v05__stage_settle(p->seg.path, p->seg.st_uid, me, &settled);
	if (!ret)
		ret = v05__segment_map_files(&p->seg);
	if (ret) {
		v05_store_release(&p->seg.ctl->owner, old);
		goto fail_detach;
	}
	if (old)
		v05__count(p, V05_C_TAKEOVERS, 1);
	v05__count(p, V05_C_REPLACES_UNDONE, settled.undone);
	v05__count(p, V05_C_REPLACES_CLEANED, settled.cleaned);
	ret = v05__plugin_init_local(p);
	if (!ret)
		ret = v05__plugin_open_journal(p);
	if (!ret)
		ret = rebuild(p);
	if (!ret)
		ret = v05__plugin_start_broker(p);
	if (ret)
		goto fail_owned;
	/* Side files it had to make anew (lanes.c's repair): counted. */
	v05__count(p, V05_C_SIDE_FILES_REPLACED, p->seg.files_replaced);
	v05__segment_own(&p->seg, true);
	*out = p;
	return 0;
fail_owned:
	v05__plugin_free_local(p);
	if (p->journal)
		v05__journal_close(p->journal);
	v05__waiter_fini(&p->waiter);
	v05_store_release(&p->seg.ctl->owner, 0);
fail_detach:
	v05__segment_detach(&p->seg);
	free(p);
	return ret;
}

V05_API int v05_recover(struct v05_plugin *p, struct v05_decision *out,
			uint32_t max)
{
	V05_ONE_THREAD(p, "recover");
	v05__clear_error();
	if (!p || (max && !out))
		return v05__fail(-EINVAL, "recover: NULL argument");
	if (p->queue_error) {
		/* A decision was lost to a failed allocation: drop the queue
		 * and hand out the whole state again, as after a takeover. */
		p->queue_error = 0;
		p->qlen = 0;
		p->qhead = 0;
		p->recovered = false;
	}
	/* The state is queued once; later calls hand out the rest. */
	for (uint32_t i = 0; !p->recovered && i <= p->table.mask; i++) {
		struct v05_prompt *e = &p->table.e[i];
		struct v05_decision d;

		if (!e->key)
			continue;
		memset(&d, 0, sizeof(d));
		d.key = e->key;
		d.slot = e->slot;
		d.gen = e->slot < p->seg.hdr.geo.slot_count ?
				v05__slot(&p->seg, e->slot)->gen : 0;
		d.batch = p->batch_recs[e->batch].id;
		d.flags = V05_DF_RECOVERED;
		if (e->state == V05_P_COLLECTING && e->issued != e->received) {
			d.kind = V05_DECISION_SAMPLE;
			d.samples = e->issued & ~e->received;
			d.k = (uint32_t)__builtin_popcountll(d.samples);
		} else if (e->state == V05_P_FINAL) {
			struct v05_slot_hdr *h = v05__slot(&p->seg, e->slot);

			d.kind = h->action == V05_ACTION_DROP ? V05_DECISION_DROP :
								V05_DECISION_FINAL;
			d.k = h->k;
			d.baseline = h->baseline;
			d.batch = h->batch_id;
		} else {
			continue; /* held: its release comes by itself */
		}
		v05__enqueue(p, &d);
	}
	for (uint32_t b = 0; !p->recovered && b < p->seg.hdr.geo.batch_count; b++) {
		if (p->batch_recs[b].id && p->batch_recs[b].state == V05_B_BARRIER) {
			struct v05_decision d;

			v05__barrier_decision(p, b, &d);
			d.flags = V05_DF_RECOVERED;
			v05__enqueue(p, &d);
		}
	}
	p->recovered = true;
	if (p->queue_error)
		return v05__fail(p->queue_error,
				 "recover: out of memory for the decision queue");
	return (int)v05__dequeue(p, out, max);
}
